"""Context editing: old thinking and tool results cleared from what the model is sent
(Anthropic's ``clear_thinking_20251015`` and ``clear_tool_uses_20250919`` edits of
``context_management``), for any upstream.

The edits (:attr:`~stateway.core.generation_settings.GenerationSettings.context_edits`, checked and
given their defaults by the surface) apply in their order to the context's model view as
the response starts (:meth:`~.service.Compaction.prepare`), so a compaction threshold and
``truncation`` judge what they left; the items themselves are never changed: the client
keeps its whole history, as Anthropic's does. Sizes are the gateway's estimate
(:mod:`stateway.core.token_estimate`), the one compaction thresholds are judged by.

- ``clear_thinking_20251015`` (``keep``: N turns, or None for all): the reasoning items
  of every assistant turn with reasoning but the last N are left out. A turn runs from
  one ``user`` message to the next: the tool results of a tool loop do not end it, so the
  reasoning a loop in progress needs (Anthropic refuses thinking without it) is the last
  turn's and always kept.
- ``clear_tool_uses_20250919``: past its ``trigger`` (input tokens, or tool uses in the
  context) the results of every tool use but the last ``keep`` are replaced by
  :data:`PLACEHOLDER`, the oldest first, but for tools named in ``exclude_tools`` and for
  uses that clearing would not shrink; ``clear_tool_inputs`` (true, or the tools it names)
  also empties the call's arguments (``{}``). A use is a function or custom tool call and
  its output, or an MCP call (its output held in its own item); a call still waiting for
  its output is no use to clear. When the clearing frees fewer than ``clear_at_least``
  tokens, nothing is cleared.

Each edit that cleared something is one entry of :attr:`Cleared.applied`, in the shape of
Anthropic's ``context_management.applied_edits`` (``cleared_thinking_turns`` or
``cleared_tool_uses``, and ``cleared_input_tokens``: the estimated tokens it freed).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, Final

from stateway.core.compaction.truncation import user_message
from stateway.core.immutable import immutable
from stateway.core.items import (
    CUSTOM_TOOL_CALL,
    CUSTOM_TOOL_CALL_OUTPUT,
    FUNCTION_CALL,
    FUNCTION_CALL_OUTPUT,
    MCP_CALL,
    REASONING,
    Item,
)
from stateway.core.token_estimate import estimate_context, item_tokens

CLEAR_THINKING: Final = "clear_thinking_20251015"
CLEAR_TOOL_USES: Final = "clear_tool_uses_20250919"
INPUT_TOKENS: Final = "input_tokens"
TOOL_USES: Final = "tool_uses"
PLACEHOLDER: Final = "[This tool result was cleared to save context.]"
"""What a cleared tool result says in place of its output: that there was one, and that it
is gone (Anthropic documents that it replaces a result with placeholder text, not the
text)."""
_OUTPUTS: Final = frozenset({FUNCTION_CALL_OUTPUT, CUSTOM_TOOL_CALL_OUTPUT})
_CALLS: Final = frozenset({FUNCTION_CALL, CUSTOM_TOOL_CALL})
_INPUT: Final = {
    FUNCTION_CALL: ("arguments", "{}"),
    MCP_CALL: ("arguments", "{}"),
    CUSTOM_TOOL_CALL: ("input", ""),
}
"""Where each kind of call holds what it was called with, and that emptied."""


@immutable
class Cleared:
    """A context with the edits applied, and what each that cleared something cleared."""

    items: list[Item]
    applied: Sequence[dict[str, Any]] = ()

    @property
    def tokens(self) -> int:
        """The estimated input tokens every edit freed together."""
        return sum(entry["cleared_input_tokens"] for entry in self.applied)


def clear(
    instructions: str | None, items: list[Item], tools: list[Item], edits: Sequence[dict[str, Any]]
) -> Cleared:
    """``items`` with ``edits`` applied in order (``instructions`` and ``tools`` count
    toward an ``input_tokens`` trigger); ``items`` itself when no edit cleared anything."""
    applied: list[dict[str, Any]] = []
    for edit in edits:
        items, entry = _EDITS[edit["type"]](instructions, items, tools, edit)
        if entry is not None:
            applied.append(entry)
    return Cleared(items, applied)


def _clear_thinking(
    instructions: str | None, items: list[Item], tools: list[Item], edit: dict[str, Any]
) -> tuple[list[Item], Item | None]:
    keep: int | None = edit["keep"]
    turns = [] if keep is None else _thinking_turns(items)
    cleared = turns[: max(len(turns) - (keep or 0), 0)]
    if not cleared:
        return items, None
    dropped = {index for turn in cleared for index in turn}
    entry = {
        "type": CLEAR_THINKING,
        "cleared_thinking_turns": len(cleared),
        "cleared_input_tokens": sum(item_tokens(items[index]) for index in dropped),
    }
    return [item for index, item in enumerate(items) if index not in dropped], entry


def _thinking_turns(items: list[Item]) -> list[list[int]]:
    """The positions of the reasoning items of each turn that has any, in order."""
    turns: list[list[int]] = [[]]
    for index, item in enumerate(items):
        if user_message(item) and turns[-1]:
            turns.append([])
        elif item.get("type") == REASONING:
            turns[-1].append(index)
    return [turn for turn in turns if turn]


@immutable
class _Use:
    """A tool use: its call's position, its result's (an MCP call's own), its tool."""

    call: int
    result: int
    name: str


def _clear_tool_uses(
    instructions: str | None, items: list[Item], tools: list[Item], edit: dict[str, Any]
) -> tuple[list[Item], Item | None]:
    uses = _tool_uses(items)
    if not _triggered(edit["trigger"], len(uses), instructions, items, tools):
        return items, None
    excluded = frozenset(edit["exclude_tools"])
    inputs = edit["clear_tool_inputs"]
    edited = list(items)
    cleared = tokens = 0
    for use in uses[: max(len(uses) - edit["keep"], 0)]:
        if use.name in excluded:
            continue
        both = inputs is True or (isinstance(inputs, list) and use.name in inputs)
        freed = _clear_use(edited, use, both)
        cleared, tokens = cleared + (freed > 0), tokens + freed
    if not cleared or tokens < edit["clear_at_least"]:
        return items, None
    entry = {"type": CLEAR_TOOL_USES, "cleared_tool_uses": cleared, "cleared_input_tokens": tokens}
    return edited, entry


def _tool_uses(items: list[Item]) -> list[_Use]:
    """Every tool use of ``items`` with its result, in the order of their calls."""
    results = {
        item.get("call_id"): index
        for index, item in enumerate(items)
        if item.get("type") in _OUTPUTS
    }
    uses: list[_Use] = []
    for index, item in enumerate(items):
        kind = item.get("type")
        if kind == MCP_CALL:
            uses.append(_Use(index, index, str(item.get("name"))))
        elif kind in _CALLS and (result := results.get(item.get("call_id"))) is not None:
            uses.append(_Use(index, result, str(item.get("name"))))
    return uses


def _triggered(
    trigger: dict[str, Any],
    uses: int,
    instructions: str | None,
    items: list[Item],
    tools: list[Item],
) -> bool:
    """Whether the context is past ``trigger`` (Anthropic's: once it exceeds the value)."""
    value: int = trigger["value"]
    if trigger["type"] == TOOL_USES:
        return uses > value
    return estimate_context(instructions, items, tools) > value


def _clear_use(items: list[Item], use: _Use, inputs: bool) -> int:
    """Clear ``use`` in ``items`` (its call's input too with ``inputs``) when that frees
    tokens; the estimated tokens freed, 0 when it was left as it was."""
    result = {**items[use.result], "output": PLACEHOLDER}
    changed = {use.result: _without_input(result) if inputs and use.call == use.result else result}
    if inputs and use.call != use.result:
        changed[use.call] = _without_input(items[use.call])
    before = sum(item_tokens(items[index]) for index in changed)
    after = sum(item_tokens(item) for item in changed.values())
    if after >= before:
        return 0
    for index, item in changed.items():
        items[index] = item
    return before - after


def _without_input(call: Item) -> Item:
    key, empty = _INPUT[call["type"]]
    return {**call, key: empty}


_Edit = Callable[
    [str | None, list[Item], list[Item], dict[str, Any]], tuple[list[Item], Item | None]
]
_EDITS: Final[dict[str, _Edit]] = {
    CLEAR_THINKING: _clear_thinking,
    CLEAR_TOOL_USES: _clear_tool_uses,
}
