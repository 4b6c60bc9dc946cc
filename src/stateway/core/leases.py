"""Run ownership by lease: every process heart-beats, survivors end a dead owner's runs.

Every in-progress row names the process running it (``owner``, see
:mod:`stateway.core.ownership`). Each process registers that name with the
:class:`~stateway.core.ports.OwnerLeases` before it serves, with its ``lease_timeout``,
and beats (counts its row up) every third of it while it lives, whatever the number of
runs it owns. At each beat it also reads every owner's heartbeat; an owner whose count
this process has seen stand still for that owner's own lease timeout is dead (each
process is judged by the promise it made, whatever the judge's configuration): its
unfinished responses are marked ``failed`` with ``server_restarted`` (with the output a
background response's log shows, and that log given its terminal event, published to
followers elsewhere), then its row is removed. Whichever survivor sees it
first does it; another one doing it at the same time finds the response finished, or its
terminal event already logged, and leaves it (a warning).

Clocks are never compared between hosts: a count is judged by how long *this* process has
seen it unchanged, on its own monotonic clock, so skewed clocks cannot kill a live owner
(a process that just started watches an owner for its lease timeout before judging it).
Nor does time this process could not watch: after a beat of its own failed or hung (the
database out of reach, for the others too most likely), it watches every owner for a whole
lease again, so the first process back from an outage longer than a lease does not fail
the runs of the others before their next beat could land.
A process that finds its own row gone (it was judged dead: paused, or cut off from the
database, for longer than the lease) registers again and logs an error. Its runs that were
failed meanwhile end here too, as stored (``failed``, ``server_restarted``: their clients
here are told what the store and watchers elsewhere were), rather than running on to an
end nobody keeps; a run the judge could not see (unstored, or begun since) goes on. If
that check fails (the store out of reach), it is made again at each beat until it is done,
the other processes judged meanwhile.

A process that stops removes its row once its runs have ended, unless responses of its
own are still in progress (ends its settler could not store before it stopped): its row
then stays, beating no more, and a survivor fails them once the lease expires, as it
would a dead process's. Removed, it would never be judged.

A process that started on a database taking no writes (its registration refused:
:meth:`LeaseKeeper.start_unregistered`) is registered by the first beat the database
takes, or before it stores a run's first unfinished row if that comes first (the loop
awaits :meth:`LeaseKeeper.register` while ``registered`` is false): no stored row names
an owner without a lease row, which no survivor would ever judge, so that its runs are
failed should it die before its first beat. A run whose registration is refused fails as
one whose row's write is refused does. Once registered, storing a run costs the test of
that flag, no more.

The start-up check of dead processes of the same host
(:func:`~stateway.core.ownership.fail_abandoned`) stays: it ends those runs before
serving, without waiting for a lease.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable

from stateway.core.coordination import EventFanout
from stateway.core.errors import StorageError, StorageRejected
from stateway.core.journal import EventDecoder, EventEncoder
from stateway.core.ownership import died_running, fail_owned
from stateway.core.ports import OwnerLeases, ResponseRecord, ResponseStore
from stateway.core.run_registry import RunRegistry
from stateway.core.runs import CancelReason

log = logging.getLogger(__name__)


class LeaseKeeper:
    def __init__(
        self,
        store: ResponseStore,
        leases: OwnerLeases,
        owner: str,
        encode: EventEncoder,
        decode: EventDecoder,
        timeout: float,
        *,
        clock: Callable[[], float] = time.monotonic,
        fanout: EventFanout | None = None,
        runs: RunRegistry | None = None,
    ) -> None:
        self._store = store
        self._runs = runs
        """This process's runs, ended when another process failed them (a lapsed lease)."""
        self._leases = leases
        self._me = owner
        self._encode = encode
        self._decode = decode
        """Reads a dead owner's logs back: its runs' output (:mod:`.logged_output`)."""
        self.timeout = timeout
        self._clock = clock
        self._fanout = fanout
        self._seen: dict[str, tuple[int, float]] = {}
        """Each other owner's count, and when this process first saw it at that count."""
        self._blind = False
        """Whether this process's last beat failed: it saw nothing since its previous one."""
        self._lapsed = False
        """Whether this process found its lease lapsed and has not yet checked its runs
        against the store (the check failed): it is made again at each beat until done."""
        self._task: asyncio.Task[None] | None = None
        self.registered = True
        """Whether this process's lease row is registered: always, but after
        :meth:`start_unregistered` (its registration refused as it started) until the next
        beat, or the next run to store its row, registers it (a row not found is not a
        lapse, then). A row naming this process as its owner may be stored only while it
        is (:meth:`register`)."""
        self._registering = asyncio.Lock()
        """One registration at a time: the runs storing their rows and the beat."""

    async def start(self) -> None:
        """Register this process (before it serves), then beat in the background."""
        await self._leases.register(self._me, self.timeout)
        self._task = asyncio.create_task(self._beat_forever())

    def start_unregistered(self) -> None:
        """Beat in the background, the first beat the database takes registering this
        process (or a run storing its row first: :meth:`register`): its registration was
        refused as it started (a database taking no writes), and it serves meanwhile what
        needs no storing."""
        self.registered = False
        self._task = asyncio.create_task(self._beat_forever())

    async def register(self) -> None:
        """Register this process's lease row, unless it is already: awaited before a run's
        unfinished row naming this process is stored while it is not (the database took
        no writes as it started), so that a survivor can judge it should it die before
        its next beat. Raises :class:`~stateway.core.errors.StorageError` when the
        database refuses it still (the run is refused, as its row's write would be)."""
        async with self._registering:
            if not self.registered:
                await self._leases.register(self._me, self.timeout)
                self.registered = True

    async def aclose(self) -> None:
        """Stop beating and remove this process's row: call once its runs have ended,
        and its settler has stopped (nothing, on a keeper not started since it was last
        closed: a start-up that failed early, or a second close). A response of its own
        still in progress (an end the settler gave up storing) keeps the row, beating no
        more: a survivor fails it once the lease expires, as a dead process's. Removed,
        the row would never be judged, and the response would stay in progress for ever
        (a conversation held, its watchers waiting), but for a restart on the same host
        (start-up marking)."""
        task, self._task = self._task, None
        if task is None:  # never started, or closed already: no row of its own to remove
            return
        task.cancel()
        await asyncio.wait([task])
        try:
            left = [r for r in await self._store.in_progress() if r.owner == self._me]
            if left:
                log.warning(
                    "stopping with %d response(s) of its own in progress (their ends could "
                    "not be stored): this process's lease is left to expire, and another "
                    "process fails them then",
                    len(left),
                )
                return
            await self._leases.forget([self._me])
        except StorageError as exc:  # the row stays; a survivor removes it after the lease
            log.warning("removing this process's lease failed: %s", exc)

    async def beat(self) -> list[str]:
        """Renew this process's lease, judge the others'; return the owners found dead
        (whose runs were ended)."""
        began = self._clock()
        try:
            if not self.registered:
                await self.register()
            elif not await self._leases.renew(self._me):
                log.error(
                    "this process's lease had lapsed (another process judged it dead and "
                    "failed its runs); registering again"
                )
                await self._leases.register(self._me, self.timeout)
                self._lapsed = True
            if self._lapsed:
                await self._check_runs_after_lapse()
            beats = await self._leases.beats()
        except StorageError:
            self._blind = True
            raise
        now = self._clock()
        if self._blind or now - began > self.timeout / 3:
            # This process could not watch (its own beat failed or hung): the database was
            # out of reach, for the others too, most likely. What it did not see does not
            # count: each owner gets a whole lease from now to beat again, so an outage
            # longer than a lease does not make the first process back fail the others'
            # runs before they could renew.
            self._seen.clear()
            self._blind = False
        dead = []
        for owner, beat in beats.items():
            if owner == self._me:
                continue
            seen = self._seen.get(owner)
            if seen is None or seen[0] != beat.count:
                self._seen[owner] = (beat.count, now)
            elif now - seen[1] >= beat.timeout:
                dead.append(owner)
        for gone in self._seen.keys() - beats.keys():
            del self._seen[gone]
        if dead:
            await self._end_runs_of(dead)
        return dead

    async def _beat_forever(self) -> None:
        while True:
            await asyncio.sleep(self.timeout / 3)
            try:
                await self.beat()
            except StorageError as exc:
                log.warning("renewing leases failed: %s", exc)

    async def _check_runs_after_lapse(self) -> None:
        """:meth:`_end_runs_failed_elsewhere`, again at the next beat if the store fails
        it: the others are judged meanwhile (a check that keeps failing must not stall
        failover for every other process)."""
        try:
            await self._end_runs_failed_elsewhere()
        except StorageError as exc:
            log.warning(
                "checking this process's runs after its lease lapsed failed (again at the "
                "next beat): %s",
                exc,
            )
        else:
            self._lapsed = False

    async def _end_runs_failed_elsewhere(self) -> None:
        """End this process's runs whose stored response another process has failed."""
        stored = [run for run in self._runs or () if run.has_row and not run.closed]
        judged = await asyncio.gather(
            *(died_running(self._store, run.state.tenant_id, run.id) for run in stored)
        )
        ended = [run for run, died in zip(stored, judged, strict=True) if died]
        for run in ended:
            run.cancel(CancelReason.LEASE_LOST)
        if ended:
            log.error("ended %d run(s) another process had failed meanwhile", len(ended))

    async def _end_runs_of(self, dead: list[str]) -> None:
        owners = set(dead)
        owned = [r for r in await self._store.in_progress() if r.owner in owners]
        failures = await asyncio.gather(*(self._fail(r) for r in owned), return_exceptions=True)
        left: list[BaseException] = []  # to be judged again at the next beat
        refused = 0
        for record, failure in zip(owned, failures, strict=True):
            if not isinstance(failure, BaseException):
                continue
            if isinstance(failure, StorageRejected):  # refused again at every beat: left
                refused += 1
                log.error(
                    "the database refused the end of response %s of a dead process, even "
                    "without its output: it is left in progress (%s)",
                    record.id,
                    failure,
                )
                continue
            if not isinstance(failure, StorageError):
                raise failure
            log.warning("failing a response of a dead process failed: %s", failure)
            left.append(failure)
        if owned:
            log.warning(
                "marked %d response(s) of %d process(es) whose lease expired as failed "
                "(server_restarted): %s",
                len(owned) - len(left) - refused,
                len(dead),
                ", ".join(sorted(dead)),
            )
        if not left:  # else judged again at the next beat
            await self._leases.forget(dead)
            for owner in dead:
                self._seen.pop(owner, None)

    async def _fail(self, record: ResponseRecord) -> None:
        terminal = await fail_owned(self._store, record, self._encode, self._decode)
        if terminal is not None and self._fanout is not None:
            self._fanout.publish(record.tenant_id, record.id, terminal, True)
