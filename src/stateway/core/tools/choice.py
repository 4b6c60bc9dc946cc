"""Whether a ``tool_choice`` names tools the request declares, judged as the hosted
Responses API judges it: ``required`` with no tool at all, or a choice (or an
``allowed_tools`` entry) naming no declared tool, is a 400 on ``tool_choice``.

A choice is judged against what the client declared (a ``web_search`` hint the gateway
does not offer counts: :mod:`.toolset` drops it later), plus the tools its context offers:
those of ``additional_tools`` and ``tool_search_output`` items (:func:`context_tools`),
the request's own and, in a request continuing earlier turns, theirs. A request's
top-level ``tools`` are its own: those of earlier turns offer nothing, as hosted.

What a choice names: a ``function`` or ``custom`` tool by ``name`` (a namespace's members
by their own name, and by ``namespace`` when given), a ``namespace`` by ``name`` (in
``allowed_tools``), an ``mcp`` server by ``server_label`` (its tools are not known before
it is asked), any other kind by its ``type`` (web search and computer use by any of
their type's spellings).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any, Final

from stateway.core.errors import InvalidRequest
from stateway.core.items import TOOL_SEARCH_OUTPUT, Item
from stateway.core.tools.catalog import members
from stateway.core.tools.tool_types import ADDITIONAL_TOOLS, CUSTOM, NAMESPACE, WEB_SEARCH_TYPES

_SAME_KIND: Final = {
    **dict.fromkeys(WEB_SEARCH_TYPES, "web_search"),
    **dict.fromkeys(("computer", "computer_use", "computer_use_preview"), "computer"),
}
"""The types that name one kind of tool, by that kind."""
_OFFERING: Final = (ADDITIONAL_TOOLS, TOOL_SEARCH_OUTPUT)
"""The input items that offer tools."""


def check_tool_choice(choice: str | dict[str, Any], tools: list[Item]) -> None:
    """Refuse ``choice`` when it forces what ``tools`` (the declared tools, those of the
    context among them) do not offer, in the hosted API's words."""
    if choice == "required" and not tools:
        raise InvalidRequest(
            "Tool choice 'required' must be specified with 'tools' parameter.",
            param="tool_choice",
            code="invalid_value",
        )
    if not isinstance(choice, dict):
        return
    named = choice.get("tools") if choice.get("type") == "allowed_tools" else [choice]
    for entry in named if isinstance(named, list) else ():
        if isinstance(entry, dict) and not _declared(entry, tools):
            raise InvalidRequest(
                f"Tool choice '{_called(entry)}' not found in 'tools' parameter.",
                param="tool_choice",
                code="invalid_value",
            )


def names_tools(choice: str | dict[str, Any]) -> bool:
    """Whether ``choice`` forces anything :func:`check_tool_choice` judges (``auto`` and
    ``none``, the common case, force nothing)."""
    return choice == "required" or isinstance(choice, dict)


def context_tools(items: Iterable[Any]) -> list[Item]:
    """The tools ``additional_tools`` and ``tool_search_output`` items offer (items as a
    client sent them: anything not an object is passed over)."""
    out: list[Item] = []
    for item in items:
        if not isinstance(item, dict) or item.get("type") not in _OFFERING:
            continue
        found = item.get("tools")
        if isinstance(found, list):
            out.extend(tool for tool in found if isinstance(tool, dict))
    return out


def _declared(entry: dict[str, Any], tools: list[Item]) -> bool:
    """Whether a choice's ``entry`` names one of the declared ``tools``. Which of the
    resolved tools an ``allowed_tools`` choice then offers is the catalog's rule (its
    entries: an MCP server's tools by name, once discovered; hosted types are never
    among them)."""
    kind = entry.get("type")
    if kind in ("function", CUSTOM):
        namespace = entry.get("namespace")
        return any(
            tool.get("type") == kind
            and tool.get("name") == entry.get("name")
            and namespace in (None, group)
            for tool, group in members(tools)
        )
    if kind == NAMESPACE:
        return any(t.get("type") == NAMESPACE and t.get("name") == entry.get("name") for t in tools)
    if kind == "mcp":
        label = entry.get("server_label")
        return any(t.get("type") == "mcp" and t.get("server_label") == label for t in tools)
    wanted = _kind(kind)
    return any(_kind(tool.get("type")) == wanted for tool in tools)


def _kind(kind: Any) -> Any:
    return _SAME_KIND.get(kind, kind) if isinstance(kind, str) else kind


_NAMED_BY: Final = {"function": "name", CUSTOM: "name", NAMESPACE: "name", "mcp": "server_label"}


def naming_field(kind: object) -> str:
    """The field a choice (or an ``allowed_tools`` entry) of ``kind`` names its tool by:
    a tool's ``name``, a server's ``server_label``, else its ``type``."""
    return _NAMED_BY.get(kind, "type") if isinstance(kind, str) else "type"


def _called(entry: dict[str, Any]) -> object:
    """What the hosted message quotes: the field that names the tool."""
    return entry.get(naming_field(entry.get("type")))
