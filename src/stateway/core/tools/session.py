"""One response's gateway tools: discovery before the first round, the calls of each
round, approvals answered by the client, and what the model is offered.

The loop owns the rounds; a ``ToolSession`` owns everything about the gateway's own tools
within them, and emits their items and lifecycle events into the run's stream:

- Discovery: each declared MCP server's tools are listed once per chain. A server an
  earlier turn of the chain listed is not asked again (its ``mcp_list_tools`` item is
  reused); otherwise an ``mcp_list_tools`` item is emitted (``failed`` with an ``error``
  when the server cannot be reached: the response goes on without its tools).
- Calls: the assembler opens a gateway call's item as the model streams it
  (:meth:`open_call`); :meth:`run` executes the round's calls under the executor's permits
  and timeouts and closes each item, ``completed`` or ``failed`` (an ``mcp_call``'s
  ``error`` is the object the Responses API defines, :func:`mcp.call_error`; the gateway's
  own refusals are ``mcp_protocol_error``s: ``INVALID_PARAMS`` for a tool the request does
  not offer, ``GATEWAY_REFUSED`` past ``max_tool_calls``).
- Approvals: a call of a tool that needs approval becomes an ``mcp_approval_request`` and
  goes back to the client; an approving ``mcp_approval_response`` in a later request runs
  the call (:meth:`resume_approvals`) before that request's first round.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field, replace

from stateway.core import events as ev
from stateway.core.ids import new_id
from stateway.core.items import (
    MCP_APPROVAL_REQUEST,
    MCP_APPROVAL_RESPONSE,
    MCP_CALL,
    MCP_LIST_TOOLS,
    TOOL_SEARCH_CALL,
    WEB_SEARCH_CALL,
    Item,
)
from stateway.core.telemetry import Telemetry
from stateway.core.tools import mcp, tool_search, web_search
from stateway.core.tools.catalog import SEPARATOR, Catalog, Entry, model_name
from stateway.core.tools.executor import Call, Executor, Outcome
from stateway.core.tools.ports import (
    GATEWAY_REFUSED,
    INVALID_PARAMS,
    McpClient,
    McpServer,
    McpTool,
    SearchQuery,
    ToolError,
    ToolFailure,
)
from stateway.core.tools.toolset import GatewayTools, McpBinding, Toolset

MAX_TOOL_CALLS = "The response reached its max_tool_calls limit; this call was not run."

Emit = Callable[[ev.Event], None]


@dataclass(slots=True)
class PendingCall:
    """A gateway call the model made this round, its item open until it has run."""

    entry: Entry
    item: Item
    output_index: int
    arguments: str
    loaded: list[Item] = field(default_factory=list)
    """The tools a gateway tool search found."""


class ToolSession:
    def __init__(
        self,
        tools: GatewayTools,
        toolset: Toolset,
        output: list[Item],
        emit: Emit,
        telemetry: Telemetry | None = None,
        tenant: str = "",
    ) -> None:
        self._tools = tools
        self._tenant = tenant
        """Whose MCP sessions the calls use (:attr:`McpServer.tenant`)."""
        self._toolset = toolset
        self._output = output
        self._emit = emit
        policy = tools.policy
        self._executor = Executor(
            timeout=policy.timeout, max_concurrent=policy.max_concurrent_calls, telemetry=telemetry
        )
        self.catalog = Catalog(toolset.client, defer=toolset.tool_search is not None)
        if toolset.tool_search is not None:
            self.catalog.add(
                tool_search.entry(
                    toolset.tool_search, self.catalog.deferred(), self.catalog.namespaces
                )
            )
        self.sources: list[Item] = []
        """Every web search result of this response, for citations."""
        self.calls_made = 0
        """Gateway calls run so far (``max_tool_calls`` counts these)."""
        self.searches = 0
        """Web searches started by this response (``max_uses`` caps them)."""
        self._known: list[tuple[str, str]] = []
        """Every tool a declared server listed, or an earlier turn called: its server's
        label and its own name (:meth:`unoffered` names them as the model knows them)."""
        self._open_items: dict[str, tuple[Item, int]] = {}
        """Gateway items announced and not done yet, by id: closed by :meth:`abandon`
        when the response ends early."""

    def needed(self, new_input: list[Item]) -> bool:
        """Whether the response involves gateway tools: declared ones, or approvals to
        answer (a call approved without its server declared again fails, and says so)."""
        return self._toolset.gateway_owned or any(
            item.get("type") == MCP_APPROVAL_RESPONSE for item in new_input
        )

    # -- before the first round ------------------------------------------------------

    async def prepare(self, context: list[Item]) -> None:
        """Offer web search and every declared MCP server's tools."""
        if self._toolset.web_search is not None:
            self.catalog.add(web_search.entry(self._toolset.web_search.declared))
        if not self._toolset.mcp:
            return
        earlier = _listed(context)
        budget = self._tools.policy.max_discovered_tools
        fresh = [b for b in self._toolset.mcp if b.label not in earlier]
        found = await self._discover(fresh)
        labels = {binding.label for binding in self._toolset.mcp}
        for item in context:  # what the model may call again from earlier turns
            if item.get("type") in (MCP_CALL, MCP_APPROVAL_REQUEST):
                label, name = item.get("server_label"), item.get("name")
                if label in labels and isinstance(name, str):
                    self._known.append((label, name))
        for binding in self._toolset.mcp:
            tools = earlier.get(binding.label) or found.get(binding.label) or []
            self._known += [(binding.label, tool.name) for tool in tools]
            for entry in mcp.entries(binding, tools[:budget]):
                self.catalog.add(entry)
            budget = max(0, budget - len(tools))

    async def _discover(self, bindings: list[McpBinding]) -> dict[str, list[McpTool]]:
        client = self._mcp_client()
        opened = []
        for binding in bindings:
            item = mcp.list_item(binding.label)
            index = self._open(item)
            self._emit(ev.ToolProgress("response.mcp_list_tools.in_progress", index, item["id"]))
            opened.append((binding, item, index))
        results: dict[str, list[McpTool]] = {}

        def lister(binding: McpBinding) -> Call:
            async def invoke() -> str:
                results[binding.label] = await client.list_tools(self._server(binding))
                return ""

            return Call(invoke, label=f"MCP server '{binding.label}'", kind=MCP_LIST_TOOLS)

        outcomes = await self._executor.run([lister(b) for b, _, _ in opened])
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
                item["tools"] = [mcp.listed_tool(t) for t in tools]
                kind = "response.mcp_list_tools.completed"
            else:
                results.pop(binding.label, None)
                item["error"] = error.message  # a string, as the Responses API has it
                kind = "response.mcp_list_tools.failed"
            self._emit(ev.ToolProgress(kind, index, item["id"]))
            self._open_items.pop(item["id"], None)
            self._emit(ev.ItemDone(index, dict(item)))
        return results

    async def resume_approvals(
        self, context: list[Item], new_input: list[Item], limit: int | None = None
    ) -> None:
        """Run each call this request's input approves (once: a call that already ran for
        an approval is not run again when a client resends its history; and never one the
        context declines anywhere, even approved later: a denial stands). A call of a tool
        this request does not offer (its server not declared again, the tool no longer
        listed or allowed) fails without running; so does one past ``limit`` (the
        response's ``max_tool_calls``)."""
        answered = {i.get("approval_request_id") for i in context if i.get("type") == MCP_CALL}
        answered.update(
            i.get("approval_request_id")
            for i in context
            if i.get("type") == MCP_APPROVAL_RESPONSE and i.get("approve") is not True
        )
        requests = {i.get("id"): i for i in context if i.get("type") == MCP_APPROVAL_REQUEST}
        pending: list[PendingCall] = []
        for item in new_input:
            if item.get("type") != MCP_APPROVAL_RESPONSE or item.get("approve") is not True:
                continue
            request_id = item.get("approval_request_id")
            request = requests.get(request_id)
            if request is None or request_id in answered:
                continue
            answered.add(request_id)
            entry, refusal = self._approved_entry(request)
            call = mcp.call_item(entry, request.get("arguments") or "", request_id)
            index = self._open(call)
            self._emit(ev.ToolProgress("response.mcp_call.in_progress", index, call["id"]))
            self._emit(ev.McpArgumentsDone(index, call["id"], call["arguments"]))
            approved = PendingCall(entry, call, index, call["arguments"])
            if refusal is None:
                pending.append(approved)
            else:
                self._close(approved, Outcome(error=ToolError.protocol(INVALID_PARAMS, refusal)))
        if pending:
            await self.run(pending, limit, parallel=True)

    def _approved_entry(self, request: Item) -> tuple[Entry, str | None]:
        """The entry of an approved request's tool as this request offers it; or, when it
        does not, one for the call's item and why the call is refused."""
        label, name = request.get("server_label", ""), request.get("name", "")
        for entry in self._mcp_entries():
            if entry.server_label == label and entry.name == name:
                return entry, None
        refused = _refused(label, name, any(b.label == label for b in self._toolset.mcp))
        return refused, refused.refusal

    def unoffered(self, name: str) -> Entry | None:
        """A model's call of a function this request does not offer, named as a declared
        MCP server's tool (``<label>__<tool>``: one not listed or not allowed, which the
        model knows from earlier turns): an entry whose call fails without running. Not
        a client call: the client never declared it. Known by its name when the server
        listed it or an earlier turn called it; else by the ``<label>__`` it starts with."""
        for label, tool in self._known:  # named only here: a call of one is rare
            if model_name(tool, label) == name:
                return _refused(label, tool, declared=True)
        for binding in self._toolset.mcp:
            prefix = binding.label + SEPARATOR
            if name.startswith(prefix) and len(name) > len(prefix):
                return _refused(binding.label, name[len(prefix) :], declared=True)
        return None

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
            return tool_search.call_item(new_id("call"), "server")
        if entry.approval:
            return mcp.approval_item(entry)
        return mcp.call_item(entry)

    def started(self, item: Item, output_index: int) -> None:
        kind = item["type"]
        if kind != "mcp_approval_request":  # done as it closes, like a client call
            self._open_items[item["id"]] = (item, output_index)
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
        self._refuse(pending[allowed:], MAX_TOOL_CALLS)
        calls: list[Call] = []
        for call in pending[:allowed]:
            calls.append(self._call(call))
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

    def _refuse(self, pending: list[PendingCall], reason: str) -> None:
        """Close calls that will not run (``max_tool_calls`` reached) as failed."""
        refusal = Outcome(error=ToolError.protocol(GATEWAY_REFUSED, reason))
        for call in pending:
            self._close(call, refusal)

    def abandon(self) -> None:
        """Close every gateway item still open (the response ended early: cancelled,
        cut short or failed) as ``incomplete``: no dangling call."""
        for item, index in list(self._open_items.values()):
            if item["type"] == MCP_LIST_TOOLS:
                item["error"] = "The response ended before the tools were listed."
                self._emit(ev.ToolProgress("response.mcp_list_tools.failed", index, item["id"]))
            else:
                item["status"] = "incomplete"
            self._emit(ev.ItemDone(index, dict(item)))
        self._open_items.clear()

    def _call(self, pending: PendingCall) -> Call:
        entry = pending.entry
        if entry.refusal is not None:
            refusal = ToolError.protocol(INVALID_PARAMS, entry.refusal)

            async def refused() -> str:
                raise ToolFailure(refusal)

            return Call(refused, label=f"{entry.server_label}.{entry.name}", kind="mcp")
        if entry.kind == "web_search":
            search = self._tools.search
            declared = self._toolset.web_search
            allowed = declared.allowed_domains if declared is not None else ()
            blocked = declared.blocked_domains if declared is not None else ()
            cap = declared.max_uses if declared is not None else None
            self.searches += 1
            over = cap is not None and self.searches > cap

            async def searching() -> str:
                query = web_search.query_of(pending.arguments)
                pending.item["action"]["query"] = query
                if over:
                    raise ToolFailure(web_search.over_max_uses(cap or 0))
                if search is None:
                    raise ToolFailure("No web search provider is configured.")
                hits = await search.search(
                    SearchQuery(query, allowed_domains=allowed, blocked_domains=blocked)
                )
                found = web_search.sources(hits)
                pending.item["action"]["sources"] = found
                self.sources.extend(found)
                return ""

            return Call(searching, label="web search", kind="web_search")
        if entry.kind == "tool_search":
            catalog = self.catalog

            async def loading() -> str:
                arguments = pending.item["arguments"]
                pending.loaded = tool_search.search(
                    tool_search.query_of(arguments),
                    catalog.deferred(),
                    catalog.namespaces,
                    tool_search.limit_of(arguments),
                )
                return ""

            return Call(loading, label="tool search", kind="tool_search")
        binding = next(b for b in self._toolset.mcp if b.label == entry.server_label)
        client = self._mcp_client()
        name = entry.name or ""
        cap = self._tools.policy.max_output_bytes

        async def calling() -> str:
            output = await client.call_tool(
                self._server(binding), name, mcp.parse_arguments(pending.arguments)
            )
            if len(output) > cap // 4 and len(output.encode()) > cap:  # inline: rarely long
                raise ToolFailure(mcp.output_too_long(binding.label, name, output, cap))
            return output

        exclusive = None if entry.parallel_safe else f"{entry.server_label}/{name}"
        label = f"{entry.server_label}.{name}"
        return Call(calling, exclusive=exclusive, label=label, kind="mcp")

    def _close(self, pending: PendingCall, outcome: Outcome) -> None:
        item, index = pending.item, pending.output_index
        self._open_items.pop(item["id"], None)
        if item["type"] == TOOL_SEARCH_CALL:
            self._close_search(pending, outcome)
            return
        error = outcome.error
        if item["type"] == WEB_SEARCH_CALL:
            if error is None:
                item["status"] = "completed"
                self._emit(ev.ToolProgress("response.web_search_call.completed", index, item["id"]))
            else:
                item["status"] = "failed"
                item["error"] = error.message
        else:
            if error is None:
                item["status"], item["output"] = "completed", outcome.output
                kind = "response.mcp_call.completed"
            else:
                item["status"], item["error"] = "failed", mcp.call_error(error)
                kind = "response.mcp_call.failed"
            self._emit(ev.ToolProgress(kind, index, item["id"]))
        self._emit(ev.ItemDone(index, dict(item)))

    def _close_search(self, pending: PendingCall, outcome: Outcome) -> None:
        """A gateway tool search ends with its call done and, right after, its output; what
        it loaded is offered from the next round on. A failed search loads nothing."""
        item = pending.item
        item["status"] = "completed" if outcome.ok else "incomplete"
        self._emit(ev.ItemDone(pending.output_index, dict(item)))
        found = pending.loaded if outcome.ok else []
        self.catalog.load(found)
        error = outcome.error.message if outcome.error is not None else None
        output = tool_search.output_item(item["call_id"], found, error)
        index = len(self._output)
        self._output.append(output)
        self._emit(ev.ItemAdded(index, dict(output)))
        self._emit(ev.ItemDone(index, dict(output)))

    # -- helpers -------------------------------------------------------------------

    def _open(self, item: Item) -> int:
        index = len(self._output)
        self._output.append(item)
        self._open_items[item["id"]] = (item, index)
        self._emit(ev.ItemAdded(index, dict(item)))
        return index

    def _server(self, binding: McpBinding) -> McpServer:
        """The binding's server, as this response's tenant uses it."""
        return replace(binding.server, tenant=self._tenant)

    def _mcp_client(self) -> McpClient:
        client = self._tools.mcp
        if client is None:  # resolve() refuses mcp tools without a client
            raise RuntimeError("no MCP client")
        return client


def _listed(context: list[Item]) -> dict[str, list[McpTool]]:
    """Servers an earlier turn listed successfully, by label (the last listing wins)."""
    out: dict[str, list[McpTool]] = {}
    for item in context:
        if item.get("type") == MCP_LIST_TOOLS and not item.get("error"):
            out[item.get("server_label", "")] = mcp.tools_of(item)
    return out


def _refused(label: str, name: str, declared: bool) -> Entry:
    """The entry of a call of ``label``'s tool ``name`` that this request does not offer,
    saying why it is not run."""
    if declared:
        reason = f"MCP server '{label}' does not offer the tool '{name}' in this request."
    else:
        reason = f"MCP server '{label}' is not declared in this request."
    return Entry(
        kind="mcp",
        function={"type": "function", "name": model_name(name, label)},
        tool={"type": "mcp", "server_label": label},
        server_label=label,
        name=name,
        refusal=reason,
    )
