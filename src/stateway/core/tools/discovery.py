"""Discovery: the tools of each MCP server a request declares, offered to the model.

Each declared server's tools are listed once per chain, and shown as they are offered: an
``mcp_list_tools`` item shows only the tools that pass the request's ``allowed_tools`` (a
list, or ``tool_names`` and ``read_only``), as hosted. It is emitted ``completed``, or
``failed`` with an ``error`` when the server cannot be reached or lists more than
``max_discovered_tools``: the response goes on without its tools. One budget of
``max_discovered_tools`` offered tools is shared by the servers, in the order they are
declared.

A later turn of the chain reuses the last listing of a server instead of asking it
again, when that listing shows every tool the turn may offer (:func:`_covers`): always for
an unfiltered listing; for one made under a filter (:func:`mcp.listing_filter`), when the
turn has the same filter, or its own ``allowed_tools`` names only tools it shows (a
narrower one). Any other turn (a wider filter, or none) may offer a tool that listing held back: it
lists the server again and emits a new ``mcp_list_tools`` item showing what it offers, so
the model is never offered a tool no item of the chain shows. (The hosted API documents
only that a listing in the context is not fetched again; this rule is the gateway's.)

Discovery also knows every tool a declared server listed, or an earlier turn called, so a
model's call of one the request does not offer fails by that name
(:meth:`Discovery.unoffered`) instead of being taken for a client's call.

A token count offers what the chain's listings show, asking no server
(:func:`listed_entries`).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from stateway.core import events as ev
from stateway.core.items import (
    MCP_APPROVAL_REQUEST,
    MCP_CALL,
    MCP_LIST_TOOLS,
    TOOL_SEARCH_OUTPUT,
    Item,
)
from stateway.core.tools import mcp
from stateway.core.tools.catalog import Catalog, Entry
from stateway.core.tools.executor import Call, Executor
from stateway.core.tools.mcp_binding import McpBinding
from stateway.core.tools.model_names import SEPARATOR, GatewayNames, model_name
from stateway.core.tools.open_items import OpenItems
from stateway.core.tools.ports import McpTool, ToolError
from stateway.core.tools.toolset import GatewayTools, Toolset


class Discovery:
    def __init__(
        self,
        tools: GatewayTools,
        toolset: Toolset,
        executor: Executor,
        items: OpenItems,
        tenant: str,
    ) -> None:
        self._tools = tools
        self._toolset = toolset
        self._executor = executor
        self._items = items
        self._tenant = tenant
        self._known: list[tuple[str, str]] = []
        """Every tool a declared server listed, or an earlier turn called: its server's
        label and its own name (:meth:`unoffered` names them as the model knows them)."""

    async def offer(self, context: list[Item], catalog: Catalog) -> None:
        """Add every declared server's tools to ``catalog`` (listing those no earlier turn
        of ``context`` listed as this request needs)."""
        earlier = _listed(context)
        fresh = [b for b in self._toolset.mcp if not _covers(earlier.get(b.label), b)]
        found = await self._list(fresh)
        labels = {binding.label for binding in self._toolset.mcp}
        for item in context:  # what the model may call again from earlier turns
            if item.get("type") in (MCP_CALL, MCP_APPROVAL_REQUEST):
                label, name = item.get("server_label"), item.get("name")
                if label in labels and isinstance(name, str):
                    self._known.append((label, name))
        shown: dict[str, list[McpTool]] = {}
        for binding in self._toolset.mcp:
            listing = earlier.get(binding.label)
            if binding.label in found:
                tools = found[binding.label]
            else:  # reused, or listed again in vain: what the chain's listing shows
                tools = listing.tools if listing is not None else []
            self._known += [(binding.label, tool.name) for tool in tools]
            shown[binding.label] = tools
        budget = self._tools.policy.max_discovered_tools
        defer = self._toolset.tool_search is not None
        for entry in _entries(self._toolset.mcp, shown, budget, defer=defer):
            catalog.add(entry)
        if defer:
            load_searched(catalog, context)

    async def _list(self, bindings: list[McpBinding]) -> dict[str, list[McpTool]]:
        """Each server's tools, all it lists, by label (a server that failed to list them
        is left out), its ``mcp_list_tools`` item done showing those it offers."""
        client = self._tools.mcp_client()
        opened = []
        for binding in bindings:
            item = mcp.list_item(binding.label, binding.filter_key)
            index = self._items.add(item)
            self._items.emit(
                ev.ToolProgress("response.mcp_list_tools.in_progress", index, item["id"])
            )
            opened.append((binding, item, index))
        results: dict[str, list[McpTool]] = {}

        def lister(binding: McpBinding, item: Item) -> Call:
            async def invoke() -> str:
                results[binding.label] = await client.list_tools(binding.server_for(self._tenant))
                return ""

            label = f"MCP server '{binding.label}'"
            return Call(invoke, label=label, kind=MCP_LIST_TOOLS, call_id=item["id"])

        outcomes = await self._executor.run([lister(b, item) for b, item, _ in opened])
        cap = self._tools.policy.max_discovered_tools
        for (binding, item, index), outcome in zip(opened, outcomes, strict=True):
            tools = results.get(binding.label, [])
            error = outcome.error
            if error is None and len(tools) > cap:
                error = ToolError(
                    f"MCP server '{binding.label}' lists {len(tools)} tools; at most "
                    f"{cap} are allowed per request."
                )
            if error is None:
                item["tools"] = [mcp.listed_tool(t) for t in binding.offered(tools)]
                kind = "response.mcp_list_tools.completed"
            else:
                results.pop(binding.label, None)
                item["error"] = error.message  # a string, as the Responses API has it
                kind = "response.mcp_list_tools.failed"
            self._items.emit(ev.ToolProgress(kind, index, item["id"]))
            self._items.done(item, index)
        return results

    def unoffered(self, name: str, names: GatewayNames) -> Entry | None:
        """A model's call of a function this request does not offer, named as a declared
        MCP server's tool (``<label>__<tool>``, or as ``names`` shows it apart: one not
        listed or not allowed, which the model knows from earlier turns): an entry whose
        call fails without running. Not a client call: the client never declared it. Known
        by its name when the server listed it or an earlier turn called it; else by the
        ``<label>__`` it starts with."""
        for label, tool in self._known:  # named only here: a call of one is rare
            if names.of(model_name(tool, label)) == name:
                return mcp.refused(label, tool, declared=True)
        for binding in self._toolset.mcp:
            prefix = binding.label + SEPARATOR
            if name.startswith(prefix) and len(name) > len(prefix):
                return mcp.refused(binding.label, name[len(prefix) :], declared=True)
        return None


def listed_entries(
    context: list[Item], bindings: list[McpBinding], budget: int, *, defer: bool
) -> list[Entry]:
    """The entries a response would offer of ``bindings``' tools as the last listings in
    ``context`` show them, asking no server (a server no turn listed: none), within
    ``budget`` offered tools: what a token count can know of them (``defer``: a tool
    search is declared, see :func:`mcp.entries`)."""
    shown = {label: listing.tools for label, listing in _listed(context).items()}
    return _entries(bindings, shown, budget, defer=defer)


def load_searched(catalog: Catalog, context: list[Item]) -> None:
    """Offer the deferred MCP tools that earlier searches in ``context`` loaded (their
    ``tool_search_output`` items: the gateway's, or the client's answer to its own), as a
    declared deferred function is offered once a search in the context loaded it."""
    for item in context:
        if item.get("type") == TOOL_SEARCH_OUTPUT:
            catalog.load_mcp(item.get("tools") or ())


def _entries(
    bindings: list[McpBinding],
    shown: Mapping[str, list[McpTool]],
    budget: int,
    *,
    defer: bool,
) -> list[Entry]:
    """Each binding's tools among those ``shown`` by its label that it offers, in the order
    the servers are declared, within one budget of ``budget`` offered tools."""
    out: list[Entry] = []
    for binding in bindings:
        offered = binding.offered(shown.get(binding.label, []))
        out += mcp.entries(binding, offered[:budget], defer=defer)
        budget = max(0, budget - len(offered))
    return out


@dataclass(frozen=True, slots=True)
class _Listing:
    """A server's last successful listing in a chain: the tools it shows, and the filter
    it was made under (:func:`mcp.listing_filter`: None for none)."""

    tools: list[McpTool]
    filter_key: str | None


def _listed(context: list[Item]) -> dict[str, _Listing]:
    """Servers an earlier turn listed successfully, by label (the last listing wins)."""
    out: dict[str, _Listing] = {}
    for item in context:
        if item.get("type") == MCP_LIST_TOOLS and not item.get("error"):
            listing = _Listing(mcp.tools_of(item), mcp.listing_filter(item))
            out[item.get("server_label", "")] = listing
    return out


def _covers(listing: _Listing | None, binding: McpBinding) -> bool:
    """Whether ``listing`` shows every tool ``binding`` may offer, so the server need not be
    asked again. An unfiltered listing shows them all; a filtered one, only what its filter
    let through: it covers a binding under the same filter, or one that names its tools
    (``allowed_tools``), each one it shows. A wider filter, or none, may offer a tool it
    held back."""
    if listing is None:
        return False
    if listing.filter_key is None or listing.filter_key == binding.filter_key:
        return True
    shown = {tool.name for tool in listing.tools}
    return binding.allowed_tools is not None and binding.allowed_tools <= shown
