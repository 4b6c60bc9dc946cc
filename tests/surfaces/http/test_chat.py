"""The Chat Completions route in process: translated answers and streams, the fast path's
relay, errors in the OpenAI shape, and fuzzed bodies that must never get a 5xx."""

from __future__ import annotations

import asyncio
import dataclasses
import gc
import json
import logging
import time
import weakref
from collections.abc import AsyncIterator, Mapping
from typing import Any

import orjson
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from openai.types.chat import ChatCompletion, ChatCompletionChunk
from starlette.applications import Starlette
from starlette.types import Message

from stateway.core.errors import (
    CredentialRevoked,
    GatewayError,
    InvalidRequest,
    ServerShuttingDown,
    UpstreamError,
    UpstreamTimeout,
    UpstreamUnavailable,
)
from stateway.core.gateway import Gateway
from stateway.core.inference import (
    Delta,
    Finish,
    ReasoningDelta,
    TextDelta,
    ToolCallDelta,
    UsageReport,
)
from stateway.core.loop import Loop
from stateway.core.principal import Principal
from stateway.core.routing import BackendEntry, Router
from stateway.core.run_registry import RunRegistry
from stateway.core.usage import Usage
from stateway.protocols.chat.decode import ChatCall, decode_chat, peek_chat
from stateway.surfaces.auth.authenticator import IDENTITY, Identity
from stateway.surfaces.http import chat as chat_module
from stateway.surfaces.http.app import build_http_app
from stateway.surfaces.http.chat import ChatRoutes
from stateway.surfaces.http.relay import RelayResponse
from stateway.surfaces.http.responses import INLINE_DECODE_BYTES, ResponsesRoutes
from stateway.surfaces.http.service import ServiceRoutes
from tests.core.fakes import MemoryStore, ScriptedBackend
from tests.protocols.responses.test_decode import json_values
from tests.surfaces.http.asgi import Reply, call, opening_after_keep_alives, stalled
from tests.surfaces.http.test_responses import expiring

OK: list[Delta | GatewayError] = [TextDelta("ok"), UsageReport(Usage(3, 1)), Finish("stop")]


class FakeRelay:
    """A relay of ``chunks`` (an error among them raised in its place); ``whole``: read
    in one piece (:meth:`body`), as a real relay reads a 200 that is no event stream."""

    def __init__(
        self,
        status: int,
        headers: dict[str, str],
        chunks: list[bytes],
        gate: asyncio.Event | None,
        *,
        whole: bool = False,
    ) -> None:
        self.status = status
        self.headers = headers
        self.whole = whole
        self._chunks = chunks
        self._gate = gate
        self.closed = asyncio.Event()

    async def chunks(self) -> AsyncIterator[bytes]:
        for chunk in self._chunks:
            if isinstance(chunk, GatewayError):
                raise chunk
            yield chunk
        if self._gate is not None:
            await self._gate.wait()

    async def body(self) -> bytes:
        assert self.whole, "only a whole answer is read in one piece"
        return b"".join([chunk async for chunk in self.chunks()])

    def usage(self) -> None:
        return None

    def output_estimate(self) -> int:
        return 0

    def failure(self) -> None:
        return None

    async def aclose(self) -> None:
        self.closed.set()


class ForwardingBackend(ScriptedBackend):
    """A backend whose upstream speaks Chat Completions: forwards bodies to a canned relay."""

    def __init__(self, relay: FakeRelay) -> None:
        super().__init__(OK)
        self.relay = relay
        self.forwarded: list[bytes] = []

    async def forward_chat(self, body: bytes, fields: Mapping[str, Any]) -> FakeRelay:
        self.forwarded.append(body)
        return self.relay


def build(
    backend: Any = None,
    *,
    models: Mapping[str, str] | None = None,
    keepalive: float = 15.0,
    max_body: int = 1 << 20,
    body_timeout: float | None = None,
) -> Starlette:
    store = MemoryStore()
    router = Router(
        [BackendEntry(backend or ScriptedBackend(OK), dict(models or {}), catch_all=models is None)]
    )
    gateway = Gateway(store, router, Loop(store), RunRegistry())
    return build_http_app(
        ResponsesRoutes(gateway, 1 << 20),
        ServiceRoutes(gateway),
        chat=ChatRoutes(
            gateway, max_body, body_timeout=body_timeout, keepalive=keepalive, max_input_items=50
        ),
    )


def body(**fields: Any) -> bytes:
    base = {"model": "m", "messages": [{"role": "user", "content": "hi"}]}
    return orjson.dumps({**base, **fields})


async def post(app: Starlette, raw: bytes, **kwargs: Any) -> Reply:
    return await call(app, "POST", "/v1/chat/completions", raw, **kwargs)


def assert_openai_error(reply: Reply, status: int, param: str | None = None) -> dict[str, Any]:
    assert reply.status == status, reply.body
    error: dict[str, Any] = reply.json()["error"]
    assert set(error) == {"message", "type", "param", "code"}
    assert error["param"] == param
    return error


def chunks(reply: Reply) -> list[Any]:
    out: list[Any] = []
    for frame in reply.body.split(b"\n\n")[:-1]:
        payload = frame.removeprefix(b"data: ")
        out.append("[DONE]" if payload == b"[DONE]" else orjson.loads(payload))
    return out


async def test_a_completion() -> None:
    reply = await post(build(), body())
    assert reply.status == 200
    completion = ChatCompletion.model_validate(reply.json())
    assert completion.choices[0].message.content == "ok"
    assert completion.choices[0].finish_reason == "stop"
    assert completion.usage is not None
    assert (completion.usage.prompt_tokens, completion.usage.completion_tokens) == (3, 1)


async def test_a_stream_with_reasoning_a_tool_call_and_usage() -> None:
    script: list[Delta | GatewayError] = [
        ReasoningDelta("hm"),
        ToolCallDelta(0, "call_1", "f", '{"a":'),
        ToolCallDelta(0, None, None, "1}"),
        UsageReport(Usage(7, 2)),
        Finish("tool_calls"),
    ]
    tools = [{"type": "function", "function": {"name": "f", "parameters": {"type": "object"}}}]
    raw = body(stream=True, stream_options={"include_usage": True}, tools=tools)
    reply = await post(build(ScriptedBackend(script)), raw)
    assert reply.status == 200
    assert reply.headers["content-type"].startswith("text/event-stream")
    got = chunks(reply)
    assert got[-1] == "[DONE]"
    parsed = [ChatCompletionChunk.model_validate(c) for c in got[:-1]]
    assert parsed[-2].choices[0].finish_reason == "tool_calls"
    assert parsed[-1].usage is not None
    assert parsed[-1].usage.total_tokens == 9
    calls = [c.choices[0].delta.tool_calls for c in parsed[:-2] if c.choices[0].delta.tool_calls]
    assert calls[0][0].id == "call_1"  # type: ignore[index]


@pytest.mark.parametrize(
    ("raw", "param"),
    [
        (b"{nope", None),
        (b"[1, 2]", None),
        (b'{"messages": [{"role": "user", "content": "x"}]}', "model"),
        (body(n=3), "n"),
        (
            body(messages=[{"role": "tool", "tool_call_id": "x", "content": "y"}]),
            "messages[0].tool_call_id",
        ),
    ],
)
async def test_bad_requests_are_400s_in_the_openai_shape(raw: bytes, param: str | None) -> None:
    error = assert_openai_error(await post(build(), raw), 400, param)
    assert error["type"] == "invalid_request_error"


async def test_an_empty_user_message_is_answered() -> None:
    """As hosted answers it: the upstream gets the user's (empty) turn."""
    backend = ScriptedBackend(OK)
    reply = await post(build(backend), body(messages=[{"role": "user", "content": ""}]))
    assert reply.status == 200, reply.body
    [sent] = backend.requests
    assert [(i["role"], i["content"]) for i in sent.items] == [
        ("user", [{"type": "input_text", "text": ""}])
    ]


async def test_an_unknown_model_is_a_404_naming_it() -> None:
    error = assert_openai_error(
        await post(build(models={"known": "known"}), body(model="other")), 404, "model"
    )
    assert "other" in error["message"]
    assert error["code"] == "model_not_found"


FILE_PART = {"type": "file", "file": {"file_data": "data:application/pdf;base64,AA"}}


@pytest.mark.parametrize("stream", [False, True])
async def test_an_error_after_translation_names_no_field_the_client_did_not_send(
    stream: bool,
) -> None:
    """The backend cannot carry the file: judged as the item ``input[1].content[1]``,
    which is no field of this request, nor sure to be ``messages[1].content[1]``."""
    messages = [
        {"role": "system", "content": "rules"},
        {"role": "user", "content": [{"type": "text", "text": "read"}, FILE_PART]},
    ]
    reply = await post(build(), body(messages=messages, stream=stream))
    error = assert_openai_error(reply, 400, None)
    assert error["code"] == "unsupported_content_type"
    assert "'input_file' in a 'user' message is not supported" in error["message"]


@pytest.mark.parametrize("stream", [False, True])
async def test_an_error_on_the_whole_input_names_the_messages(stream: bool) -> None:
    """As an Anthropic upstream's refusal of a request without turns names ``input``."""
    refusing = ScriptedBackend([InvalidRequest("No turn to answer.", param="input")])
    reply = await post(build(refusing), body(stream=stream))
    assert assert_openai_error(reply, 400, "messages")["message"] == "No turn to answer."


async def test_a_body_not_declared_json_is_refused() -> None:
    reply = await post(build(), body(), content_type="text/plain")
    assert_openai_error(reply, 415)


async def test_a_body_that_never_finishes_is_a_408() -> None:
    sent = await stalled(build(body_timeout=0.1), "/v1/chat/completions", b'{"model": ')
    assert sent[0]["status"] == 408
    assert orjson.loads(sent[1]["body"])["error"]["code"] == "request_timeout"


@pytest.mark.parametrize("forwarded", [True, False], ids=["fast_path", "translated"])
async def test_a_large_body_is_read_off_the_event_loop_within_the_item_limit(
    forwarded: bool,
) -> None:
    """A body past ``INLINE_DECODE_BYTES`` is parsed (and translated) in a worker thread,
    held to the same item limit."""
    relay = FakeRelay(200, {"content-type": "application/json"}, [b"{}"], None)
    backend = ForwardingBackend(relay) if forwarded else ScriptedBackend(OK)
    app = build(backend, max_body=4 * INLINE_DECODE_BYTES)
    large = {"role": "user", "content": "x" * INLINE_DECODE_BYTES}
    over = await post(app, body(messages=[{"role": "user", "content": "hi"}] * 50 + [large]))
    assert assert_openai_error(over, 400, "messages")["code"] == "array_above_max_length"
    reply = await post(app, body(messages=[{"role": "user", "content": "hi"}] * 49 + [large]))
    assert reply.status == 200, reply.body
    assert len(backend.forwarded if forwarded else backend.requests) == 1


async def test_a_translated_requests_session_header_reaches_its_command(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The session a client names (cache affinity: :mod:`.sessions`)."""
    decoded: list[Any] = []

    def recording(fields: dict[str, Any], **options: Any) -> Any:
        decoded.append(decode_chat(fields, **options))
        return decoded[-1]

    monkeypatch.setattr(chat_module, "decode_chat", recording)
    app = build()
    headers = [(b"x-session-affinity", b"4f1c-9a")]
    assert (await post(app, body(), headers=headers)).status == 200
    assert (await post(app, body())).status == 200
    assert [d.command.session for d in decoded] == ["4f1c-9a", None]


@pytest.mark.parametrize("stream", [False, True])
async def test_an_upstream_failure_before_output_is_an_http_error(stream: bool) -> None:
    failing = ScriptedBackend([UpstreamUnavailable("The model server 'x' is unreachable.")])
    error = assert_openai_error(await post(build(failing), body(stream=stream)), 502)
    assert error["code"] == "upstream_unavailable"


async def test_a_stream_cut_after_output_ends_with_an_error_line() -> None:
    cut = ScriptedBackend([TextDelta("par"), UpstreamError("cut", code="upstream_stream_cut")])
    got = chunks(await post(build(cut), body(stream=True)))
    assert "[DONE]" not in got
    assert got[-1]["error"]["code"] == "upstream_stream_cut"


async def test_a_non_stream_failure_after_output_is_an_http_error() -> None:
    cut = ScriptedBackend([TextDelta("par"), UpstreamError("cut", code="upstream_stream_cut")])
    error = assert_openai_error(await post(build(cut), body()), 502)
    assert error["code"] == "upstream_stream_cut"


# -- the fast path ---------------------------------------------------------------------


async def test_the_fast_path_forwards_the_body_untouched_and_relays_bytes() -> None:
    canned = [b'{"id": "x",', b' "weird":  [1 ,2]}']
    relay = FakeRelay(
        200, {"content-type": "application/json", "content-length": "27"}, canned, None
    )
    backend = ForwardingBackend(relay)
    raw = b'{"model":"m","messages":[{"role":"user","content":"hi","name":"a"}],"top_k":5,"n":3}'
    reply = await post(build(backend), raw)
    assert backend.forwarded == [raw]
    assert backend.requests == []  # nothing translated
    assert (reply.status, reply.body) == (200, b"".join(canned))
    assert reply.headers["content-type"] == "application/json"
    assert reply.headers["content-length"] == "27"
    assert relay.closed.is_set()


async def test_a_whole_relayed_answer_goes_out_in_one_body_message() -> None:
    """A whole answer (read in one piece before any of it is relayed) is the status line
    and one body message: no empty message to end it."""
    headers = {"content-type": "application/json", "content-length": "27"}
    relay = FakeRelay(200, headers, [b'{"id": "x",', b' "weird":  [1 ,2]}'], None, whole=True)
    sent: list[Message] = []
    reply = await post(build(ForwardingBackend(relay)), body(), watch=sent.append)
    assert (reply.status, reply.body) == (200, b'{"id": "x", "weird":  [1 ,2]}')
    assert [m["type"] for m in sent] == ["http.response.start", "http.response.body"]
    assert sent[1]["more_body"] is False
    assert relay.closed.is_set()


@pytest.mark.parametrize(
    "failure",
    [
        UpstreamTimeout("The model server 'x' sent nothing for 2 s (read_timeout)."),
        ServerShuttingDown(),
    ],
)
async def test_a_whole_answer_failing_before_its_end_is_an_openai_error(
    failure: GatewayError,
) -> None:
    """Read whole before any of it goes out, a whole answer that fails part-way is
    answered as the error, whatever of it had come."""
    headers = {"content-type": "application/json", "content-length": "390"}
    relay = FakeRelay(200, headers, [b'{"id":', failure], None, whole=True)  # type: ignore[list-item]
    reply = await post(build(ForwardingBackend(relay)), body())
    error = assert_openai_error(reply, failure.status)
    assert error["code"] == failure.code
    assert relay.closed.is_set()


async def test_the_fast_path_renames_the_model_and_keeps_every_other_field() -> None:
    relay = FakeRelay(200, {"content-type": "application/json"}, [b"{}"], None)
    backend = ForwardingBackend(relay)
    sent = {
        "model": "public",
        "messages": [{"role": "user", "content": "hi"}],
        "chat_template_kwargs": {"x": 1},
    }
    await post(build(backend, models={"public": "upstream-name"}), orjson.dumps(sent))
    assert orjson.loads(backend.forwarded[0]) == {**sent, "model": "upstream-name"}


async def test_the_fast_path_holds_to_the_input_item_limit() -> None:
    relay = FakeRelay(200, {"content-type": "application/json"}, [b"{}"], None)
    backend = ForwardingBackend(relay)
    app = build(backend)  # at most 50 input items
    reply = await post(app, body(messages=[{"role": "user", "content": "hi"}] * 51))
    error = assert_openai_error(reply, 400, "messages")
    assert error["code"] == "array_above_max_length"
    assert backend.forwarded == []
    assert (await post(app, body(messages=[{"role": "user", "content": "hi"}] * 50))).status == 200
    assert len(backend.forwarded) == 1


async def test_the_fast_path_passes_an_upstream_error_through() -> None:
    error = b'{"error": {"message": "bad", "type": "BadRequestError", "param": null, "code": 400}}'
    relay = FakeRelay(400, {"content-type": "application/json", "retry-after": "3"}, [error], None)
    reply = await post(build(ForwardingBackend(relay)), body())
    assert (reply.status, reply.body, reply.headers["retry-after"]) == (400, error, "3")


async def test_a_client_leaving_closes_the_relayed_upstream_request() -> None:
    gate = asyncio.Event()  # never set: the upstream goes silent
    relay = FakeRelay(200, {"content-type": "text/event-stream"}, [b"data: {}\n\n"], gate)
    leave = asyncio.Event()
    app = build(ForwardingBackend(relay))

    def watch(message: Mapping[str, Any]) -> None:
        if message.get("body"):
            leave.set()  # the first chunk arrived: the client goes away

    await post(app, body(stream=True), leave=leave, watch=watch)
    assert relay.closed.is_set()


class SilentBackend(ForwardingBackend):
    """An upstream that never sends its status line."""

    def __init__(self) -> None:
        super().__init__(FakeRelay(200, {}, [], None))
        self.waiting = asyncio.Event()
        self.cancelled = asyncio.Event()

    async def forward_chat(self, body: bytes, fields: Mapping[str, Any]) -> FakeRelay:
        self.waiting.set()
        try:
            await asyncio.Event().wait()
        except asyncio.CancelledError:
            self.cancelled.set()
            raise
        raise AssertionError("unreachable")


async def test_a_client_leaving_before_the_upstream_answers_closes_the_request() -> None:
    backend = SilentBackend()
    store = MemoryStore()
    gateway = Gateway(
        store, Router([BackendEntry(backend, {}, catch_all=True)]), Loop(store), RunRegistry()
    )
    app = build_http_app(
        ResponsesRoutes(gateway, 1 << 20), ServiceRoutes(gateway), chat=ChatRoutes(gateway, 1 << 20)
    )
    leave = asyncio.Event()
    answered = asyncio.ensure_future(post(app, body(), leave=leave))
    await backend.waiting.wait()
    leave.set()
    reply = await answered
    assert backend.cancelled.is_set()
    assert reply.status == 0  # nothing was answered
    assert gateway.generations.current.leases == 0  # the relay's lease was given back


@pytest.mark.parametrize(
    "failure",
    [
        UpstreamTimeout("The model server 'x' sent nothing for 2 s (read_timeout)."),
        UpstreamError("The model server 'x' closed the stream before finishing."),
    ],
)
async def test_a_relayed_body_failing_before_its_first_byte_is_an_openai_error(
    failure: GatewayError,
) -> None:
    """An upstream that sent its status line, then nothing (silent past read_timeout, or
    its connection reset): the client is answered the error, not a 200 whose promised
    body never comes. Only an event stream's status line goes out at once."""
    headers = {"content-type": "application/json", "content-length": "390"}
    relay = FakeRelay(200, headers, [failure], None)  # type: ignore[list-item]
    reply = await post(build(ForwardingBackend(relay)), body())
    error = assert_openai_error(reply, failure.status)
    assert error["code"] == failure.code
    assert reply.headers["content-length"] == str(len(reply.body))
    assert relay.closed.is_set()


async def test_a_relayed_body_cut_after_its_first_byte_is_cut_short() -> None:
    cut = UpstreamError("cut", code="upstream_stream_cut")
    relay = FakeRelay(200, {"content-type": "application/json"}, [b'{"id":', cut], None)  # type: ignore[list-item]
    reply = await post(build(ForwardingBackend(relay)), body())
    assert (reply.status, reply.body) == (200, b'{"id":')  # the connection closes unfinished
    assert relay.closed.is_set()


async def test_a_relayed_stream_failing_part_way_ends_with_an_error_line() -> None:
    cut = UpstreamError(
        "The model server 'x' closed the stream before finishing.", code="upstream_stream_cut"
    )
    relay = FakeRelay(200, {"content-type": "text/event-stream"}, [b"data: {}\n\n", cut], None)  # type: ignore[list-item]
    reply = await post(build(ForwardingBackend(relay)), body(stream=True))
    frames = reply.body.split(b"\n\n")
    assert frames[0] == b"data: {}"
    assert orjson.loads(frames[1].removeprefix(b"data: "))["error"]["code"] == "upstream_stream_cut"
    assert relay.closed.is_set()


@pytest.mark.parametrize("content_type", ["text/event-stream", "application/json"])
@pytest.mark.parametrize("ending", [ServerShuttingDown(), CredentialRevoked("revoked")])
async def test_a_relay_ended_by_shutdown_or_revocation_is_logged_as_info(
    caplog: pytest.LogCaptureFixture, ending: GatewayError, content_type: str
) -> None:
    """Expected endings, not faults: no warning."""
    relay = FakeRelay(200, {"content-type": content_type}, [b"data: {}\n\n", ending], None)  # type: ignore[list-item]
    with caplog.at_level(logging.DEBUG, logger="stateway"):
        await post(build(ForwardingBackend(relay)), body(stream=True))
    [line] = [r for r in caplog.records if r.name == "stateway.surfaces.http.relay"]
    assert line.levelno == logging.INFO
    assert ending.message in line.getMessage()
    assert [r for r in caplog.records if r.levelno >= logging.WARNING] == []


async def test_a_relay_cut_by_its_upstream_is_logged_as_a_warning(
    caplog: pytest.LogCaptureFixture,
) -> None:
    cut = UpstreamError("The model server 'x' closed the stream before finishing.")
    relay = FakeRelay(200, {"content-type": "application/json"}, [b'{"id":', cut], None)  # type: ignore[list-item]
    with caplog.at_level(logging.DEBUG, logger="stateway"):
        await post(build(ForwardingBackend(relay)), body())
    [line] = [r for r in caplog.records if r.name == "stateway.surfaces.http.relay"]
    assert line.levelno == logging.WARNING
    assert "'x'" in line.getMessage()


async def test_a_request_ended_by_shutdown_before_its_answer_is_logged_as_info(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """A 503 the shutdown answers is expected, not a fault."""

    class Ending(ForwardingBackend):
        async def forward_chat(self, body: bytes, fields: Mapping[str, Any]) -> FakeRelay:
            raise ServerShuttingDown()

    with caplog.at_level(logging.DEBUG, logger="stateway"):
        reply = await post(build(Ending(FakeRelay(200, {}, [], None))), body())
    assert_openai_error(reply, 503)
    [line] = [r for r in caplog.records if "503" in r.getMessage()]
    assert line.levelno == logging.INFO


async def test_a_relayed_stream_cut_within_an_event_gets_its_error_on_a_line_apart() -> None:
    """Cut mid-event (a read timeout, the size limit): glued onto the half-sent line, the
    error line was unreadable; the content type is told case-insensitively."""
    cut = UpstreamError("cut", code="upstream_stream_cut")
    relay = FakeRelay(200, {"content-type": "Text/Event-Stream"}, [b'data: {"id":', cut], None)  # type: ignore[list-item]
    reply = await post(build(ForwardingBackend(relay)), body(stream=True))
    assert reply.body.startswith(b'data: {"id":\n\ndata: {"error"')


async def test_a_watched_relayed_stream_cut_within_an_event_gets_its_error_on_a_line_apart() -> (
    None
):
    """The same when its credential is watched for revocation (an API key's): the last
    chunk relayed is known there too."""
    cut = UpstreamError("cut", code="upstream_stream_cut")
    relay = FakeRelay(200, {"content-type": "text/event-stream"}, [b'data: {"id":', cut], None)  # type: ignore[list-item]
    identity = Identity(Principal(), authenticated=True, expires_at=time.time() + 3600)
    sent: list[bytes] = []

    async def send(message: Message) -> None:
        sent.append(message.get("body", b""))

    async def receive() -> Message:
        raise AssertionError("not read")

    await RelayResponse(relay)({"type": "http", IDENTITY: identity}, receive, send)  # type: ignore[arg-type]
    assert b"".join(sent).startswith(b'data: {"id":\n\ndata: {"error"')


_parts = st.lists(
    st.fixed_dictionaries(
        {"type": st.sampled_from(["text", "image_url", "file", "input_audio", "refusal", "x"])},
        optional={
            "text": st.text(max_size=4) | json_values,
            "image_url": st.just({"url": "https://x/i.png"}) | json_values,
            "file": json_values,
            "refusal": json_values,
        },
    ),
    max_size=3,
)
_message = st.fixed_dictionaries(
    {},
    optional={
        "role": st.sampled_from(["system", "developer", "user", "assistant", "tool", "x"])
        | json_values,
        "content": st.text(max_size=4) | _parts | json_values,
        "name": json_values,
        "tool_call_id": st.sampled_from(["c1", "c2"]) | json_values,
        "tool_calls": st.just(
            [{"id": "c1", "type": "function", "function": {"name": "f", "arguments": "{}"}}]
        )
        | json_values,
        "reasoning_content": json_values,
    },
)
chat_like = st.fixed_dictionaries(
    {},
    optional={
        "model": st.sampled_from(["m", "known"]) | json_values,
        "messages": st.lists(_message, max_size=4) | json_values,
        "tools": st.just([{"type": "function", "function": {"name": "f"}}]) | json_values,
        "tool_choice": st.sampled_from(
            ["auto", "none", "required", {"type": "function", "function": {"name": "f"}}]
        )
        | json_values,
        "stream": st.booleans() | json_values,
        "stream_options": json_values,
        "n": st.integers(0, 3) | json_values,
        "stop": json_values,
        "max_tokens": json_values,
        "temperature": json_values,
        "response_format": json_values,
        "logprobs": json_values,
        "metadata": json_values,
    },
)


@settings(
    max_examples=200, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(chat_like)
def test_fuzzed_chat_requests_never_get_a_5xx(raw: dict[str, Any]) -> None:
    async def attempt() -> None:
        reply = await post(build(models={"known": "known"}), json.dumps(raw).encode())
        assert reply.status < 500, reply.body
        if reply.status >= 400:
            assert set(reply.json()["error"]) == {"message", "type", "param", "code"}
        elif reply.headers["content-type"].startswith("text/event-stream"):
            assert chunks(reply)[-1] == "[DONE]"
        else:
            ChatCompletion.model_validate(reply.json())

    asyncio.run(attempt())


async def test_store_is_taken_and_nothing_is_stored() -> None:
    """``store: true`` is answered (clients send it to be let to send ``metadata``), but no
    chat completion is kept: each stored-completion route hosted serves (list, retrieve,
    update, delete, messages) is a 404 saying so, which the SDK raises as
    ``NotFoundError``; not a 405, as if listing were a wrong method."""
    app = build()
    reply = await post(app, body(store=True, metadata={"k": "v"}))
    assert reply.status == 200, reply.body
    one = f"/v1/chat/completions/{reply.json()['id']}"
    for method, path in [
        ("GET", "/v1/chat/completions"),
        ("GET", one),
        ("POST", one),
        ("DELETE", one),
        ("GET", one + "/messages"),
    ]:
        answered = await call(app, method, path, b'{"metadata": {"k": "w"}}')
        error = assert_openai_error(answered, 404)
        assert error["code"] == "not_found", (method, path)
        assert "stores no chat completion" in error["message"], (method, path)
    other = await call(app, "PUT", one)
    assert other.status == 405
    assert set(other.headers["allow"].split(", ")) == {"GET", "HEAD", "POST", "DELETE"}


class Fields(dict[str, Any]):
    """A parsed body whose release a weak reference tells."""


@pytest.mark.parametrize("stream", [True, False])
@pytest.mark.usefixtures("young_heap")
async def test_a_translated_answer_goes_out_holding_no_parsed_body(
    stream: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The parsed body (as large as the bytes it came in) is let go once the answer is
    ready: it is not held while the answer goes out."""
    parsed: list[weakref.ref[Fields]] = []

    def peek(raw: bytes, **limits: Any) -> ChatCall:
        call = peek_chat(raw, **limits)
        fields = Fields(call.fields)
        parsed.append(weakref.ref(fields))
        return dataclasses.replace(call, fields=fields)

    monkeypatch.setattr(chat_module, "peek_chat", peek)
    held: list[bool] = []

    def watch(message: Message) -> None:
        if message["type"] == "http.response.body" and not held:
            gc.collect()
            held.append(parsed[0]() is not None)

    reply = await post(build(), body(stream=stream), watch=watch)
    assert reply.status == 200
    assert held == [False]


async def test_a_silent_translated_stream_gets_keep_alive_comments_at_the_routes_interval() -> None:
    gate = asyncio.Event()
    watch = opening_after_keep_alives(gate)

    app = build(ScriptedBackend([TextDelta("a")], gate), keepalive=0.05)
    reply = await asyncio.wait_for(post(app, body(stream=True), watch=watch), timeout=10)
    assert reply.status == 200
    assert reply.body.count(b": keep-alive\n\n") == 2
    assert reply.body.endswith(b"data: [DONE]\n\n")


async def test_a_client_leaving_a_translated_stream_cancels_its_run() -> None:
    backend = ScriptedBackend([TextDelta("a")], asyncio.Event())  # never finishes
    leave = asyncio.Event()

    def watch(message: Message) -> None:
        if b"chat.completion.chunk" in message.get("body", b""):
            leave.set()  # the first chunk arrived: the client goes away

    reply = await asyncio.wait_for(
        post(build(backend), body(stream=True), leave=leave, watch=watch), timeout=10
    )
    assert reply.status == 200
    await asyncio.wait_for(backend.closed.wait(), timeout=5)  # the upstream call abandoned


async def test_a_translated_stream_cut_by_its_credentials_expiry_ends_with_an_error_line() -> None:
    store = MemoryStore()
    router = Router(
        [BackendEntry(ScriptedBackend([TextDelta("a")], asyncio.Event()), {}, catch_all=True)]
    )
    gateway = Gateway(store, router, Loop(store), RunRegistry())
    routes = ChatRoutes(gateway, 1 << 20)
    sent = await expiring(routes, "/v1/chat/completions", body(stream=True))
    *_, last = sent.split(b"\n\n")[:-1]
    assert orjson.loads(last.removeprefix(b"data: "))["error"]["code"] == "invalid_api_key"
    await gateway.runs.settle()
