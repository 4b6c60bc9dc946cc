"""Retention: stored responses deleted once older than ``[storage] retention``, and
deleted conversations and deleted responses' content erased.

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
still running is never deleted, however old. Live conversations and their items are not
affected (hosted keeps them until deleted), nor the responses' answers remembered for
``Idempotency-Key`` retries, which expire on their own.

A deleted conversation is only hidden when a client deletes it (ADR 0006: a turn running
on it still ends on its row); every sweep then erases it with its items (their content),
retention or not: the conversations deleted before the sweep began, :data:`CONVERSATIONS`
per transaction, but none a running turn still holds (a later sweep takes it, once the
turn has let go). No grace period: nothing serves a deleted conversation again (it is a
404 everywhere, no turn, append or ``item_reference`` takes it or its items), so
erasing it changes no answer. Without a retention the sweeps come an hour apart, so a
deleted conversation is gone within the hour. The responses of its turns are kept (they
hold their own items), as hosted keeps them.

A deleted response is only hidden when a client deletes it: its items still serve the
responses that continue from it (a chain is read by walking ``previous_response_id``).
Every sweep, retention or not, erases the content of the responses deleted more than
:data:`ERASE_AFTER` before it began that no response continues from (its items, its
event log, its body; what ``/v1/usage`` counts stays: the tokens were spent), then of
the deleted ones before them that this leaves unneeded, up their chains,
:data:`DELETED_RESPONSES` per transaction; one still running waits for its end. One a
live response continues from is kept as it is: deleting the whole chain, or its last
response, is what erases it. Nothing serves an erased response (a deleted one is a 404,
continuing from it a 400 already), so erasing it changes no answer, but for a race the
grace closes: a run that read the response before its deletion, while it was live, and
has not stored its own row yet. Streamed, background and conversation runs store theirs
as they start; a non-stream one only at its end (ADR 0005), however long it runs. An
hour outlasts any client's wait by default (the ``openai`` SDK's is ten minutes, an
upstream's ``read_timeout`` as long); a run longer still stores its row after the
erasure, its context starting after the erased response, which reading it logs.

Each sweep first fills in the usage columns of the responses an earlier release stored
without them (:class:`~stateway.core.accounting.UsageBackfill`), :data:`BATCH` per
transaction, until none is left: ``/v1/usage`` reads their bodies meanwhile, and reads
columns once they are filled.

What each sweep deleted is logged and counted (``stateway_responses_deleted_total``,
``stateway_conversations_purged_total``, ``stateway_responses_erased_total``). A sweep
that fails (the database out of reach) is logged, and the next one tries again.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Awaitable, Callable
from functools import partial
from typing import Final

from stateway.core.accounting import UsageBackfill
from stateway.core.conversations.ports import ConversationPurger
from stateway.core.ports import ResponseEraser, ResponsePurger

log = logging.getLogger(__name__)

BATCH: Final = 500
"""Responses deleted per transaction."""
CONVERSATIONS: Final = 50
"""Deleted conversations erased per transaction: fewer than responses, as each holds the
items of all its turns (a response, those of one)."""
DELETED_RESPONSES: Final = 100
"""Deleted responses erased per transaction (each is rewritten, not only deleted)."""
ERASE_AFTER: Final = 3600.0
"""Seconds a deleted response's content waits: a run that read it before it was deleted
may not have stored the response continuing from it yet."""
_LONGEST_PAUSE: Final = 3600.0
_SHORTEST_PAUSE: Final = 1.0


class RetentionSweeper:
    def __init__(
        self,
        purger: ResponsePurger | None,
        retention: float | None,
        *,
        conversations: ConversationPurger | None = None,
        eraser: ResponseEraser | None = None,
        backfill: UsageBackfill | None = None,
        clock: Callable[[], float] = time.time,
        deleted: Callable[[int], None] = lambda count: None,
        purged: Callable[[int], None] = lambda count: None,
        erased: Callable[[int], None] = lambda count: None,
    ) -> None:
        """Responses are deleted with a ``purger`` and a ``retention``, deleted
        conversations erased with ``conversations``, deleted responses' content with
        ``eraser``; the usage columns are filled in with ``backfill``; ``deleted``,
        ``purged`` and ``erased`` are told how many each sweep did (metrics)."""
        self._purger = purger
        self._conversations = conversations
        self._eraser = eraser
        self._backfill = backfill
        self._deleted = deleted
        self._purged = purged
        self._erased = erased
        self.retention = retention
        self.pause = _LONGEST_PAUSE
        """Seconds between sweeps."""
        if retention is not None:
            self.pause = min(_LONGEST_PAUSE, max(_SHORTEST_PAUSE, retention / 10))
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

    async def fill_usage(self) -> int:
        """Fill in the usage columns of every finished response stored without them; how
        many were."""
        if self._backfill is None:
            return 0
        return await _batches(self._backfill.fill, BATCH)

    async def sweep(self) -> int:
        """Delete every finished response created more than the retention ago; how many
        were (none without a retention)."""
        if self._purger is None or self.retention is None:
            return 0
        return await _batches(partial(self._purger.purge, self._clock() - self.retention), BATCH)

    async def erase(self) -> int:
        """Erase every conversation deleted before now that no running turn holds; how
        many were."""
        if self._conversations is None:
            return 0
        return await _batches(partial(self._conversations.purge, self._clock()), CONVERSATIONS)

    async def erase_responses(self) -> int:
        """Erase the content of every response deleted more than :data:`ERASE_AFTER` ago
        that none continues from, and of the deleted ones this leaves unneeded; how
        many were."""
        if self._eraser is None:
            return 0
        before = self._clock() - ERASE_AFTER
        return await _batches(partial(self._eraser.purge, before), DELETED_RESPONSES)

    async def _sweeping(self) -> None:
        while True:
            await _step(
                self.fill_usage,
                "filling in the usage columns",
                "filled in the usage columns of %d responses",
                lambda count: None,
            )
            await _step(
                self.sweep,
                "deleting responses older than the retention",
                "deleted %d responses older than the retention",
                self._deleted,
            )
            await _step(
                self.erase,
                "erasing deleted conversations",
                "erased %d deleted conversations",
                self._purged,
            )
            await _step(
                self.erase_responses,
                "erasing deleted responses",
                "erased %d deleted responses",
                self._erased,
            )
            await asyncio.sleep(self.pause)


async def _step(
    work: Callable[[], Awaitable[int]],
    doing: str,
    done: str,
    counted: Callable[[int], None],
) -> None:
    """One step of a sweep: how many it did logged (``done``) and counted; its failure
    logged (``doing`` failed), and the next sweep tries again."""
    try:
        count = await work()
    except Exception:
        log.exception("%s failed", doing)
        return
    if count:
        log.info(done, count)
        counted(count)


async def _batches(work: Callable[[int], Awaitable[int]], batch: int) -> int:
    """Batch after batch of one sweep (``work`` does one, of at most the limit it is
    given), until one comes back short; how many went."""
    gone = 0
    while True:
        count = await work(batch)
        gone += count
        if count < batch:
            return gone
        await asyncio.sleep(0)  # requests waiting for the database go between batches
