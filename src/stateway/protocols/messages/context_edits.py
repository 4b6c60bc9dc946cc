"""``context_management`` on the Messages API: Anthropic's context editing, applied by the
gateway for every upstream (:mod:`stateway.core.compaction.clearing`).

- ``clear_thinking_20251015`` (``keep``: ``{"type": "thinking_turns", "value": N}``, or
  ``"all"`` / ``{"type": "all"}``; without it, one turn: the default Anthropic documents
  for the models that do not keep every turn's thinking) and ``clear_tool_uses_20250919``
  (``trigger``: ``input_tokens`` or ``tool_uses``, 100,000 input tokens without it;
  ``keep``: 3 tool uses without it; ``clear_at_least``; ``exclude_tools``;
  ``clear_tool_inputs``, true or the tools' names) become the core's edits
  (:attr:`~stateway.core.generation_settings.GenerationSettings.context_edits`), every field given.
  Their fields are checked as the body is (:mod:`.edit_params`, worded by :mod:`.validation`:
  an unknown trigger type names its ``type``, with the tags expected; an edit of a type
  not served is accepted without effect: :class:`~.edit_params.OtherEdit`); thinking
  clearing needs ``thinking`` enabled or adaptive and must be the first edit when there are
  more, as Anthropic refuses it otherwise (in its words for the first).
- ``compact_20260112``: the gateway's compaction (:func:`.compaction.autocompact`); a
  count compacts nothing, but refuses a bad one as a message does (its fields are checked
  with the body, as the others').

The answer says what was cleared, as Anthropic's does, when the request asked for a
clearing edit: ``context_management.applied_edits`` on the message (:mod:`.encode`) or on
a stream's last ``message_delta`` (:mod:`.stream`), one entry per edit that cleared
something (none when the context was under every trigger); ``count_tokens`` counts what
the edits left and gives the count before them as ``context_management.
original_input_tokens`` (what was counted, and the estimate of what the edits took out).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Final

from stateway.core.commands import CreateResponse
from stateway.core.compaction.clearing import CLEAR_THINKING, CLEAR_TOOL_USES, INPUT_TOKENS
from stateway.core.errors import InvalidRequest
from stateway.core.response import ResponseState
from stateway.core.results import TokenCount
from stateway.protocols.messages import compaction
from stateway.protocols.messages.edit_params import (
    ClearThinkingEdit,
    ClearToolUsesEdit,
    CompactEdit,
    ThinkingTurns,
)
from stateway.protocols.messages.errors import field_error
from stateway.protocols.messages.request import CountTokensBody

DEFAULT_TRIGGER: Final = 100_000
"""Input tokens past which tool results are cleared, unless the edit says (Anthropic's)."""
DEFAULT_KEPT_USES: Final = 3
DEFAULT_KEPT_TURNS: Final = 1
_THINKING: Final = frozenset({"enabled", "adaptive"})


def decode_context_management(
    command: CreateResponse, body: CountTokensBody, *, compacts: bool = True
) -> None:
    """Set ``command``'s edits from ``body.context_management``; ``compacts``: an
    autocompact edit is the gateway's compaction (not for a count)."""
    edits = body.context_management.edits if body.context_management is not None else None
    clearing: list[dict[str, Any]] = []
    compacted = False
    for index, edit in enumerate(edits or ()):
        where = f"context_management.edits.{index}"
        match edit:
            case ClearThinkingEdit():
                _check_thinking(body, index, where)
                clearing.append(_thinking_edit(edit))
            case ClearToolUsesEdit():
                clearing.append(_tool_edit(edit))
            case CompactEdit() if compacts and not compacted:
                compaction.autocompact(command, edit)
                compacted = True
    command.settings.context_edits = clearing


def _check_thinking(body: CountTokensBody, index: int, where: str) -> None:
    thinking = body.thinking.type if body.thinking is not None else None
    if thinking not in _THINKING:
        raise InvalidRequest(
            f"`{CLEAR_THINKING}` strategy requires `thinking` to be enabled or adaptive",
            param="context_management",
        )
    if index > 0:
        raise field_error(
            where,
            f"`{CLEAR_THINKING}` must be the first edit in `edits` when combined with "
            "other strategies.",
        )


def _thinking_edit(edit: ClearThinkingEdit) -> dict[str, Any]:
    keep = edit.keep
    if keep is None:
        return {"type": CLEAR_THINKING, "keep": DEFAULT_KEPT_TURNS}
    return {"type": CLEAR_THINKING, "keep": keep.value if isinstance(keep, ThinkingTurns) else None}


def _tool_edit(edit: ClearToolUsesEdit) -> dict[str, Any]:
    trigger = edit.trigger
    return {
        "type": CLEAR_TOOL_USES,
        "trigger": {"type": INPUT_TOKENS, "value": DEFAULT_TRIGGER}
        if trigger is None
        else {"type": trigger.type, "value": trigger.value},
        "keep": DEFAULT_KEPT_USES if edit.keep is None else edit.keep.value,
        "clear_at_least": 0 if edit.clear_at_least is None else edit.clear_at_least.value,
        "exclude_tools": list(edit.exclude_tools or ()),
        "clear_tool_inputs": edit.clear_tool_inputs or False,
    }


def applied_edits(state: ResponseState) -> dict[str, Any]:
    """The answer's ``context_management`` field (a message's, a stream's last
    ``message_delta``'s), when the request asked for a clearing edit."""
    if not state.settings.context_edits:
        return {}
    return {"context_management": {"applied_edits": state.applied_edits}}


def encode_token_count(counted: TokenCount, edits: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """``count_tokens``' answer: the count, and with clearing ``edits`` the count before
    them."""
    answer: dict[str, Any] = {"input_tokens": counted.input_tokens}
    if edits:
        original = counted.input_tokens + counted.cleared
        answer["context_management"] = {"original_input_tokens": original}
    return answer
