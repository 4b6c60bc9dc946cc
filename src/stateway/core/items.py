"""Canonical items.

Items follow the Open Responses item model (``message``, ``function_call``,
``function_call_output``, ``reasoning``, ...) and are kept as plain JSON objects: they
are what clients send and store, unknown types must travel untouched, and the hot path
should not build a class per item. Protocols validate the shapes they accept at the edge.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any, Final, TypeGuard

from stateway.core.ids import new_id

Item = dict[str, Any]
"""One Open Responses item, JSON-compatible."""

MESSAGE: Final = "message"
FUNCTION_CALL: Final = "function_call"
FUNCTION_CALL_OUTPUT: Final = "function_call_output"
REASONING: Final = "reasoning"
CUSTOM_TOOL_CALL: Final = "custom_tool_call"
CUSTOM_TOOL_CALL_OUTPUT: Final = "custom_tool_call_output"
MCP_LIST_TOOLS: Final = "mcp_list_tools"
MCP_CALL: Final = "mcp_call"
MCP_APPROVAL_REQUEST: Final = "mcp_approval_request"
MCP_APPROVAL_RESPONSE: Final = "mcp_approval_response"
WEB_SEARCH_CALL: Final = "web_search_call"
TOOL_SEARCH_CALL: Final = "tool_search_call"
TOOL_SEARCH_OUTPUT: Final = "tool_search_output"

ID_PREFIXES: Final = {
    MESSAGE: "msg",
    FUNCTION_CALL: "fc",
    FUNCTION_CALL_OUTPUT: "fco",
    REASONING: "rs",
    CUSTOM_TOOL_CALL: "ctc",
    CUSTOM_TOOL_CALL_OUTPUT: "ctco",
    "shell_call": "sh",
    "shell_call_output": "sho",
    "local_shell_call": "lsh",
    "apply_patch_call": "apc",
    "apply_patch_call_output": "apco",
    TOOL_SEARCH_CALL: "tsc",
    TOOL_SEARCH_OUTPUT: "tso",
    MCP_APPROVAL_RESPONSE: "mcpa",
    MCP_APPROVAL_REQUEST: "mcpr",
    MCP_CALL: "mcp",
    MCP_LIST_TOOLS: "mcpl",
    WEB_SEARCH_CALL: "ws",
    "compaction": "cmp",
}
"""The prefix of the ids the gateway gives items, by type: the same wherever it gives
one (a response's output, a conversation's own id for an item it was given)."""

SCREENSHOT_TYPES: Final = frozenset({"input_image", "computer_screenshot"})
"""The types of a ``computer_call_output``'s ``output``: one image, a dict, not a list of
parts."""


def is_screenshot(output: object) -> TypeGuard[dict[str, Any]]:
    """Whether an item's ``output`` is a screenshot (a ``computer_call_output``'s)."""
    return isinstance(output, dict) and output.get("type") in SCREENSHOT_TYPES


ID_IS_REFERENCE: Final = frozenset({"local_shell_call_output"})
"""Item types whose ``id`` names another item (the call a ``local_shell_call_output``
answers, as the spec has it): never replaced by a new id."""


UNMODELLED_PREFIX: Final = "item"
"""The prefix of the ids the gateway gives items of types it does not model."""


def new_item_id(kind: object) -> str:
    """A new gateway id for an item of type ``kind`` (``item_...`` for unmodelled types)."""
    modelled = ID_PREFIXES.get(kind) if isinstance(kind, str) else None
    return new_id(modelled or UNMODELLED_PREFIX)


def announced(item: Item) -> Item:
    """A copy of ``item`` as its ``output_item.added`` shows it: ``in_progress`` when it
    has a ``status``, as every item is announced (hosted, the Open Responses spec), even
    one given whole and done at once, which its ``output_item.done`` then shows as it
    came; a custom tool's call with no ``input`` yet, which its input's events then
    stream (:meth:`~stateway.core.call_items.CallItems.given`)."""
    added = dict(item)
    if "status" in added:
        added["status"] = "in_progress"
    if added.get("type") == CUSTOM_TOOL_CALL:
        added["input"] = ""
    return added


ITEM_BREAK: Final = "\n\n"
"""Between the texts of separate items shown in one field, such as the rounds of a run in
a Chat message's ``content`` or ``reasoning_content``: each is a whole utterance, and
joined without a break their words would run together."""


def joined_items(texts: Iterable[str]) -> str:
    """The texts of separate items as one: the non-empty ones, a blank line between."""
    return ITEM_BREAK.join(text for text in texts if text)


def item_text(item: Item) -> str:
    """The concatenated text of a message or reasoning item's parts."""
    content = item.get("content")
    if isinstance(content, str):
        return content
    if not isinstance(content, list):
        return ""
    return "".join(
        part["text"]
        for part in content
        if isinstance(part, dict) and isinstance(part.get("text"), str)
    )
