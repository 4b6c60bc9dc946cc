"""What each upstream shape's endings and refusals become, through to the run's status.

The backends' parsers turn upstream payloads into deltas; the loop then decides the run's
ending. These tests go through both, so a break in either shows.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from stateway.backends.chat_reply import from_upstream_chunk, from_upstream_completion
from stateway.backends.chat_request import to_upstream as chat_to_upstream
from stateway.backends.responses_reply import StreamState, from_upstream_response
from stateway.backends.responses_request import to_upstream as responses_to_upstream
from stateway.backends.upstream_status import classify_status
from stateway.core.errors import UpstreamError
from stateway.core.generation_settings import GenerationSettings
from stateway.core.inference import Delta, Finish, InferenceRequest
from stateway.core.tools.catalog import model_tools
from stateway.protocols.responses.decode import decode_create
from tests.core.test_loop_endings import finish_with


def chat_stream(finish_reason: str) -> list[Delta]:
    chunks: list[dict[str, Any]] = [
        {"choices": [{"index": 0, "delta": {"role": "assistant", "content": "Hel"}}]},
        {"choices": [{"index": 0, "delta": {}, "finish_reason": finish_reason}]},
    ]
    return [delta for chunk in chunks for delta in from_upstream_chunk(chunk)]


def chat_completion(finish_reason: str) -> list[Delta]:
    message = {"role": "assistant", "content": "Hel"}
    payload = {"choices": [{"index": 0, "message": message, "finish_reason": finish_reason}]}
    return list(from_upstream_completion(payload))


def responses_final(status: str, reason: str | None) -> dict[str, Any]:
    return {
        "status": status,
        "incomplete_details": None if reason is None else {"reason": reason},
        "output": [
            {
                "type": "message",
                "role": "assistant",
                "content": [{"type": "output_text", "text": "Hel"}],
            }
        ],
    }


def responses_stream(status: str, reason: str | None) -> list[Delta]:
    kind = "response.incomplete" if status == "incomplete" else "response.completed"
    state = StreamState()
    events = [
        {"type": "response.output_text.delta", "delta": "Hel"},
        {"type": kind, "response": responses_final(status, reason)},
    ]
    return [delta for event in events for delta in state.feed(event)]


def responses_whole(status: str, reason: str | None) -> list[Delta]:
    return list(from_upstream_response(responses_final(status, reason)))


# Parsed inside the tests, not at import: a mutation tool only sees what a test calls.
FILTERED: dict[str, Callable[[], list[Delta]]] = {
    "chat stream": lambda: chat_stream("content_filter"),
    "chat completion": lambda: chat_completion("content_filter"),
    "responses stream": lambda: responses_stream("incomplete", "content_filter"),
    "responses whole": lambda: responses_whole("incomplete", "content_filter"),
}
CUT: dict[str, Callable[[], list[Delta]]] = {
    "chat stream": lambda: chat_stream("length"),
    "chat completion": lambda: chat_completion("length"),
    "responses stream": lambda: responses_stream("incomplete", "max_output_tokens"),
    "responses whole": lambda: responses_whole("incomplete", "max_output_tokens"),
}
COMPLETE: dict[str, Callable[[], list[Delta]]] = {
    "chat": lambda: chat_stream("stop"),
    "responses": lambda: responses_stream("completed", None),
}


@pytest.mark.parametrize("shape", FILTERED)
async def test_a_content_filter_ends_the_run_incomplete(shape: str) -> None:
    deltas = FILTERED[shape]()
    assert deltas[-1] == Finish("content_filter")

    run, store, _ = await finish_with(deltas)

    assert (run.state.status, run.state.incomplete_reason) == ("incomplete", "content_filter")
    assert next(iter(store.records.values())).status == "incomplete"


@pytest.mark.parametrize("shape", CUT)
async def test_an_output_limit_ends_the_run_incomplete(shape: str) -> None:
    deltas = CUT[shape]()
    assert deltas[-1] == Finish("length")

    run, _, _ = await finish_with(deltas)

    assert (run.state.status, run.state.incomplete_reason) == ("incomplete", "max_output_tokens")


@pytest.mark.parametrize("shape", COMPLETE)
async def test_a_normal_ending_completes(shape: str) -> None:
    deltas = COMPLETE[shape]()
    assert deltas[-1] == Finish("stop")

    run, _, _ = await finish_with(deltas)

    assert run.state.status == "completed"


TOOLS = b'"tools": [{"type": "function", "name": "f", "parameters": {"type": "object"}}]'


@pytest.mark.parametrize(
    ("field", "expected"), [(b"", True), (b', "parallel_tool_calls": false', False)]
)
@pytest.mark.parametrize("translate", [chat_to_upstream, responses_to_upstream])
def test_parallel_tool_calls_reach_the_upstream_as_requested_default_true(
    translate: Any, field: bytes, expected: bool
) -> None:
    command = decode_create(b'{"model": "m", "input": "x", ' + TOOLS + field + b"}")
    request = InferenceRequest(
        "m",
        None,
        command.input,
        command.settings,
        stream=True,
        tools=model_tools(command.settings.tools),
    )

    assert translate(request)["parallel_tool_calls"] is expected


def test_settings_without_tools_send_no_parallel_flag() -> None:
    request = InferenceRequest("m", None, [], GenerationSettings(), stream=True)
    assert "parallel_tool_calls" not in chat_to_upstream(request)
    assert "parallel_tool_calls" not in responses_to_upstream(request)


@pytest.mark.parametrize("code", [None, "model_not_found", "unknown_model"])
def test_an_upstream_404_is_a_404_model_not_found(code: str | None) -> None:
    error = classify_status(404, "no such model", code, "b")

    assert error.status == 404
    assert error.code == (code or "model_not_found")
    assert "no such model" in error.message


@pytest.mark.parametrize(
    ("status", "code", "client_status", "client_code"),
    [
        (400, None, 400, "upstream_rejected"),
        (422, "context_length_exceeded", 400, "context_length_exceeded"),
        (429, None, 429, "rate_limit_exceeded"),
    ],
)
def test_other_upstream_statuses_keep_their_meaning(
    status: int, code: str | None, client_status: int, client_code: str
) -> None:
    error = classify_status(status, "m", code, "b")

    assert (error.status, error.code) == (client_status, client_code)


@pytest.mark.parametrize("reason", ["abort", "error"])
@pytest.mark.parametrize("answer", [chat_stream, chat_completion])
def test_an_engine_abort_or_error_is_a_failure_not_an_ending(
    reason: str, answer: Callable[[str], list[Delta]]
) -> None:
    """vLLM ends a request its engine aborted (shutdown, a pause, scale-down) with
    ``finish_reason: "abort"`` and ``[DONE]`` (vllm-project/vllm#57082), SGLang likewise
    (sgl-project/sglang#6693), and vLLM's engine names a failed request's reason
    ``error``: the answer is cut short, not done."""
    with pytest.raises(UpstreamError, match=f"'{reason}'"):
        answer(reason)
