"""Canonical responses and stream events -> the Messages wire, checked with the SDK's types."""

from __future__ import annotations

import re
from typing import Any

import orjson
import pytest
from anthropic.lib.streaming._messages import accumulate_event
from anthropic.types import Message, RawMessageStreamEvent
from pydantic import TypeAdapter

from stateway.core import events as ev
from stateway.core.errors import (
    ContextTooLong,
    GatewayError,
    InvalidRequest,
    NoSearchProvider,
    NotFound,
    Overloaded,
    ServerShuttingDown,
    StorageError,
    ThreadAlreadyContinued,
    ThreadNotFound,
    UpstreamContextTooLong,
    UpstreamError,
    UpstreamOutputOverWindow,
)
from stateway.core.generation_settings import GenerationSettings
from stateway.core.reasoning import redacted_item
from stateway.core.response import ResponseState
from stateway.core.usage import Usage
from stateway.protocols.messages.encode import (
    encode_message,
    encode_usage,
    tool_input,
)
from stateway.protocols.messages.errors import (
    encode_error,
    error_type,
    is_overloaded,
    stream_error,
)
from stateway.protocols.messages.stream import PING, MessagesStream

EVENTS: TypeAdapter[Any] = TypeAdapter(RawMessageStreamEvent)


def state(**fields: Any) -> ResponseState:
    base = ResponseState(
        id="resp_1",
        tenant_id="t",
        created_at=0.0,
        model="m",
        instructions=None,
        previous_response_id=None,
        store=False,
        settings=GenerationSettings(),
        status="completed",
        usage=Usage(10, 4, cached_tokens=3, reasoning_tokens=2, cache_write_tokens=5),
    )
    for key, value in fields.items():
        setattr(base, key, value)
    return base


THINKING = {
    "id": "rs_1",
    "type": "reasoning",
    "summary": [],
    "content": [{"type": "reasoning_text", "text": "plan"}],
    "encrypted_content": "sig==",
}
TEXT = {
    "id": "msg_1",
    "type": "message",
    "role": "assistant",
    "content": [{"type": "output_text", "text": "hi", "annotations": []}],
}
CALL = {
    "id": "fc_1",
    "type": "function_call",
    "call_id": "toolu_1",
    "name": "f",
    "arguments": '{"a": 1}',
}
MCP = {"id": "mcp_1", "type": "mcp_call", "name": "x", "arguments": "{}"}


def test_the_message_object_parses_with_the_sdk() -> None:
    output = [THINKING, redacted_item("rs_2", "opaque"), TEXT, CALL, MCP]
    message = Message.model_validate(encode_message(state(output=output)))
    assert message.id == "msg_1"
    assert [b.type for b in message.content] == [
        "thinking",
        "redacted_thinking",
        "text",
        "tool_use",
    ]
    thinking, redacted, _, call = message.content
    assert thinking.type == "thinking"
    assert (thinking.thinking, thinking.signature) == ("plan", "sig==")
    assert redacted.type == "redacted_thinking"
    assert redacted.data == "opaque"
    assert call.type == "tool_use"
    assert call.input == {"a": 1}
    assert call.id == "toolu_1"
    assert message.stop_reason == "tool_use"
    usage = message.usage
    assert (usage.input_tokens, usage.cache_read_input_tokens) == (2, 3)
    assert (usage.cache_creation_input_tokens, usage.output_tokens) == (5, 4)
    assert usage.output_tokens_details is not None
    assert usage.output_tokens_details.thinking_tokens == 2


def test_stop_reasons() -> None:
    assert encode_message(state(output=[TEXT]))["stop_reason"] == "end_turn"
    stopped = encode_message(state(output=[TEXT], stop_sequence="END"))
    assert (stopped["stop_reason"], stopped["stop_sequence"]) == ("stop_sequence", "END")
    for reason, wire in [
        ("max_output_tokens", "max_tokens"),
        ("content_filter", "refusal"),
        ("max_rounds", "pause_turn"),
    ]:
        cut = state(output=[TEXT], status="incomplete", incomplete_reason=reason)
        assert encode_message(cut)["stop_reason"] == wire


@pytest.mark.parametrize(
    ("reason", "upstream"),
    [
        ("max_output_tokens", "model_context_window_exceeded"),
        ("max_rounds", "pause_turn"),
        ("content_filter", "refusal"),
    ],
)
def test_an_anthropic_upstreams_own_stop_reason_is_answered_as_it_came(
    reason: str, upstream: str
) -> None:
    details = {"type": "refusal", "category": "cyber", "explanation": "Malware."}
    shown = details if upstream == "refusal" else None
    cut = state(
        output=[TEXT],
        status="incomplete",
        incomplete_reason=reason,
        stop_reason=upstream,
        stop_details=shown,
    )
    message = Message.model_validate(encode_message(cut))
    assert message.stop_reason == upstream
    assert (message.stop_details and message.stop_details.model_dump()) == shown
    got = frames(MessagesStream().encode(ev.ResponseFinished(cut)))
    [(name, data), _] = got
    assert name == "message_delta"
    expected = {"stop_reason": upstream, "stop_sequence": None}
    assert data["delta"] == (expected if shown is None else {**expected, "stop_details": details})


def test_an_incomplete_response_for_another_reason_stopped_at_max_tokens() -> None:
    cut = state(output=[TEXT], status="incomplete", incomplete_reason=None)
    assert encode_message(cut)["stop_reason"] == "max_tokens"


def test_unsigned_thinking_refusals_and_calls_without_arguments() -> None:
    refusal = {**TEXT, "content": [{"type": "refusal", "refusal": "no"}, {"type": "output_text"}]}
    unsigned = {**THINKING, "encrypted_content": None}
    bare_call = {**CALL, "arguments": ""}
    message = encode_message(state(output=[unsigned, refusal, bare_call]))
    assert message["content"] == [
        {"type": "thinking", "thinking": "plan", "signature": ""},
        {"type": "text", "text": "no"},  # a message is one block, as streamed
        {"type": "tool_use", "id": "toolu_1", "name": "f", "input": {}},
    ]


_DEEP = '{"a":' * 300 + "1" + "}" * 300


@pytest.mark.parametrize(
    ("arguments", "expected"),
    [
        ('{"a": 1}', {"a": 1}),
        ("", {}),
        ("[1]", {"arguments": "[1]"}),
        ("not json", {"arguments": "not json"}),
        (_DEEP, {"arguments": _DEEP}),  # an object nested past what can be written again
    ],
)
def test_call_arguments_become_an_input_object(arguments: str, expected: Any) -> None:
    assert tool_input(arguments) == expected


def test_a_call_cut_short_has_the_input_a_streaming_client_makes_of_it() -> None:
    """Out of tokens mid-call: the fragment streamed is no JSON, which the SDK reads as an
    empty input; the whole message says the same, not a made-up ``arguments`` key."""
    cut = {**CALL, "arguments": '{"city": "Par', "status": "incomplete"}
    done = state(output=[cut], status="incomplete", incomplete_reason="max_output_tokens")
    assert encode_message(done)["content"][0]["input"] == {}
    assert encode_message(done)["stop_reason"] == "max_tokens"
    whole = {**cut, "arguments": '{"city": "Paris"}'}  # cut after its arguments: they stand
    assert encode_message(state(output=[whole]))["content"][0]["input"] == {"city": "Paris"}


def test_usage_never_counts_negative_input() -> None:
    assert encode_usage(Usage(1, 1, cached_tokens=5))["input_tokens"] == 0
    assert "server_tool_use" not in encode_usage(Usage(1, 1))


def frames(stream: bytes, events: TypeAdapter[Any] = EVENTS) -> list[tuple[str, dict[str, Any]]]:
    """Each frame's event name and data, checked against the SDK's event types (``events``:
    the beta ones for blocks only the beta API has)."""
    out = []
    for chunk in stream.split(b"\n\n")[:-1]:
        event_line, data_line = chunk.split(b"\n")
        name = event_line.removeprefix(b"event: ").decode()
        data = orjson.loads(data_line.removeprefix(b"data: "))
        assert data["type"] == name  # the SDK skips a frame without a matching event line
        events.validate_python(data) if name not in ("ping", "error") else None
        out.append((name, data))
    return out


def test_a_stream_encodes_blocks_in_order() -> None:
    stream = MessagesStream()
    done = state(output=[THINKING, TEXT, CALL])
    reasoning_added = {**THINKING, "content": [], "encrypted_content": None}
    log = [
        ev.ResponseCreated(done),
        ev.ResponseInProgress(done),
        ev.ItemAdded(0, reasoning_added),
        ev.ReasoningDelta(0, 0, "rs_1", "plan"),
        ev.ReasoningDone(0, 0, "rs_1", "plan"),
        ev.ItemDone(0, THINKING),
        ev.ItemAdded(1, {**TEXT, "content": []}),
        ev.PartAdded(1, 0, "msg_1", {"type": "output_text", "text": ""}),
        ev.TextDelta(1, 0, "msg_1", "hi"),
        ev.TextDone(1, 0, "msg_1", "hi"),
        ev.ItemDone(1, TEXT),
        ev.ItemAdded(2, {**MCP}),
        ev.McpArgumentsDelta(2, "mcp_1", "{}"),
        ev.ItemAdded(3, {**CALL, "arguments": ""}),
        ev.ArgumentsDelta(3, "fc_1", '{"a": 1}'),
        ev.ArgumentsDone(3, "fc_1", "f", '{"a": 1}'),
        ev.ItemDone(3, CALL),
        ev.ResponseFinished(done),
    ]
    got = frames(b"".join(stream.encode(event) for event in log))
    names = [name for name, _ in got]
    assert names == [
        "message_start",
        "ping",
        "content_block_start",
        "content_block_delta",
        "content_block_delta",
        "content_block_stop",
        "content_block_start",
        "content_block_delta",
        "content_block_stop",
        "content_block_start",
        "content_block_delta",
        "content_block_stop",
        "message_delta",
        "message_stop",
    ]
    assert got[2][1]["content_block"] == {"type": "thinking", "thinking": "", "signature": ""}
    assert got[6][1]["content_block"] == {"type": "text", "text": ""}
    assert got[4][1]["delta"] == {"type": "signature_delta", "signature": "sig=="}
    assert [data["index"] for name, data in got if name == "content_block_stop"] == [0, 1, 2]
    assert got[9][1]["content_block"] == {
        "type": "tool_use",
        "id": "toolu_1",
        "name": "f",
        "input": {},
    }
    assert got[10][1]["delta"] == {"type": "input_json_delta", "partial_json": '{"a": 1}'}
    delta = got[12][1]
    assert delta["delta"] == {"stop_reason": "tool_use", "stop_sequence": None}
    assert (delta["usage"]["input_tokens"], delta["usage"]["output_tokens"]) == (2, 4)


def sdk_inputs(log: list[ev.Event]) -> list[Any]:
    """The ``input`` of each ``tool_use`` block the SDK's stream accumulator makes of the
    frames of ``log`` (it raises on fragments that cannot begin a JSON object)."""
    stream, snapshot, bufs = MessagesStream(), None, {}
    for _, data in frames(b"".join(stream.encode(event) for event in log)):
        if data["type"] not in ("ping", "error"):
            snapshot = accumulate_event(event=data, current_snapshot=snapshot, json_bufs=bufs)
    assert snapshot is not None
    return [block.input for block in snapshot.content if block.type == "tool_use"]


@pytest.mark.parametrize(
    "pieces",
    [["{bad"], ["{", "bad}"], ["[1,", " 2]"], ['"s"'], [" ", '{"a": 1}'], ["  "]],
)
def test_arguments_that_are_no_object_do_not_break_the_sdks_stream(pieces: list[str]) -> None:
    """An open model's arguments need not be JSON: the fragments sent always begin an
    object; arguments none of which could go out come whole at the call's end, as the
    non-streamed answer has them."""
    arguments = "".join(pieces)
    call = {**CALL, "arguments": arguments}
    done = state(output=[call])
    log: list[ev.Event] = [ev.ResponseCreated(done), ev.ItemAdded(0, {**call, "arguments": ""})]
    log += [ev.ArgumentsDelta(0, "fc_1", piece) for piece in pieces]
    log += [ev.ArgumentsDone(0, "fc_1", "f", arguments), ev.ItemDone(0, call)]
    log.append(ev.ResponseFinished(done))
    [streamed] = sdk_inputs(log)
    whole = encode_message(done)["content"][0]["input"]
    assert streamed == ({} if pieces[0] == "{" else whole)  # an object begun stays one


def test_long_arguments_go_out_whole_in_fewer_checked_pieces() -> None:
    """Each check parses everything so far: fragments go out once they add a quarter to
    what went out, and what is held goes out as the call ends."""
    arguments = orjson.dumps({"content": "x" * 20000}).decode()
    pieces = [arguments[i : i + 5] for i in range(0, len(arguments), 5)]
    call = {**CALL, "arguments": arguments}
    done = state(output=[call])
    log: list[ev.Event] = [ev.ResponseCreated(done), ev.ItemAdded(0, {**call, "arguments": ""})]
    log += [ev.ArgumentsDelta(0, "fc_1", piece) for piece in pieces]
    log += [ev.ItemDone(0, call), ev.ResponseFinished(done)]
    stream = MessagesStream()
    got = frames(b"".join(stream.encode(event) for event in log))
    sent = [d["delta"]["partial_json"] for n, d in got if n == "content_block_delta"]
    assert "".join(sent) == arguments
    assert len(sent) < 60 < len(pieces)
    assert sdk_inputs(log) == [{"content": "x" * 20000}]


def test_message_start_carries_the_prompt_usage_the_upstream_reported_first() -> None:
    """As Anthropic's: ``message_start`` has the prompt's tokens (outside the cache, cache
    reads and writes beside) when the upstream reported them before any output (an
    Anthropic upstream's own ``message_start``); zeros when it reports only at the end."""
    running = state(status="in_progress", usage=None)
    [(name, data), _] = frames(MessagesStream().encode(ev.ResponseCreated(running)))
    assert name == "message_start"
    assert data["message"]["usage"] == {
        "input_tokens": 0,
        "output_tokens": 0,
        "cache_read_input_tokens": 0,
        "cache_creation_input_tokens": 0,
    }
    running.prompt_usage = Usage(12, 1, cached_tokens=3, cache_write_tokens=4)
    [(_, data), _] = frames(MessagesStream().encode(ev.ResponseCreated(running)))
    assert data["message"]["usage"] == {
        "input_tokens": 5,
        "output_tokens": 1,
        "cache_read_input_tokens": 3,
        "cache_creation_input_tokens": 4,
    }


def test_thinking_asked_without_its_text_keeps_only_the_signature() -> None:
    """``display: "omitted"``: the block is empty, no ``thinking_delta`` is sent, and the
    signature still is (it carries the thinking)."""
    omitted = GenerationSettings(reasoning_display="omitted")
    done = state(output=[THINKING, TEXT], settings=omitted)
    message = Message.model_validate(encode_message(done))
    thinking = message.content[0]
    assert thinking.type == "thinking"
    assert (thinking.thinking, thinking.signature) == ("", "sig==")

    stream = MessagesStream()
    log = [
        ev.ResponseCreated(done),
        ev.ItemAdded(0, {**THINKING, "content": [], "encrypted_content": None}),
        ev.ReasoningDelta(0, 0, "rs_1", "plan"),
        ev.ReasoningDone(0, 0, "rs_1", "plan"),
        ev.ItemDone(0, THINKING),
    ]
    got = frames(b"".join(stream.encode(event) for event in log))
    deltas = [data["delta"] for name, data in got if name == "content_block_delta"]
    assert deltas == [{"type": "signature_delta", "signature": "sig=="}]


def test_thinking_not_enabled_shows_no_thinking_blocks() -> None:
    """A model that reasons anyway (an open model over a Chat upstream) is not the client's
    concern: a client that reads ``content[0].text`` gets the text."""
    hidden = GenerationSettings(reasoning_display="hidden")
    done = state(output=[THINKING, TEXT], settings=hidden)
    assert [block["type"] for block in encode_message(done)["content"]] == ["text"]

    stream = MessagesStream()
    log = [
        ev.ResponseCreated(done),
        ev.ItemAdded(0, {**THINKING, "content": [], "encrypted_content": None}),
        ev.ReasoningDelta(0, 0, "rs_1", "plan"),
        ev.ItemDone(0, THINKING),
        ev.ItemAdded(1, {**TEXT, "content": []}),
        ev.TextDelta(1, 0, "msg_1", "hi"),
        ev.ItemDone(1, TEXT),
    ]
    got = frames(b"".join(stream.encode(event) for event in log))
    starts = [data for name, data in got if name == "content_block_start"]
    assert [(s["index"], s["content_block"]["type"]) for s in starts] == [(0, "text")]
    assert all(
        data["delta"]["type"] == "text_delta" for name, data in got if name == "content_block_delta"
    )


def test_a_failed_stream_ends_with_an_error_event_and_no_message_stop() -> None:
    stream = MessagesStream()
    cut = state(
        status="failed", error={"code": "upstream_stream_cut", "message": "cut", "status": 502}
    )
    [(name, data)] = frames(stream.encode(ev.ResponseFinished(cut)))
    assert name == "error"
    assert data["error"] == {"type": "api_error", "message": "cut"}
    busy = state(
        status="failed", error={"code": "upstream_overloaded", "message": "busy", "status": 503}
    )
    [(_, data)] = frames(MessagesStream().encode(ev.ResponseFinished(busy)))
    assert data["error"]["type"] == "overloaded_error"


def test_redacted_thinking_is_streamed_whole_in_its_start() -> None:
    redacted = redacted_item("rs_2", "opaque")
    stream = MessagesStream()
    log = [
        ev.ResponseCreated(state(output=[redacted])),
        ev.ItemAdded(0, redacted),
        ev.ItemDone(0, redacted),
    ]
    got = frames(b"".join(stream.encode(event) for event in log))
    assert [name for name, _ in got][2:] == ["content_block_start", "content_block_stop"]
    assert got[2][1]["content_block"] == {"type": "redacted_thinking", "data": "opaque"}


def test_an_unsigned_thinking_block_gets_no_signature_delta_and_unseen_deltas_no_frame() -> None:
    stream = MessagesStream()
    unsigned = {**THINKING, "encrypted_content": None}
    log = [
        ev.ResponseCreated(state(output=[unsigned])),
        ev.ItemAdded(0, {**unsigned, "content": []}),
        ev.ReasoningDelta(0, 0, "rs_1", "plan"),
        ev.ItemDone(0, unsigned),
    ]
    got = frames(b"".join(stream.encode(event) for event in log))
    assert stream.encode(ev.TextDelta(5, 0, "msg_9", "never started")) == b""
    start = got[0][1]["message"]
    assert (start["stop_reason"], start["stop_sequence"]) == (None, None)
    assert [name for name, _ in got] == [
        "message_start",
        "ping",
        "content_block_start",
        "content_block_delta",
        "content_block_stop",
    ]
    assert got[3][1]["delta"] == {"type": "thinking_delta", "thinking": "plan"}


@pytest.mark.parametrize(
    ("error", "kind", "message"),
    [
        ({"code": "overloaded", "message": "busy"}, "overloaded_error", "busy"),
        ({"code": "upstream_overloaded", "status": 500}, "overloaded_error", None),
        ({"code": "upstream_unavailable", "status": 503}, "overloaded_error", None),
        ({"code": "server_shutting_down", "status": 503}, "api_error", None),
        ({"code": "server_restarted", "status": 503}, "api_error", None),
        ({"code": "server_error", "status": 503}, "api_error", None),
        ({"code": "upstream_unavailable", "status": 502}, "api_error", None),
        ({"status": 529}, "overloaded_error", None),
        ({"code": "server_error", "status": 500, "message": "boom"}, "api_error", "boom"),
        ({"status": 504}, "api_error", None),
        (None, "api_error", None),
    ],
)
def test_a_stream_error_event_is_overloaded_only_when_something_was(
    error: dict[str, Any] | None, kind: str, message: str | None
) -> None:
    """Typed as the error would be answered before the stream (:func:`encode_error`): a
    503 of the gateway's own (shutting down, restarted, storage) is an ``api_error``."""
    event = stream_error(error)
    assert event["error"]["type"] == kind
    assert event["error"]["message"] == (message or "The response failed.")


@pytest.mark.parametrize(
    ("said", "worded"),
    [
        (
            "Model server 'up' answered 400: the request exceeds the available context size",
            "prompt is too long: Model server 'up' answered 400: the request exceeds the "
            "available context size",
        ),
        (
            "Model server 'up' answered 400: prompt is too long: 210000 tokens > 200000 maximum",
            "prompt is too long: 210000 tokens > 200000 maximum",
        ),
    ],
)
def test_a_context_refused_once_the_stream_opened_is_worded_as_before_it(
    said: str, worded: str
) -> None:
    """llama.cpp checks a prompt when a slot frees, which may come after the status line
    went out: the error event says what Claude Code compacts on, as a 400 would."""
    event = stream_error({"code": "context_length_exceeded", "status": 400, "message": said})
    assert event["error"] == {"type": "invalid_request_error", "message": worded}


@pytest.mark.parametrize(
    ("code", "status", "overloaded"),
    [
        ("overloaded", 503, True),  # the gateway's own queue is full
        ("upstream_overloaded", 503, True),
        ("upstream_overloaded", 500, True),  # the code says it, whatever the status
        ("overloaded", None, True),
        ("overloaded", 429, False),  # a 4xx keeps its type: answered 529, it would be retried
        ("upstream_overloaded", 400, False),
        (None, 529, True),  # Anthropic's status for it
        ("upstream_error", 529, True),
        ("upstream_unavailable", 503, True),
        ("upstream_unavailable", 502, False),  # unreachable: not overloaded
        ("server_shutting_down", 503, False),  # the gateway's own 503s
        ("server_restarted", 503, False),
        ("storage_unavailable", 503, False),
        ("identity_provider_unavailable", 503, False),
        ("server_error", 503, False),
        (None, 503, False),
        ("internal_error", 500, False),
        (None, None, False),
    ],
)
def test_one_rule_says_overloaded_before_a_stream_and_in_one(
    code: str | None, status: int | None, overloaded: bool
) -> None:
    """:func:`encode_error` and :func:`stream_error` type an error as ``overloaded_error``
    by the same predicate; anything else of theirs here is an ``api_error``."""
    kind = "overloaded_error" if overloaded else "api_error"
    assert is_overloaded(code, status) is overloaded
    assert stream_error({"code": code, "status": status})["error"]["type"] == kind
    if status is not None:
        answered = encode_error(GatewayError("m", code=code, status=status))
        before = kind if overloaded or status >= 500 else error_type(status)  # a 4xx's own
        assert answered["error"] == {"type": before, "message": "m"}


def test_the_ping_frame() -> None:
    assert frames(PING) == [("ping", {"type": "ping"})]


def test_error_types_by_status() -> None:
    assert encode_error(InvalidRequest("bad")) == {
        "type": "error",
        "error": {"type": "invalid_request_error", "message": "bad"},
    }
    altered = InvalidRequest("unverified", code="invalid_encrypted_content")
    assert encode_error(altered)["error"]["type"] == "invalid_request_error"
    assert encode_error(altered)["error"]["message"].startswith(
        "messages: Invalid `signature` in `thinking` block"
    )
    assert encode_error(NotFound("no"))["error"]["type"] == "not_found_error"
    named = InvalidRequest("unverified", param="messages.3.content.1", code=altered.code)
    assert encode_error(named)["error"] == {  # as Anthropic names the block
        "type": "invalid_request_error",
        "message": "messages.3.content.1: Invalid `signature` in `thinking` block: it was not "
        "made by this gateway for this organization, or it was altered.",
    }
    held = InvalidRequest("unverified", param="previous_response_id", code=altered.code)
    assert encode_error(held)["error"]["message"].startswith("messages: Invalid `signature`")
    assert encode_error(Overloaded("busy"))["error"]["type"] == "overloaded_error"
    assert encode_error(UpstreamError("down"))["error"]["type"] == "api_error"
    for gateways in (ServerShuttingDown(), StorageError("Storage is unavailable.")):
        assert encode_error(gateways) == {  # a 503 of the gateway's own, not overloaded
            "type": "error",
            "error": {"type": "api_error", "message": gateways.message},
        }
    for refusal in (ThreadNotFound("msg_1"), ThreadAlreadyContinued("msg_1")):
        assert encode_error(refusal) == {  # the SDK picks its error class by the code
            "type": "error",
            "error": {
                "type": error_type(refusal.status),
                "message": refusal.message,
                "details": {"error_code": refusal.code},
            },
        }
    assert encode_error(ThreadNotFound("msg_1"))["error"]["type"] == "not_found_error"
    assert [error_type(s) for s in (401, 402, 403, 409, 413, 429, 500, 504, 529, 408)] == [
        "authentication_error",
        "billing_error",
        "permission_error",
        "conflict_error",
        "request_too_large",
        "rate_limit_error",
        "api_error",
        "timeout_error",
        "overloaded_error",
        "invalid_request_error",
    ]


def test_a_web_search_tool_with_no_provider_is_refused_in_words_for_a_messages_client() -> None:
    """The core's words offer ``external_web_access``, a declaration only the Responses
    API has: a Messages client is told what to configure, or to leave the tool out."""
    error = NoSearchProvider("web_search", param="tools[0]")
    assert encode_error(error) == {
        "type": "error",
        "error": {
            "type": "invalid_request_error",
            "message": "tools: the web_search server tool needs a web search provider, and "
            "this gateway has none configured: set STATEWAY_WEB_SEARCH_PROVIDER (searxng, "
            "brave or tavily) where it runs, or leave the tool out.",
        },
    }


def test_a_context_too_long_is_worded_as_anthropic_words_it() -> None:
    """Claude Code compacts on the text ``prompt is too long``: Anthropic's error has no
    code to tell it by."""
    own = ContextTooLong("No candidate ... (it has 400).", tokens=1008, window=400)
    assert encode_error(own)["error"] == {
        "type": "invalid_request_error",
        "message": "prompt is too long: 1008 tokens > 400 maximum",
    }
    upstream = InvalidRequest(
        "Model server 'a' answered 400: This model's maximum context length is 8 tokens.",
        code="context_length_exceeded",
    )
    assert encode_error(upstream)["error"]["message"] == (
        "prompt is too long: Model server 'a' answered 400: This model's maximum context "
        "length is 8 tokens."
    )
    anthropic = InvalidRequest(
        "Model server 'a' answered 400: prompt is too long: 9 tokens > 8 maximum",
        code="context_length_exceeded",
    )
    assert encode_error(anthropic)["error"]["message"] == "prompt is too long: 9 tokens > 8 maximum"
    other = InvalidRequest("Bad.", code="invalid_value")
    assert encode_error(other)["error"]["message"] == "Bad."


def test_output_tokens_over_the_window_are_worded_as_anthropic_words_a_model_s_most() -> None:
    """Claude Code asks again at the most such words name (its own pattern)."""
    over = UpstreamOutputOverWindow("...", requested=32000, window=8192)
    message = encode_error(over)["error"]["message"]
    assert message == (
        "max_tokens: 32000 > 8192, which is the maximum allowed number of output tokens for "
        "this model"
    )
    claude_code = (
        r"^max_tokens: \d+ > (\d+), which is the maximum allowed number of output tokens for .+$"
    )
    said = re.match(claude_code, message)
    assert said is not None
    assert said[1] == "8192"
    assert encode_error(over)["error"]["type"] == "invalid_request_error"


def test_too_many_output_tokens_are_worded_as_anthropic_words_them() -> None:
    """Claude Code reads ``input length and `max_tokens` exceed context limit: X + Y > Z``
    and asks again for fewer output tokens (its default, 32000, fills a 32k model)."""
    output = UpstreamContextTooLong("...", tokens=1201, window=32768, requested=32000)
    assert encode_error(output)["error"]["message"] == (
        "input length and `max_tokens` exceed context limit: 1201 + 32000 > 32768, "
        "decrease input length or `max_tokens` and try again"
    )
    prompt = UpstreamContextTooLong("...", tokens=40000, window=32768, requested=32000)
    assert encode_error(prompt)["error"]["message"] == (
        "prompt is too long: 40000 tokens > 32768 maximum"
    )
    full = UpstreamContextTooLong("...", tokens=32768, window=32768, requested=1)
    assert encode_error(full)["error"]["message"].startswith(  # no output fits: compact
        "prompt is too long: "
    )


def test_a_refusal_after_text_is_a_blank_line_after_it_in_the_one_text_block() -> None:
    parts = [
        {"type": "output_text", "text": "Sure, here", "annotations": []},
        {"type": "refusal", "refusal": "I can't continue."},
    ]
    declined = {**TEXT, "content": parts}
    done = state(output=[declined])
    assert encode_message(done)["content"] == [
        {"type": "text", "text": "Sure, here\n\nI can't continue."}
    ]
    assert encode_message(done)["stop_reason"] == "refusal"
    stream = MessagesStream()
    log = [
        ev.ResponseCreated(done),
        ev.ItemAdded(0, {**TEXT, "content": []}),
        ev.TextDelta(0, 0, "msg_1", "Sure, here"),
        ev.RefusalDelta(0, 1, "msg_1", "I can't"),
        ev.RefusalDelta(0, 1, "msg_1", " continue."),
        ev.ItemDone(0, declined),
        ev.ResponseFinished(done),
    ]
    texts = [
        data["delta"]["text"]
        for _, data in frames(b"".join(stream.encode(event) for event in log))
        if data["type"] == "content_block_delta"
    ]
    assert "".join(texts) == "Sure, here\n\nI can't continue.", "as the unstreamed block"


CITED = {
    "type": "char_location",
    "cited_text": "hi",
    "document_index": 0,
    "document_title": "d",
    "start_char_index": 0,
    "end_char_index": 2,
}


def test_an_anthropic_upstreams_citations_come_back_on_their_text_block() -> None:
    """In the message, and streamed as ``citations_delta`` once the text is done."""
    part = {"type": "output_text", "text": "hi", "annotations": [], "citations": [CITED]}
    cited = {**TEXT, "id": "msg_2", "content": [part]}
    done = state(output=[TEXT, cited])
    message = Message.model_validate(encode_message(done))
    plain, block = message.content
    assert plain.type == block.type == "text"
    assert plain.citations is None
    assert [c.model_dump() for c in block.citations or ()] == [{**CITED, "file_id": None}]

    stream = MessagesStream()
    log = [
        ev.ResponseCreated(done),
        ev.ItemAdded(1, {**cited, "content": []}),
        ev.PartAdded(1, 0, "msg_2", {"type": "output_text", "text": ""}),
        ev.TextDelta(1, 0, "msg_2", "hi"),
        ev.TextDone(1, 0, "msg_2", "hi"),
        ev.PartDone(1, 0, "msg_2", part),
        ev.ItemDone(1, cited),
    ]
    got = frames(b"".join(stream.encode(event) for event in log))
    deltas = [data["delta"] for name, data in got if name == "content_block_delta"]
    assert deltas == [
        {"type": "text_delta", "text": "hi"},
        {"type": "citations_delta", "citation": CITED},
    ]
    assert got[-1][0] == "content_block_stop"
