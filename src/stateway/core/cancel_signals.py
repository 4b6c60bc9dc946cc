"""The cancel signals between processes (:class:`~stateway.core.coordination.CancelSignals`,
shared through Redis): those a ``DELETE`` sends for a response another process may be
running, sent again while its owner may have missed one, and those other processes send
for runs here, acted on. A cancel's own signals, and its wait for the owner to end the
run, are :func:`stateway.core.background.cancel`'s.
"""

from __future__ import annotations

import asyncio
import logging
import time
from contextlib import suppress
from typing import Final

from stateway.core.coordination import CancelSignals
from stateway.core.errors import StorageError
from stateway.core.ports import ResponseStore
from stateway.core.run_registry import RunRegistry
from stateway.core.runs import CancelReason, Run

log = logging.getLogger(__name__)

CANCEL_WAIT: Final = 30.0
"""Seconds a cancel sent to another process waits for the response to end there."""
RESEND_INTERVAL: Final = 1.0
"""Seconds between the sends of a cancel signal while it waits: a signal reaches only the
processes subscribed as it is sent, and an owner subscribing again (Redis restarted, its
connection dropped) would miss a single one and run on."""


class DeleteSignals:
    """The cancel signals a ``DELETE`` sends for a response another process may be running
    (its owner stops the run as if deleted there). Sent at once, then again every
    ``RESEND_INTERVAL`` for ``CANCEL_WAIT`` seconds, as a cancel's are while it waits: an
    owner subscribing again (Redis restarted) misses a signal sent meanwhile, and would run
    the deleted response to its end. The ``DELETE`` does not wait, and the deleted row
    cannot tell when the run ended, so the resends run in the background and
    :meth:`aclose` (shutdown) cancels them. A response that had ended is not signalled."""

    def __init__(self, signals: CancelSignals) -> None:
        self._signals = signals
        self._resends: set[asyncio.Task[None]] = set()
        self._closed = False

    async def send(self, tenant_id: str, response_id: str) -> None:
        """Signal the run of a response just deleted, unfinished (a signal that cannot be
        sent is logged: the response is deleted already, and a resend may go)."""
        try:
            await self._signals.send(tenant_id, response_id)
        except StorageError as exc:
            log.warning("deleted response %s without signalling its run: %s", response_id, exc)
        if not self._closed:
            resending = asyncio.create_task(self._resend(tenant_id, response_id))
            self._resends.add(resending)
            resending.add_done_callback(self._resends.discard)

    async def _resend(self, tenant_id: str, response_id: str) -> None:
        deadline = time.monotonic() + CANCEL_WAIT
        while time.monotonic() < deadline:
            await asyncio.sleep(RESEND_INTERVAL)
            with suppress(StorageError):  # Redis away for now (logged): the next one may go
                await self._signals.send(tenant_id, response_id)

    async def aclose(self) -> None:
        self._closed = True
        resends = list(self._resends)
        for resending in resends:
            resending.cancel()
        await asyncio.gather(*resends, return_exceptions=True)


class SignalledCancels:
    """The cancels another process sends for runs of this one (the handler that
    :class:`~stateway.core.coordination.CancelSignals` delivers them to). A background run
    here is cancelled. A foreground run cannot be cancelled, but it can be deleted, and
    another process's ``DELETE`` sends the same signal: such a run stops, as a ``DELETE``
    sent here stops it, once the store tells that its response is deleted. Those checks
    are this object's: :meth:`aclose` (shutdown, once signals stopped coming) cancels the
    ones under way, so none outlives the store it reads."""

    def __init__(self, runs: RunRegistry, store: ResponseStore) -> None:
        self._runs = runs
        self._store = store
        self._checks: set[asyncio.Task[None]] = set()
        """Checks under way of whether a signalled foreground run's response was deleted."""
        self._closed = False

    def received(self, tenant_id: str, response_id: str) -> None:
        """A cancel (or a ``DELETE``) sent for ``response_id``: acted on when its run is
        here."""
        run = self._runs.of(tenant_id, response_id)
        if run is None:
            return
        if run.state.background:
            run.cancel(CancelReason.CANCELLED)
        elif run.state.store and not self._closed:
            checking = asyncio.create_task(self._stop_if_deleted(run))
            self._checks.add(checking)
            checking.add_done_callback(self._checks.discard)

    async def _stop_if_deleted(self, run: Run) -> None:
        try:
            record = await self._store.get(run.state.tenant_id, run.id)
        except StorageError as exc:
            log.warning("reading response %s after a cancel signal failed: %s", run.id, exc)
            return
        if record is None:  # deleted (its sender deleted it before signalling)
            run.cancel(CancelReason.DELETED)  # its final save leaves the row deleted

    async def aclose(self) -> None:
        """Cancel the checks under way and wait for them to end; later signals start
        none (the process stops: its runs end as it does, their rows deleted or not)."""
        self._closed = True
        checks = list(self._checks)
        for check in checks:
            check.cancel()
        await asyncio.gather(*checks, return_exceptions=True)
