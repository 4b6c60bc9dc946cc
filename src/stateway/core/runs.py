"""Runs: one generation in flight, with its append-only event log.

The producer (the loop) appends events and never waits on a subscriber; each subscriber
reads the log from any position at its own pace, so none can stall the run or lose an
event. The position of an event in the log is its ``sequence_number``.
"""

from __future__ import annotations

import asyncio
import enum
from collections.abc import AsyncGenerator, AsyncIterator, Awaitable, Callable, Coroutine
from contextlib import aclosing
from dataclasses import replace
from typing import TYPE_CHECKING

from stateway.core.errors import GatewayError
from stateway.core.events import Event, Notice
from stateway.core.items import Item
from stateway.core.response import UNFINISHED, ResponseState

if TYPE_CHECKING:
    from stateway.core.compaction.between_rounds import Threshold
    from stateway.core.compaction.truncation import Fitted
    from stateway.core.journal import RunJournal
    from stateway.core.run_row import QueuedStart
    from stateway.core.window_room import WindowRoom


class CancelReason(enum.Enum):
    """Why a run was interrupted; decides how it is stored and how it ends."""

    CLIENT_GONE = "client_gone"
    """Its only client went away: stored ``incomplete`` (``client_disconnected``)."""
    DELETED = "deleted"
    """Its response was deleted: it ends ``cancelled``; the deleted row stays deleted."""
    SHUTTING_DOWN = "shutting_down"
    """The server is stopping after the drain window: stored ``failed``
    (``server_shutting_down``); a waiting non-stream client gets a 503."""
    CANCELLED = "cancelled"
    """Its client cancelled it (a background response): it ends ``cancelled``, keeping the
    output produced so far."""
    LEASE_LOST = "lease_lost"
    """Its process was paused past its lease and another one failed its response meanwhile
    (``server_restarted``): it ends failed the same way; its stored end stays as it is."""
    INTERRUPTED = "interrupted"
    """Its client interrupted it (a WebSocket ``response.interrupt``): it ends
    ``incomplete`` (``interrupted``) with the items it had completed; those it was writing
    are discarded. It continues like a completed response."""


class Run:
    __slots__ = (
        "__weakref__",  # a finished run must be freed by reference counting; tests watch it
        "_done",
        "_waiters",
        "before_end",
        "began",
        "cache_salt",
        "cancel_reason",
        "cancellable",
        "compaction_threshold",
        "context",
        "driver",
        "error",
        "events",
        "finishing",
        "fitted",
        "generate",
        "has_row",
        "hidden_rounds",
        "input_items",
        "interrupted",
        "journal",
        "progress",
        "queued",
        "state",
        "steered",
        "stored_input",
        "task",
        "window_room",
    )

    def __init__(
        self,
        state: ResponseState,
        input_items: list[Item],
        *,
        generate: bool = True,
        hidden_rounds: bool = False,
    ) -> None:
        self.state = state
        self.input_items = input_items
        """This request's own input."""
        self.stored_input = input_items
        """The input stored with the response: ``input_items``, after the prior items
        when those are not in the store (:attr:`CreateResponse.prior_stored`)."""
        self.generate = generate
        """False: a prewarm, which ends ``completed`` without output or inference."""
        self.hidden_rounds = hidden_rounds
        """Its client is shown only :func:`~stateway.core.hidden.visible` items (Chat
        Completions, Messages): what it has seen is told by those alone."""
        self.context: list[Item] = []
        """The items before the output (the prior items, then the input), as the run was
        started with them, as a stored chain gives them: unchecked, holding what the
        model is not shown (a call cut short, one truncated away or summarized), whose
        ids a call the run makes must not take. With the output, what a continuation of
        it sees (a WebSocket checkpoint), checked again as a chain read from the store."""
        self.fitted: Fitted | None = None
        """Its context fitted to each candidate's window, when its candidates declare
        different ones (``truncation: "auto"``): what each attempt is sent."""
        self.compaction_threshold: Threshold | None = None
        """Its ``context_management`` threshold, which its tool loop checks before each
        later round, when it did not compact as it started."""
        self.window_room: WindowRoom | None = None
        """The windows its candidates refused its output tokens for, once one has: its
        later rounds ask each only the room their prompt leaves (Messages' ``max_tokens``)."""
        self.cache_salt: str | None = None
        """Its tenant's ``cache_salt``, which every upstream call it makes carries (its
        rounds', its compaction's; :attr:`InferenceRequest.cache_salt
        <stateway.core.inference.InferenceRequest.cache_salt>`)."""
        self.events: list[Event] = []
        self.error: GatewayError | None = None
        """Set when the run failed before any output its client was shown: non-streaming
        callers raise it, streams answer with it as an HTTP error."""
        self.task: asyncio.Task[None] | None = None
        """The task driving the run: its own, or its caller's (:attr:`driver`)."""
        self.driver: Coroutine[None, None, None] | None = None
        """An attached run's driving, for its caller to await in its own task
        (:attr:`CreateResponse.attach <stateway.core.commands.CreateResponse.attach>`)."""
        self.cancellable = False
        """True while generating: a cancel then interrupts the round. Once the run is
        finishing (persisting, emitting its terminal event) a cancel changes nothing."""
        self.has_row = False
        """Set by the loop when it writes an in-progress row (streams); other stored runs
        are written once, at their end."""
        self.began = False
        """Set by the loop as it starts; a cancel before then is applied as it starts."""
        self.interrupted = False
        """Set when :meth:`cancel` cancelled the task driving the run (an attached run's
        caller tells its own cancel from anyone else's by it)."""
        self.cancel_reason: CancelReason | None = None
        """Set by the first :meth:`cancel` that came before the run began finishing; a
        run cancelled before it started generating ends as soon as it starts."""
        self.finishing = False
        """Set by the loop as it starts finishing: its terminal event comes next, so no
        :meth:`note` is logged any more."""
        self.steered = False
        """Set when input was queued to steer the run (WebSocket ``response.steer``): it
        ends ``incomplete`` (``steered``) at its next safe boundary, before another round
        of its gateway tool loop, and a successor takes the input."""
        self.queued: QueuedStart | None = None
        """A background run's wait to start, set by the loop: ``queued`` until it starts
        working (:class:`~stateway.core.run_row.QueuedStart`)."""
        self.journal: RunJournal | None = None
        """A background run's wire log: its events encoded once and persisted in batches."""
        self.before_end: Callable[[], Awaitable[object]] | None = None
        """Awaited once as the run starts finishing, before its end is stored or its
        terminal event emitted (:meth:`ending`): the give-back of its concurrent request's
        slot, so that whoever learns of the end finds the slot free on every replica."""
        self.progress: Callable[[], list[Item]] | None = None
        """The output as it stands, the item being written included (the round's
        :meth:`~stateway.core.assembler.OutputAssembler.output_so_far`), set by the loop."""
        self._waiters: list[asyncio.Future[None]] = []
        """One future per subscriber that is caught up and waiting for more."""
        self._done = asyncio.Event()

    @property
    def id(self) -> str:
        return self.state.id

    def snapshot(self) -> ResponseState:
        """The response as a reader sees it while it runs: its output so far, the text of
        the item being written included, and in progress (or still queued) until its
        terminal event (an end not yet stored is not its answer: the save may fail, and
        the run end failed)."""
        state = self.state
        if self.closed:
            return state
        output = state.output if self.progress is None else self.progress()
        if state.status in UNFINISHED:
            return state if self.progress is None else replace(state, output=output)
        queued = self.queued is not None and not self.queued.started  # ending from queued
        return replace(
            state,
            output=output,
            status="queued" if queued else "in_progress",
            error=None,
            incomplete_reason=None,
            completed_at=None,
        )

    def emit(self, event: Event) -> None:
        self.events.append(event)
        if self._waiters:  # most events find none (an attached run has no subscriber)
            self._wake()

    async def ending(self) -> None:
        """Await :attr:`before_end`, the first time only: its driver calls it as the run
        starts finishing, before anything tells of the end."""
        step, self.before_end = self.before_end, None
        if step is not None:
            await step()

    def note(self, notice: Notice) -> bool:
        """Log ``notice`` at the next sequence number, between the run's own events; False
        (nothing logged) before ``response.created`` or once the run is finishing."""
        if not self.events or self.finishing or self.closed:
            return False
        self.emit(notice)
        return True

    def close(self) -> None:
        """Mark the log complete; called once the terminal event is in it (or the run died)."""
        self.progress = None  # its round's assembler refers back to the run
        self.queued = None  # as does its wait to start
        self._done.set()
        self._wake()

    @property
    def closed(self) -> bool:
        return self._done.is_set()

    async def wait(self) -> None:
        await self._done.wait()

    async def announced(self) -> None:
        """Wait for the run's first event or its end. A stored stream announces itself
        (``response.created``) once its in-progress row is committed (:mod:`.run_row`):
        from then on any process on the database finds the response by its id."""
        async with aclosing(self.subscribe_batches()) as batches:
            async for _ in batches:  # the first batch, or none once it ended
                return

    def cancel(self, reason: CancelReason = CancelReason.CLIENT_GONE) -> None:
        """Interrupt the run for ``reason``; the first reason wins, and a run that is
        already finishing is left to finish."""
        if self.cancel_reason is not None or self.closed:
            return
        if self.cancellable:
            if self.task is None or self.task.done():
                return
            self.task.cancel()
            self.interrupted = True
        elif self.began:  # finishing: too late to change how it ends
            return
        self.cancel_reason = reason

    async def subscribe(self, after: int = -1) -> AsyncIterator[tuple[int, Event]]:
        """Yield ``(sequence_number, event)`` for every event after ``after``, live."""
        async for first, events in self.subscribe_batches(after):
            for offset, event in enumerate(events):
                yield first + offset, event

    async def subscribe_batches(
        self, after: int = -1
    ) -> AsyncGenerator[tuple[int, list[Event]], None]:
        """Yield ``(first sequence_number, events)``: everything logged since the last
        batch, so a subscriber that fell behind catches up in one step."""
        position = after + 1
        while True:
            events = self.events
            if position < len(events):
                batch = events[position:]
                yield position, batch
                position += len(batch)
                continue
            if self._done.is_set():
                return
            waiter = asyncio.get_running_loop().create_future()
            self._waiters.append(waiter)
            # A subscriber cancelled here leaves a cancelled future; the next wake drops it.
            await waiter

    def _wake(self) -> None:
        if self._waiters:
            waiters, self._waiters = self._waiters, []
            for waiter in waiters:
                if not waiter.done():
                    waiter.set_result(None)
