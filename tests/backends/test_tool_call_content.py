"""A Chat backend's ``tool_call_content``: the ``content`` an assistant message holding
only tool calls is sent with (``null``, the spec's, by default; ``""`` for a server that
refuses null, as LM Studio does), and what a backend left to its default learns from LM
Studio's refusal of null: the same call is sent again once with ``""``, as is every call
after it, never after output, never more than once."""

from __future__ import annotations

import asyncio
import json
import logging
from contextlib import aclosing
from typing import Any

import orjson
import pytest
from aiohttp import web
from pydantic import ValidationError

from stateway.app.generation import BACKEND_APIS
from stateway.backend_config import BackendConfig
from stateway.backends.chat_request import chat_body
from stateway.backends.upstream_http import UpstreamClient
from stateway.backends.upstream_target import UpstreamTarget
from stateway.core.backend import Backend
from stateway.core.errors import UpstreamRejected
from stateway.core.generation_settings import GenerationSettings
from stateway.core.inference import Delta, InferenceRequest, TextDelta
from stateway.core.logprobs import INCLUDE
from tests.backends.conftest import Loopback
from tests.backends.test_logprobs import LLAMA_REFUSAL
from tests.backends.test_openai_chat import request

ANSWER = {"choices": [{"index": 0, "message": {"role": "assistant", "content": "5"}}]}
LM_STUDIO_REFUSAL = {
    "error": "Invalid 'content': 'content' field must be a string or an array of objects.."
}
"""LM Studio's answer (a 400) to a message whose content is null: its words alone."""
USER = {"type": "message", "role": "user", "content": [{"type": "input_text", "text": "add"}]}
CALL = {"type": "function_call", "call_id": "c1", "name": "add", "arguments": "{}"}
OUTPUT = {"type": "function_call_output", "call_id": "c1", "output": "5"}
SAID = {"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": "ok"}]}


class Server:
    """A Chat server on loopback that keeps each body it is sent; with ``strict``, it
    refuses a message whose content is null as LM Studio does (with ``refusal``); with
    ``refusing``, every call so; with ``tokens_whole``, a streamed call asking for tokens
    with tools, as llama-server does."""

    def __init__(self, loopback: Loopback, *, strict: bool = False) -> None:
        self.loopback = loopback
        self.strict = strict
        self.refusing = False
        self.tokens_whole = False
        self.bodies: list[dict[str, Any]] = []
        self.sent: list[bytes] = []
        """Each body as its bytes came."""
        self.paths: list[str] = []
        self.refusal: dict[str, Any] = LM_STUDIO_REFUSAL

    async def answer(self, incoming: web.Request) -> web.Response:
        self.sent.append(raw := await incoming.read())
        self.paths.append(incoming.path)
        body = orjson.loads(raw)
        self.bodies.append(body)
        null = any(m.get("content") is None for m in body["messages"])
        if self.refusing or (self.strict and null):
            return web.json_response(self.refusal, status=400)
        if self.tokens_whole and body.get("stream") and body.get("logprobs") and "tools" in body:
            return web.json_response(LLAMA_REFUSAL, status=400)
        return web.json_response(ANSWER)

    async def backend(self, **config: Any) -> Backend:
        url = await self.loopback.serve(self.answer)
        settings = BackendConfig(name="up", url=url, **config)
        client = self.loopback.adopt(UpstreamClient(UpstreamTarget("up", url)))
        return BACKEND_APIS["chat"](client, settings)

    def contents(self) -> list[Any]:
        """The content of each assistant message of each body sent, in order."""
        return [
            m["content"] for b in self.bodies for m in b["messages"] if m["role"] == "assistant"
        ]


async def answered(backend: Backend, items: list[dict[str, Any]]) -> list[Delta]:
    request = InferenceRequest(
        model="m", instructions=None, items=items, settings=GenerationSettings(), stream=False
    )
    async with aclosing(backend.infer(request)) as deltas:
        return [delta async for delta in deltas]


@pytest.mark.parametrize(("config", "sent"), [({}, None), ({"tool_call_content": ""}, "")])
async def test_an_assistant_message_of_tool_calls_alone_has_the_content_configured(
    loopback: Loopback, config: dict[str, Any], sent: str | None
) -> None:
    server = Server(loopback)
    await answered(await server.backend(**config), [USER, CALL, OUTPUT])
    assert server.contents() == [sent]
    [assistant] = [m for m in server.bodies[0]["messages"] if m["role"] == "assistant"]
    assert assistant["tool_calls"][0]["id"] == "c1"


@pytest.mark.parametrize(
    ("items", "content", "null"),
    [
        ([USER, CALL, OUTPUT], "null", True),
        ([USER, CALL, OUTPUT], "", False),
        ([USER, SAID, CALL, OUTPUT], "null", False),
        ([USER, SAID], "null", False),
    ],
)
def test_the_body_tells_whether_it_sends_null_content_as_it_is_built(
    items: list[dict[str, Any]], content: Any, null: bool
) -> None:
    """What the backend reads to watch a call for LM Studio's refusal, instead of walking
    every call's messages for a null one (a backend that never sends a tool call paid
    that walk on each)."""
    request = InferenceRequest(
        model="m", instructions=None, items=items, settings=GenerationSettings(), stream=False
    )
    built = chat_body(request, tool_call_content=content)
    sent = [m.get("content") for m in built.body["messages"] if m["role"] == "assistant"]
    assert built.null_content is null
    assert (None in sent) is null


async def test_text_beside_tool_calls_is_sent_as_it_is(loopback: Loopback) -> None:
    server = Server(loopback)
    await answered(await server.backend(tool_call_content=""), [USER, SAID, CALL, OUTPUT])
    assert server.contents() == ["ok"]


async def test_a_server_refusing_null_in_lm_studio_s_words_is_sent_the_call_again_with_text(
    loopback: Loopback, caplog: pytest.LogCaptureFixture
) -> None:
    """The refusal comes before any output: the call goes again with ``""`` and its answer
    is the round's; every later call of the backend goes with ``""`` from the start. The
    log says so, and names the setting that spares the refused call."""
    server = Server(loopback, strict=True)
    backend = await server.backend()
    with caplog.at_level(logging.INFO, logger="stateway.backends.openai_chat"):
        answer = await answered(backend, [USER, CALL, OUTPUT])
    assert [d for d in answer if isinstance(d, TextDelta)]
    assert server.contents() == [None, ""]
    [said] = [r.getMessage() for r in caplog.records if r.name.endswith("openai_chat")]
    assert "model server up refused content null" in said
    assert 'tool_call_content = ""' in said
    await answered(backend, [USER, CALL, OUTPUT])
    assert server.contents() == [None, "", ""]


def holding(server: Server, count: int) -> Server:
    """``server``, holding each answer (a refusal) until ``count`` requests came."""
    arrived = asyncio.Event()
    answer = server.answer

    async def held(incoming: web.Request) -> web.Response:
        reply = await answer(incoming)
        if len(server.bodies) == count:
            arrived.set()
        await arrived.wait()
        return reply

    server.answer = held  # type: ignore[method-assign]
    return server


async def test_calls_refused_at_once_on_a_fresh_backend_are_each_sent_again_once(
    loopback: Loopback, caplog: pytest.LogCaptureFixture
) -> None:
    """Calls already sent with null when the first refusal comes are each refused and
    sent again once with ``""`` (a 400 costs no tokens), never more; the log says it once,
    and every later call goes with ``""`` from the start."""
    server = holding(Server(loopback, strict=True), 3)
    backend = await server.backend()
    with caplog.at_level(logging.INFO, logger="stateway.backends.openai_chat"):
        answers = await asyncio.gather(*(answered(backend, [USER, CALL, OUTPUT]) for _ in "abc"))
    assert all(any(isinstance(d, TextDelta) for d in answer) for answer in answers)
    assert server.contents() == [None, None, None, "", "", ""]
    said = [r for r in caplog.records if r.name.endswith("openai_chat")]
    assert len(said) == 1
    await answered(backend, [USER, CALL, OUTPUT])
    assert server.contents()[6:] == [""]


async def test_a_server_that_took_null_is_not_watched_for_its_refusal_again(
    loopback: Loopback,
) -> None:
    """A server that answered a call sending null takes it: no later call is sent again
    on its refusal (nor wrapped for it, on every round after a tool call)."""
    server = Server(loopback)
    backend = await server.backend()
    await answered(backend, [USER, CALL, OUTPUT])
    server.strict = True
    with pytest.raises(UpstreamRejected) as refused:
        await answered(backend, [USER, CALL, OUTPUT])
    assert refused.value.code == "null_content_unsupported"
    assert server.contents() == [None, None]


async def test_a_backend_configured_to_send_null_sends_null_and_passes_the_refusal_on(
    loopback: Loopback,
) -> None:
    server = Server(loopback, strict=True)
    backend = await server.backend(tool_call_content="null")
    with pytest.raises(UpstreamRejected) as refused:
        await answered(backend, [USER, CALL, OUTPUT])
    assert (refused.value.status, refused.value.code) == (400, "null_content_unsupported")
    assert "'content' field must be a string" in refused.value.message
    assert server.contents() == [None]


async def test_another_refusal_is_passed_on_unsent_again(loopback: Loopback) -> None:
    server = Server(loopback, strict=True)
    server.refusal = {"error": {"message": "bad tools", "type": "invalid_request_error"}}
    with pytest.raises(UpstreamRejected, match="bad tools"):
        await answered(await server.backend(), [USER, CALL, OUTPUT])
    assert server.contents() == [None]


async def test_a_call_without_null_content_is_not_sent_again(loopback: Loopback) -> None:
    """LM Studio's words about another message (none here is null): the call would go
    again as it went, so it does not."""
    server = Server(loopback)
    server.refusing = True
    with pytest.raises(UpstreamRejected):
        await answered(await server.backend(), [USER, SAID])
    assert server.contents() == ["ok"]


async def test_a_round_asked_whole_after_null_was_refused_goes_with_text_at_once(
    loopback: Loopback,
) -> None:
    """A streamed round with tools asking for tokens, to a server refusing both null and
    that (as llama-server refuses it): asked again with ``""``, then whole with ``""`` at
    once, not with the null its body was built with."""
    server = Server(loopback, strict=True)
    server.tokens_whole = True
    backend = await server.backend()
    tool = {"type": "function", "name": "add", "parameters": {"type": "object"}}
    asked = request([USER, CALL, OUTPUT], include=[INCLUDE], tools=[tool], stream=True)
    async with aclosing(backend.infer(asked)) as deltas:
        assert [d async for d in deltas if isinstance(d, TextDelta)]
    streamed = [bool(body.get("stream")) for body in server.bodies]
    assert list(zip(streamed, server.contents(), strict=True)) == [
        (True, None),
        (True, ""),
        (False, ""),
    ]


CLIENT_CALLS = {  # a Chat client's own assistant message of tool calls alone, as SDKs send it
    "model": "m",
    "messages": [
        {"role": "user", "content": "add"},
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {"id": "c1", "type": "function", "function": {"name": "add", "arguments": "{}"}}
            ],
        },
        {"role": "tool", "tool_call_id": "c1", "content": "5"},
    ],
}


async def forwarded(backend: Backend, fields: dict[str, Any]) -> int:
    """``fields`` sent on the fast path (as a client wrote them: spaced): the status."""
    body = orjson.dumps(fields, option=orjson.OPT_INDENT_2)
    relay = await backend.forward_chat(body, orjson.loads(body))  # type: ignore[attr-defined]
    await relay.aclose()
    return int(relay.status)


async def test_the_fast_path_sends_a_client_s_null_content_as_the_backend_configured(
    loopback: Loopback,
) -> None:
    """A Chat client's own message of tool calls alone (``content`` null, as the SDKs
    send it) goes to a backend sending ``""`` with ``""``, all else as it came; a body
    holding no such message goes in the very bytes the client sent."""
    server = Server(loopback, strict=True)
    backend = await server.backend(tool_call_content="")
    assert await forwarded(backend, CLIENT_CALLS) == 200
    asked, called, output = CLIENT_CALLS["messages"]
    texted = [asked, {**called, "content": ""}, output]
    assert server.bodies == [{**CLIENT_CALLS, "messages": texted}]
    plain = {"model": "m", "messages": [{"role": "user", "content": "add"}]}
    assert await forwarded(backend, plain) == 200
    assert server.sent[-1] == orjson.dumps(plain, option=orjson.OPT_INDENT_2)


async def test_the_fast_path_texts_only_an_assistant_message_s_null_content(
    loopback: Loopback,
) -> None:
    """Only an assistant message whose content is null or absent gets ``""``: another
    role's null, and an assistant's text, go as they came (the upstream judges them), and
    user messages in a row stay apart (``alternate_roles`` is off); a body with neither,
    or whose ``messages`` is no list, goes in the very bytes sent."""
    server = Server(loopback)
    backend = await server.backend(tool_call_content="")
    calls = CLIENT_CALLS["messages"][1]["tool_calls"]
    messages = [
        {"role": "user", "content": None},
        {"role": "user", "content": "add"},
        {"role": "assistant", "content": "let me add", "tool_calls": calls},
        {"role": "assistant", "tool_calls": calls},
    ]
    await forwarded(backend, {"model": "m", "messages": messages})
    *asked, said, called = messages
    assert server.bodies[-1]["messages"] == [*asked, said, {**called, "content": ""}]
    assert server.paths[-1].endswith("/chat/completions")
    runs = [{"role": "user", "content": "add"}, {"role": "user", "content": "please"}, called]
    await forwarded(backend, {"model": "m", "messages": runs})
    assert server.bodies[-1]["messages"] == [*runs[:2], {**called, "content": ""}]
    for untouched in (
        {"model": "m", "messages": [*asked, said]},
        {"model": "m", "messages": "add"},
    ):
        await forwarded(backend, untouched)
        assert server.sent[-1] == orjson.dumps(untouched, option=orjson.OPT_INDENT_2)


async def test_the_fast_path_sends_empty_text_once_a_translated_call_learned_to(
    loopback: Loopback,
) -> None:
    """A backend left to its default that learned from a translated call that the server
    refuses null forwards a client's null content as ``""`` at once: one call."""
    server = Server(loopback, strict=True)
    backend = await server.backend()
    await answered(backend, [USER, CALL, OUTPUT])  # refused with null, answered with ""
    assert await forwarded(backend, CLIENT_CALLS) == 200
    assert server.contents() == [None, "", ""]


async def relayed(backend: Backend, fields: dict[str, Any]) -> tuple[int, bytes]:
    """``fields`` sent on the fast path (spaced, as a client wrote them): the status and
    the body relayed, chunk by chunk."""
    body = orjson.dumps(fields, option=orjson.OPT_INDENT_2)
    relay = await backend.forward_chat(body, orjson.loads(body))  # type: ignore[attr-defined]
    try:
        return int(relay.status), b"".join([chunk async for chunk in relay.chunks()])
    finally:
        await relay.aclose()


@pytest.mark.parametrize("stream", [False, True])
async def test_the_fast_path_learns_lm_studio_s_refusal_of_null_itself(
    loopback: Loopback, caplog: pytest.LogCaptureFixture, stream: bool
) -> None:
    """A backend left to its default forwards a client's null content as it came; LM
    Studio's refusal of it (a JSON 400, streamed or not) comes before any output: the
    request goes again once with ``""``, its answer the client's, and the backend has
    learned, as a translated call's refusal teaches it (the same log line): every later
    request, forwarded or translated, goes with ``""`` at once."""
    server = Server(loopback, strict=True)
    backend = await server.backend()
    fields = {**CLIENT_CALLS, "stream": stream}
    with caplog.at_level(logging.INFO, logger="stateway.backends.openai_chat"):
        status, body = await relayed(backend, fields)
    assert (status, orjson.loads(body)) == (200, ANSWER)
    assert server.contents() == [None, ""]
    asked, called, output = CLIENT_CALLS["messages"]
    assert server.bodies[1] == {**fields, "messages": [asked, {**called, "content": ""}, output]}
    [said] = [r.getMessage() for r in caplog.records if r.name.endswith("openai_chat")]
    assert "model server up refused content null" in said
    assert await forwarded(backend, fields) == 200
    await answered(backend, [USER, CALL, OUTPUT])
    assert server.contents() == [None, "", "", ""]


async def test_requests_refused_at_once_on_the_fast_path_are_each_sent_again_once(
    loopback: Loopback, caplog: pytest.LogCaptureFixture
) -> None:
    """Requests already forwarded with null when the first refusal comes are each sent
    again once with ``""``; the log says it once."""
    server = holding(Server(loopback, strict=True), 3)
    backend = await server.backend()
    with caplog.at_level(logging.INFO, logger="stateway.backends.openai_chat"):
        statuses = await asyncio.gather(*(forwarded(backend, CLIENT_CALLS) for _ in "abc"))
    assert statuses == [200, 200, 200]
    assert server.contents() == [None, None, None, "", "", ""]
    assert len([r for r in caplog.records if r.name.endswith("openai_chat")]) == 1


@pytest.mark.parametrize(
    ("refusal", "fields", "config"),
    [
        (  # other words
            {"error": {"message": "bad tools", "type": "invalid_request_error"}},
            CLIENT_CALLS,
            {},
        ),
        (  # LM Studio's, about a request without null content
            LM_STUDIO_REFUSAL,
            {"model": "m", "messages": [{"role": "user", "content": "add"}]},
            {},
        ),
        (LM_STUDIO_REFUSAL, CLIENT_CALLS, {"tool_call_content": "null"}),  # told to send null
    ],
    ids=["other-words", "no-null-content", "configured-null"],
)
async def test_any_other_refusal_on_the_fast_path_is_relayed_as_it_came(
    loopback: Loopback,
    refusal: dict[str, Any],
    fields: dict[str, Any],
    config: dict[str, Any],
) -> None:
    """Relayed byte for byte, the request not sent again, nothing learned."""
    server = Server(loopback)
    server.refusing = True
    server.refusal = refusal
    backend = await server.backend(**config)
    status, body = await relayed(backend, fields)
    assert (status, body) == (400, json.dumps(refusal).encode())  # as aiohttp wrote it
    assert server.sent == [orjson.dumps(fields, option=orjson.OPT_INDENT_2)]
    server.refusing = False
    assert await forwarded(backend, fields) == 200
    assert server.sent[-1] == orjson.dumps(fields, option=orjson.OPT_INDENT_2)


async def test_a_server_that_took_null_is_not_watched_for_its_refusal_on_the_fast_path(
    loopback: Loopback,
) -> None:
    """A server that answered a translated call sending null takes it: a forwarded
    request's refusal in LM Studio's words is relayed, as a translated call's is."""
    server = Server(loopback)
    backend = await server.backend()
    await answered(backend, [USER, CALL, OUTPUT])
    server.strict = True
    assert await forwarded(backend, CLIENT_CALLS) == 400
    assert server.contents() == [None, None]


async def test_a_backend_sending_null_forwards_a_client_s_null_content_as_it_came(
    loopback: Loopback,
) -> None:
    server = Server(loopback)
    backend = await server.backend(tool_call_content="null")
    assert await forwarded(backend, CLIENT_CALLS) == 200
    assert server.sent == [orjson.dumps(CLIENT_CALLS, option=orjson.OPT_INDENT_2)]


@pytest.mark.parametrize("api", ["responses", "anthropic"])
def test_only_a_chat_upstream_takes_the_setting(api: str) -> None:
    with pytest.raises(ValidationError, match="tool_call_content"):
        BackendConfig(name="up", url="http://x", api=api, tool_call_content="")


def test_only_null_or_an_empty_string_is_taken() -> None:
    with pytest.raises(ValidationError, match="tool_call_content"):
        BackendConfig(name="up", url="http://x", tool_call_content=" ")
