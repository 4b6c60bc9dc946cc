"""What the creates share when answering a run (:mod:`stateway.surfaces.http.run_answers`):
a response that failed after its output, answered whole as an HTTP error by a protocol
with no way to show partial output (Chat Completions, Messages)."""

from __future__ import annotations

from typing import Any

import pytest

from stateway.core.errors import UpstreamError
from stateway.core.generation_settings import GenerationSettings
from stateway.core.response import ResponseState
from stateway.surfaces.http.run_answers import failure_after_output


def failed(error: dict[str, Any] | None) -> ResponseState:
    state = ResponseState("resp_1", "t", 0.0, "m", None, None, False, GenerationSettings())
    state.output = [{"type": "message", "role": "assistant", "content": []}]
    state.status = "failed"
    state.error = error
    return state


def test_a_failure_after_output_is_answered_with_its_own_words_and_status() -> None:
    state = failed(None)
    state.fail(UpstreamError("The model server is overloaded.", status=529, code="overloaded"))
    error = failure_after_output(state)
    assert (error.message, error.status, error.code) == (
        "The model server is overloaded.",
        529,
        "overloaded",
    )


@pytest.mark.parametrize(
    "stored", [None, {}, {"code": "server_error", "message": "", "status": None}]
)
def test_a_failure_without_words_or_status_is_a_502_saying_so(
    stored: dict[str, Any] | None,
) -> None:
    """A response whose error object carries no message or status (stored so by an older
    release, or kept in the hosted shape) is still answered as a failure: a 502."""
    error = failure_after_output(failed(stored))
    assert (error.message, error.status) == ("The response failed.", 502)
