"""The server tool calls of an assistant turn sent back, as its blocks are read: each
call's block (``server_tool_use``, ``mcp_tool_use``) leaves its call pending, by its
``tool_use_id``, and the result block after it answers it (:func:`answered`)."""

from __future__ import annotations

from stateway.core.items import Item
from stateway.protocols.messages.errors import field_error


def answered(
    pending: dict[str, Item],
    tool_use_id: str,
    wanted: str,
    where: str,
    *,
    block_type: str,
    follows: str = "the block of the call it answers",
) -> Item:
    """The pending call of type ``wanted`` a result block at ``where`` answers, no longer
    pending; a 400 ``tool_call_not_found`` when no such call's block came before it."""
    call = pending.pop(tool_use_id, None)
    if call is None or call["type"] != wanted:
        raise field_error(
            f"{where}.tool_use_id",
            f"unexpected tool_use_id '{tool_use_id}' found in a {block_type} block: "
            f"it must follow {follows}.",
            code="tool_call_not_found",
        )
    return call
