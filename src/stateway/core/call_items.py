"""A call's item as the output assembler (:mod:`stateway.core.assembler`) writes it.

A call's first fragment opens its item: a gateway-owned tool's (an ``mcp_call``, a
``web_search_call``, a ``tool_search_call`` the gateway runs; a declared MCP server's
tool that was not offered among them: :meth:`ToolSession.unoffered`, or a deferred one no
search loaded: :func:`.tools.mcp.held_back`), else the client's:
a ``function_call`` (named back to its public tool: :meth:`Catalog.public_call`), a
``custom_tool_call``, a shell or apply_patch call (:mod:`.tools.client_hosted`) or a client
``tool_search_call``, under a call id of its own: the upstream's, unless it gave none or
one already used. Its argument fragments stream as the item's own events (a custom call's
input as its arguments' ``input`` string decodes, :class:`StreamedInput`; a shell or
apply_patch call's payload comes whole, when it closes). An
apply_patch call of several files is one call per file: the first under the model's call id,
each further one under an id of its own (the first's, numbered, unless used), added whole
after it (:meth:`CallItems.take_further`).

Closed, a client's call goes back to the client (:attr:`CallItems.tool_calls`, approval
requests among them); a gateway-owned one, completed, is run before the next round
(:attr:`CallItems.gateway_calls`), and its item is done only once it has run.

A call of a client's tool the stages withheld (:meth:`CallItems.withholds`, known by the
name on its first fragment) is never the client's: its item is no output and has no
events, and, completed, it is answered as not available (:meth:`CallItems.refuse`), for
the model to read in the next round (:mod:`stateway.core.tools.withheld`). So is a whole
call item an upstream made of a tool not offered (:meth:`CallItems.refuses`).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Final

from stateway.core import events as ev
from stateway.core.ids import new_id
from stateway.core.inference import ToolCallDelta
from stateway.core.items import (
    CUSTOM_TOOL_CALL,
    FUNCTION_CALL,
    MCP_APPROVAL_REQUEST,
    MCP_CALL,
    TOOL_SEARCH_CALL,
    WEB_SEARCH_CALL,
    Item,
)
from stateway.core.tools import client_hosted, mcp, tool_search
from stateway.core.tools.catalog import Catalog, Entry
from stateway.core.tools.custom_tools import custom_input
from stateway.core.tools.invocations import PendingCall
from stateway.core.tools.session import ToolSession
from stateway.core.tools.streamed_input import StreamedInput
from stateway.core.tools.withheld import client_call, withheld_call

Emit = Callable[[ev.Event], None]

CALL_TYPES: Final = frozenset(
    {
        FUNCTION_CALL,
        CUSTOM_TOOL_CALL,
        MCP_CALL,
        MCP_APPROVAL_REQUEST,
        WEB_SEARCH_CALL,
        TOOL_SEARCH_CALL,
        *client_hosted.CALL_TYPES.values(),
    }
)
"""The call items a round opens from a call's fragments and :meth:`CallItems.close`
closes: keep the two in step."""


def silent(_event: ev.Event) -> None:
    """Where a failed round's events go: nowhere
    (:meth:`stateway.core.assembler.OutputAssembler.abandon`)."""


class CallItems:
    """The call items of one round: each opened, streamed and closed."""

    __slots__ = (
        "_catalog",
        "_emit",
        "_further",
        "_inputs",
        "_tools",
        "_used_call_ids",
        "gateway_calls",
        "refused",
        "tool_calls",
    )

    def __init__(
        self, emit: Emit, used_call_ids: set[str], catalog: Catalog, tools: ToolSession | None
    ) -> None:
        self._emit = emit
        self._used_call_ids = used_call_ids
        self._catalog = catalog
        """Maps the model-visible names of calls back to the public tools."""
        self._tools = tools
        self.tool_calls: list[Item] = []
        """Calls that go back to the client (approval requests among them)."""
        self.gateway_calls: list[PendingCall] = []
        """Calls the gateway runs before the next round."""
        self._further: list[Item] = []
        """Calls the last one closed held (an apply_patch call's several files), each
        added after it: :meth:`take_further`."""
        self.refused = 0
        """Calls of withheld tools answered (:meth:`refuse`): the model is told, in
        another round."""
        self._inputs: dict[str, StreamedInput] = {}
        """The input of each custom call open, by item id, as said so far."""

    def silence(self) -> None:
        """Announce nothing more (the round failed)."""
        self._emit = silent

    def withholds(self, name: str | None) -> bool:
        """Whether a call of the model-visible ``name`` is of a client's tool the stages
        withheld (:meth:`WithheldCalls.withholds`): never the client's."""
        return self._tools is not None and self._tools.withheld.withholds(name, self._catalog)

    def refusing(self, item: Item) -> bool:
        """Whether the whole call ``item`` an upstream began is not the client's: once
        done, :meth:`refuses` answers it."""
        return self._refused_call(item) is not None

    def refuses(self, index: int, item: Item) -> bool:
        """Whether the whole call ``item`` an upstream made before output ``index`` is not
        the client's (:meth:`WithheldCalls.refused_item`): answered now, unseen."""
        call = self._refused_call(item)
        if call is None:
            return False
        assert self._tools is not None  # a call is refused only where tools are
        call["call_id"] = self._unused(call["call_id"])
        self._tools.withheld.answer(index, call)
        self.refused += 1
        return True

    def _refused_call(self, item: Item) -> Item | None:
        """The call answering ``item`` as not available, if it is none of the client's."""
        tools = self._tools
        if tools is None:
            return None
        return tools.withheld.refused_item(item, self._catalog, tools.native_tools)

    def withheld(self, delta: ToolCallDelta) -> Item:
        """The unseen item a call of a withheld tool opens (:meth:`withholds`)."""
        return withheld_call(self._unused(delta.call_id), delta.name or "")

    def refuse(self, index: int, item: Item, status: str, text: str) -> None:
        """Close the call of a withheld tool made before output ``index`` with its
        arguments ``text``: answered, when whole (``completed``), as not available."""
        if status == "completed" and self._tools is not None:
            item["arguments"] = text
            self._tools.withheld.answer(index, item)
            self.refused += 1

    def open(self, delta: ToolCallDelta) -> tuple[Item, Entry | None]:
        """The item a call's first fragment opens, with the catalog entry of a
        gateway-owned call (None for the client's)."""
        entry = self._catalog.entry(delta.name) if delta.name else None
        if entry is None and delta.name and self._tools is not None:
            entry = self._tools.unoffered(delta.name)  # a declared server's, not offered
        elif entry is not None and entry.deferred and entry.gateway_owned:
            entry = mcp.held_back(entry)  # a deferred server's, no search loaded it
        if entry is not None and entry.gateway_owned and self._tools is not None:
            return self._tools.open_call(entry), entry
        call_id = self._unused(delta.call_id)
        item: Item = {
            "id": new_id("fc"),
            "type": FUNCTION_CALL,
            "status": "in_progress",
            "call_id": call_id,
            "name": delta.name or "",
            "arguments": "",
        }
        if delta.name and self._catalog.is_custom(delta.name):
            del item["arguments"]
            item.update(id=new_id("ctc"), type=CUSTOM_TOOL_CALL, input="")
            self._inputs[item["id"]] = StreamedInput()
        elif entry is not None and entry.kind in client_hosted.TOOL_TYPES:
            item = client_hosted.open_call(entry.kind, call_id)
        elif entry is not None and entry.kind == "tool_search":  # the client's own search
            item = tool_search.call_item(call_id, "client")
        self._catalog.public_call(item)
        return item, None

    def _unused(self, call_id: str | None) -> str:
        """``call_id``, unless it is none or already used: then a new one; used now."""
        if not call_id or call_id in self._used_call_ids:
            call_id = new_id("call")
        self._used_call_ids.add(call_id)
        return call_id

    def take_further(self) -> list[Item]:
        """The further calls the last call closed held, for the assembler to add whole
        after it (:func:`client_hosted.further_call`); none are kept."""
        further, self._further = self._further, []
        return further

    def given(self, index: int, item: Item, streamed: str = "") -> None:
        """A whole call ``item`` an upstream gave at output ``index`` (added, not yet
        done), the client's (:meth:`refuses` said so): a custom tool's input streamed as
        its events (what of it the upstream has not ``streamed`` already), as hosted
        streams it and as :meth:`close` streams a call written here; any call the client
        runs (:func:`client_call`: a shell, apply_patch or computer use call, ...) goes
        back to it."""
        kind = item.get("type")
        if kind == CUSTOM_TOOL_CALL:
            raw = item.get("input")
            raw = raw if isinstance(raw, str) else ""
            rest = raw[len(streamed) :] if raw.startswith(streamed) else ""
            if rest:
                self._emit(ev.CustomInputDelta(index, item["id"], rest))
            self._emit(ev.CustomInputDone(index, item["id"], raw))
            self.tool_calls.append(item)
        elif client_call(item):
            self.tool_calls.append(item)

    def arguments(self, index: int, item: Item, delta: str) -> None:
        """A fragment of the arguments of the call at output ``index``, as its item's
        event (a custom call's: the input it adds, if any)."""
        kind = item["type"]
        if kind == FUNCTION_CALL:
            self._emit(ev.ArgumentsDelta(index, item["id"], delta))
        elif kind == MCP_CALL:
            self._emit(ev.McpArgumentsDelta(index, item["id"], delta))
        elif kind == CUSTOM_TOOL_CALL and (reader := self._inputs.get(item["id"])) is not None:
            said = reader.feed(delta)
            if said:
                self._emit(ev.CustomInputDelta(index, item["id"], said))

    def close(self, index: int, item: Item, entry: Entry | None, status: str, text: str) -> bool:
        """Close the call at output ``index`` with its arguments ``text`` and ``status``;
        whether its item is done now (a gateway-owned call's is done once it has run, or,
        cut short, abandoned)."""
        item_id = item["id"]
        match item["type"]:
            case "custom_tool_call":
                raw = custom_input(text)
                item["input"] = raw
                item["status"] = status
                reader = self._inputs.pop(item_id, None)
                rest = raw[reader.said :] if reader is not None else raw
                if rest:  # what was not said yet: the input goes on from what was
                    self._emit(ev.CustomInputDelta(index, item_id, rest))
                self._emit(ev.CustomInputDone(index, item_id, raw))
                self.tool_calls.append(item)
            case "tool_search_call" if item.get("execution") == "client":
                item["arguments"] = tool_search.arguments_of(text)
                item["status"] = status
                self.tool_calls.append(item)
            case "mcp_call" | "web_search_call" | "tool_search_call":
                if item["type"] == MCP_CALL:
                    item["arguments"] = text
                    self._emit(ev.McpArgumentsDone(index, item_id, text))
                elif item["type"] == TOOL_SEARCH_CALL:
                    item["arguments"] = tool_search.arguments_of(text)
                if entry is not None and status == "completed":
                    self.gateway_calls.append(PendingCall(entry, item, index, text))
                return False
            case "shell_call" | "local_shell_call" | "apply_patch_call":
                payloads = client_hosted.close_call(item, text)
                item["status"] = status
                self.tool_calls.append(item)
                for number, payload in enumerate(payloads, 2):
                    call_id = self._unused(f"{item['call_id']}_{number}")
                    call = client_hosted.further_call(item, payload, call_id)
                    self.tool_calls.append(call)
                    self._further.append(call)
            case "mcp_approval_request":
                item["arguments"] = text
                self.tool_calls.append(item)
            case _:
                self._catalog.public_call(item)
                if not text and status == "completed":  # arguments never came (vLLM's
                    text = "{}"  # stream of a call taking none): none, in JSON, as hosted
                    self._emit(ev.ArgumentsDelta(index, item_id, text))
                item["arguments"] = text
                item["status"] = status
                self._emit(ev.ArgumentsDone(index, item_id, item["name"], text))
                self.tool_calls.append(item)
        return True
