"""A Chat server that refuses ``content: null`` (LM Studio's: the spec's shape of an
assistant message of tool calls alone) end to end: the real gateway, in front of the real
fake upstream refusing it in LM Studio's words, takes a two-round tool conversation
through, over the Responses API (``previous_response_id``), Chat Completions (the
translated path) and the Messages API, with the backend's ``tool_call_content = ""``, and
by default too (the round refused sent again once with ``""``, every later one so from
the start); one configured to send ``null`` passes the refusal on in each protocol's error
shape."""

from __future__ import annotations

import urllib.error
import urllib.request
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anthropic
import openai
import orjson
import pytest
from anthropic import Anthropic
from openai import OpenAI

from stateway.fake_upstream.launch import start_fake_upstream
from tests.e2e.configured import configured_gateway
from tests.e2e.test_upstream_mapping import clear, upstream_requests

MODEL = "fake-model"
ADD: Any = {
    "type": "function",
    "name": "add",
    "parameters": {"type": "object", "properties": {"a": {"type": "integer"}}},
}
CHAT_ADD: Any = {"type": "function", "function": {"name": "add", "parameters": ADD["parameters"]}}
MESSAGES_ADD: Any = {"name": "add", "input_schema": ADD["parameters"]}
WORDS = "'content' field must be a string or an array of objects"


@pytest.fixture(scope="module")
def lm_studio() -> Iterator[str]:
    """A fake model server refusing a message whose content is null, as LM Studio does."""
    with start_fake_upstream(content_required=True) as url:
        yield url


def sent_contents(upstream: str) -> list[Any]:
    """The content of each assistant message of each Chat call the upstream was sent."""
    return [
        message["content"]
        for sent in upstream_requests(upstream)
        for message in sent["body"]["messages"]
        if message["role"] == "assistant"
    ]


def responses_round_trip(sdk: OpenAI) -> str:
    """A call made, its output sent back by ``previous_response_id``: the answer's text."""
    first = sdk.responses.create(model=MODEL, input='[[tool:add:{"a": 1}]] add', tools=[ADD])
    [call] = first.output
    assert call.type == "function_call"
    second = sdk.responses.create(
        model=MODEL,
        previous_response_id=first.id,
        input=[{"type": "function_call_output", "call_id": call.call_id, "output": "2"}],
        tools=[ADD],
    )
    assert second.status == "completed"
    return second.output_text


def chat_round_trip(sdk: OpenAI, *, stream: bool = False, keyed: bool = False) -> str | None:
    """A Chat Completions client's call and its output, the assistant's message as the
    SDK gives it back (``content: null``), its second request (the one sending it back)
    streamed or not, sent with an ``Idempotency-Key`` or not: the answer's text."""
    messages: list[Any] = [{"role": "user", "content": '[[tool:add:{"a": 1}]] add'}]
    first = sdk.chat.completions.create(model=MODEL, messages=messages, tools=[CHAT_ADD])
    called = first.choices[0].message
    assert called.tool_calls
    messages += [
        called.model_dump(exclude_none=False, include={"role", "content", "tool_calls"}),
        {"role": "tool", "tool_call_id": called.tool_calls[0].id, "content": "2"},
    ]
    options: dict[str, Any] = {}
    if keyed:
        options["extra_headers"] = {"Idempotency-Key": str(uuid.uuid4())}
    if stream:
        return streamed_text(sdk, messages, **options)
    second = sdk.chat.completions.create(
        model=MODEL, messages=messages, tools=[CHAT_ADD], **options
    )
    return second.choices[0].message.content


def messages_round_trip(claude: Anthropic) -> str:
    """A Messages client's ``tool_use`` and its ``tool_result``: the answer's text."""
    messages: list[Any] = [{"role": "user", "content": '[[tool:add:{"a": 1}]] add'}]
    first = claude.messages.create(
        model=MODEL, max_tokens=200, messages=messages, tools=[MESSAGES_ADD]
    )
    [use] = [block for block in first.content if block.type == "tool_use"]
    messages += [
        {"role": "assistant", "content": [block.model_dump() for block in first.content]},
        {
            "role": "user",
            "content": [{"type": "tool_result", "tool_use_id": use.id, "content": "2"}],
        },
    ]
    second = claude.messages.create(
        model=MODEL, max_tokens=200, messages=messages, tools=[MESSAGES_ADD]
    )
    return "".join(block.text for block in second.content if block.type == "text")


# A declared window keeps Chat Completions requests off the fast path (translated).
TRANSLATED = {"context_window": 32768}


def test_a_backend_sending_empty_text_takes_both_protocols_tool_rounds_through(
    lm_studio: str, tmp_path: Path
) -> None:
    backend = {"url": lm_studio, "tool_call_content": "", **TRANSLATED}
    with (
        configured_gateway(tmp_path, backend) as gateway,
        OpenAI(base_url=gateway.url + "/v1", api_key="k", max_retries=0) as sdk,
        Anthropic(base_url=gateway.url, api_key="k", max_retries=0) as claude,
    ):
        clear(lm_studio)
        assert responses_round_trip(sdk)
        assert sent_contents(lm_studio) == [""]
        clear(lm_studio)
        assert chat_round_trip(sdk)
        assert sent_contents(lm_studio) == [""]
        clear(lm_studio)
        assert messages_round_trip(claude)
        assert sent_contents(lm_studio) == [""]


def test_by_default_the_refused_round_goes_again_with_empty_text_and_later_ones_at_once(
    lm_studio: str, tmp_path: Path
) -> None:
    with (
        configured_gateway(tmp_path, {"url": lm_studio, **TRANSLATED}) as gateway,
        OpenAI(base_url=gateway.url + "/v1", api_key="k", max_retries=0) as sdk,
    ):
        clear(lm_studio)
        assert responses_round_trip(sdk)
        assert sent_contents(lm_studio) == [None, ""]
        clear(lm_studio)
        assert chat_round_trip(sdk)
        assert sent_contents(lm_studio) == [""]


def test_a_backend_sending_null_passes_the_refusal_on_in_each_protocol_s_shape(
    lm_studio: str, tmp_path: Path
) -> None:
    backend = {"url": lm_studio, "tool_call_content": "null", **TRANSLATED}
    with (
        configured_gateway(tmp_path, backend) as gateway,
        OpenAI(base_url=gateway.url + "/v1", api_key="k", max_retries=0) as sdk,
        Anthropic(base_url=gateway.url, api_key="k", max_retries=0) as claude,
    ):
        with pytest.raises(openai.BadRequestError) as refused:
            responses_round_trip(sdk)
        assert WORDS in refused.value.message
        assert refused.value.code == "null_content_unsupported"
        with pytest.raises(openai.BadRequestError) as refused:
            chat_round_trip(sdk)
        assert WORDS in refused.value.message
        assert refused.value.code == "null_content_unsupported"
        with pytest.raises(anthropic.BadRequestError) as rejected:
            messages_round_trip(claude)
        assert rejected.value.body["error"]["type"] == "invalid_request_error"  # type: ignore[index]
        assert WORDS in rejected.value.message


def forwarded_contents(upstream: str) -> list[Any]:
    """:func:`sent_contents`, of the calls forwarded on the Chat fast path only: the
    client's own body (a translated call adds the ``tool_choice`` the SDK left out)."""
    assert all("tool_choice" not in sent["body"] for sent in upstream_requests(upstream))
    return sent_contents(upstream)


def test_the_fast_path_sends_a_chat_client_s_null_content_as_the_backend_does(
    lm_studio: str, tmp_path_factory: pytest.TempPathFactory
) -> None:
    """A Chat client's own message of tool calls alone (``content: null``, as the SDK
    gives it back) forwarded to a backend sending ``""``, configured or learned (by a
    translated round's refusal), goes with ``""``."""
    configured = {"url": lm_studio, "tool_call_content": ""}
    with (
        configured_gateway(tmp_path_factory.mktemp("configured"), configured) as gateway,
        OpenAI(base_url=gateway.url + "/v1", api_key="k", max_retries=0) as sdk,
    ):
        clear(lm_studio)
        assert chat_round_trip(sdk)
        assert forwarded_contents(lm_studio) == [""]
    with (
        configured_gateway(tmp_path_factory.mktemp("learned"), {"url": lm_studio}) as gateway,
        OpenAI(base_url=gateway.url + "/v1", api_key="k", max_retries=0) as sdk,
    ):
        assert responses_round_trip(sdk)  # refused with null, answered with ""
        clear(lm_studio)
        assert chat_round_trip(sdk)
        assert forwarded_contents(lm_studio) == [""]


def streamed_text(sdk: OpenAI, messages: list[Any], **options: Any) -> str:
    """A streamed completion's text, its chunks added up."""
    chunks = sdk.chat.completions.create(
        model=MODEL, messages=messages, tools=[CHAT_ADD], stream=True, **options
    )
    return "".join(chunk.choices[0].delta.content or "" for chunk in chunks if chunk.choices)


@pytest.mark.parametrize(
    ("stream", "keyed"),
    [(False, False), (True, False), (False, True), (True, True)],
    ids=["whole", "streamed", "whole-keyed", "streamed-keyed"],
)
def test_the_fast_path_learns_lm_studio_s_refusal_of_a_chat_client_s_null_content(
    lm_studio: str, tmp_path: Path, stream: bool, keyed: bool
) -> None:
    """A gateway serving only Chat clients, its backend left to its default (no
    translated round teaches it): LM Studio's refusal of a client's own null content is
    no answer the client sees. The request goes again once with ``""``, and every later
    one so at once (one upstream call); the log says it once, as for a translated round."""
    with (
        configured_gateway(tmp_path, {"url": lm_studio}) as gateway,
        OpenAI(base_url=gateway.url + "/v1", api_key="k", max_retries=0) as sdk,
    ):
        clear(lm_studio)
        assert chat_round_trip(sdk, stream=stream, keyed=keyed)
        assert forwarded_contents(lm_studio) == [None, ""]  # refused, then sent again
        assert len(upstream_requests(lm_studio)) == 3  # the first round's, and those two
        clear(lm_studio)
        assert chat_round_trip(sdk, stream=stream, keyed=keyed)
        assert forwarded_contents(lm_studio) == [""]
        assert len(upstream_requests(lm_studio)) == 2
    said = gateway.log.read_text()
    assert said.count("refused content null beside tool calls") == 1


def test_another_refusal_of_a_request_with_null_content_is_relayed_as_it_came(
    lm_studio: str, tmp_path: Path
) -> None:
    """A 400 in other words to a forwarded request holding ``content: null`` is the
    upstream's own answer, byte for byte, the request sent once."""
    called = {
        "role": "assistant",
        "content": None,
        "tool_calls": [
            {"id": "c1", "type": "function", "function": {"name": "add", "arguments": "{}"}}
        ],
    }
    body = orjson.dumps({"model": MODEL, "messages": ["not a message", called]})
    direct = exchanged(lm_studio + "/chat/completions", body)
    assert direct[0] == 400
    assert b"Invalid message at index 0" in direct[1]
    with configured_gateway(tmp_path, {"url": lm_studio}) as gateway:
        clear(lm_studio)
        assert exchanged(gateway.url + "/v1/chat/completions", body) == direct
        assert len(upstream_requests(lm_studio)) == 1


def exchanged(url: str, body: bytes) -> tuple[int, bytes]:
    """``body`` posted to ``url``: the status and the body answered."""
    asked = urllib.request.Request(url, data=body, headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(asked) as answer:
            return int(answer.status), bytes(answer.read())
    except urllib.error.HTTPError as refused:
        return refused.code, bytes(refused.read())
