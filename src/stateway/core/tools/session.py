"""One response's gateway tools: discovery before the first round, the calls of each
round, approvals answered by the client, and what the model is offered.

The loop owns the rounds; a ``ToolSession`` owns everything about the gateway's own tools
within them, and emits their items and lifecycle events into the run's stream
(:mod:`.open_items`):

- Discovery (:mod:`.discovery`): each declared MCP server's tools, listed once per chain,
  offered in the catalog before the first round, after the client's tools, the tool
  search and the web search (:func:`known_catalog`). A token count's catalog
  (:func:`counted_catalog`) is the same but for the servers no earlier turn listed.
- Calls: the assembler opens a gateway call's item as the model streams it
  (:meth:`~ToolSession.open_call`); :meth:`~ToolSession.run` executes the round's calls
  (:mod:`.invocations`) under the executor's permits and timeouts and closes each item,
  ``completed`` or ``failed`` (an ``mcp_call``'s ``error`` is the object the Responses API
  defines, :func:`mcp.call_error`; the gateway's own refusals are
  ``mcp_protocol_error``s: ``INVALID_PARAMS`` for a tool the request does not offer,
  ``GATEWAY_REFUSED`` past ``max_tool_calls``).
- Withheld tools (:mod:`.withheld`): the calls of the client's tools the stages withheld,
  answered as not available, which the loop weaves into the model's next round.
- Approvals (:mod:`.approvals`): a call of a tool that needs approval becomes an
  ``mcp_approval_request`` and goes back to the client; an approving
  ``mcp_approval_response`` in a later request runs the call
  (:meth:`~ToolSession.resume_approvals`) before that request's first round.
"""

from __future__ import annotations

from typing import Any

from stateway.core import events as ev
from stateway.core.items import (
    MCP_APPROVAL_REQUEST,
    MCP_APPROVAL_RESPONSE,
    MCP_CALL,
    TOOL_SEARCH_CALL,
    WEB_SEARCH_CALL,
    Item,
)
from stateway.core.telemetry import Telemetry
from stateway.core.tools import mcp, tool_search, web_search
from stateway.core.tools.approvals import approved, approved_entry
from stateway.core.tools.catalog import Catalog, Entry
from stateway.core.tools.context_offers import with_context_tools
from stateway.core.tools.discovery import Discovery, listed_entries, load_searched
from stateway.core.tools.executor import Executor, Outcome
from stateway.core.tools.invocations import Invocations, PendingCall
from stateway.core.tools.open_items import Emit, OpenItems
from stateway.core.tools.ports import GATEWAY_REFUSED, INVALID_PARAMS, ToolError
from stateway.core.tools.toolset import GatewayTools, Toolset
from stateway.core.tools.withheld import WithheldCalls

MAX_TOOL_CALLS = "The response reached its max_tool_calls limit; this call was not run."


def known_catalog(toolset: Toolset, client: list[Item] | None = None) -> Catalog:
    """A response's catalog before any MCP server's tools join it: the client's tools
    (``client``, else the declared ones; deferred ones held back when a tool search is
    declared), the tool search, the web search; each gateway tool apart from a client's of
    its name (:meth:`Catalog.add`)."""
    catalog = Catalog(
        toolset.client if client is None else client, defer=toolset.tool_search is not None
    )
    if toolset.tool_search is not None:
        catalog.add(tool_search.entry(toolset.tool_search, catalog.deferred(), catalog.namespaces))
    if toolset.web_search is not None:
        catalog.add(web_search.entry(toolset.web_search.declared))
    return catalog


def offered_catalog(toolset: Toolset, context: list[Item]) -> Catalog:
    """:func:`known_catalog` with the client's tools that ``context`` offers beside the
    declared ones (:func:`with_context_tools`: ``additional_tools`` items, what searches
    loaded)."""
    return known_catalog(toolset, with_context_tools(toolset.client, context))


def round_choice(
    toolset: Toolset, catalog: Catalog, choice: str | dict[str, Any]
) -> str | dict[str, Any]:
    """A request's ``tool_choice`` as its rounds send it (and a count counts it): as
    declared when it names a tool sent as declared (:meth:`Toolset.native_choice`), else in
    the catalog's model-visible names (:meth:`Catalog.model_choice`)."""
    return toolset.native_choice(choice) or catalog.model_choice(choice)


def counted_catalog(toolset: Toolset, context: list[Item], max_discovered_tools: int) -> Catalog:
    """What a response's first round would offer, as far as it is known without asking
    anything (``/input_tokens``): the tools of earlier turns in ``context`` among the
    client's, and a declared MCP server's tools as the chain's last listing shows them. A
    server no turn listed yet adds none: a run would list it first, which a count does not
    (a round trip to each server for every count)."""
    catalog = offered_catalog(toolset, context)
    defer = toolset.tool_search is not None
    for entry in listed_entries(context, toolset.mcp, max_discovered_tools, defer=defer):
        catalog.add(entry)
    if defer:
        load_searched(catalog, context)
        renew_search(toolset, catalog)
    return catalog


def renew_search(toolset: Toolset, catalog: Catalog) -> None:
    """The tool search's function described anew once MCP servers' tools joined the
    catalog: a deferred server is searchable too (its label and description listed)."""
    if toolset.tool_search is not None and any(e.kind == "mcp" for e in catalog.deferred()):
        catalog.renew(
            tool_search.entry(toolset.tool_search, catalog.deferred(), catalog.namespaces)
        )


class ToolSession:
    def __init__(
        self,
        tools: GatewayTools,
        toolset: Toolset,
        output: list[Item],
        emit: Emit,
        telemetry: Telemetry | None = None,
        tenant: str = "",
        context: list[Item] | None = None,
    ) -> None:
        """``tenant``: whose MCP sessions the calls use (:attr:`McpServer.tenant`);
        ``context``: what the rounds are sent before the output, whose items may offer
        tools (:func:`offered_catalog`)."""
        self._tools = tools
        self._toolset = toolset
        self._tenant = tenant
        self._output = output
        self._emit = emit
        policy = tools.policy
        self._executor = Executor(
            timeout=policy.timeout, max_concurrent=policy.max_concurrent_calls, telemetry=telemetry
        )
        self.catalog = offered_catalog(toolset, context or [])
        self.sources: list[Item] = []
        """Every web search result of this response, for citations."""
        self.calls_made = 0
        """Gateway calls run so far (``max_tool_calls`` counts these)."""
        self.withheld = WithheldCalls(toolset.withheld, telemetry)
        """Calls of the client's tools the stages withheld, answered here."""
        self._opened: OpenItems | None = None
        self._discovery: Discovery | None = None
        self._invocations: Invocations | None = None
        """These three made at first use: most responses have no gateway tools."""

    @property
    def native_tools(self) -> list[Item]:
        """The tools sent as declared (:attr:`Toolset.native`): this round's, as the
        rounds send them."""
        return self._toolset.native

    def needed(self, new_input: list[Item]) -> bool:
        """Whether the response involves gateway tools: declared ones, or approvals to
        answer (a call approved without its server declared again fails, and says so)."""
        return self._toolset.gateway_owned or any(
            item.get("type") == MCP_APPROVAL_RESPONSE for item in new_input
        )

    # -- before the first round ------------------------------------------------------

    async def prepare(self, context: list[Item]) -> None:
        """Offer every declared MCP server's tools; cite the searches of the turn this
        response continues."""
        if self._toolset.web_search is not None:
            self.sources.extend(web_search.turn_sources(context))
        if self._toolset.mcp:
            await self._discovered().offer(context, self.catalog)
            renew_search(self._toolset, self.catalog)

    async def resume_approvals(
        self, context: list[Item], new_input: list[Item], limit: int | None = None
    ) -> None:
        """Run each call this request's input approves (:func:`.approvals.approved`). A
        call of a tool this request does not offer fails without running; so does one
        past ``limit`` (the response's ``max_tool_calls``).

        Its item streams as hosted streams one: added with no arguments, then the
        arguments the request was approved with, whole, as one delta, then done (a client
        that appends the deltas to the added item has them once)."""
        requests = approved(context, new_input)
        if not requests:
            return
        offered = self._mcp_entries()
        pending: list[PendingCall] = []
        for request in requests:
            entry, refusal = approved_entry(request, offered, self._toolset.mcp)
            arguments = request.get("arguments") or ""
            call = mcp.call_item(entry, approval_request_id=request.get("id"))
            index = self._items.add(call)
            self._emit(ev.ToolProgress("response.mcp_call.in_progress", index, call["id"]))
            if arguments:
                self._emit(ev.McpArgumentsDelta(index, call["id"], arguments))
            call["arguments"] = arguments
            self._emit(ev.McpArgumentsDone(index, call["id"], arguments))
            approval = PendingCall(entry, call, index, arguments)
            if refusal is None:
                pending.append(approval)
            else:
                self._close(approval, Outcome(error=ToolError.protocol(INVALID_PARAMS, refusal)))
        if pending:
            await self.run(pending, limit, parallel=True)

    def compacted(self, context: list[Item]) -> None:
        """The response compacted, its rounds going on from ``context``: the client's tools
        offered are those it still holds, as on a later turn. A tool search's output
        summarized away loads nothing any more (a deferred tool is held back again, for a
        search to load again: a deferred MCP server's too); an ``additional_tools`` item
        is kept, and its tools. The gateway's own tools stay offered: the request declares
        them."""
        self.catalog.reoffer(offered_catalog(self._toolset, context))
        if self._toolset.tool_search is not None:  # no search output survives a compaction
            self.catalog.hold_back(b.label for b in self._toolset.mcp if b.deferred)
        renew_search(self._toolset, self.catalog)

    def unoffered(self, name: str) -> Entry | None:
        """A model's call of a function this request does not offer, named as a declared
        MCP server's tool: an entry whose call fails without running
        (:meth:`.Discovery.unoffered`)."""
        if not self._toolset.mcp:
            return None
        return self._discovered().unoffered(name, self.catalog.names())

    def _discovered(self) -> Discovery:
        if self._discovery is None:
            self._discovery = Discovery(
                self._tools, self._toolset, self._executor, self._items, self._tenant
            )
        return self._discovery

    @property
    def _items(self) -> OpenItems:
        if self._opened is None:
            self._opened = OpenItems(self._output, self._emit)
        return self._opened

    def _mcp_entries(self) -> list[Entry]:
        out = []
        for tool in self.catalog.model_tools():
            entry = self.catalog.entry(tool["name"])
            if entry is not None and entry.kind == "mcp":
                out.append(entry)
        return out

    # -- during a round --------------------------------------------------------------

    def open_call(self, entry: Entry) -> Item:
        """The public item a gateway call starts as (the assembler appends and announces
        it, then calls :meth:`started`)."""
        if entry.kind == "web_search":
            return web_search.call_item()
        if entry.kind == "tool_search":
            return tool_search.call_item(None, "server")
        if entry.approval:
            return mcp.approval_item(entry)
        return mcp.call_item(entry)

    def started(self, item: Item, output_index: int) -> None:
        kind = item["type"]
        if kind != MCP_APPROVAL_REQUEST:  # done as it closes, like a client call
            self._items.added(item, output_index)
        if kind == MCP_CALL:
            self._emit(ev.ToolProgress("response.mcp_call.in_progress", output_index, item["id"]))
        elif kind == WEB_SEARCH_CALL:
            self._emit(
                ev.ToolProgress("response.web_search_call.in_progress", output_index, item["id"])
            )

    async def run(self, pending: list[PendingCall], limit: int | None, *, parallel: bool) -> None:
        """Run the round's gateway calls and close their items. Calls past ``limit`` (the
        response's ``max_tool_calls``, counting the calls run so far) are not run; they
        fail with a message saying so."""
        allowed = len(pending) if limit is None else max(0, limit - self.calls_made)
        refusal = Outcome(error=ToolError.protocol(GATEWAY_REFUSED, MAX_TOOL_CALLS))
        for call in pending[allowed:]:
            if call.item["type"] == WEB_SEARCH_CALL:
                web_search.show_query(call.item, call.arguments)
            self._close(call, refusal)
        if self._invocations is None:
            self._invocations = Invocations(
                self._tools, self._toolset, self.catalog, self._tenant, self.sources
            )
        calls = []
        for call in pending[:allowed]:
            calls.append(self._invocations.call(call))
            if call.item["type"] == WEB_SEARCH_CALL:
                self._emit(
                    ev.ToolProgress(
                        "response.web_search_call.searching", call.output_index, call.item["id"]
                    )
                )
        self.calls_made += len(calls)
        outcomes = await self._executor.run(calls, parallel=parallel)
        for call, outcome in zip(pending[:allowed], outcomes, strict=True):
            self._close(call, outcome)

    def abandon(self) -> None:
        """Close every gateway item still open (the response ended early: cancelled,
        cut short or failed) as ``incomplete``: no dangling call."""
        if self._opened is not None:
            self._opened.abandon()

    def _close(self, pending: PendingCall, outcome: Outcome) -> None:
        item, index = pending.item, pending.output_index
        if item["type"] == TOOL_SEARCH_CALL:
            self._close_search(pending, outcome)
            return
        error = outcome.error
        if item["type"] == WEB_SEARCH_CALL:
            if error is None:
                item["status"] = "completed"
                self._emit(ev.ToolProgress("response.web_search_call.completed", index, item["id"]))
            else:
                web_search.fail(item, error)
        else:
            if error is None:
                item["status"], item["output"] = "completed", outcome.output
                kind = "response.mcp_call.completed"
            else:
                item["status"], item["error"] = "failed", mcp.call_error(error)
                kind = "response.mcp_call.failed"
            self._emit(ev.ToolProgress(kind, index, item["id"]))
        self._items.done(item, index)

    def _close_search(self, pending: PendingCall, outcome: Outcome) -> None:
        """A gateway tool search ends with its call done and, right after, its output; what
        it loaded is offered from the next round on. A failed search loads nothing."""
        item = pending.item
        item["status"] = "completed" if outcome.ok else "incomplete"
        self._items.done(item, pending.output_index)
        found = pending.loaded if outcome.ok else []
        self.catalog.load(found)
        self._items.add_done(
            tool_search.output_item(found, tool_search.error_of(outcome.error), item)
        )
