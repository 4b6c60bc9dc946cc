"""Anthropic's tool search server tool over the gateway's own tool search.

In: ``tool_search_tool_regex_YYYYMMDD`` / ``tool_search_tool_bm25_YYYYMMDD`` (or undated)
becomes the gateway's ``tool_search`` tool (``execution: "server"``) with the variant's
query ``syntax`` (:mod:`stateway.core.tools.search_syntax`): the tools declared with
``defer_loading`` are held back until a search loads them, for any model.

Out: each search is a pair of blocks, as Anthropic answers —
``server_tool_use`` (``srvtoolu_`` id, the variant's ``name``, ``input.query``) and
``tool_search_tool_result`` whose ``content`` is a ``tool_search_tool_search_result``
(a ``tool_reference`` per tool loaded) or, for a search that failed, a
``tool_search_tool_result_error`` (``invalid_tool_input`` for a bad or too long pattern or
no query, ``execution_time_exceeded`` for a pattern too slow to match, ``unavailable``;
and why as ``error_message``).

In again: the same blocks of an earlier turn are the search they show, and what its
``tool_reference`` blocks name is loaded: offered to the model from there on
(:func:`resolve` finds each among the declared tools, or the MCP servers' tools; one
that names none of them is a 400).
"""

from __future__ import annotations

from collections.abc import Collection
from typing import Any, Final

from stateway.core.ids import new_id
from stateway.core.items import TOOL_SEARCH_CALL, TOOL_SEARCH_OUTPUT, Item
from stateway.core.tools.model_names import model_name
from stateway.core.tools.search_output import loaded_mcp
from stateway.core.tools.tool_types import NAMESPACE, TOOL_SEARCH
from stateway.protocols.messages.answered_calls import answered
from stateway.protocols.messages.blocks import (
    ServerToolUseBlock,
    ToolReferenceBlock,
    ToolResultBlock,
    ToolSearchToolResultBlock,
)
from stateway.protocols.messages.errors import field_error
from stateway.protocols.messages.tool_params import TOOL_SEARCH_TOOL, ToolSearchToolParam

SERVER_TOOL_USE_PREFIX: Final = "srvtoolu_"
NAMES: Final = {"tool_search_tool_regex": "regex", "tool_search_tool_bm25": "bm25"}
"""Each variant's tool name -> the query syntax of the gateway's search."""
INVALID_INPUT: Final = "invalid_tool_input"
ERROR_CODES: Final = frozenset(
    {INVALID_INPUT, "unavailable", "too_many_requests", "execution_time_exceeded"}
)
"""A failed search's codes (the SDK's ``BetaToolSearchToolResultErrorObject``)."""
_REFERENCE: Final = "_reference"
"""A sent-back reference's place in the body, until :func:`resolve` replaces it."""
_LENIENT: Final = "_lenient"
"""The same, of a ``tool_result``'s reference (:func:`referenced`): one naming no declared
tool loads nothing, and none loads anything without the tool search server tool."""


# -- in: the declaration ---------------------------------------------------------------


def declared(tool: ToolSearchToolParam) -> Item:
    """The tool search server tool as the gateway's ``tool_search`` tool."""
    found = TOOL_SEARCH_TOOL.fullmatch(tool.type)
    name = found[1] if found is not None else tool.type
    return {"type": TOOL_SEARCH, "execution": "server", "syntax": NAMES[name]}


def shown_name(tools: list[Item]) -> str | None:
    """The variant's tool name when the client declared the tool search server tool."""
    for tool in tools:
        if tool.get("type") == TOOL_SEARCH and tool.get("syntax") in NAMES.values():
            return f"tool_search_tool_{tool['syntax']}"
    return None


def is_search_item(item: Item) -> bool:
    """A gateway search's call or output."""
    return item.get("type") in (TOOL_SEARCH_CALL, TOOL_SEARCH_OUTPUT) and (
        item.get("execution") == "server"
    )


# -- out: blocks -----------------------------------------------------------------------


def block(item: Item, name: str) -> dict[str, Any]:
    """A search's call as its ``server_tool_use`` block, or its output as its
    ``tool_search_tool_result``."""
    if item.get("type") == TOOL_SEARCH_CALL:
        arguments = item.get("arguments")
        return {
            "type": "server_tool_use",
            "id": SERVER_TOOL_USE_PREFIX + str(item.get("id", "")).removeprefix("tsc_"),
            "name": name,
            "input": arguments if isinstance(arguments, dict) else {"query": str(arguments)},
        }
    content: dict[str, Any]
    if item.get("status") == "incomplete":
        code, message = error_parts(item.get("error"))
        content = {
            "type": "tool_search_tool_result_error",
            "error_code": code,
            "error_message": message,
        }
    else:
        names = [n for tool in item.get("tools") or () for n in _names(tool)]
        content = {
            "type": "tool_search_tool_search_result",
            "tool_references": [{"type": "tool_reference", "tool_name": n} for n in names],
        }
    return {
        "type": "tool_search_tool_result",
        "tool_use_id": SERVER_TOOL_USE_PREFIX + str(item.get("id", "")).removeprefix("tso_"),
        "content": content,
    }


def error_parts(error: object) -> tuple[str, str | None]:
    """A failed search's code and message, from its output's ``error``: the code it
    starts with (:func:`stateway.core.tools.tool_search.error_of`; a client's sent back
    is the code alone, or ``code: message``), else ``invalid_tool_input`` (a search
    without a query)."""
    if not isinstance(error, str):
        return INVALID_INPUT, None
    code, _, message = error.partition(": ")
    if code in ERROR_CODES:
        return code, message or None
    return INVALID_INPUT, error


def _names(tool: Any) -> list[str]:
    """What references a loaded tool: an MCP server's tools by their own names, as the
    connector's ``mcp_tool_use`` blocks name them."""
    if not isinstance(tool, dict):
        return []
    if tool.get("type") == NAMESPACE:
        return [model_name(str(m.get("name")), tool.get("name")) for m in tool.get("tools") or ()]
    if tool.get("type") == "mcp":
        return [n for names in loaded_mcp([tool]).values() for n in names or ()]
    return [str(tool.get("name"))]


# -- in: an earlier turn's blocks ------------------------------------------------------


def call_of(block: ServerToolUseBlock, pending: dict[str, Item]) -> Item:
    """The search an earlier turn's ``server_tool_use`` of the tool search showed."""
    item: Item = {
        "id": "tsc_" + block.id.removeprefix(SERVER_TOOL_USE_PREFIX),
        "type": TOOL_SEARCH_CALL,
        "status": "completed",
        "call_id": None,
        "execution": "server",
        "arguments": block.input,
    }
    pending[block.id] = item
    return item


def output_of(block: ToolSearchToolResultBlock, where: str, pending: dict[str, Item]) -> Item:
    """The output of the search a ``tool_search_tool_result`` answers (it must follow its
    call's block): its references, resolved once the declared tools are known
    (:func:`resolve`), or its error."""
    answered(
        pending,
        block.tool_use_id,
        TOOL_SEARCH_CALL,
        where,
        block_type=block.type,
        follows="the server_tool_use block of the search it answers",
    )
    item: Item = {
        "id": "tso_" + block.tool_use_id.removeprefix(SERVER_TOOL_USE_PREFIX),
        "type": TOOL_SEARCH_OUTPUT,
        "status": "completed",
        "call_id": None,
        "execution": "server",
        "tools": [],
    }
    content = block.content
    if content.type == "tool_search_tool_result_error":
        item["status"] = "incomplete"
        message = content.error_message
        item["error"] = f"{content.error_code}: {message}" if message else content.error_code
        return item
    at = f"{where}.content.tool_references"
    item["tools"] = [
        {"type": "function", "name": reference.tool_name, _REFERENCE: f"{at}.{position}"}
        for position, reference in enumerate(content.tool_references)
    ]
    return item


def referenced(block: ToolResultBlock, where: str) -> list[Item]:
    """What a ``tool_result``'s ``tool_reference`` blocks load (a client's own search,
    Claude Code's ToolSearch): a search's output after it, which no call shows (the model
    reads the result's ``Tool loaded: NAME``); none without references. A reference to no
    declared tool loads nothing (:func:`resolve`), as before the tool search was run."""
    if not isinstance(block.content, list):
        return []
    names = [part.tool_name for part in block.content if isinstance(part, ToolReferenceBlock)]
    if not names:
        return []
    return [
        {
            "id": new_id("tso"),
            "type": TOOL_SEARCH_OUTPUT,
            "status": "completed",
            "call_id": None,
            "execution": "server",
            "tools": [{"type": "function", "name": name, _LENIENT: where} for name in names],
        }
    ]


def resolve(
    items: list[Item],
    tools: list[Item],
    *,
    inherited: bool = False,
    defined: Collection[str] = (),
) -> None:
    """Each sent-back ``tool_reference`` (in place) as the declared tool it names, which
    the search's output then loads; one naming no declared tool is a 400, as Anthropic's
    ("has no corresponding tool definition"), unless the request ``defined`` it where a
    later ``tool_removal`` withdrew it: that one loads nothing (the removal stands).
    Beside the MCP connector's servers, a reference naming no declared tool may name one
    of theirs, which are known only once listed: it loads that tool of whichever deferred
    server has it (:meth:`~stateway.core.tools.catalog.Catalog.load_mcp`), none when none
    does (a server not deferred offers its tools anyway).
    ``inherited``: a thread's turn without
    ``tools``, whose tools the core knows: its references are left out (the thread's own
    stored outputs load what its searches found). A ``tool_result``'s references
    (:func:`referenced`) load what they name only beside the tool search server tool (the
    deferred tools are offered anyway without it): else their output is left out."""
    declared = {str(tool.get("name")): tool for tool in tools if tool.get("type") == "function"}
    connector = [tool for tool in tools if tool.get("type") == "mcp"]
    servers = [tool["server_label"] for tool in connector if tool.get("defer_loading") is True]
    searching = shown_name(tools) is not None
    kept: list[Item] = []
    for item in items:
        if item.get("type") == TOOL_SEARCH_OUTPUT and item.get("tools"):
            lenient = any(_LENIENT in reference for reference in item["tools"])
            item["tools"] = _resolved(
                item["tools"],
                declared,
                servers,
                unchecked=inherited or bool(connector),  # the servers' tools are not known
                defined=defined,
            )
            if lenient and not (searching and item["tools"]):
                continue  # a tool_result's references, with nothing to load
        kept.append(item)
    items[:] = kept


def _resolved(
    references: list[Item],
    declared: dict[str, Item],
    servers: list[str],
    *,
    unchecked: bool,
    defined: Collection[str],
) -> list[Item]:
    """The tools ``references`` load: the ``declared`` ones they name, and the others of
    the deferred MCP ``servers``; one naming none of them is a 400, unless ``unchecked``
    or ``defined``."""
    out = []
    unknown: list[str] = []
    for reference in references:
        lenient = reference.pop(_LENIENT, None) is not None
        where = reference.pop(_REFERENCE, None)
        if where is None and not lenient:
            out.append(reference)
            continue
        tool = declared.get(reference["name"])
        if tool is not None:
            out.append(tool)
        elif servers:
            unknown.append(reference["name"])
        elif not (unchecked or lenient or reference["name"] in defined):
            raise field_error(
                f"{where}.tool_name",
                f"Tool reference '{reference['name']}' has no corresponding tool "
                "definition: declare it in tools (with defer_loading).",
            )
    if unknown:
        out += [{"type": "mcp", "server_label": s, "allowed_tools": unknown} for s in servers]
    return out
