"""``parallel_tool_calls: false``: the fragments a round keeps (:class:`_SingleCall`)."""

from __future__ import annotations

from stateway.core.inference import ToolCallDelta
from stateway.core.rounds import _SingleCall


def fragment(index: int, call_id: str | None, arguments: str = "") -> ToolCallDelta:
    return ToolCallDelta(index, call_id, "f" if call_id else None, arguments)


def test_the_first_call_is_kept_whole_and_the_next_dropped() -> None:
    single = _SingleCall()
    kept = [
        single.admits(d)
        for d in (fragment(0, "a"), fragment(0, None, "{}"), fragment(1, "b"), fragment(1, None))
    ]
    assert kept == [True, True, False, False]


def test_a_server_without_indexes_starts_a_call_with_a_new_id() -> None:
    single = _SingleCall()
    kept = [
        single.admits(d)
        for d in (fragment(0, "a"), fragment(0, None, "{"), fragment(0, "b"), fragment(0, None))
    ]
    assert kept == [True, True, False, False]


def test_the_first_calls_own_id_repeated_stays_its() -> None:
    single = _SingleCall()
    kept = [single.admits(d) for d in (fragment(0, "a"), fragment(0, "a", "{}"), fragment(0, "b"))]
    assert kept == [True, True, False]
