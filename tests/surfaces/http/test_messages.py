"""The Messages routes in process: answers, streams, errors in Anthropic's shape, and
fuzzed bodies that must never get a 5xx."""

from __future__ import annotations

import asyncio
import json
import re
from collections.abc import AsyncGenerator
from typing import Any

import orjson
import pytest
from anthropic.types import Message
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from starlette.applications import Starlette
from starlette.types import Message as AsgiMessage

from stateway.core.commands import CreateResponse
from stateway.core.errors import (
    GatewayError,
    UpstreamError,
    UpstreamRejected,
    UpstreamUnavailable,
)
from stateway.core.gateway import Gateway
from stateway.core.inference import (
    Delta,
    Finish,
    InferenceRequest,
    ReasoningDelta,
    ReasoningSignature,
    TextDelta,
    ToolCallDelta,
    UsageReport,
)
from stateway.core.loop import Loop
from stateway.core.routing import BackendEntry, Router
from stateway.core.run_registry import RunRegistry
from stateway.core.usage import Usage
from stateway.protocols.messages.blocks import BLOCK_TYPES
from stateway.protocols.messages.decode import decode_messages
from stateway.sealing import AesGcmSealer
from stateway.surfaces.http import messages as messages_module
from stateway.surfaces.http.app import build_http_app
from stateway.surfaces.http.messages import MessagesRoutes
from stateway.surfaces.http.responses import INLINE_DECODE_BYTES, ResponsesRoutes
from stateway.surfaces.http.service import ServiceRoutes
from tests.core.fakes import MemoryStore, ScriptedBackend
from tests.protocols.responses.test_decode import json_values
from tests.surfaces.http.asgi import Reply, call, stalled

OK: list[Delta | GatewayError] = [TextDelta("ok"), UsageReport(Usage(3, 1)), Finish("stop")]


def build(
    backend: Any = None,
    *,
    catch_all: bool = True,
    keepalive: float = 15.0,
    sealer: AesGcmSealer | None = None,
    body_timeout: float | None = None,
    max_body: int = 1 << 20,
) -> Starlette:
    store = MemoryStore()
    backend = backend or ScriptedBackend(OK)
    models = {} if catch_all else {"known": "known"}
    router = Router([BackendEntry(backend, models, catch_all=catch_all)])
    gateway = Gateway(store, router, Loop(store, sealer=sealer), RunRegistry(), sealer=sealer)
    return build_http_app(
        ResponsesRoutes(gateway, 1 << 20),
        ServiceRoutes(gateway),
        messages=MessagesRoutes(
            gateway, max_body, body_timeout=body_timeout, keepalive=keepalive, max_input_items=50
        ),
    )


def body(**fields: Any) -> bytes:
    base = {"model": "m", "max_tokens": 64, "messages": [{"role": "user", "content": "hi"}]}
    return orjson.dumps({**base, **fields})


async def post(app: Starlette, raw: bytes, path: str = "/v1/messages", **kwargs: Any) -> Reply:
    headers = [(b"anthropic-version", b"2023-06-01"), (b"x-api-key", b"k")]
    return await call(app, "POST", path, raw, query="beta=true", headers=headers, **kwargs)


def frames(reply: Reply) -> list[tuple[str, dict[str, Any]]]:
    out = []
    for chunk in reply.body.split(b"\n\n")[:-1]:
        event, data = chunk.split(b"\n")
        name = event.removeprefix(b"event: ").decode()
        payload = orjson.loads(data.removeprefix(b"data: "))
        assert payload["type"] == name
        out.append((name, payload))
    return out


def assert_anthropic_error(reply: Reply, status: int, kind: str) -> str:
    assert reply.status == status, reply.body
    assert reply.headers["request-id"].startswith("req_")
    error = reply.json()
    assert error["type"] == "error"
    assert error["error"]["type"] == kind
    message: str = error["error"]["message"]
    return message


async def test_a_message() -> None:
    reply = await post(build(), body())
    assert reply.status == 200
    assert reply.headers["request-id"].startswith("req_")
    message = Message.model_validate(reply.json())
    assert message.content[0].type == "text"
    assert message.content[0].text == "ok"
    assert (message.stop_reason, message.usage.input_tokens, message.usage.output_tokens) == (
        "end_turn",
        3,
        1,
    )


@pytest.mark.parametrize("stream", [False, True])
async def test_max_tokens_0_is_a_prewarm_that_asks_no_model(stream: bool) -> None:
    """As the Responses surface's ``prompt_cache_options.prewarm``: the context is checked,
    no model asked, and the message is whole, without content, stopped at its limit."""
    backend = ScriptedBackend(OK)
    reply = await post(build(backend), body(max_tokens=0, stream=stream))
    assert reply.status == 200, reply.body
    assert backend.requests == []
    if stream:
        names = [name for name, _ in frames(reply)]
        assert names == ["message_start", "ping", "message_delta", "message_stop"]
        delta = frames(reply)[2][1]
        assert delta["delta"]["stop_reason"] == "max_tokens"
        assert delta["usage"]["output_tokens"] == 0
        return
    message = Message.model_validate(reply.json())
    assert (message.content, message.stop_reason) == ([], "max_tokens")
    assert message.usage.output_tokens == 0


async def test_a_negative_max_tokens_is_refused_and_count_tokens_ignores_max_tokens() -> None:
    message = assert_anthropic_error(
        await post(build(), body(max_tokens=-1)), 400, "invalid_request_error"
    )
    assert message.startswith("max_tokens: ")
    reply = await post(build(), body(max_tokens=0), path="/v1/messages/count_tokens")
    assert reply.status == 200, reply.body
    assert reply.json()["input_tokens"] > 0


async def test_a_budget_past_max_tokens_is_taken_with_interleaved_thinking() -> None:
    backend = ScriptedBackend(OK)
    app = build(backend)
    raw = body(max_tokens=2000, thinking={"type": "enabled", "budget_tokens": 4000})
    assert_anthropic_error(await post(app, raw), 400, "invalid_request_error")
    beta = (b"anthropic-beta", b"claude-code-20250219, interleaved-thinking-2025-05-14")
    reply = await call(app, "POST", "/v1/messages", raw, headers=[beta])
    assert reply.status == 200, reply.body
    [sent] = backend.requests
    assert sent.settings.reasoning_budget == 4000
    assert sent.settings.anthropic_beta == [
        "claude-code-20250219",
        "interleaved-thinking-2025-05-14",
    ]


@pytest.mark.parametrize("padding", [0, INLINE_DECODE_BYTES], ids=["inline", "offloaded"])
async def test_the_item_limit_and_the_betas_reach_the_decoder(padding: int) -> None:
    """On the event loop or, for a body past ``INLINE_DECODE_BYTES``, in a worker thread."""
    backend = ScriptedBackend(OK)
    app = build(backend, max_body=4 * INLINE_DECODE_BYTES)
    turns = [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "ok"}] * 25
    last = {"role": "user", "content": "x" * padding or "x"}
    over = await post(app, body(messages=[*turns, last]))
    message = assert_anthropic_error(over, 400, "invalid_request_error")
    assert message.startswith("messages: 51 messages and blocks are more than the 50"), message
    beta = (b"anthropic-beta", b"interleaved-thinking-2025-05-14")
    reply = await call(
        app, "POST", "/v1/messages", body(messages=[*turns[1:], last]), headers=[beta]
    )
    assert reply.status == 200, reply.body
    [sent] = backend.requests
    assert sent.settings.anthropic_beta == ["interleaved-thinking-2025-05-14"]


async def test_the_session_header_reaches_the_command(monkeypatch: pytest.MonkeyPatch) -> None:
    """The session a client names (Claude Code's ``x-claude-code-session-id``)."""
    decoded: list[CreateResponse] = []

    def recording(raw: bytes, **options: Any) -> CreateResponse:
        decoded.append(decode_messages(raw, **options))
        return decoded[-1]

    monkeypatch.setattr(messages_module, "decode_messages", recording)
    app = build()
    session = [(b"x-claude-code-session-id", b"4f1c-9a")]
    assert (await call(app, "POST", "/v1/messages", body(), headers=session)).status == 200
    assert (await call(app, "POST", "/v1/messages", body())).status == 200
    assert [command.session for command in decoded] == ["4f1c-9a", None]


async def test_a_stream_with_thinking_and_a_tool_call() -> None:
    script: list[Delta | GatewayError] = [
        ReasoningDelta("hm"),
        ReasoningSignature("sig="),
        ToolCallDelta(0, "toolu_1", "f", '{"a":'),
        ToolCallDelta(0, None, None, "1}"),
        UsageReport(Usage(7, 2)),
        Finish("tool_calls"),
    ]
    tools = [{"name": "f", "input_schema": {"type": "object"}}]
    thinking = {"type": "enabled", "budget_tokens": 1024}
    asked = body(stream=True, tools=tools, thinking=thinking, max_tokens=2048)
    reply = await post(build(ScriptedBackend(script)), asked)
    assert reply.status == 200
    assert reply.headers["content-type"].startswith("text/event-stream")
    assert reply.headers["request-id"].startswith("req_")
    got = frames(reply)
    assert [name for name, _ in got][:2] == ["message_start", "ping"]
    assert got[-1] == ("message_stop", {"type": "message_stop"})
    delta = got[-2][1]
    assert delta["delta"]["stop_reason"] == "tool_use"
    assert (delta["usage"]["input_tokens"], delta["usage"]["output_tokens"]) == (7, 2)
    signature = [
        d for n, d in got if n == "content_block_delta" and d["delta"]["type"] == "signature_delta"
    ]
    assert signature[0]["delta"]["signature"] == "sig="


async def test_a_silent_upstream_gets_pings() -> None:
    gate = asyncio.Event()
    backend = ScriptedBackend([TextDelta("a")], gate=gate)
    app = build(backend, keepalive=0.01)

    def watch(message: AsgiMessage) -> None:
        sent = message.get("body", b"") if message["type"] == "http.response.body" else b""
        if sent.startswith(b"event: ping"):
            gate.set()  # a ping on its own: sent because the upstream was silent

    reply = await post(app, body(stream=True), watch=watch)
    names = [name for name, _ in frames(reply)]
    assert names.count("ping") >= 2
    assert names[-1] == "message_stop"


async def test_a_cut_stream_ends_with_an_error_event() -> None:
    cut = ScriptedBackend([TextDelta("a"), UpstreamError("gone", code="upstream_stream_cut")])
    got = frames(await post(build(cut), body(stream=True)))
    assert got[-1][0] == "error"
    assert got[-1][1]["error"]["type"] == "api_error"
    assert "message_stop" not in [name for name, _ in got]
    busy = ScriptedBackend(
        [TextDelta("a"), UpstreamUnavailable("busy", status=503, code="upstream_overloaded")]
    )
    assert (
        frames(await post(build(busy), body(stream=True)))[-1][1]["error"]["type"]
        == "overloaded_error"
    )


@pytest.mark.parametrize("stream", [False, True])
async def test_an_upstream_failure_before_output_is_a_5xx(
    stream: bool, caplog: pytest.LogCaptureFixture
) -> None:
    failing = ScriptedBackend([UpstreamError("Model server 'x' answered 500.")])
    reply = await post(build(failing), body(stream=stream))
    assert "500" in assert_anthropic_error(reply, 502, "api_error")
    [logged] = [r for r in caplog.records if r.name == "stateway.surfaces.http.messages"]
    assert "502" in logged.getMessage()  # logged like every route's 5xx, stream or not
    caplog.clear()
    overloaded = ScriptedBackend([UpstreamUnavailable("busy", status=503)])
    assert_anthropic_error(
        await post(build(overloaded), body(stream=stream)), 529, "overloaded_error"
    )  # Anthropic's status for it: the SDK's OverloadedError
    [logged] = [r for r in caplog.records if r.name == "stateway.surfaces.http.messages"]
    assert "-> 529 " in logged.getMessage()  # the status answered


async def test_a_failure_after_output_is_not_a_message() -> None:
    cut = ScriptedBackend([TextDelta("a"), UpstreamError("gone")])
    assert_anthropic_error(await post(build(cut), body()), 502, "api_error")


class Exploding(ScriptedBackend):
    async def infer(self, request: InferenceRequest) -> AsyncGenerator[Delta, None]:
        raise RuntimeError("a bug")
        yield TextDelta("")  # pragma: no cover


async def test_a_bug_is_an_api_error_without_details() -> None:
    message = assert_anthropic_error(await post(build(Exploding([])), body()), 500, "api_error")
    assert "bug" not in message


@pytest.mark.parametrize(
    ("raw", "status", "kind", "named"),
    [
        (b"{", 400, "invalid_request_error", None),
        (b"[]", 400, "invalid_request_error", None),
        (b"", 400, "invalid_request_error", None),
        (orjson.dumps({"model": "m", "messages": []}), 400, "invalid_request_error", "max_tokens"),
        (
            body(messages=[{"role": "user", "content": [{"type": "video"}]}]),
            400,
            "invalid_request_error",
            "video",
        ),
        (body(model="nope"), 404, "not_found_error", "nope"),
    ],
)
async def test_bad_requests(raw: bytes, status: int, kind: str, named: str | None) -> None:
    message = assert_anthropic_error(await post(build(catch_all=False), raw), status, kind)
    if named is not None:
        assert named in message


ECHO_TOOL = {"name": "echo", "input_schema": {"type": "object"}}


@pytest.mark.parametrize("path", ["/v1/messages", "/v1/messages/count_tokens"])
@pytest.mark.parametrize("tools", [None, []])
@pytest.mark.parametrize(
    ("choice", "words"),
    [
        ({"type": "any"}, "tool_choice.any may only be specified while providing tools"),
        (
            {"type": "any", "disable_parallel_tool_use": True},
            "tool_choice.any may only be specified while providing tools",
        ),
        ({"type": "tool", "name": "echo"}, "Tool 'echo' not found in provided tools"),
    ],
)
async def test_a_forcing_tool_choice_without_tools_is_refused_as_hosted(
    path: str, tools: list[Any] | None, choice: dict[str, Any], words: str
) -> None:
    fields: dict[str, Any] = {"tool_choice": choice}
    if tools is not None:
        fields["tools"] = tools
    reply = await post(build(), body(**fields), path)
    assert assert_anthropic_error(reply, 400, "invalid_request_error") == words


@pytest.mark.parametrize("tools", [None, [], [ECHO_TOOL]])
@pytest.mark.parametrize(
    "choice",
    [{"type": "auto"}, {"type": "none"}, {"type": "auto", "disable_parallel_tool_use": True}],
)
async def test_a_tool_choice_forcing_nothing_needs_no_tools(
    tools: list[Any] | None, choice: dict[str, Any]
) -> None:
    fields: dict[str, Any] = {"tool_choice": choice}
    if tools is not None:
        fields["tools"] = tools
    assert (await post(build(), body(**fields))).status == 200


async def test_a_named_tool_choice_of_no_declared_tool_is_refused_as_hosted() -> None:
    raw = body(tools=[ECHO_TOOL], tool_choice={"type": "tool", "name": "clock"})
    reply = await post(build(), raw)
    message = assert_anthropic_error(reply, 400, "invalid_request_error")
    assert message == "Tool 'clock' not found in provided tools"
    forced = body(tools=[ECHO_TOOL], tool_choice={"type": "any"})
    assert (await post(build(), forced)).status == 200


async def test_a_tool_result_without_its_tool_use() -> None:
    stray = [{"role": "user", "content": [{"type": "tool_result", "tool_use_id": "toolu_9"}]}]
    message = assert_anthropic_error(
        await post(build(), body(messages=stray)), 400, "invalid_request_error"
    )
    assert "toolu_9" in message


async def test_an_unanswered_tool_use_is_a_400() -> None:
    use = {"type": "tool_use", "id": "toolu_1", "name": "f", "input": {}}
    messages = [
        {"role": "user", "content": "q"},
        {"role": "assistant", "content": [use]},
        {"role": "user", "content": "next"},
    ]
    message = assert_anthropic_error(
        await post(build(), body(messages=messages)), 400, "invalid_request_error"
    )
    assert "toolu_1" in message


async def test_an_image_on_a_text_only_upstream_names_the_part() -> None:
    class TextOnly(ScriptedBackend):
        carried_part_types = {
            **ScriptedBackend.carried_part_types,
            "user": frozenset({"input_text"}),
        }

    image = {"type": "image", "source": {"type": "url", "url": "https://x/i.png"}}
    raw = body(messages=[{"role": "user", "content": [{"type": "text", "text": "see"}, image]}])
    message = assert_anthropic_error(
        await post(build(TextOnly(OK)), raw), 400, "invalid_request_error"
    )
    assert message.startswith("messages.0.content.1.image: This model does not support image")
    assert "backend 'scripted'" in message


CLAUDE_CODE_MEDIA_PATH = re.compile(
    r"messages[.[](\d+)[\].]+content[.[](\d+)[\].]+(?:tool_result[.[]content[.[](\d+)[\].]+)?"
    r"(image|document|pdf)"
)
"""How Claude Code 2.1.332 finds the block a 400 refuses (its own pattern): it leaves that
block out and sends the request again."""


@pytest.mark.parametrize("path", ["/v1/messages", "/v1/messages/count_tokens"])
@pytest.mark.parametrize("stream", [False, True])
async def test_a_pdf_a_tool_returned_is_refused_as_claude_code_recovers_from(
    path: str, stream: bool
) -> None:
    """Claude Code's Read of a PDF answers with a ``document`` block in the
    ``tool_result``, which a Chat Completions upstream cannot carry. Refused in other
    words, Claude Code resent the request unchanged until it gave up, and every later
    request of the session, the PDF still in it, failed the same way."""
    pdf = {"type": "base64", "media_type": "application/pdf", "data": "JVBERi0="}
    read = {"type": "tool_use", "id": "toolu_1", "name": "Read", "input": {}}
    result = {
        "type": "tool_result",
        "tool_use_id": "toolu_1",
        "content": [{"type": "text", "text": "PDF file read"}, {"type": "document", "source": pdf}],
    }
    messages = [
        {"role": "user", "content": "read it"},
        {"role": "assistant", "content": [read]},
        {"role": "user", "content": [result]},
    ]
    raw = body(messages=messages, stream=stream)
    if path.endswith("count_tokens"):
        raw = orjson.dumps({"model": "m", "messages": messages})
    message = assert_anthropic_error(await post(build(), raw, path), 400, "invalid_request_error")
    assert message.startswith(
        "messages.2.content.0.tool_result.content.1.document: This model does not support PDF input"
    )
    found = CLAUDE_CODE_MEDIA_PATH.search(message)
    assert found is not None
    assert found.groups() == ("2", "0", "1", "document")


@pytest.mark.parametrize("stream", [False, True])
async def test_an_image_the_model_refuses_is_named_by_its_path(stream: bool) -> None:
    """A text-only model's refusal (vLLM's words: ``image_input_unsupported``) names the
    request's image as Anthropic names a block its model cannot read, on which Claude Code
    leaves it out and sends the request again; before or instead of a stream alike."""
    words = "Model server 'up' answered 400: m is not a multimodal model"
    refused = UpstreamRejected(words, status=400, code="image_input_unsupported")
    image = {"type": "image", "source": {"type": "url", "url": "https://x/i.png"}}
    content = [{"type": "text", "text": "see"}, image]
    raw = body(messages=[{"role": "user", "content": content}], stream=stream)
    reply = await post(build(ScriptedBackend([refused])), raw)
    message = assert_anthropic_error(reply, 400, "invalid_request_error")
    assert (
        message == f"messages.0.content.1.image: This model does not support image input: {words}"
    )
    found = CLAUDE_CODE_MEDIA_PATH.search(message)
    assert found is not None
    assert found.groups() == ("0", "1", None, "image")


@pytest.mark.parametrize("path", ["/v1/messages", "/v1/messages/count_tokens"])
@pytest.mark.parametrize("stream", [False, True])
async def test_a_signature_that_does_not_open_is_named_by_its_block(
    path: str, stream: bool
) -> None:
    """As Anthropic names it (``messages.1.content.0: Invalid `signature` in `thinking`
    block``), not as the canonical item the core refused (``input[3]``); a signature that
    is not the gateway's (Anthropic's own, as it made it) is left out, not refused."""
    anthropics = {"type": "thinking", "thinking": "a", "signature": "EqQBCkgIARABGAIiQL"}
    forged = {"type": "thinking", "thinking": "b", "signature": "sw1.forged"}
    messages = [
        {"role": "user", "content": "q"},
        {"role": "assistant", "content": [anthropics, {"type": "text", "text": "a"}]},
        {"role": "user", "content": "more"},
        {"role": "assistant", "content": [{"type": "text", "text": "b"}, forged]},
        {"role": "user", "content": "next"},
    ]
    raw = body(messages=messages, stream=stream)
    if path.endswith("count_tokens"):
        raw = orjson.dumps({"model": "m", "messages": messages})
    reply = await post(build(sealer=AesGcmSealer(bytes(32))), raw, path)
    message = assert_anthropic_error(reply, 400, "invalid_request_error")
    assert message == (
        "messages.3.content.1: Invalid `signature` in `thinking` block: it was not made by "
        "this gateway for this organization, or it was altered."
    )


async def test_a_non_json_content_type_is_refused() -> None:
    reply = await call(build(), "POST", "/v1/messages", body(), content_type="text/plain")
    assert_anthropic_error(reply, 415, "invalid_request_error")


@pytest.mark.parametrize("path", ["/v1/messages", "/v1/messages/count_tokens"])
async def test_a_body_that_never_finishes_is_refused_as_hosted_refuses_it(path: str) -> None:
    """A 400 naming ``request_body_timeout`` (the SDK's ``BetaRequestBodyTimeoutError``,
    which it does not retry), where the OpenAI routes answer 408; the connection closed."""
    sent = await stalled(build(body_timeout=0.1), path, b'{"model": ')
    assert sent[0]["status"] == 400
    assert (b"connection", b"close") in sent[0]["headers"]
    error = orjson.loads(sent[1]["body"])["error"]
    assert error["type"] == "invalid_request_error"
    assert error["details"] == {"error_code": "request_body_timeout"}
    assert "did not arrive within 0.1 seconds" in error["message"]


class Counting(ScriptedBackend):
    async def count_tokens(self, request: InferenceRequest) -> int:
        return 42


async def test_a_client_that_leaves_abandons_its_count() -> None:
    gate, leave = asyncio.Event(), asyncio.Event()
    backend = ScriptedBackend(OK)
    backend.token_count, backend.count_gate = 42, gate
    raw = orjson.dumps({"model": "m", "messages": [{"role": "user", "content": "hi"}]})
    path = "/v1/messages/count_tokens"
    request = asyncio.create_task(call(build(backend), "POST", path, raw, leave=leave))
    await backend.started.wait()
    leave.set()
    await asyncio.wait_for(backend.closed.wait(), 5)  # the upstream's count, abandoned
    assert not gate.is_set()
    assert (await request).status == 0


async def test_count_tokens_by_the_upstream_or_an_estimate() -> None:
    raw = orjson.dumps({"model": "m", "messages": [{"role": "user", "content": "hello " * 40}]})
    counted = await post(build(Counting(OK)), raw, "/v1/messages/count_tokens")
    assert counted.json() == {"input_tokens": 42}
    assert counted.headers["request-id"].startswith("req_")
    assert counted.headers["stateway-token-count"] == "upstream"
    estimate = await post(build(), raw, "/v1/messages/count_tokens")
    assert 40 < estimate.json()["input_tokens"] < 200
    assert estimate.headers["stateway-token-count"] == "estimate"
    assert_anthropic_error(
        await post(build(), b"{}", "/v1/messages/count_tokens"), 400, "invalid_request_error"
    )
    unknown = orjson.dumps({"model": "nope", "messages": [{"role": "user", "content": "x"}]})
    assert_anthropic_error(
        await post(build(catch_all=False), unknown, "/v1/messages/count_tokens"),
        404,
        "not_found_error",
    )


async def test_models_in_the_shape_the_client_speaks() -> None:
    app = build(catch_all=False)
    anthropic = await call(
        app, "GET", "/v1/models", headers=[(b"anthropic-version", b"2023-06-01")]
    )
    assert anthropic.json() == {
        "data": [
            {
                "type": "model",
                "id": "known",
                "display_name": "known",
                "created_at": "1970-01-01T00:00:00Z",
                "lifecycle": "active",
                "max_input_tokens": None,
                "max_tokens": None,
            }
        ],
        "has_more": False,
        "first_id": "known",
        "last_id": "known",
    }
    assert "request-id" in anthropic.headers
    openai = await call(app, "GET", "/v1/models")
    assert openai.json() == {
        "object": "list",
        "data": [{"id": "known", "object": "model", "created": 0, "owned_by": "scripted"}],
    }


async def test_one_model_in_the_shape_the_client_speaks() -> None:
    app = build(catch_all=False)
    version = [(b"anthropic-version", b"2023-06-01")]
    anthropic = await call(app, "GET", "/v1/models/known", headers=version)
    assert (anthropic.status, anthropic.json()["type"]) == (200, "model")
    openai = await call(app, "GET", "/v1/models/known")
    assert openai.json() == {"id": "known", "object": "model", "created": 0, "owned_by": "scripted"}

    missing = await call(app, "GET", "/v1/models/other", headers=version)
    assert missing.status == 404
    assert missing.json()["error"]["type"] == "not_found_error"
    assert missing.json()["request_id"] == missing.headers["request-id"]
    missing = await call(app, "GET", "/v1/models/other")
    assert missing.status == 404
    assert missing.json()["error"]["code"] == "model_not_found"
    listing = await call(app, "GET", "/v1/models/")
    assert (listing.status, listing.json()["object"]) == (200, "list")
    paged = await call(app, "GET", "/v1/models", query="limit=0", headers=version)
    assert paged.status == 400
    assert paged.json()["error"]["type"] == "invalid_request_error"


@pytest.mark.parametrize(
    ("method", "path", "status", "kind"),
    [
        ("GET", "/v1/messages", 405, "invalid_request_error"),
        ("POST", "/v1/messages/batches", 404, "not_found_error"),
        ("POST", "/v1/messages/", 404, "not_found_error"),
        ("POST", "/v1/messages/count_tokens/", 404, "not_found_error"),
        ("GET", "/v1/messages/count_tokens", 405, "invalid_request_error"),
    ],
)
async def test_route_errors_under_messages_have_anthropics_shape(
    method: str, path: str, status: int, kind: str
) -> None:
    reply = await call(build(), method, path, body() if method == "POST" else b"")
    assert reply.status == status
    assert reply.json()["type"] == "error"
    assert reply.json()["error"]["type"] == kind
    assert reply.json()["request_id"] == reply.headers["request-id"]


_blocks = st.lists(
    st.fixed_dictionaries(
        {"type": st.sampled_from([*sorted(BLOCK_TYPES), "x"])},
        optional={
            "text": st.one_of(st.text(max_size=4), json_values),
            "id": st.sampled_from(["t1", "t2", ""]) | json_values,
            "tool_use_id": st.sampled_from(["t1", "t2"]) | json_values,
            "name": st.sampled_from(["f"]) | json_values,
            "input": st.just({}) | json_values,
            "content": json_values,
            "source": json_values,
            "thinking": json_values,
            "signature": json_values,
            "data": json_values,
            "is_error": json_values,
            "cache_control": json_values,
            "server_name": st.sampled_from(["calc"]) | json_values,
            "tool_name": json_values,
        },
    ),
    max_size=3,
)
_tools = st.lists(
    st.sampled_from(
        [
            {"name": "f", "input_schema": {"type": "object"}},
            {"type": "web_search_20250305", "name": "web_search", "max_uses": 2},
            {"type": "bash_20250124", "name": "bash"},
            {"type": "memory_20250818", "name": "memory"},
            {"type": "mcp_toolset", "mcp_server_name": "calc"},
            {"type": "computer_20250124", "name": "computer"},
        ]
    )
    | json_values,
    max_size=3,
)
messages_like = st.fixed_dictionaries(
    {},
    optional={
        "model": st.sampled_from(["m", "known"]) | json_values,
        "max_tokens": st.integers(-1, 5000) | json_values,
        "messages": st.lists(
            st.fixed_dictionaries(
                {},
                optional={
                    "role": st.sampled_from(["user", "assistant", "system", "x"]) | json_values,
                    "content": st.text(max_size=4) | _blocks | json_values,
                },
            ),
            max_size=4,
        )
        | json_values,
        "system": st.text(max_size=4) | _blocks | json_values,
        "tools": _tools | json_values,
        "mcp_servers": st.just([{"type": "url", "url": "http://127.0.0.1:9/mcp", "name": "calc"}])
        | json_values,
        "tool_choice": st.sampled_from([{"type": "any"}, {"type": "tool", "name": "f"}])
        | json_values,
        "thinking": st.sampled_from(
            [{"type": "adaptive"}, {"type": "enabled", "budget_tokens": 2000}]
        )
        | json_values,
        "stop_sequences": json_values,
        "temperature": json_values,
        "stream": st.booleans() | json_values,
        "metadata": json_values,
        "output_config": json_values,
    },
)


@settings(
    max_examples=200, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(messages_like)
def test_fuzzed_messages_never_get_a_5xx(raw: dict[str, Any]) -> None:
    async def attempt() -> None:
        reply = await post(build(), json.dumps(raw).encode())
        assert reply.status < 500, reply.body
        if reply.status >= 400:
            assert reply.json()["type"] == "error"
            error = reply.json()["error"]
            assert set(error) - {"details"} == {"type", "message"}
            assert set(error.get("details", {"error_code": ""})) == {"error_code"}
        elif reply.headers["content-type"].startswith("text/event-stream"):
            assert frames(reply)[-1][0] == "message_stop"
        else:
            Message.model_validate(reply.json())

    asyncio.run(attempt())


async def test_a_route_not_served_answers_an_anthropic_client_in_its_shape() -> None:
    """The Files API (``client.beta.files``), say: ``anthropic-version`` tells the client."""
    app = build()
    version = [(b"anthropic-version", b"2023-06-01")]
    files = await call(app, "GET", "/v1/files", headers=version)
    assert_anthropic_error(files, 404, "not_found_error")
    openai = await call(app, "GET", "/v1/files")
    assert (openai.status, openai.json()["error"]["code"]) == (404, "not_found")
