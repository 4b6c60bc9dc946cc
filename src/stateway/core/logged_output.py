"""The output of a run that died with its process, rebuilt from its event log.

A run whose process died (killed; judged dead by its lease) is ended ``failed`` by another
process (:mod:`.ownership`, :mod:`.leases`), which knows of its output only what its event
log stored: a background run's, a journaled stream's (keyed, WebSocket). The items the run
had finished are in the log whole (``ItemDone``). The one it was writing is rebuilt from
its deltas as the run's :class:`~.open_item.OpenItem`, then ended as a cancel ends it
(:meth:`Loop.execute <stateway.core.loop.Loop.execute>`): an
:class:`~.assembler.OutputAssembler` finishes it ``incomplete`` (a message with its text so
far, a call with its arguments so far), then the gateway tools' items still open are
closed as :class:`~.tools.open_items.OpenItems` closes them (``incomplete``; a listing
failed). So a run that died keeps what a cancelled one keeps, as far as its log went: the
events of its last 0.2 s may have died with it.

A custom tool's call (Codex's freeform ``apply_patch``) streams its raw input, never the
function arguments a Chat upstream wrote it as: its input is rebuilt from those events,
and the call ended as one an upstream began and never finished (its input as it stands).

What a log does not hold is not rebuilt: the arguments of a call that streams none (a
shell call's, a tool search's, an approval request's), calls held
back while another was written (:mod:`.assembler`), the citations of the text being
written, and the seal of the reasoning being written (a failed response's output is never
continued from). Its usage is not in the log either: it stays unknown.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable

from stateway.core import events as ev
from stateway.core.assembler import WRITTEN, OutputAssembler
from stateway.core.call_items import silent
from stateway.core.compaction.reasoning_output import ReasoningOutput
from stateway.core.items import CUSTOM_TOOL_CALL, Item
from stateway.core.journal import EventDecoder
from stateway.core.open_item import OpenItem
from stateway.core.tools.open_items import OpenItems

log = logging.getLogger(__name__)


def logged_output(payloads: Iterable[bytes], decode: EventDecoder) -> list[Item]:
    """The output the logged ``payloads`` (a run's log from its first event, cut off)
    show, ended as a cancel would have ended it at that point; none, logged, when the log
    cannot be replayed: it is read at start-up, which it must never stop."""
    replay = _Replay()
    try:
        for payload in payloads:
            event = decode(payload)
            if event is not None:
                replay.apply(event)
        return replay.end()
    except Exception:
        log.exception("a dead run's output could not be rebuilt from its log; it is kept empty")
        return []


class _Replay:
    """A log's output items as its events build them."""

    __slots__ = ("open", "output", "summary", "writing")

    def __init__(self) -> None:
        self.output: list[Item] = []
        self.open = OpenItems(self.output, silent)
        """Every item added and not done yet."""
        self.writing: OpenItem | None = None
        """The item the run's assembler was writing, with its deltas so far."""
        self.summary = False
        """Whether that item (reasoning) was also streamed as its summary."""

    def apply(self, event: ev.Event) -> None:
        match event:
            case ev.ItemAdded(output_index=index, item=added):
                item = dict(added)
                if self._put(index, item):
                    self.open.added(item, index)
                    written = item.get("type") in WRITTEN
                    self.writing = OpenItem(index, item) if written else None
                    if self.writing is not None and item["type"] == CUSTOM_TOOL_CALL:
                        self.writing.begun = True  # its input is logged raw, as begun
                    self.summary = False
            case ev.ItemDone(output_index=index, item=done):
                item = dict(done)
                if self._put(index, item):
                    self.open.done(item, index)
                    if self.writing is not None and self.writing.index == index:
                        self.writing = None
            case _:
                writing = self.writing
                if writing is not None and getattr(event, "output_index", None) == writing.index:
                    self._write(writing, event)

    def _write(self, writing: OpenItem, event: ev.Event) -> None:
        """An event of the item being written: its parts and deltas gathered as the
        assembler gathers them."""
        match event:
            case ev.PartAdded(part={"type": "output_text"}):
                writing.text_part = True
            case ev.PartAdded(part={"type": "refusal"}) if writing.refusal is None:
                writing.refusal = []
            case ev.TextDelta(delta=delta, logprobs=logprobs):
                writing.chunks.append(delta)
                if logprobs:
                    if writing.logprobs is None:
                        writing.logprobs = []
                    writing.logprobs.extend(logprobs)
            case ev.RefusalDelta(delta=delta):
                if writing.refusal is None:
                    writing.refusal = []
                writing.refusal.append(delta)
            case (
                ev.ReasoningDelta(delta=delta)
                | ev.ArgumentsDelta(delta=delta)
                | ev.McpArgumentsDelta(delta=delta)
                | ev.CustomInputDelta(delta=delta)
            ):
                writing.chunks.append(delta)
            case ev.CustomInputDone(input=whole):  # all of it, whatever was said before
                writing.chunks[:] = [whole]
            case ev.McpArgumentsDone(arguments=arguments):  # closed: its call would run next
                writing.item["arguments"] = arguments
                self.writing = None
            case ev.SummaryPartAdded(summary_index=part):
                self.summary = True
                if part:  # after the break its text was just given
                    if writing.breaks is None:
                        writing.breaks = []
                    writing.breaks.append(len(writing.chunks) - 1)

    def _put(self, index: int, item: Item) -> bool:
        """``item`` at ``index`` of the output (the next one, or one there already);
        False, and nothing put, for an index past the end: a log with a gap."""
        if index < 0 or index > len(self.output):
            return False
        self.output[index : index + 1] = [item]
        return True

    def _closed(self, event: ev.Event) -> None:
        """The events of the item being written as the assembler ends it: once it is done
        it is no longer open."""
        if isinstance(event, ev.ItemDone):
            self.apply(event)

    def end(self) -> list[Item]:
        """The output ended as a cancel ends it: the item being written finished
        ``incomplete``, then the gateway's items still open closed."""
        writing = self.writing
        reasoning = ReasoningOutput(summary=True) if self.summary else None
        assembler = OutputAssembler(self.output, self._closed, set(), reasoning=reasoning)
        if writing is not None:
            assembler.resume(writing)
        assembler.finish("incomplete")
        self.open.abandon()
        return self.output
