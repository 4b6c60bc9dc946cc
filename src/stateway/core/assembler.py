"""Output assembly: backend deltas in, output items and canonical events out.

One ``OutputAssembler`` serves one round. It opens an item when its first delta arrives
(reasoning, a message, a function call), closes the open item when a different one
starts, and closes whatever is still open when the round ends, as ``completed`` or, when
the round was cut short, ``incomplete`` (a round that failed: ``incomplete`` and not
announced done, :meth:`OutputAssembler.abandon`). A message holds an ``output_text`` part
(with the ``citations`` an upstream gave its text, :meth:`OutputAssembler.citation`), a
``refusal`` part after it when the model declined, or the refusal alone; text after a
refusal starts another message, as does an upstream's :meth:`OutputAssembler.message`.
A message's and a reasoning item's parts, done as the item closes:
:mod:`stateway.core.item_parts`. The items an upstream gives whole
(:meth:`OutputAssembler.item`) and the calls it begins whose input streams
(:meth:`OutputAssembler.call_begun`): :mod:`stateway.core.given_items`.

Calls are written one at a time, as the Responses and Messages streams show them: while
one is open, the fragments of another index wait (a Chat upstream may interleave its
parallel calls' fragments by index), and that call is written whole once the open one
closes: when the round ends or other output starts. Each call's item, and where it goes
once closed (back to the client, or run by the gateway): :mod:`stateway.core.call_items`.
A call of a tool the stages withheld is written unseen: open, but neither in the output
nor announced, and answered once closed (:attr:`OutputAssembler.refused`).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Final

from stateway.core import events as ev
from stateway.core.call_items import CALL_TYPES, CallItems, Emit, silent
from stateway.core.compaction.reasoning_output import ReasoningOutput
from stateway.core.errors import UpstreamError
from stateway.core.given_items import GivenItems
from stateway.core.ids import new_id
from stateway.core.inference import ToolCallDelta
from stateway.core.item_parts import (
    break_summary,
    close_message,
    close_reasoning,
    close_text,
    finish_reasoning,
    open_text,
)
from stateway.core.items import MESSAGE, REASONING, Item
from stateway.core.open_item import OpenItem, new_call, new_reasoning, text_part
from stateway.core.tools.catalog import Catalog
from stateway.core.tools.invocations import PendingCall
from stateway.core.tools.session import ToolSession

WRITTEN: Final = frozenset({MESSAGE, REASONING}) | CALL_TYPES
"""The item types an assembler opens and writes from deltas (so an item it may leave
cut mid-way); any other is added whole."""


class OutputAssembler:
    def __init__(
        self,
        output: list[Item],
        emit: Emit,
        used_call_ids: set[str],
        catalog: Catalog | None = None,
        tools: ToolSession | None = None,
        reasoning: ReasoningOutput | None = None,
        wrap: Callable[[str, str | None], str] | None = None,
    ) -> None:
        self._output = output
        self._reasoning = reasoning
        """Summaries and sealing of reasoning items
        (:mod:`stateway.core.compaction.reasoning_output`)."""
        self._wrap = wrap
        """Seals an upstream's own seal over for the tenant, with the thinking text it signs
        (:func:`stateway.core.reasoning.wrapped`); None: kept as it came."""
        self._tools = tools
        self._emit = emit
        self._calls = CallItems(
            emit,
            used_call_ids,
            tools.catalog if tools is not None else catalog or Catalog([]),
            tools,
        )
        self._given: GivenItems | None = None
        """The items an upstream gives whole, and the calls it begins (:meth:`_whole`)."""
        self._open: OpenItem | None = None
        self._closed_tools: set[int] = set()
        self._held: dict[int, list[ToolCallDelta]] = {}
        """Fragments of the calls after the one being written, by index."""
        self.started = False
        """Whether any output event was emitted: past this point failover is forbidden."""
        self._abandoned = False
        """The round failed (:meth:`abandon`): an item opened now is never announced."""

    @property
    def tool_calls(self) -> list[Item]:
        """Calls that go back to the client (approval requests among them)."""
        return self._calls.tool_calls

    @property
    def gateway_calls(self) -> list[PendingCall]:
        """Calls the gateway runs before the next round."""
        return self._calls.gateway_calls

    @property
    def refused(self) -> int:
        """Calls of withheld tools this round answered: the model is told in the next."""
        return self._calls.refused

    def text(self, delta: str, logprobs: list[Item] | None = None) -> None:
        current = self._open
        writing = current is not None and current.item["type"] == MESSAGE and not current.refusal
        if not delta and (not logprobs or not writing):
            return  # tokens with no text yet belong to the message being written, if any
        if current is None or not writing:
            current = self._start_message(text=True)
        elif not current.text_part:  # begun by the upstream's MessageStart
            open_text(self._emit, current)
        current.chunks.append(delta)
        if logprobs is not None:
            if current.logprobs is None:
                current.logprobs = []
            current.logprobs.extend(logprobs)
        self._emit(ev.TextDelta(current.index, 0, current.item["id"], delta, logprobs))

    def citation(self, citation: Item) -> None:
        """A source of the message's text, as its upstream cites it (an Anthropic
        citation): kept on the ``output_text`` part, opened for it if the text has not
        begun."""
        self._writing_text().citations.append(citation)

    def annotation(self, annotation: Item) -> None:
        """An annotation of the message's text, as its upstream gives it (a Responses
        upstream's): kept on the ``output_text`` part, opened for it if the text has not
        begun, and announced as the text is done."""
        self._writing_text().annotations.append(annotation)

    def _writing_text(self) -> OpenItem:
        """The message whose text is being written, its ``output_text`` part open: the
        open one, else a new one."""
        current = self._open
        if current is None or current.item["type"] != MESSAGE or current.refusal is not None:
            return self._start_message(text=True)
        if not current.text_part:  # begun by the upstream's MessageStart
            open_text(self._emit, current)
        return current

    def refusal(self, delta: str) -> None:
        """The model declining: a ``refusal`` part of the message being written (after
        its text, if it has any), or of a message of its own."""
        if not delta:
            return
        current = self._open
        if current is None or current.item["type"] != MESSAGE:
            current = self._start_message()
        index = 1 if current.text_part else 0
        if current.refusal is None:
            if current.text_part:  # the text is done before the refusal's part begins
                current.text_done = close_text(
                    self._emit, current, "".join(current.chunks), self._tools
                )
            current.refusal = []
            part = {"type": "refusal", "refusal": ""}
            self._emit(ev.PartAdded(current.index, index, current.item["id"], part))
        current.refusal.append(delta)
        self._emit(ev.RefusalDelta(current.index, index, current.item["id"], delta))

    def message(self, phase: str | None) -> None:
        """An upstream's new message begins (its ``phase``, if given, kept on the item):
        what is being written is closed, and the text that follows goes to this one."""
        self._start_message(phase)

    def reasoning(self, delta: str) -> None:
        if not delta:
            return
        current = self._open
        if current is None or current.item["type"] != REASONING:
            current = self._start_reasoning()
        current.chunks.append(delta)
        self._emit(ev.ReasoningDelta(current.index, 0, current.item["id"], delta))
        if self._reasoning is not None and self._reasoning.summary:
            part = len(current.breaks) if current.breaks else 0
            self._emit(ev.SummaryTextDelta(current.index, part, current.item["id"], delta))

    def summary_break(self, text: str) -> None:
        """The reasoning's summary goes on in another part, ``text`` between the two in
        the reasoning's text (:func:`break_summary`); nothing while no reasoning is being
        written."""
        current = self._open
        if current is not None and current.item["type"] == REASONING:
            break_summary(self._emit, self._reasoning, current, text)

    def reasoning_signature(self, signature: str) -> None:
        """Seal the reasoning just streamed (opened empty if none was: thinking sent
        without its text) and close it: the next reasoning is another item."""
        current = self._open
        if current is None or current.item["type"] != REASONING:
            current = self._start_reasoning()
        current.item["encrypted_content"] = self._wrapped(signature, "".join(current.chunks))
        self._close("completed")

    def _wrapped(self, seal: str, text: str | None) -> str:
        return self._wrap(seal, text) if self._wrap is not None else seal

    def tool_call(self, delta: ToolCallDelta) -> None:
        """A fragment of a call. While a call is being written, the fragments of another
        index are held (servers may interleave parallel calls' fragments by index) until
        it closes: then each held call is written whole, in index order. A new call starts
        at a new index or, for servers that omit indexes, at a new upstream id naming its
        function (:func:`~stateway.core.open_item.new_call`); a bare fragment for a call
        already closed is an error."""
        current = self._open
        if current is not None and current.tool_index not in (None, delta.index):
            self._held.setdefault(delta.index, []).append(delta)
            return
        self._write_call(delta)

    def _write_call(self, delta: ToolCallDelta) -> None:
        current = self._open
        if current is None or current.tool_index != delta.index or new_call(current, delta):
            if delta.call_id is None and delta.index in self._closed_tools:
                raise UpstreamError(
                    "The model server interleaved tool call fragments; cannot assemble them."
                )
            current = self._start_tool_call(delta)
        elif (  # gateway items have no name; one shown nameless is never named withheld
            delta.name and current.item.get("name") == "" and not self._calls.withholds(delta.name)
        ):
            current.item["name"] = delta.name
        if delta.arguments:
            current.chunks.append(delta.arguments)
            if not current.withheld:
                self._calls.arguments(current.index, current.item, delta.arguments)

    def call_begun(self, item: Item) -> None:
        """A custom tool's call an upstream began (its ``call_id`` and name; no input
        yet): added now, its input streamed as it comes (:meth:`call_input`), done with
        its whole item (:meth:`item`). One of a tool not offered is not shown
        (:meth:`GivenItems.begun`)."""
        self._release("completed")
        self._close("completed")
        shown = self._whole().begun(item)
        if shown is not None:
            opened = self._start(shown)
            opened.begun, opened.upstream_id = True, item.get("call_id")

    def call_input(self, text: str) -> None:
        """A piece of the input of the call an upstream began, as it sent it; nothing
        while none is open (one not shown)."""
        self._whole().input(self._open, text)

    def item(self, item: Item) -> None:
        """A whole output item passed through as it came, added and done at once
        (:meth:`GivenItems.add`); a custom tool's call streams its input between the two,
        as one written here does (or, begun, it ends: :meth:`call_begun`)."""
        current = self._open
        if current is not None and current.begun and current.upstream_id == item.get("call_id"):
            self._open = None
            self._whole().end(current, item)
        elif not self._whole().ended(item):
            self._release("completed")
            self._close("completed")
            if self._whole().add(item):
                self.started = True

    def _whole(self) -> GivenItems:
        """The round's whole items and begun calls, made at the first (most rounds: none)."""
        if self._given is None:
            self._given = GivenItems(self._output, self._emit, self._calls, self._wrap)
        return self._given

    def resume(self, item: OpenItem) -> None:
        """Go on with ``item`` (this assembler has written nothing), an item another one
        opened and never closed: a run cut off with its process, its output rebuilt from
        its log (:mod:`stateway.core.logged_output`) and finished as a cancel finishes it."""
        self._open = item
        self.started = True

    def output_so_far(self) -> list[Item]:
        """The output with the item being written as it stands (its text or arguments so
        far, not yet in the item itself): what a reader of a running response sees."""
        current = self._open
        output = list(self._output)
        if current is not None and not current.withheld:
            output[current.index] = current.so_far()
        return output

    def finish(self, status: str = "completed") -> None:
        """Close the open item with ``status`` (``completed`` or ``incomplete``), and the
        calls held after it."""
        self._release(status)
        self._close(status)

    def abandon(self) -> None:
        """The round failed: what is open is closed ``incomplete`` in the output, but not
        announced done. Clients take an item done as final (Codex runs a call, Claude Code
        a ``tool_use`` block) and the upstream APIs end a failed stream with its error."""
        self._emit = silent
        self._calls.silence()
        if self._given is not None:
            self._given.silence()
        self._abandoned = True
        self.finish("incomplete")

    def _release(self, status: str) -> None:
        """Each held call written, in index order, each closing the one before it: as
        ``completed``, since another call followed it (only the last item of a response
        cut short is ``incomplete``), unless the round failed, which finishes nothing."""
        held, self._held = self._held, {}
        before = status if self._abandoned else "completed"
        for index in sorted(held):
            self._close(before)
            for fragment in held[index]:
                self._write_call(fragment)

    def _start(self, item: Item, tool_index: int | None = None) -> OpenItem:
        opened = self._opening(item, tool_index)
        self.started = True
        self._output.append(item)
        self._emit(ev.ItemAdded(opened.index, dict(item)))
        return opened

    def _opening(self, item: Item, tool_index: int | None) -> OpenItem:
        """``item`` open, once what was open is closed (and the calls held, if any, written
        first: other output follows them), at the end of the output."""
        if self._held:
            self._release("completed")
        self._close("completed")
        opened = OpenItem(len(self._output), item, tool_index)
        self._open = opened
        return opened

    def _start_message(self, phase: str | None = None, *, text: bool = False) -> OpenItem:
        """A new message (with its ``output_text`` part open, if ``text``)."""
        item: Item = {
            "id": new_id("msg"),
            "type": MESSAGE,
            "status": "in_progress",
            "role": "assistant",
            "content": [],
        }
        if phase is not None:
            item["phase"] = phase
        opened = self._start(item)
        if text:  # inline: one call less per message
            opened.text_part = True
            self._emit(ev.PartAdded(opened.index, 0, item["id"], text_part("output_text", "")))
        return opened

    def _start_reasoning(self) -> OpenItem:
        item = new_reasoning()
        opened = self._start(item)
        self._emit(ev.PartAdded(opened.index, 0, item["id"], text_part("reasoning_text", "")))
        if self._reasoning is not None and self._reasoning.summary:
            self._emit(ev.SummaryPartAdded(opened.index, 0, item["id"]))
        return opened

    def _start_tool_call(self, delta: ToolCallDelta) -> OpenItem:
        if self._calls.withholds(delta.name):  # never the client's: not output, not shown
            withheld = self._opening(self._calls.withheld(delta), delta.index)
            withheld.upstream_id, withheld.withheld = delta.call_id, True
            return withheld
        item, entry = self._calls.open(delta)
        opened = self._start(item, delta.index)
        opened.upstream_id = delta.call_id
        if entry is not None and self._tools is not None:  # a gateway-owned call
            opened.entry = entry
            if not self._abandoned:
                self._tools.started(item, opened.index)
            elif "status" in item:  # a held call written as the round failed: never
                item["status"] = "incomplete"  # announced, so never kept open to close
        return opened

    def _close(self, status: str) -> None:
        current = self._open
        if current is None:
            return
        self._open = None
        item = current.item
        text = "".join(current.chunks)
        if current.tool_index is not None:  # a call
            self._closed_tools.add(current.tool_index)
        if current.withheld:  # answered unseen (when whole), never announced done
            self._calls.refuse(current.index, item, status, text)
            return
        if current.begun:  # cut short, or other output came before its whole item
            self._whole().cut(current, status)
            return
        match item["type"]:
            case "message":
                item["content"] = close_message(self._emit, current, text, self._tools)
                item["status"] = status
            case "reasoning":
                item["content"] = close_reasoning(self._emit, current, text)
                item["status"] = status
                if self._reasoning is not None:
                    finish_reasoning(self._emit, self._reasoning, current, text)
            case _:  # a call
                if not self._calls.close(current.index, item, current.entry, status, text):
                    return  # its item is done once it has run (or, cut short, abandoned)
        self._emit(ev.ItemDone(current.index, dict(item)))
        for further in self._calls.take_further():  # an apply_patch call's further files
            self._whole().further(further)
