from __future__ import annotations

import itertools
from typing import Any

from stateway.core.compaction.truncation import truncate

_numbers = itertools.count()


def item(kind: str, role: str | None = None, size: int = 10) -> dict[str, Any]:
    out: dict[str, Any] = {"type": kind, "size": size, "n": next(_numbers)}
    if role:
        out["role"] = role
    return out


def size(entry: dict[str, Any]) -> int:
    return int(entry["size"])


def positions(items: list[dict[str, Any]], entry: dict[str, Any]) -> int:
    return next(i for i, candidate in enumerate(items) if candidate is entry)


def test_fitting_context_is_untouched() -> None:
    items = [item("message", "user"), item("message", "assistant")]
    assert truncate(items, 20, size) is items


def test_oldest_turns_go_whole_pinned_items_and_the_last_turn_stay() -> None:
    items = [
        item("message", "system", 5),  # 0
        item("message", "user"),  # 1 turn one
        item("function_call"),  # 2
        item("function_call_output"),  # 3
        item("message", "developer", 5),  # 4 pinned, inside turn one
        item("message", "user"),  # 5 turn two
        item("message", "assistant"),  # 6
        item("message", "user"),  # 7 last turn
        item("reasoning"),  # 8
    ]
    kept = truncate(items, 50, size)
    assert [positions(items, entry) for entry in kept] == [0, 4, 5, 6, 7, 8]
    assert [positions(items, entry) for entry in truncate(items, 30, size)] == [0, 4, 7, 8]


def test_when_even_the_last_turn_does_not_fit_it_goes_as_it_is() -> None:
    items = [item("message", "user"), item("message", "user", 100)]
    assert truncate(items, 5, size) == [items[1]]


def test_leading_items_before_any_user_message_belong_to_the_first_turn() -> None:
    items = [
        item("message", "assistant"),
        item("additional_tools"),
        item("message", "user"),
        item("message", "user"),
    ]
    kept = truncate(items, 25, size)
    assert kept == [items[1], items[3]]
