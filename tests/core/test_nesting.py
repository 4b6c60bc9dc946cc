"""How deep free-form JSON may nest: :data:`MAX_NESTING` levels of containers, no more."""

from __future__ import annotations

from typing import Any

from stateway.core.nesting import MAX_NESTING, nests_too_deep


def nested(levels: int, *, leaf: Any = 0) -> Any:
    """``levels`` containers, lists and objects by turns, around ``leaf``."""
    value = leaf
    for level in range(levels):
        value = [value] if level % 2 else {"k": value}
    return value


def test_the_limit_is_counted_in_containers() -> None:
    assert not nests_too_deep(nested(MAX_NESTING))
    assert nests_too_deep(nested(MAX_NESTING + 1))
    assert not nests_too_deep(nested(MAX_NESTING - 1, leaf={}))
    assert nests_too_deep(nested(MAX_NESTING, leaf=[]))


def test_any_branch_too_deep_counts_however_wide_the_value() -> None:
    wide: list[Any] = [{"type": "text", "text": "a"}] * 10_000
    assert not nests_too_deep({"messages": [{"content": wide}]})
    assert nests_too_deep([*wide, nested(MAX_NESTING)])
    assert nests_too_deep({"a": 1, "b": {"c": [nested(MAX_NESTING - 2)]}})
    assert not nests_too_deep({"a": 1, "b": {"c": [nested(MAX_NESTING - 3)]}})


def test_a_value_nested_past_the_recursion_limit_is_judged() -> None:
    assert nests_too_deep(nested(5_000))
