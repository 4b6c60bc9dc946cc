"""A summary call fitted to the window of the model asked for it.

A context is compacted because it has grown large, often past the window of the model that
is to summarize it: Codex compacts mid-turn with the tool output that overflowed its
context, and a client calls ``/responses/compact`` once its context no longer fits. Sent
whole, such a call is refused (``context_length_exceeded``) and the compaction with it, so
the summarizer is shown the context less its oldest items, as few as make it fit:

- within :data:`SHARE` of the window, by the gateway's estimate
  (:mod:`stateway.core.token_estimate`), when the candidate's window is known (configured,
  or learned from its server); the rest is the summary's room, and the estimate's margin;
- when the server refuses it all the same (its tokenizer counts more than the estimate, or
  no window is known), within :data:`SHARE` of what its refusal says fits (its window, less
  the output it was asked for, over the tokens it counted), or of half when it says no
  numbers (or counted the prompt only part of the way, as vLLM's ``at least``):
  :data:`ATTEMPTS` calls at most.

Whole turns go first, the oldest first, as ``truncation: "auto"`` drops them
(:mod:`.truncation`); when the last turn alone does not fit (one turn of many tool calls),
its oldest items after the user message that opened it, each call with its outputs.
``system`` and ``developer`` messages always stay, and so does that user message.

One item can be too large for the call alone (a tool's output of a whole file, a log
pasted into a user message): left out, the summary would lose even its gist, and one that
always stays could never fit. It is shown instead as its excerpt (:mod:`.excerpt`: its
texts' heads and tails, a marker between them saying how much was left out), sized to
what the items newer than it leave: the turn or call holding it is where the leaving out
stops, and a ``system``, ``developer`` or opening user message too large alone counts at
its shortest excerpt meanwhile, then takes what is left. When even the shortest do not
fit, the call goes as it is and the server decides.

What is left out or cut is only not shown to the summarizer: the compaction stands for the
whole context (a Responses compaction's output keeps every user message besides), and the
items stored, and the client's, are never changed.
"""

from __future__ import annotations

from stateway.core.compaction.excerpt import excerpt, least_tokens
from stateway.core.compaction.prompt import prompt_message
from stateway.core.compaction.truncation import pinned, turns, user_message
from stateway.core.errors import UpstreamContextTooLong, UpstreamError
from stateway.core.items import Item
from stateway.core.token_estimate import BYTES_PER_TOKEN, estimate_context, item_tokens

SHARE = 0.8
"""Of a window, what a summary call's input may fill: the rest is for the summary (as a
``context_management`` compaction triggers at 80% of the window by default)."""
ATTEMPTS = 4
"""Summary calls at most, the first included, while the server refuses them as too long."""


class SummaryWindow:
    """What a summary call shows of a context's model view: fitted to a window when one is
    known, then smaller each time the server refuses it (:meth:`shrink`)."""

    __slots__ = ("_fixed", "_view", "items")

    def __init__(
        self, instructions: str | None, view: list[Item], prompt: str, window: int | None
    ) -> None:
        self._view = view
        self._fixed = estimate_context(instructions, [prompt_message(prompt)], [])
        """The tokens of what is always sent: the instructions and the prompt."""
        self.items = view if window is None else self._fit(int(window * SHARE))

    def shrink(self, refused: UpstreamError) -> bool:
        """Fit :attr:`items` to what ``refused`` (the server's refusal of them as too long)
        says fits; False when they can be made no smaller."""
        shown = _tokens(self.items)
        sent = self._fixed + shown
        target = sent // 2
        if (
            isinstance(refused, UpstreamContextTooLong)
            and refused.tokens > 0
            and not refused.at_least  # counted only part of the way: no measure of it
        ):
            room = refused.window - (refused.requested or 0)
            target = int(sent * SHARE * max(room, 0) / refused.tokens)
        fitted = self._fit(target)
        if _tokens(fitted) >= shown:
            return False
        self.items = fitted
        return True

    def _fit(self, target: int) -> list[Item]:
        separators = -(-len(self._view) // BYTES_PER_TOKEN)  # a comma after each item
        return _fitted(self._view, target - self._fixed - separators)


def _fitted(view: list[Item], budget: int) -> list[Item]:
    """``view`` within ``budget``: its oldest units left out (:func:`_units`) until the
    rest fits, but the one holding an item too large for ``budget`` alone, whose such items
    are cut instead, to what the rest leaves them; the items never left out that are too
    large alone, counted meanwhile at their shortest excerpts, are cut last, to share what
    is left."""
    sizes = [item_tokens(item) for item in view]
    if sum(sizes) <= budget:
        return view
    opening = _last_user_message(view)
    floors = _floors(view, sizes, opening, budget)
    total = sum(sizes) - sum(sizes[index] - least for index, least in floors.items())
    dropped: set[int] = set()
    cut: dict[int, Item] = {}
    for unit in _units(view, opening):
        if total <= budget:
            break
        large = [index for index in unit if sizes[index] > budget]
        rest = total - sum(sizes[index] for index in large)
        excerpts = _excerpts(view, large, budget - rest)
        if excerpts is not None:
            cut, total = excerpts, budget
            break
        dropped.update(unit)
        total -= sum(sizes[index] for index in unit)
    if floors:
        rest = total - sum(floors.values())
        cut |= _excerpts(view, list(floors), max(budget - rest, sum(floors.values()))) or {}
    return [cut.get(index, item) for index, item in enumerate(view) if index not in dropped]


def _floors(view: list[Item], sizes: list[int], opening: int | None, budget: int) -> dict[int, int]:
    """The items never left out (``system`` and ``developer`` messages, the ``opening``
    user message) too large for ``budget`` alone that can be cut, and the estimated tokens
    of their shortest excerpts."""
    large = [
        index
        for index, item in enumerate(view)
        if (index == opening or pinned(item)) and sizes[index] > budget
    ]
    return {index: least for index in large if (least := least_tokens(view[index])) is not None}


def _units(view: list[Item], opening: int | None) -> list[list[int]]:
    """What may be left out of ``view``, oldest first: each turn before the last, then each
    item of the last after the user message that opens it (``opening``), a call with its
    outputs; never a ``system`` or ``developer`` message, nor that user message. Nothing
    when no user message opens a turn."""
    if opening is None:
        return []
    units = [[i for i in turn if not pinned(view[i])] for turn in turns(view[:opening])]
    calls: dict[str, list[int]] = {}  # each call's unit, grown as its items come
    for index in range(opening + 1, len(view)):
        call_id = view[index].get("call_id")
        if isinstance(call_id, str) and call_id in calls:
            calls[call_id].append(index)
        elif not pinned(view[index]):
            units.append([index])
            if isinstance(call_id, str):
                calls[call_id] = units[-1]
    return [unit for unit in units if unit]


def _excerpts(view: list[Item], large: list[int], room: int) -> dict[int, Item] | None:
    """The items of ``view`` at ``large`` cut to share ``room``, each its shortest excerpt
    and an equal part of the rest; None when there are none, one cannot be cut, or
    ``room`` holds less than their shortest excerpts."""
    floors = [least_tokens(view[index]) for index in large]
    if not large or None in floors:
        return None
    spare = room - sum(floor or 0 for floor in floors)
    if spare < 0:
        return None
    cut = {
        index: excerpt(view[index], (floor or 0) + spare // len(large))
        for index, floor in zip(large, floors, strict=True)
    }
    return {index: item for index, item in cut.items() if item is not None}


def _tokens(items: list[Item]) -> int:
    return sum(item_tokens(item) for item in items)


def _last_user_message(items: list[Item]) -> int | None:
    for index in range(len(items) - 1, -1, -1):
        if user_message(items[index]):
            return index
    return None
