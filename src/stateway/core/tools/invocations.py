"""What running each kind of gateway call does: the executor's :class:`Call` for a model's
call, and what it leaves on the call's item.

- A call of a tool the request does not offer (its entry's ``refusal``) fails without
  running: an ``mcp_protocol_error`` with ``INVALID_PARAMS``.
- A web search sends the query the model wrote to the search provider, with the declared
  tool's domain filters, and puts the hits on the item (``action.sources``) and among the
  response's sources (its citations). Searches past the tool's ``max_uses`` are not sent;
  a call without a query is not one of them (the cap counts the searches sent).
- A gateway tool search finds deferred tools in the catalog; what it loaded is offered
  from the next round on.
- An MCP call sends the arguments to its server, as the response's tenant uses it; an
  output over ``max_output_bytes`` fails the call, as does an ``isError`` result whose
  text is (its content would be stored, echoed and read as an output is). Calls of a
  tool that is not parallel-safe never overlap.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from stateway.core.items import Item
from stateway.core.tools import mcp, tool_search, web_search
from stateway.core.tools.catalog import Catalog, Entry
from stateway.core.tools.executor import Call
from stateway.core.tools.ports import INVALID_PARAMS, SearchQuery, ToolError, ToolFailure
from stateway.core.tools.toolset import GatewayTools, Toolset


@dataclass(slots=True)
class PendingCall:
    """A gateway call the model made this round, its item open until it has run."""

    entry: Entry
    item: Item
    output_index: int
    arguments: str
    loaded: list[Item] = field(default_factory=list)
    """The tools a gateway tool search found."""


class Invocations:
    def __init__(
        self,
        tools: GatewayTools,
        toolset: Toolset,
        catalog: Catalog,
        tenant: str,
        sources: list[Item],
    ) -> None:
        self._tools = tools
        self._toolset = toolset
        self._catalog = catalog
        self._tenant = tenant
        """Whose MCP sessions the calls use (:attr:`McpServer.tenant`)."""
        self._sources = sources
        """Every web search result of this response, for citations: extended here."""
        self.searches = 0
        """Web searches sent to the provider by this response (``max_uses`` caps them: a
        call refused for its arguments, or past the cap, is not one)."""

    def call(self, pending: PendingCall) -> Call:
        """The call to run for ``pending``."""
        entry = pending.entry
        if entry.refusal is not None:
            return _refused(pending, entry.refusal)
        match entry.kind:
            case "web_search":
                return self._web_search(pending)
            case "tool_search":
                return self._tool_search(pending)
            case _:
                return self._mcp(pending)

    def _web_search(self, pending: PendingCall) -> Call:
        search = self._tools.search
        declared = self._toolset.web_search
        allowed = declared.allowed_domains if declared is not None else ()
        blocked = declared.blocked_domains if declared is not None else ()
        cap = declared.max_uses if declared is not None else None

        async def searching() -> str:
            query = web_search.query_of(pending.arguments)
            pending.item["action"]["query"] = query
            if cap is not None and self.searches >= cap:
                raise ToolFailure(web_search.over_max_uses(cap))
            if search is None:
                raise ToolFailure("No web search provider is configured.")
            self.searches += 1  # before the first await: the round's calls start in order
            hits = await search.search(
                SearchQuery(query, allowed_domains=allowed, blocked_domains=blocked)
            )
            found = web_search.sources(hits)
            pending.item["action"]["sources"] = found
            self._sources.extend(found)
            return ""

        return Call(searching, label="web search", kind="web_search", call_id=pending.item["id"])

    def _tool_search(self, pending: PendingCall) -> Call:
        catalog = self._catalog

        async def loading() -> str:
            arguments = pending.item["arguments"]
            pending.loaded = await tool_search.search_as_declared(
                pending.entry.tool, arguments, catalog.deferred(), catalog.namespaces
            )
            return ""

        return Call(loading, label="tool search", kind="tool_search", call_id=pending.item["id"])

    def _mcp(self, pending: PendingCall) -> Call:
        entry = pending.entry
        binding = next(b for b in self._toolset.mcp if b.label == entry.server_label)
        client = self._tools.mcp_client()
        server = binding.server_for(self._tenant)
        name = entry.name or ""
        cap = self._tools.policy.max_output_bytes

        async def calling() -> str:
            arguments = mcp.parse_arguments(pending.arguments)
            try:
                output = await client.call_tool(server, name, arguments)
            except ToolFailure as failure:  # an isError result's content is its answer too
                error = failure.error
                if error.kind != "execution" or not mcp.over_cap(error.message, cap):
                    raise
                too_long = mcp.output_too_long(binding.label, name, error.message, cap, error=True)
                raise ToolFailure(too_long) from None
            if mcp.over_cap(output, cap):
                raise ToolFailure(mcp.output_too_long(binding.label, name, output, cap))
            return output

        exclusive = None if entry.parallel_safe else f"{entry.server_label}/{name}"
        label = f"{entry.server_label}.{name}"
        call_id = pending.item["id"]
        return Call(calling, exclusive, label=label, kind="mcp", name=name, call_id=call_id)


def _refused(pending: PendingCall, refusal: str) -> Call:
    entry = pending.entry
    error = ToolError.protocol(INVALID_PARAMS, refusal)

    async def refused() -> str:
        raise ToolFailure(error)

    label = f"{entry.server_label}.{entry.name}"
    return Call(refused, label=label, kind="mcp", name=entry.name or "", call_id=pending.item["id"])
