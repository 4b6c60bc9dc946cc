"""Request bounds and refusals through the real ``stateway serve``: item counts, nesting,
requests with nothing to respond to, refusal codes, and the shapes echoed back."""

from __future__ import annotations

import urllib.error
import urllib.request
from collections.abc import Iterator
from typing import Any

import openai
import orjson
import pytest
from mcp import Client
from openai import OpenAI

from stateway.core.nesting import MAX_NESTING
from stateway.launch import start_gateway
from tests.e2e.test_upstream_mapping import clear, upstream_requests

MODEL = "fake-model"


def post(gateway: str, body: bytes, path: str = "/v1/responses") -> tuple[int, str, Any]:
    """POST raw bytes; the status, content type and parsed JSON body."""
    request = urllib.request.Request(
        gateway + path, data=body, headers={"Content-Type": "application/json"}
    )
    try:
        with urllib.request.urlopen(request) as response:
            return response.status, response.headers["content-type"], orjson.loads(response.read())
    except urllib.error.HTTPError as error:
        with error:
            return error.code, error.headers["content-type"], orjson.loads(error.read())


def nested_json(levels: int) -> bytes:
    """A JSON object ``levels`` containers deep, written by hand (orjson stops at 255)."""
    return b'{"a":' * (levels - 1) + b"{}" + b"}" * (levels - 1)


@pytest.fixture(scope="module")
def small_limit_gateway(
    fake_upstream: str, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[str]:
    database = f"sqlite:///{tmp_path_factory.mktemp('limits') / 'stateway.db'}"
    args = ["--upstream", fake_upstream, "--database", database]
    with start_gateway(args, env={"STATEWAY_MAX_INPUT_ITEMS": "3"}) as url:
        yield url


def test_input_items_over_the_limit_are_refused_before_upstream(
    small_limit_gateway: str, fake_upstream: str
) -> None:
    messages = [{"role": "user", "content": f"m{i}"} for i in range(4)]
    clear(fake_upstream)
    status, kind, body = post(
        small_limit_gateway, orjson.dumps({"model": MODEL, "input": messages})
    )
    assert (status, kind) == (400, "application/json")
    assert body["error"]["param"] == "input"
    assert body["error"]["code"] == "array_above_max_length"
    assert body["error"]["type"] == "invalid_request_error"
    assert upstream_requests(fake_upstream) == []
    at_limit = orjson.dumps({"model": MODEL, "input": messages[:3]})
    assert post(small_limit_gateway, at_limit)[0] == 200


@pytest.mark.parametrize("mode", ["legacy", "auto"])
async def test_input_items_over_the_limit_are_refused_to_mcp_as_to_the_route(
    small_limit_gateway: str, fake_upstream: str, mode: str
) -> None:
    """The MCP ``create_response`` tool holds its input to the route's bounds: it had
    none, and 200,000 one-word messages (a 6 MB call) took ~18 s of CPU and ~400 MB
    more, where the route refuses them at once."""
    messages = [{"role": "user", "content": f"m{i}"} for i in range(4)]
    parts = [{"role": "user", "content": [{"type": "input_text", "text": "m"}] * 31}]
    clear(fake_upstream)
    async with Client(small_limit_gateway + "/mcp", mode=mode) as client:
        for given in (messages, parts):
            arguments = {"model": MODEL, "input": given}
            refused = await client.call_tool("create_response", arguments)
            assert refused.is_error
            error = refused.structured_content["error"]
            assert (error["param"], error["code"]) == ("input", "array_above_max_length")
        assert upstream_requests(fake_upstream) == []
        at_limit = {"model": MODEL, "input": messages[:3]}
        assert not (await client.call_tool("create_response", at_limit)).is_error


def deep_body(place: str, value: bytes, *, stream: bool) -> bytes:
    head = b'{"model": "' + MODEL.encode() + b'", "stream": ' + (b"true" if stream else b"false")
    match place:
        case "tools[0].parameters":
            rest = b', "input": "hi", "tools": [{"type": "function", "name": "f", "parameters": '
            return head + rest + value + b"}]}"
        case "input[0].extra":
            return (
                head + b', "input": [{"role": "user", "content": "hi", "extra": ' + value + b"}]}"
            )
        case _:
            fmt = b'{"type": "json_schema", "name": "s", "schema": ' + value + b"}"
            return head + b', "input": "hi", "text": {"format": ' + fmt + b"}}"


PLACES = ["tools[0].parameters", "input[0].extra", "text.format.schema"]


@pytest.mark.parametrize("stream", [False, True])
@pytest.mark.parametrize("place", PLACES)
def test_nesting_too_deep_to_store_is_a_400_naming_the_field(
    gateway: str, fake_upstream: str, place: str, stream: bool
) -> None:
    clear(fake_upstream)
    status, kind, body = post(gateway, deep_body(place, nested_json(300), stream=stream))
    assert (status, kind) == (400, "application/json")
    assert body["error"]["param"] == place
    assert body["error"]["code"] == "nesting_too_deep"
    assert upstream_requests(fake_upstream) == []


@pytest.mark.parametrize("place", PLACES)
def test_forty_levels_are_stored_retrievable_and_continuable(
    gateway: str, client: OpenAI, place: str
) -> None:
    status, _, created = post(gateway, deep_body(place, nested_json(40), stream=False))
    assert status == 200
    assert created["status"] == "completed"
    stored = client.responses.retrieve(created["id"])
    assert stored.status == "completed"
    items = client.responses.input_items.list(created["id"])
    assert len(items.data) == 1
    following = client.responses.create(
        model=MODEL, input="more", previous_response_id=created["id"]
    )
    assert following.status == "completed"


@pytest.mark.parametrize("levels", [40, MAX_NESTING])
@pytest.mark.parametrize("place", PLACES)
def test_nesting_up_to_the_limit_streams_to_completion(
    gateway: str, client: OpenAI, place: str, levels: int
) -> None:
    body = deep_body(place, nested_json(levels), stream=True)
    request = urllib.request.Request(
        gateway + "/v1/responses", data=body, headers={"Content-Type": "application/json"}
    )
    with urllib.request.urlopen(request) as response:
        frames = response.read().split(b"\n\n")
    assert frames[-2].startswith(b"event: response.completed\n")
    completed = orjson.loads(frames[-2].split(b"data: ", 1)[1])
    stored = client.responses.retrieve(completed["response"]["id"])
    assert stored.status == "completed"


@pytest.mark.parametrize(
    "extra", [{}, {"input": []}, {"input": [], "stream": True}, {"input": [], "instructions": ""}]
)
def test_nothing_to_respond_to_is_refused_by_the_gateway(
    gateway: str, fake_upstream: str, extra: dict[str, Any]
) -> None:
    clear(fake_upstream)
    status, kind, body = post(gateway, orjson.dumps({"model": MODEL, **extra}))
    assert (status, kind) == (400, "application/json")
    assert body["error"]["type"] == "invalid_request_error"
    assert body["error"]["code"] == "missing_required_parameter"
    assert body["error"]["param"] == "input"
    assert upstream_requests(fake_upstream) == []


def test_instructions_alone_are_answered(client: OpenAI) -> None:
    assert client.responses.create(model=MODEL, instructions="say hi").status == "completed"


def test_refusals_carry_codes(client: OpenAI) -> None:
    with pytest.raises(openai.BadRequestError) as role:
        client.responses.create(model=MODEL, input=[{"role": "robot", "content": "x"}])  # type: ignore[list-item]
    assert (role.value.code, role.value.param) == ("invalid_value", "input[0].role")
    with pytest.raises(openai.BadRequestError) as choice:
        client.responses.create(model=MODEL, input="x", tool_choice="sometimes")  # type: ignore[arg-type]
    assert (choice.value.code, choice.value.param) == ("invalid_value", "tool_choice")
    created = client.responses.create(model=MODEL, input="x")
    with pytest.raises(openai.BadRequestError) as limit:
        client.responses.input_items.list(created.id, limit=0)
    assert (limit.value.code, limit.value.param) == ("integer_below_min_value", "limit")


@pytest.mark.parametrize(
    ("fields", "param", "code", "message"),
    [
        (
            {"temperature": 3},
            "temperature",
            "decimal_above_max_value",
            "Invalid 'temperature': decimal above maximum value. Expected a value <= 2, but got "
            "3 instead.",
        ),
        (
            {"max_output_tokens": 15},
            "max_output_tokens",
            "integer_below_min_value",
            "Invalid 'max_output_tokens': integer below minimum value. Expected a value >= 16, "
            "but got 15 instead.",
        ),
        (
            {"safety_identifier": "u" * 129},
            "safety_identifier",
            "string_above_max_length",
            "Invalid 'safety_identifier': string too long. Expected a string with maximum "
            "length 128, but got a string with length 129 instead.",
        ),
        (
            {"max_output_tokens": "2"},
            "max_output_tokens",
            "invalid_type",
            "Invalid type for 'max_output_tokens': expected an integer, but got a string instead.",
        ),
    ],
)
def test_a_field_out_of_bounds_is_refused_as_hosted_words_it(
    client: OpenAI, fields: dict[str, Any], param: str, code: str, message: str
) -> None:
    with pytest.raises(openai.BadRequestError) as refused:
        client.responses.create(model=MODEL, input="x", extra_body=fields)
    assert (refused.value.code, refused.value.param) == (code, param)
    assert refused.value.body["message"] == message  # type: ignore[index]


def test_json_schema_echo_has_boolean_strict_and_description(
    gateway: str, fake_upstream: str
) -> None:
    fmt = {"type": "json_schema", "name": "s", "schema": {"type": "object"}}
    clear(fake_upstream)
    status, _, created = post(
        gateway, orjson.dumps({"model": MODEL, "input": "x", "text": {"format": fmt}})
    )
    assert status == 200
    assert created["text"]["format"] == {**fmt, "strict": False, "description": None}
    [sent] = upstream_requests(fake_upstream)
    body = sent["body"]
    upstream = (
        body["response_format"]["json_schema"]
        if "response_format" in body
        else body["text"]["format"]
    )
    assert None not in upstream.values()  # nulls the client did not send never go upstream
    stored = get_json(gateway, f"/v1/responses/{created['id']}")
    assert stored["text"]["format"] == {**fmt, "strict": False, "description": None}


def get_json(gateway: str, path: str) -> Any:
    with urllib.request.urlopen(gateway + path) as response:
        return orjson.loads(response.read())


def test_input_items_carry_status(client: OpenAI) -> None:
    created = client.responses.create(
        model=MODEL,
        input=[
            {"role": "developer", "content": "rules"},
            {"role": "user", "content": [{"type": "input_text", "text": "hi"}]},
        ],
    )
    items = client.responses.input_items.list(created.id).data
    assert [getattr(item, "status", None) for item in items] == ["completed", "completed"]
    following = client.responses.create(model=MODEL, input="x", previous_response_id=created.id)
    [item] = client.responses.input_items.list(following.id).data
    assert getattr(item, "status", None) == "completed"
