"""Valid request bodies with one to three of their values replaced, anywhere in them, by
a value of another type or a wrong one: the fuzzing that finds a field checked only by
its place in the union of shapes (a ``type`` that is a list, a ``text`` that is an
object, deep in an input item), which bodies drawn from scratch seldom reach."""

from __future__ import annotations

import copy
from typing import Any

from hypothesis import strategies as st

Path = tuple[str | int, ...]

WRONG = st.one_of(
    st.none(),
    st.booleans(),
    st.sampled_from([0, -1, 1.5, 2**70, -(2**70), 1e308, "", "x", "\u0000", " "]),
    st.sampled_from([[], {}, [None], ["x"], {"type": None}, {"type": "x"}, [{}], [[]]]),
    st.sampled_from([{"a": {"b": []}}, [{"type": "text", "text": 1}], {"type": ["x"]}]),
)
"""What a value is replaced by: every JSON type, the empty ones, nested ones, odd ones."""


def _paths(value: Any, prefix: Path = ()) -> list[Path]:
    found = [prefix]
    if isinstance(value, dict):
        for key, child in value.items():
            found += _paths(child, (*prefix, key))
    elif isinstance(value, list):
        for index, child in enumerate(value):
            found += _paths(child, (*prefix, index))
    return found


@st.composite
def mutated(draw: st.DrawFn, seeds: list[dict[str, Any]]) -> dict[str, Any]:
    """One of ``seeds``, with one to three values (not the body itself) replaced by one of
    :data:`WRONG`, or removed."""
    body = copy.deepcopy(draw(st.sampled_from(seeds)))
    for _ in range(draw(st.integers(1, 3))):
        paths = _paths(body)[1:]
        if not paths:
            break
        path = draw(st.sampled_from(paths))
        parent: Any = body
        for step in path[:-1]:
            parent = parent[step]
        key = path[-1]
        if draw(st.integers(0, 4)) == 0:
            del parent[key]
        else:
            parent[key] = copy.deepcopy(draw(WRONG))  # never one object in two places
    return body
