"""``truncation: "auto"``: drop the oldest turns until the context fits its window.

A turn is a ``user`` message and everything up to the next one (items before the first
user message belong to the first turn), so a call never loses its output and the
context still opens with a user turn, as chat templates expect. ``system`` and
``developer`` messages and ``additional_tools`` items are never dropped, nor is the last
turn (the one being answered): when even they do not fit, the context goes as it is and
the upstream decides. Sizes are the gateway's estimate
(:mod:`stateway.core.token_estimate`).

A route whose candidates declare different windows has its context fitted to the window
of each candidate a round tries (:class:`Fitted`), not to the smallest: what one candidate
cannot take, another may be sent whole.
"""

from __future__ import annotations

from collections.abc import Callable

from stateway.core.items import MESSAGE, Item
from stateway.core.routing import Candidate
from stateway.core.token_estimate import item_tokens
from stateway.core.tools.tool_types import ADDITIONAL_TOOLS

_PINNED_ROLES = frozenset({"system", "developer"})


def truncate(items: list[Item], budget: int, size: Callable[[Item], int]) -> list[Item]:
    """``items`` without their oldest turns, as few dropped as make it fit ``budget``."""
    total = sum(size(item) for item in items)
    if total <= budget:
        return items
    dropped: set[int] = set()
    for turn in turns(items)[:-1]:
        if total <= budget:
            break
        for index in turn:
            if not pinned(items[index]):
                dropped.add(index)
                total -= size(items[index])
    return [item for index, item in enumerate(items) if index not in dropped]


class Fitted:
    """A context fitted to each candidate's window as it is tried: each window's fit made
    once, the first time a candidate with it is tried; a candidate declaring no window is
    sent the view whole."""

    __slots__ = ("_fits", "_reserve", "_view")

    def __init__(self, view: list[Item], reserve: int) -> None:
        """``reserve``: the tokens of a window the view may not take (the output allowance,
        the instructions and tools)."""
        self._view = view
        self._reserve = reserve
        self._fits: dict[int, list[Item]] = {}

    def items(self, candidate: Candidate, *, output: list[Item]) -> list[Item]:
        """What a round sends ``candidate``: the view fitted to its window, then
        ``output``."""
        return self.fit(candidate.context_window) + output

    def fit(self, window: int | None) -> list[Item]:
        """The view within ``window``, less the reserve (whole when no window is known)."""
        if window is None:
            return self._view
        fitted = self._fits.get(window)
        if fitted is None:
            fitted = truncate(self._view, window - self._reserve, item_tokens)
            self._fits[window] = fitted
        return fitted


def turns(items: list[Item]) -> list[list[int]]:
    """Item positions grouped into turns, each opening at a user message."""
    turns: list[list[int]] = [[]]
    for index, item in enumerate(items):
        if user_message(item) and any(not pinned(items[i]) for i in turns[-1]):
            turns.append([])
        turns[-1].append(index)
    return turns


def user_message(item: Item) -> bool:
    """Whether ``item`` is a ``user`` message: one that opens a turn."""
    return item.get("type") == MESSAGE and item.get("role") == "user"


def pinned(item: Item) -> bool:
    """Never left out of a context to fit it: a ``system`` or ``developer`` message, an
    ``additional_tools`` item."""
    return (item.get("type") == MESSAGE and item.get("role") in _PINNED_ROLES) or item.get(
        "type"
    ) == ADDITIONAL_TOOLS
