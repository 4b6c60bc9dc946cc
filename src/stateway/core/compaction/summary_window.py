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
  numbers: :data:`ATTEMPTS` calls at most.

Whole turns go first, the oldest first, as ``truncation: "auto"`` drops them
(:mod:`.truncation`); when the last turn alone does not fit (one turn of many tool calls),
its oldest items after the user message that opened it, each call with its outputs.
``system`` and ``developer`` messages always stay, and so does that user message: when even
they do not fit, the call goes as it is and the server decides. What is left out is only
not shown to the summarizer: the compaction stands for the whole context (a Responses
compaction's output keeps every user message besides).
"""

from __future__ import annotations

from stateway.core.compaction.prompt import prompt_message
from stateway.core.compaction.truncation import pinned, truncate, user_message
from stateway.core.errors import UpstreamContextTooLong, UpstreamError
from stateway.core.items import Item
from stateway.core.token_estimate import estimate_context, item_tokens

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
        says fits; False when no item more can be left out."""
        sent = self._fixed + sum(item_tokens(item) for item in self.items)
        target = sent // 2
        if isinstance(refused, UpstreamContextTooLong) and refused.tokens > 0:
            room = refused.window - (refused.requested or 0)
            target = int(sent * SHARE * max(room, 0) / refused.tokens)
        fitted = self._fit(target)
        if len(fitted) >= len(self.items):
            return False
        self.items = fitted
        return True

    def _fit(self, target: int) -> list[Item]:
        budget = target - self._fixed
        kept = truncate(self._view, budget, item_tokens)
        return _within_last_turn(kept, budget)


def _within_last_turn(items: list[Item], budget: int) -> list[Item]:
    """``items`` (older turns already left out) without the oldest items of their last turn
    after its opening user message, each call with its outputs, as few as make them fit
    ``budget``."""
    total = sum(item_tokens(item) for item in items)
    opening = _last_user_message(items)
    if total <= budget or opening is None:
        return items
    dropped: set[int] = set()
    for index in range(opening + 1, len(items)):
        if total <= budget:
            break
        if index in dropped or pinned(items[index]):
            continue
        for member in _unit(items, index):
            dropped.add(member)
            total -= item_tokens(items[member])
    return [item for index, item in enumerate(items) if index not in dropped]


def _last_user_message(items: list[Item]) -> int | None:
    for index in range(len(items) - 1, -1, -1):
        if user_message(items[index]):
            return index
    return None


def _unit(items: list[Item], index: int) -> list[int]:
    """The item at ``index`` and, for a call or a call's output, every item of its
    ``call_id`` (what a model server refuses to see apart)."""
    call_id = items[index].get("call_id")
    if not isinstance(call_id, str):
        return [index]
    return [i for i in range(index, len(items)) if items[i].get("call_id") == call_id]
