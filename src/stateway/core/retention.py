"""Retention: stored responses deleted once older than ``[storage] retention``.

Hosted OpenAI keeps a stored response for 30 days; a gateway keeps them until deleted
unless its operator sets a retention. Then every process sweeps: at start-up, and every
tenth of the retention after (at most an hour, at least a second apart), it asks the
store to delete the finished responses created before ``now - retention``, their items
and event logs with them, a batch of :data:`BATCH` per transaction, batch after batch
until one comes back short: no transaction holds the database long, and requests are
served between them. Processes sharing a database sweep side by side (a response is
deleted once; the other finds nothing).

What goes is what hosted's expiry takes: the response (a ``GET`` is a 404, a
``previous_response_id`` naming it a 400 ``previous_response_not_found``), its items (a
later response of its chain continues from what is left: the chain's walk ends where a
response is missing), its event log, and its usage from ``GET /v1/usage``. A response
still running is never deleted, however old. Conversations and their items are not
affected (hosted keeps them until deleted), nor the responses' answers remembered for
``Idempotency-Key`` retries, which expire on their own.

What each sweep deleted is logged and counted (``stateway_responses_deleted_total``). A
sweep that fails (the database out of reach) is logged, and the next one tries again.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Callable
from typing import Final

from stateway.core.ports import ResponsePurger

log = logging.getLogger(__name__)

BATCH: Final = 500
"""Responses deleted per transaction."""
_LONGEST_PAUSE: Final = 3600.0
_SHORTEST_PAUSE: Final = 1.0


class RetentionSweeper:
    def __init__(
        self,
        purger: ResponsePurger,
        retention: float,
        *,
        clock: Callable[[], float] = time.time,
        deleted: Callable[[int], None] = lambda count: None,
    ) -> None:
        """``deleted`` is told what each sweep deleted (a metric)."""
        self._purger = purger
        self._deleted = deleted
        self.retention = retention
        self.pause = min(_LONGEST_PAUSE, max(_SHORTEST_PAUSE, retention / 10))
        """Seconds between sweeps."""
        self._clock = clock
        self._task: asyncio.Task[None] | None = None

    def start(self) -> None:
        self._task = asyncio.create_task(self._sweeping(), name="retention")

    async def aclose(self) -> None:
        task, self._task = self._task, None
        if task is not None:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task

    async def sweep(self) -> int:
        """Delete every finished response created more than the retention ago; how many
        were."""
        before = self._clock() - self.retention
        deleted = 0
        while True:
            count = await self._purger.purge(before, BATCH)
            deleted += count
            if count < BATCH:
                return deleted
            await asyncio.sleep(0)  # requests waiting for the database go between batches

    async def _sweeping(self) -> None:
        while True:
            try:
                deleted = await self.sweep()
            except Exception:  # logged, and the next sweep tries again
                log.exception("deleting responses older than the retention failed")
            else:
                if deleted:
                    log.info("deleted %d responses older than the retention", deleted)
                    self._deleted(deleted)
            await asyncio.sleep(self.pause)
