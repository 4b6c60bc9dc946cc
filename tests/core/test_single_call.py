"""``parallel_tool_calls: false``: the fragments a round keeps (:class:`_SingleCall`)."""

from __future__ import annotations

import pytest

from stateway.core.inference import ToolCallDelta
from stateway.core.rounds import _SingleCall

Fragment = tuple[int, str | None]
"""A fragment's index and upstream call id (None: a continuation)."""


@pytest.mark.parametrize(
    ("fragments", "kept"),
    [
        # the first call is kept whole, the next dropped whole
        ([(0, "a"), (0, None), (1, "b"), (1, None)], [True, True, False, False]),
        # a server without indexes: a new id at the same index is a new call
        ([(0, "a"), (0, None), (0, "b"), (0, None)], [True, True, False, False]),
        # the first call's own id, repeated, stays its
        ([(0, "a"), (0, "a"), (0, "b")], [True, True, False]),
    ],
)
def test_a_round_keeps_the_fragments_of_its_first_call(
    fragments: list[Fragment], kept: list[bool]
) -> None:
    single = _SingleCall()
    deltas = [
        ToolCallDelta(index, call_id, "f" if call_id else None, "") for index, call_id in fragments
    ]
    assert [single.admits(d) for d in deltas] == kept
