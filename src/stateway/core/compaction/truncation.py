"""``truncation: "auto"``: drop the oldest turns until the context fits its window.

A turn is a ``user`` message and everything up to the next one (items before the first
user message belong to the first turn), so a call never loses its output and the
context still opens with a user turn, as chat templates expect. ``system`` and
``developer`` messages and ``additional_tools`` items are never dropped, nor is the last
turn (the one being answered): when even they do not fit, the context goes as it is and
the upstream decides. Sizes are the gateway's estimate
(:mod:`stateway.core.token_estimate`).
"""

from __future__ import annotations

from collections.abc import Callable

from stateway.core.items import MESSAGE, Item
from stateway.core.tools.catalog import ADDITIONAL_TOOLS

_PINNED_ROLES = frozenset({"system", "developer"})


def truncate(items: list[Item], budget: int, size: Callable[[Item], int]) -> list[Item]:
    """``items`` without their oldest turns, as few dropped as make it fit ``budget``."""
    total = sum(size(item) for item in items)
    if total <= budget:
        return items
    turns = _turns(items)
    dropped: set[int] = set()
    for turn in turns[:-1]:
        if total <= budget:
            break
        for index in turn:
            if not _pinned(items[index]):
                dropped.add(index)
                total -= size(items[index])
    return [item for index, item in enumerate(items) if index not in dropped]


def _turns(items: list[Item]) -> list[list[int]]:
    """Item positions grouped into turns, each opening at a user message."""
    turns: list[list[int]] = [[]]
    for index, item in enumerate(items):
        if _user_message(item) and any(not _pinned(items[i]) for i in turns[-1]):
            turns.append([])
        turns[-1].append(index)
    return turns


def _user_message(item: Item) -> bool:
    return item.get("type") == MESSAGE and item.get("role") == "user"


def _pinned(item: Item) -> bool:
    return (item.get("type") == MESSAGE and item.get("role") in _PINNED_ROLES) or item.get(
        "type"
    ) == ADDITIONAL_TOOLS
