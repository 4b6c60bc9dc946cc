"""Messages turns, as Anthropic reads a conversation: a run of consecutive user (or
assistant) messages is one turn (a ``role: "system"`` message is one of its own), and the
turn after one with ``tool_use`` blocks is a user turn that begins with a ``tool_result``
for each of them (400s in Anthropic's words, naming the message). Calls split over
assistant messages, and their results over user messages, pair up as in one message.
:mod:`.content` decodes the messages and checks each turn here as it begins.
"""

from __future__ import annotations

from collections.abc import Sequence
from itertools import islice

from stateway.core.errors import InvalidRequest
from stateway.protocols.messages.blocks import Block, ToolResultBlock
from stateway.protocols.messages.errors import field_error
from stateway.protocols.messages.request import MessageParam


def thread_calls(messages: list[MessageParam]) -> dict[str, str | None]:
    """The calls of a thread's earlier turn that the first turn's leading results answer,
    as if an earlier message of this request had made them."""
    calls: dict[str, str | None] = {}
    for block in turn_blocks(messages, 0) if messages else ():
        if not isinstance(block, ToolResultBlock):
            break
        calls[block.tool_use_id] = "thread"
    return calls


def continues_turn(messages: list[MessageParam], index: int) -> bool:
    """Whether the message at ``index`` goes on the turn of the one before: Anthropic takes
    consecutive user (or assistant) messages as one turn; a system message is one of its
    own."""
    role = messages[index].role
    return index > 0 and role != "system" and messages[index - 1].role == role


def turn_blocks(messages: list[MessageParam], start: int) -> list[Block | None]:
    """The blocks of the user turn that begins at ``start`` (None for a string content,
    which holds no result), its messages' in order; none for another role's turn."""
    if messages[start].role != "user":
        return []
    blocks: list[Block | None] = []
    for message in islice(messages, start, None):
        if message.role != "user":
            break
        blocks += [None] if isinstance(message.content, str) else message.content
    return blocks


def check_results_first(
    awaited: list[str], blocks: Sequence[Block | None], where: str, asked: str
) -> None:
    """As Anthropic checks it: the turn after one with ``tool_use`` blocks (``asked``,
    their ids ``awaited``) is a user turn (its ``blocks``, from the message ``where``)
    that begins with a ``tool_result`` for each of them (a Chat upstream could not take
    them later either: its tool messages follow their call)."""
    if not awaited:
        return
    leading = 0
    while leading < len(blocks) and isinstance(blocks[leading], ToolResultBlock):
        leading += 1
    answered = {b.tool_use_id for b in blocks[:leading] if isinstance(b, ToolResultBlock)}
    missing = [call for call in awaited if call not in answered]
    if not missing:
        return
    later = {b.tool_use_id for b in blocks[leading:] if isinstance(b, ToolResultBlock)}
    if later & set(missing):
        raise field_error(
            f"{where}.content.0",
            f"Did not find {len(missing)} `tool_result` block(s) at the beginning of this "
            "message. Messages following `tool_use` blocks must begin with a matching number "
            "of `tool_result` blocks.",
            "tool_output_missing",
        )
    raise unanswered(asked, missing)


def unanswered(where: str, calls: list[str]) -> InvalidRequest:
    return field_error(
        where,
        f"`tool_use` ids were found without `tool_result` blocks immediately after: "
        f"{', '.join(calls)}. Each `tool_use` block must have a corresponding `tool_result` "
        "block in the next message.",
        "tool_output_missing",
    )
