"""The retention sweeper: what it asks the store to delete, batch after batch, and how
often; a failed sweep is logged and the next one tries again. Deleted conversations, and
the content of deleted responses, are erased by every sweep, retention or not."""

from __future__ import annotations

import asyncio
import logging

import pytest

from stateway.core.errors import StorageError
from stateway.core.retention import (
    BATCH,
    CONVERSATIONS,
    DELETED_RESPONSES,
    ERASE_AFTER,
    RetentionSweeper,
)


class Purger:
    """Deletes ``counts`` one call after another (then nothing); each call's arguments
    are kept, and an exception among the counts is raised instead."""

    def __init__(self, *counts: int | Exception) -> None:
        self.counts = list(counts)
        self.calls: list[tuple[float, int]] = []
        self.called = asyncio.Event()

    async def purge(self, before: float, limit: int) -> int:
        self.calls.append((before, limit))
        self.called.set()
        count = self.counts.pop(0) if self.counts else 0
        if isinstance(count, Exception):
            raise count
        return count


async def test_a_sweep_deletes_batch_after_batch_until_one_comes_back_short() -> None:
    purger = Purger(BATCH, BATCH, 7)
    sweeper = RetentionSweeper(purger, 3600.0, clock=lambda: 10_000.0)
    assert await sweeper.sweep() == 2 * BATCH + 7
    assert purger.calls == [(6400.0, BATCH)] * 3


@pytest.mark.parametrize(
    ("retention", "pause"),
    [(30 * 86400.0, 3600.0), (600.0, 60.0), (2.0, 1.0)],
)
def test_sweeps_come_a_tenth_of_the_retention_apart_within_a_second_and_an_hour(
    retention: float, pause: float
) -> None:
    assert RetentionSweeper(Purger(), retention).pause == pause


async def test_it_sweeps_at_start_and_a_failed_sweep_is_tried_again(
    caplog: pytest.LogCaptureFixture,
) -> None:
    purger = Purger(StorageError("Storage failed."), 3)
    counted: list[int] = []
    sweeper = RetentionSweeper(purger, 2.0, deleted=counted.append)  # a sweep every second
    with caplog.at_level(logging.INFO, logger="stateway.core.retention"):
        sweeper.start()
        try:
            await asyncio.wait_for(purger.called.wait(), 5)
            purger.called.clear()
            await asyncio.wait_for(purger.called.wait(), 5)
        finally:
            await sweeper.aclose()
    assert len(purger.calls) == 2
    # the sweeper's own lines: a garbage-collected object of another test may log too
    failed, done = [r for r in caplog.records if r.name == "stateway.core.retention"]
    assert failed.levelno == logging.ERROR
    assert "failed" in failed.getMessage()
    assert done.getMessage() == "deleted 3 responses older than the retention"
    assert counted == [3], "what a sweep deletes is counted; a failed one counts nothing"


async def test_closing_stops_the_sweeps() -> None:
    purger = Purger()
    sweeper = RetentionSweeper(purger, 2.0)
    sweeper.start()
    await asyncio.wait_for(purger.called.wait(), 5)
    await sweeper.aclose()
    purger.called.clear()
    await asyncio.sleep(1.2)
    assert not purger.called.is_set()
    await sweeper.aclose()  # twice is fine


async def test_closing_one_never_started_is_fine() -> None:
    await RetentionSweeper(Purger(), 2.0).aclose()


async def test_deleted_conversations_are_erased_batch_after_batch_without_a_retention() -> None:
    """No grace: what was deleted before the sweep began goes."""
    conversations = Purger(CONVERSATIONS, 3)
    sweeper = RetentionSweeper(None, None, conversations=conversations, clock=lambda: 10_000.0)
    assert await sweeper.erase() == CONVERSATIONS + 3
    assert conversations.calls == [(10_000.0, CONVERSATIONS)] * 2
    assert await sweeper.sweep() == 0, "without a retention, no response is deleted"
    assert sweeper.pause == 3600.0


async def test_each_sweep_erases_deleted_conversations_even_when_deleting_responses_failed(
    caplog: pytest.LogCaptureFixture,
) -> None:
    responses = Purger(StorageError("Storage failed."))
    conversations = Purger(3)
    purged: list[int] = []
    sweeper = RetentionSweeper(responses, 2.0, conversations=conversations, purged=purged.append)
    with caplog.at_level(logging.INFO, logger="stateway.core.retention"):
        sweeper.start()
        try:
            await asyncio.wait_for(conversations.called.wait(), 5)
        finally:
            await sweeper.aclose()
    lines = [r.getMessage() for r in caplog.records if r.name == "stateway.core.retention"]
    assert lines == [
        "deleting responses older than the retention failed",
        "erased 3 deleted conversations",
    ]
    assert purged == [3]


async def test_deleted_responses_are_erased_batch_after_batch_an_hour_after_deletion() -> None:
    """No retention needed; an hour's grace leaves a run that read the response before it
    was deleted the time to store the response continuing from it (which keeps it)."""
    eraser = Purger(DELETED_RESPONSES, 2)
    sweeper = RetentionSweeper(None, None, eraser=eraser, clock=lambda: 10_000.0)
    assert await sweeper.erase_responses() == DELETED_RESPONSES + 2
    assert eraser.calls == [(10_000.0 - ERASE_AFTER, DELETED_RESPONSES)] * 2
    assert ERASE_AFTER == 3600.0


async def test_each_sweep_erases_deleted_responses_and_counts_them(
    caplog: pytest.LogCaptureFixture,
) -> None:
    conversations = Purger(StorageError("Storage failed."))
    eraser = Purger(3)
    erased: list[int] = []
    sweeper = RetentionSweeper(
        None, None, conversations=conversations, eraser=eraser, erased=erased.append
    )
    with caplog.at_level(logging.INFO, logger="stateway.core.retention"):
        sweeper.start()
        try:
            await asyncio.wait_for(eraser.called.wait(), 5)
        finally:
            await sweeper.aclose()
    lines = [r.getMessage() for r in caplog.records if r.name == "stateway.core.retention"]
    assert lines == ["erasing deleted conversations failed", "erased 3 deleted responses"]
    assert erased == [3]


class Backfill:
    """Fills ``counts`` one call after another (then nothing), as :class:`Purger`."""

    def __init__(self, *counts: int | Exception) -> None:
        self.purger = Purger(*counts)

    async def fill(self, limit: int) -> int:
        return await self.purger.purge(0.0, limit)


async def test_usage_columns_are_filled_in_batch_after_batch_until_none_is_left() -> None:
    backfill = Backfill(BATCH, BATCH, 1)
    sweeper = RetentionSweeper(None, None, backfill=backfill)
    assert await sweeper.fill_usage() == 2 * BATCH + 1
    assert [limit for _, limit in backfill.purger.calls] == [BATCH] * 3
    assert await RetentionSweeper(None, None).fill_usage() == 0


async def test_each_sweep_fills_in_usage_columns_first_and_goes_on_when_that_fails(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """Logged, not counted (a migration's work, done once); a failure leaves the rest of
    the sweep to run, and the next sweep tries again. The erasure's failure logged too."""
    backfill = Backfill(4, StorageError("Storage failed."))
    eraser = Purger(1, StorageError("Storage failed."))
    sweeper = RetentionSweeper(None, 2.0, eraser=eraser, backfill=backfill)
    sweeper.pause = 0.01
    with caplog.at_level(logging.INFO, logger="stateway.core.retention"):
        sweeper.start()
        try:
            while len(eraser.calls) < 2:
                await asyncio.wait_for(eraser.called.wait(), 5)
                eraser.called.clear()
        finally:
            await sweeper.aclose()
    lines = [r.getMessage() for r in caplog.records if r.name == "stateway.core.retention"]
    assert lines[:4] == [
        "filled in the usage columns of 4 responses",
        "erased 1 deleted responses",
        "filling in the usage columns failed",
        "erasing deleted responses failed",
    ]
