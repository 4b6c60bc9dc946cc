"""Anthropic's server-side compaction on the Messages API, over the gateway's own
(:mod:`stateway.core.compaction`).

- A compaction request (``compaction: {"type": "summarize", "instructions"?}``): the
  conversation in ``messages`` followed by a ``compaction_trigger``, so the response's
  whole output is one ``compaction`` item, summarized by the call behind
  ``/v1/responses/compact``: with the request's ``instructions`` as its prompt when they
  are not blank, else :data:`~stateway.core.compaction.prompt.STANDALONE_SUMMARY_PROMPT`
  (the block is sent back in place of the user's messages too). Nothing is sampled after
  it; the answer is that block alone, ``stop_reason: "compaction"`` (:mod:`.encode`,
  :mod:`.stream`). It cannot be combined with ``context_management``; ``/count_tokens``
  ignores it. A request ending on an assistant turn that waits for tool results is
  ``compaction_incomplete_turn``; one with nothing but system text,
  ``compaction_nothing_to_summarize``.
- A ``compaction`` block sent back (:func:`split_block`): it must be the first block of
  the conversation (only ``system`` messages, and blocks without content, before it;
  never in a ``system`` message: ``compaction_block_misplaced``), and only one block may
  have content (``compaction_block_ambiguous``). It becomes a compaction item where it
  stands, which the model sees as its summary (:mod:`stateway.core.compaction.view`);
  its ``signature`` is the summary sealed for the tenant, checked there against its
  ``content`` (``compaction_signature_invalid``, ``compaction_content_mismatch``:
  another tenant's block, or an altered one, is refused). A block whose ``content`` is
  null (a failed compaction) is a no-op wherever it is. Its ``cache_control`` marks the
  summary shown in its place (for an Anthropic upstream, the breakpoint the block's
  would be). ``encrypted_content`` and ``tool_changes`` are taken and ignored: the
  gateway's blocks carry neither (their docstrings: opaque metadata, absent when the
  server did not compute tool changes).

- The ``compact_20260112`` edit of ``context_management`` (:func:`autocompact`, called by
  :mod:`.context_edits`): the
  gateway's ``context_management`` compaction, at the edit's ``trigger``; the answer's
  ``compaction`` block comes first, then the answer from the summary (a prefill still
  ends what it is sampled from), or nothing more with ``pause_after_compaction``
  (``stop_reason: "compaction"``, only then). Either compaction's call is counted apart,
  in ``usage.iterations`` (:func:`.encode.message_usage`).

Each of these errors carries its code as ``error.details.error_code``, from which the SDK
picks its error class (:mod:`.errors`).
"""

from __future__ import annotations

from typing import Any

from stateway.core.commands import CreateResponse
from stateway.core.compaction import sealed
from stateway.core.compaction.prompt import STANDALONE_SUMMARY_PROMPT
from stateway.core.compaction.view import CACHE_CONTROL
from stateway.core.errors import InvalidRequest
from stateway.core.ids import new_id
from stateway.core.items import Item
from stateway.protocols.messages.blocks import Block, CompactionBlock, ToolUseBlock
from stateway.protocols.messages.edit_params import CompactEdit
from stateway.protocols.messages.errors import (
    AMBIGUOUS,
    INCOMPLETE_TURN,
    MISPLACED,
    NOTHING_TO_SUMMARIZE,
    field_error,
)
from stateway.protocols.messages.request import MessageParam, MessagesBody


def check_system(system: list[Any]) -> None:
    """A ``compaction`` block in the top-level ``system`` blocks (raw: its blocks are
    text blocks) is misplaced, not an unknown block."""
    for index, block in enumerate(system):
        if isinstance(block, dict) and block.get("type") == sealed.COMPACTION:
            raise _misplaced(f"system.{index}")


def split_block(messages: list[MessageParam]) -> tuple[list[MessageParam], Item | None]:
    """``messages`` without their ``compaction`` blocks, and the compaction item of the
    one with content, which goes first (after any system messages)."""
    found = [
        (index, position, block)
        for index, message in enumerate(messages)
        if not isinstance(message.content, str)
        for position, block in enumerate(message.content)
        if isinstance(block, CompactionBlock)
    ]
    if not found:
        return messages, None
    given = [(index, position, block) for index, position, block in found if block.content]
    if len(given) > 1:
        index, position, _ = given[1]
        raise field_error(
            f"messages.{index}.content.{position}",
            "more than one `compaction` block has content; send only the block the "
            "conversation returned last.",
            AMBIGUOUS,
        )
    item: Item | None = None
    if given:
        index, position, block = given[0]
        message = messages[index]
        ahead = [] if isinstance(message.content, str) else message.content[:position]
        before = [m for m in messages[:index] if m.role != "system"]
        if message.role == "system" or not _no_ops(ahead) or not all(map(_empty, before)):
            raise _misplaced(f"messages.{index}.content.{position}")
        item = {
            "id": new_id("cmp"),
            "type": sealed.COMPACTION,
            "encrypted_content": block.signature,
            "content": block.content,  # checked against the signature (core)
        }
        if block.cache_control is not None:  # the summary shown in its place carries it
            item[CACHE_CONTROL] = block.cache_control
    kept = [
        message
        if isinstance(message.content, str)
        else message.model_copy(
            update={"content": [b for b in message.content if not isinstance(b, CompactionBlock)]}
        )
        for message in messages
    ]
    return kept, item


def _no_ops(blocks: list[Block]) -> bool:
    """Whether ``blocks`` are all failed compactions (``content`` null), which are no-ops
    wherever they are, so do not stand before a block."""
    return all(isinstance(block, CompactionBlock) and not block.content for block in blocks)


def _empty(message: MessageParam) -> bool:
    """Whether ``message`` holds nothing but failed compactions."""
    return not isinstance(message.content, str) and _no_ops(message.content)


def placed(items: list[Item], item: Item | None) -> list[Item]:
    """``items`` with the compaction ``item`` after their leading system messages."""
    if item is None:
        return items
    at = next((i for i, it in enumerate(items) if it.get("role") != "system"), len(items))
    return [*items[:at], item, *items[at:]]


def check_finished(messages: list[MessageParam]) -> None:
    """A compaction request may not end on an assistant turn waiting for tool results."""
    last = messages[-1] if messages else None
    if last is None or last.role != "assistant" or isinstance(last.content, str):
        return
    if any(isinstance(block, ToolUseBlock) for block in last.content):
        raise field_error(
            f"messages.{len(messages) - 1}",
            "a compaction request cannot end on an unfinished `assistant` turn; send the "
            "`tool_result` blocks of its `tool_use` blocks first.",
            INCOMPLETE_TURN,
        )


def nothing_to_summarize() -> InvalidRequest:
    return field_error(
        "messages",
        "there is nothing to compact: no `user` or `assistant` content, and no `compaction` block.",
        NOTHING_TO_SUMMARIZE,
    )


def request_compaction(command: CreateResponse, body: MessagesBody) -> None:
    """Make ``command`` a compaction request: its output one compaction block."""
    config = body.compaction or {}
    if body.context_management is not None:
        raise field_error("compaction", "cannot be combined with `context_management`.")
    if config.get("type") != "summarize":
        raise field_error("compaction.type", "expected 'summarize'.")
    instructions = config.get("instructions")
    if instructions is not None and not isinstance(instructions, str):
        raise field_error("compaction.instructions", "expected a string.", "invalid_type")
    settings = command.settings
    blank = instructions is None or not instructions.strip()
    settings.summary_prompt = STANDALONE_SUMMARY_PROMPT if blank else instructions
    command.input.append({"type": sealed.COMPACTION_TRIGGER})


def autocompact(command: CreateResponse, edit: CompactEdit) -> None:
    """The ``compact_20260112`` edit of ``context_management`` as the gateway's
    ``context_management`` compaction: past ``trigger.value`` input tokens (by the
    gateway's estimate; without a trigger, its default: 80% of the model's context window,
    when one is known) the response first compacts, its block first, then answers from the
    summary, or stops there (``pause_after_compaction``); ``instructions`` are added to
    the prompt. Its fields were checked with the body (:class:`.edit_params.CompactEdit`)."""
    threshold = edit.trigger.value if edit.trigger is not None else None
    pause = bool(edit.pause_after_compaction)
    entry = {"type": sealed.COMPACTION, "compact_threshold": threshold}
    command.settings.context_management = [entry | {"pause_after_compaction": pause}]
    added = edit.instructions
    if added is not None and added.strip():
        command.settings.summary_prompt = f"{STANDALONE_SUMMARY_PROMPT}\n\n{added}"
    else:
        command.settings.summary_prompt = STANDALONE_SUMMARY_PROMPT


def _misplaced(param: str) -> InvalidRequest:
    return field_error(
        param,
        "a `compaction` block must be the first block of the conversation, and cannot "
        "appear in a system message.",
        MISPLACED,
    )
