"""The runs in flight in this process, by response id, and the answers in flight relayed
from elsewhere (:class:`Relaying`): what a cancel, a watch or a delete reaches a run
through, and what shutdown ends (:meth:`RunRegistry.end_all`) and the drain waits for
(:meth:`RunRegistry.settle`), with the logs kept as their runs ended while they are
stored.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from typing import Protocol

from stateway.core.errors import GatewayError, ServerShuttingDown
from stateway.core.runs import CancelReason, Run


class Relaying(Protocol):
    """An answer in flight relayed from elsewhere: a model server's (the Chat Completions
    fast path), or the log of a run another gateway process runs (a watch of it). Not a
    run of this process, nothing of it is stored here, but the server shutting down ends
    it too."""

    async def end(self, error: GatewayError) -> None:
        """Interrupt it now; its client is answered ``error`` in its place."""
        ...


class RunRegistry:
    """Runs in flight in this process, by response id; and the answers in flight relayed
    from elsewhere (:class:`Relaying`), for :meth:`end_all` to end them at shutdown."""

    def __init__(self) -> None:
        self._runs: dict[str, Run] = {}
        self._relays: set[Relaying] = set()
        self.closing = False
        """Set by :meth:`end_all`: runs added later are ended as soon as they start."""
        self._idle: asyncio.Future[None] | None = None
        """Resolved when the last run leaves, while someone waits in :meth:`settle`."""
        self._logs: dict[tuple[str, str], asyncio.Future[None]] = {}
        """Logs kept after their run left, being stored, by tenant and response id."""
        self._writes: set[asyncio.Future[None]] = set()
        """Their writes under way (held here: a task nobody references may be collected
        before it ends)."""

    def add(self, run: Run) -> None:
        self._runs[run.id] = run
        if self.closing:
            run.cancel(CancelReason.SHUTTING_DOWN)

    def discard(self, run: Run) -> None:
        self._runs.pop(run.id, None)
        if not self._runs and self._idle is not None:
            if not self._idle.done():
                self._idle.set_result(None)
            self._idle = None

    def add_relay(self, relay: Relaying) -> None:
        """Know ``relay`` until :meth:`discard_relay`; raises :class:`ServerShuttingDown`
        once :meth:`end_all` ended the relays (it would not be ended)."""
        if self.closing:
            raise ServerShuttingDown()
        self._relays.add(relay)

    def discard_relay(self, relay: Relaying) -> None:
        self._relays.discard(relay)

    def get(self, response_id: str) -> Run | None:
        return self._runs.get(response_id)

    def of(self, tenant_id: str, response_id: str) -> Run | None:
        """The run of ``response_id`` when this process runs it for ``tenant_id``: another
        tenant's is none of the caller's."""
        run = self._runs.get(response_id)
        return run if run is not None and run.state.tenant_id == tenant_id else None

    def storing_log(self, tenant_id: str, response_id: str, stored: asyncio.Future[None]) -> None:
        """The log of ``response_id`` was kept once its run's end was being saved, and is
        stored after it (:meth:`RunJournal.keep <stateway.core.journal.RunJournal.keep>`):
        until ``stored`` is done, the run may have left while its stored response shows
        no log, so a watch waits for it (:meth:`log_stored`)."""
        key = (tenant_id, response_id)
        self._logs[key] = stored
        stored.add_done_callback(lambda _: self._logs.pop(key, None))

    def writing_log(self, write: asyncio.Future[None]) -> None:
        """Hold ``write``, the write of a log kept as its run ended (:meth:`storing_log`),
        until it is done."""
        self._writes.add(write)
        write.add_done_callback(self._writes.discard)

    async def log_stored(self, tenant_id: str, response_id: str) -> None:
        """Return once the log of ``response_id`` being stored after its run's end is
        readable (its write done, stored or not); at once when none is."""
        stored = self._logs.get((tenant_id, response_id))
        if stored is not None:
            await asyncio.shield(stored)

    def __len__(self) -> int:
        return len(self._runs)

    def __iter__(self) -> Iterator[Run]:
        return iter(list(self._runs.values()))

    async def settle(self) -> None:
        """Return once no run is in flight, and no log kept as its run ended is still
        being stored: background runs have no request that a server draining its
        connections would wait for, and a log kept for a resume is resumed after the
        restart."""
        while self._runs or self._logs:
            if self._runs:
                self._idle = self._idle or asyncio.get_running_loop().create_future()
                await asyncio.shield(self._idle)
            else:
                await asyncio.wait(list(self._logs.values()))

    async def end_all(self, reason: CancelReason) -> int:
        """Cancel every run for ``reason`` and wait until each has ended; with
        ``SHUTTING_DOWN``, runs registered from now on end as soon as they start, and the
        relays in flight are ended as ``server_shutting_down`` (their requests answer it
        as they end; relays are added no more). Returns how many it ended (runs and
        relays)."""
        runs = list(self._runs.values())
        relays = list(self._relays) if reason is CancelReason.SHUTTING_DOWN else []
        if reason is CancelReason.SHUTTING_DOWN:
            self.closing = True
            for relay in relays:
                await relay.end(ServerShuttingDown())
        for run in runs:
            run.cancel(reason)
        for run in runs:
            await run.wait()
        return len(runs) + len(relays)
