"""What an ``allowed_tools`` choice offers the model, of a request's resolved tools
(:meth:`~stateway.core.tools.catalog.Catalog.model_tools`): the tools it names, every
round of the response, loaded ones included; and the tool search while one of them is
deferred, which only a search can load: a choice naming only deferred tools would
otherwise leave the model nothing to call.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING

from stateway.core.items import Item
from stateway.core.tools.tool_types import CUSTOM, NAMESPACE, TOOL_SEARCH, WEB_SEARCH_TYPES

if TYPE_CHECKING:
    from stateway.core.tools.catalog import Entry


class Allowed:
    """An ``allowed_tools`` choice's ``tools`` over a catalog's ``entries``."""

    def __init__(self, tools: list[Item], entries: Iterable[Entry]) -> None:
        self._tools = tools
        self._searching = any(e.deferred and self._names(e) for e in entries)
        """Whether a tool it names is deferred: the tool search is offered too."""

    def offers(self, entry: Entry) -> bool:
        return self._names(entry) or (self._searching and entry.kind == TOOL_SEARCH)

    def _names(self, entry: Entry) -> bool:
        return any(names(tool, entry) for tool in self._tools)


def names(tool: Item, entry: Entry) -> bool:
    """Whether ``tool`` (one of an ``allowed_tools`` choice's) names ``entry``: a function
    or custom tool by its name (and ``namespace``, when given), a namespace by its name, an
    MCP server by its label (and a tool of it by ``name``, when given), the other kinds by
    their type. What it matches is a resolved entry (a discovered MCP tool, a namespace's
    member): :mod:`.choice` judges the same choice against the declared tools, before they
    are resolved, which is why the two rules differ."""
    kind = tool.get("type")
    if kind == NAMESPACE:
        return entry.namespace is not None and entry.namespace == tool.get("name")
    if kind in WEB_SEARCH_TYPES:
        kind = "web_search"
    if kind != entry.kind:
        return False
    if kind == "mcp":
        name = tool.get("name")
        return tool.get("server_label") == entry.server_label and name in (None, entry.name)
    if kind in ("function", CUSTOM):
        namespace = tool.get("namespace", entry.namespace)
        return tool.get("name") == entry.tool.get("name") and namespace == entry.namespace
    return True
