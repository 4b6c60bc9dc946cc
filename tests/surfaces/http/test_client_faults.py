"""Bodies a client got wrong, through the HTTP surface: each is a 4xx in the protocol's
own error shape naming the field, never a 500 (found by fuzzing the served gateway)."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import httpx2
import openai
import orjson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from starlette.applications import Starlette

from stateway.core.compaction.sealed import seal
from stateway.core.gateway import Gateway
from stateway.core.inference import Finish, TextDelta
from stateway.core.loop import Loop
from stateway.core.routing import BackendEntry, Router
from stateway.core.run_registry import RunRegistry
from stateway.sealing import AesGcmSealer
from stateway.surfaces.http.app import build_http_app
from stateway.surfaces.http.messages import MessagesRoutes
from stateway.surfaces.http.responses import ResponsesRoutes
from stateway.surfaces.http.service import ServiceRoutes
from tests.core.fakes import MemoryStore, ScriptedBackend
from tests.support.mutation import mutated
from tests.surfaces.http.asgi import Reply, call

SEALER = AesGcmSealer(bytes(32))
ANTHROPIC = [(b"anthropic-version", b"2023-06-01")]


def carrying_all() -> ScriptedBackend:
    return CarryingAll([TextDelta("ok"), Finish("stop")])


class CarryingAll(ScriptedBackend):
    """Carries every type of item, content part and tool, as a Responses upstream does: a
    mutated body is judged by the decoders, not refused for what its backend carries."""

    carries_unknown_types = True
    _parts = frozenset({"input_text", "input_image", "input_file", "output_text", "refusal"})
    carried_part_types = dict.fromkeys(
        ("user", "system", "developer", "assistant", "tool_output"), _parts
    )


def build(backend: ScriptedBackend | None = None) -> Starlette:
    store = MemoryStore()
    backend = backend or ScriptedBackend([TextDelta("ok"), Finish("stop")])
    router = Router([BackendEntry(backend, {}, catch_all=True)])
    loop = Loop(store, sealer=SEALER)  # compaction items are sealed
    gateway = Gateway(store, router, loop, RunRegistry(), sealer=SEALER)
    return build_http_app(
        ResponsesRoutes(gateway, 1 << 20),
        ServiceRoutes(gateway),
        messages=MessagesRoutes(gateway, 1 << 20),
    )


def assert_openai_refusal(reply: Reply, param: str) -> None:
    assert reply.status == 400, reply.body
    error = reply.json()["error"]
    assert set(error) == {"message", "type", "param", "code"}
    assert error["param"] == param


CALL = {"type": "function_call", "call_id": "c", "name": "f", "arguments": "{}"}
CUSTOM_CALL = {"type": "custom_tool_call", "call_id": "c", "name": "f", "input": ""}


@pytest.mark.parametrize("kind", [["web_search"], {"type": "mcp"}])
@pytest.mark.parametrize("path", ["/v1/responses", "/v1/responses/input_tokens"])
async def test_a_tool_type_of_another_type_is_refused(path: str, kind: object) -> None:
    body = {"model": "m", "input": "hi", "tools": [{"type": kind, "name": "f"}]}
    reply = await call(build(), "POST", path, orjson.dumps(body))
    assert_openai_refusal(reply, "tools[0].type")
    assert reply.json()["error"]["code"] == "invalid_type"


@pytest.mark.parametrize("detail", [["low"], {"a": 1}, 3])
async def test_an_image_detail_of_another_type_is_refused(detail: object) -> None:
    image = {"type": "input_image", "image_url": "data:,", "detail": detail}
    body = {"model": "m", "input": [{"role": "user", "content": [image]}]}
    reply = await call(build(), "POST", "/v1/responses", orjson.dumps(body))
    assert_openai_refusal(reply, "input[0].content[0].detail")


@pytest.mark.parametrize(
    ("part", "param"),
    [
        ({"type": ["input_text"], "text": "r"}, "input[1].output[0].type"),
        ({"type": {"type": "input_text"}, "text": "r"}, "input[1].output[0].type"),
        ({"type": "input_text", "text": ["r"]}, "input[1].output[0].text"),
        ({"type": "input_text", "text": {"a": 1}}, "input[1].output[0].text"),
        ("r", "input[1].output[0]"),
        ({"type": "input_image", "image_url": "data:,", "detail": []}, "input[1].output[0].detail"),
    ],
)
@pytest.mark.parametrize("kind", ["function_call_output", "custom_tool_call_output"])
async def test_a_tool_output_part_is_checked_as_a_message_part(
    kind: str, part: object, param: str
) -> None:
    """These reached the backends, whose translations failed on them (an Anthropic
    upstream's on a text that is no string, the context check on a type that is none)."""
    call_item = CALL if kind == "function_call_output" else CUSTOM_CALL
    output = {"type": kind, "call_id": "c", "output": [part]}
    body = {"model": "m", "input": [call_item, output]}
    reply = await call(build(), "POST", "/v1/responses", orjson.dumps(body))
    assert_openai_refusal(reply, param)


async def test_a_tool_output_part_of_a_later_type_is_left_to_the_backend() -> None:
    """Judged by what the routed backend carries (this one: text only), as before."""
    output = {"type": "function_call_output", "call_id": "c", "output": [{"type": "x_new"}]}
    body = {"model": "m", "input": [CALL, output]}
    reply = await call(build(), "POST", "/v1/responses", orjson.dumps(body))
    assert_openai_refusal(reply, "input[1].output[0].type")
    assert reply.json()["error"]["code"] == "unsupported_content_type"


@pytest.mark.parametrize("kind", [["custom"], {"type": "custom"}])
@pytest.mark.parametrize("path", ["/v1/messages", "/v1/messages/count_tokens"])
async def test_a_messages_tool_type_of_another_type_is_refused(path: str, kind: Any) -> None:
    body = {
        "model": "m",
        "max_tokens": 8,
        "messages": [{"role": "user", "content": "hi"}],
        "tools": [{"type": kind, "name": "f", "input_schema": {"type": "object"}}],
    }
    reply = await call(build(), "POST", path, orjson.dumps(body), headers=ANTHROPIC)
    assert reply.status == 400, reply.body
    assert reply.json()["type"] == "error"
    error = reply.json()["error"]
    assert error["type"] == "invalid_request_error"
    assert "tools.0.type" in error["message"]


IMAGE = {"type": "input_image", "image_url": "data:,", "detail": "low"}
RESPONSES_SEEDS: list[dict[str, Any]] = [
    {
        "model": "m",
        "input": [
            {
                "type": "message",
                "role": "user",
                "content": [
                    {"type": "input_text", "text": "hi"},
                    IMAGE,
                    {"type": "input_file", "file_data": "data:,", "filename": "a.txt"},
                ],
            },
            {"role": "assistant", "content": [{"type": "output_text", "text": "yo"}]},
            {"type": "reasoning", "summary": [{"type": "summary_text", "text": "s"}]},
            CALL,
            {"type": "function_call_output", "call_id": "c", "output": [IMAGE]},
            {**CUSTOM_CALL, "call_id": "d"},
            {"type": "custom_tool_call_output", "call_id": "d", "output": "ok"},
            {"role": "user", "content": "next"},
        ],
        "tools": [
            {"type": "function", "name": "f", "parameters": {"type": "object"}},
            {"type": "custom", "name": "g", "format": {"type": "text"}},
            {"type": "namespace", "name": "n", "tools": [{"type": "function", "name": "h"}]},
            {"type": "web_search", "external_web_access": False},
            {"type": "tool_search"},
            {"type": "shell"},
            {"type": "image_generation"},
        ],
        "tool_choice": {"type": "function", "name": "f"},
        "text": {"format": {"type": "json_schema", "name": "s", "schema": {"type": "object"}}},
        "reasoning": {"effort": "low"},
        "include": ["reasoning.encrypted_content"],
    },
    {
        "model": "m",
        "input": [
            {"type": "compaction", "encrypted_content": seal(SEALER, "compaction", "default", "s")},
            {"role": "user", "content": "x"},
            {"type": "shell_call", "call_id": "s", "action": {"commands": ["ls"]}},
            {"type": "shell_call_output", "call_id": "s", "output": [{"stdout": "a"}]},
            {"type": "tool_search_call", "call_id": "t", "arguments": {"q": "x"}},
            {"type": "tool_search_output", "call_id": "t", "tools": [{"type": "shell"}]},
            {"type": "additional_tools", "role": "developer", "tools": [{"type": "shell"}]},
            {
                "type": "mcp_call",
                "id": "mcp_1",
                "name": "t",
                "server_label": "s",
                "arguments": "{}",
            },
            {"type": "web_search_call", "id": "ws_1", "action": {"query": "q", "sources": []}},
            {"type": "compaction_trigger"},
        ],
        "context_management": [{"type": "compaction", "compact_threshold": 1000}],
        "stream": True,
    },
]


@pytest.mark.parametrize("seed", RESPONSES_SEEDS)
async def test_the_responses_seeds_are_accepted(seed: dict[str, Any]) -> None:
    """So that a mutation anywhere in them is what is judged."""
    reply = await call(build(carrying_all()), "POST", "/v1/responses", orjson.dumps(seed))
    assert reply.status == 200, reply.body


@settings(max_examples=150, deadline=None, derandomize=True, database=None)
@given(mutated(RESPONSES_SEEDS), st.sampled_from(["/v1/responses", "/v1/responses/input_tokens"]))
def test_mutated_responses_bodies_never_get_a_5xx(body: dict[str, Any], path: str) -> None:
    reply = asyncio.run(call(build(carrying_all()), "POST", path, json.dumps(body).encode()))
    assert reply.status < 500, reply.body
    if reply.status >= 400:
        assert set(reply.json()["error"]) == {"message", "type", "param", "code"}


PNG = {"type": "base64", "media_type": "image/png", "data": "iVBORw0KGgo="}
MESSAGES_SEEDS: list[dict[str, Any]] = [
    {
        "model": "m",
        "max_tokens": 2048,
        "system": [{"type": "text", "text": "s", "cache_control": {"type": "ephemeral"}}],
        "messages": [
            {
                "role": "user",
                "content": [
                    {"type": "text", "text": "hi"},
                    {"type": "image", "source": PNG},
                    {"type": "document", "source": {"type": "text", "data": "d"}, "title": "t"},
                ],
            },
            {
                "role": "assistant",
                "content": [
                    {"type": "thinking", "thinking": "hm", "signature": "sig"},
                    {"type": "tool_use", "id": "t1", "name": "f", "input": {"a": 1}},
                ],
            },
            {
                "role": "user",
                "content": [
                    {
                        "type": "tool_result",
                        "tool_use_id": "t1",
                        "content": [{"type": "text", "text": "r"}],
                    },
                ],
            },
        ],
        "tools": [
            {"name": "f", "input_schema": {"type": "object"}},
            {"type": "bash_20250124", "name": "bash"},
        ],
        "tool_choice": {"type": "auto", "disable_parallel_tool_use": True},  # while thinking,
        "thinking": {"type": "enabled", "budget_tokens": 1024},  # none is forced (Anthropic)
        "metadata": {"user_id": "u"},
        "stop_sequences": ["STOP"],
    },
]


@pytest.mark.parametrize("path", ["/v1/messages", "/v1/messages/count_tokens"])
async def test_the_messages_seed_is_accepted(path: str) -> None:
    [seed] = MESSAGES_SEEDS
    reply = await call(build(carrying_all()), "POST", path, orjson.dumps(seed), headers=ANTHROPIC)
    assert reply.status == 200, reply.body


@settings(max_examples=150, deadline=None, derandomize=True, database=None)
@given(mutated(MESSAGES_SEEDS), st.sampled_from(["/v1/messages", "/v1/messages/count_tokens"]))
def test_mutated_messages_bodies_never_get_a_5xx(body: dict[str, Any], path: str) -> None:
    raw = json.dumps(body).encode()  # orjson writes no integer beyond 64 bits
    reply = asyncio.run(call(build(carrying_all()), "POST", path, raw, headers=ANTHROPIC))
    assert reply.status < 500, reply.body
    if reply.status >= 400:
        assert reply.json()["type"] == "error"
        assert set(reply.json()["error"]) == {"type", "message"}


MCP_CALL = {"type": "mcp_call", "id": "mcp_1", "name": "t", "server_label": "s", "arguments": "{}"}
SEARCH = {"type": "web_search_call", "id": "ws_1", "status": "completed"}


@pytest.mark.parametrize(
    ("item", "param", "code"),
    [
        ({"type": "web_search_call"}, "input[1].id", "missing_required_parameter"),
        ({**SEARCH, "id": ["ws_1"]}, "input[1].id", "invalid_type"),
        ({**SEARCH, "action": "search"}, "input[1].action", "invalid_type"),
        ({**SEARCH, "action": {"sources": [5]}}, "input[1].action.sources", "invalid_type"),
        ({"type": "mcp_call"}, "input[1].id", "missing_required_parameter"),
        (
            {**MCP_CALL, "approval_request_id": ["x"]},
            "input[1].approval_request_id",
            "invalid_type",
        ),
        ({**MCP_CALL, "arguments": {"a": 1}}, "input[1].arguments", "invalid_type"),
        ({**MCP_CALL, "type": "mcp_approval_request", "id": ["x"]}, "input[1].id", "invalid_type"),
    ],
)
async def test_a_gateway_tool_item_sent_back_is_checked_where_it_was_read(
    item: dict[str, Any], param: str, code: str
) -> None:
    """Read as the model's earlier calls, these failed the turn with a 500."""
    body = {"model": "m", "input": [{"role": "user", "content": "x"}, item]}
    reply = await call(build(carrying_all()), "POST", "/v1/responses", orjson.dumps(body))
    assert_openai_refusal(reply, param)
    assert reply.json()["error"]["code"] == code


@pytest.mark.parametrize("item", [MCP_CALL, {**SEARCH, "action": {"query": "q", "sources": []}}])
async def test_a_gateway_tool_item_sent_back_whole_is_accepted(item: dict[str, Any]) -> None:
    body = {"model": "m", "input": [{"role": "user", "content": "x"}, item]}
    reply = await call(build(carrying_all()), "POST", "/v1/responses", orjson.dumps(body))
    assert reply.status == 200, reply.body


@pytest.mark.parametrize(
    ("item", "param", "code"),
    [
        ({"summary": [{"type": "summary_text", "text": 5}]}, "summary[0].text", "invalid_type"),
        ({"summary": [{"type": "summary_text"}]}, "summary[0].text", "missing_required_parameter"),
        ({"summary": ["s"]}, "summary[0]", "invalid_type"),
        ({"content": [{"type": "reasoning_text", "text": [1]}]}, "content[0].text", "invalid_type"),
        ({"content": "thought"}, "content", "invalid_type"),
    ],
)
async def test_a_reasoning_items_texts_must_be_strings(
    item: dict[str, Any], param: str, code: str
) -> None:
    """A Chat upstream's translation joined them, and failed on any other type."""
    reasoning = {"type": "reasoning", "summary": [], **item}
    body = {"model": "m", "input": [{"role": "user", "content": "x"}, reasoning]}
    reply = await call(build(carrying_all()), "POST", "/v1/responses", orjson.dumps(body))
    assert_openai_refusal(reply, f"input[1].{param}")
    assert reply.json()["error"]["code"] == code


@pytest.mark.parametrize(
    ("fields", "param", "limit", "length"),
    [
        ({"safety_identifier": "u" * 129}, "safety_identifier", 128, 129),  # pydantic's bound
        ({"metadata": {"k": "v" * 513}}, "metadata.k", 512, 513),  # checked by hand
    ],
)
async def test_a_string_too_long_is_refused_in_hosted_words_through_the_sdk(
    fields: dict[str, Any], param: str, limit: int, length: int
) -> None:
    """The official SDK sees hosted's code and sentence, whichever check found the string
    too long: a client's handling of ``string_above_max_length`` works here too."""
    transport = httpx2.ASGITransport(app=build())
    async with (
        httpx2.AsyncClient(transport=transport) as http,
        openai.AsyncOpenAI(
            api_key="unused", base_url="http://localhost/v1", http_client=http, max_retries=0
        ) as client,
    ):
        with pytest.raises(openai.BadRequestError) as refused:
            await client.responses.create(model="m", input="hi", extra_body=fields)
    error = refused.value
    assert (error.status_code, error.code, error.param) == (400, "string_above_max_length", param)
    assert error.body == {
        "message": f"Invalid '{param}': string too long. Expected a string with maximum length "
        f"{limit}, but got a string with length {length} instead.",
        "type": "invalid_request_error",
        "param": param,
        "code": "string_above_max_length",
    }
