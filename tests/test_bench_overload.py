"""How ``python -m bench`` classes one stream of its overload run (docs/benchmarks.md,
Method: *Overload*): each is completed, refused, failed mid-way or other, with the reason
an *other* is given in the results."""

from __future__ import annotations

from bench.overload import _TERMINAL, COMPLETED, FAILED_MIDWAY, OTHER, REFUSED, _Stream

COMPLETED_EVENT, FAILED_EVENT, INCOMPLETE_EVENT = _TERMINAL


async def test_each_stream_is_classed_by_its_status_terminal_event_and_end() -> None:
    stream = _Stream()
    assert stream.outcome() == (OTHER, "no answer")
    stream.status, stream.error_body = 503, b'{"error": {"code": "overloaded"}}'
    assert stream.outcome() == (REFUSED, "")
    stream.status = 200
    assert stream.outcome() == (FAILED_MIDWAY, "")  # no terminal event: cut
    stream.terminal = FAILED_EVENT
    assert stream.outcome() == (FAILED_MIDWAY, "")
    stream.terminal = INCOMPLETE_EVENT
    assert stream.outcome() == (OTHER, "response.incomplete")
    stream.terminal = COMPLETED_EVENT
    assert stream.outcome() == (OTHER, "cut after response.completed")
    stream.complete = True
    assert stream.outcome() == (COMPLETED, "")
