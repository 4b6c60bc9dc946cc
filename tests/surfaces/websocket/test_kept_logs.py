"""The logs a closing connection keeps: its close waits for those kept after their run's
end until they are written, and for nothing when none is."""

from __future__ import annotations

import asyncio
import gc
import weakref

import pytest

from stateway.surfaces.websocket.kept_logs import KeptLogs
from stateway.surfaces.websocket.outbox import Outbox


class Log:
    """A run's log, kept by its journal: stored in the background once its run has ended
    (a future), at once otherwise (None)."""

    def __init__(self, stored: asyncio.Future[None] | None) -> None:
        self.stored = stored

    def keep(self) -> asyncio.Future[None] | None:
        return self.stored


async def outbox() -> Outbox:
    async def send(frame: bytes) -> None:
        pass

    return Outbox(send, 1024, lambda: 0, lambda: None)


async def test_the_close_waits_for_the_logs_kept_after_their_run_s_end() -> None:
    writing: asyncio.Future[None] = asyncio.get_running_loop().create_future()
    logs = KeptLogs(await outbox())
    logs.keep([Log(None), Log(writing)])
    stored = asyncio.create_task(logs.stored())
    await asyncio.sleep(0)
    assert not stored.done()
    writing.set_result(None)
    async with asyncio.timeout(5):
        await stored


async def test_the_close_waits_for_nothing_when_no_log_is_being_written() -> None:
    logs = KeptLogs(await outbox())
    logs.keep([Log(None)])
    async with asyncio.timeout(5):
        await logs.stored()


@pytest.mark.usefixtures("young_heap")
async def test_a_run_s_journal_is_let_go_once_its_last_frames_went_out() -> None:
    """An idle connection holds no finished run's log: once the outbox has sent the
    frames put before it, the journal is dropped (not kept until the next run)."""
    box = await outbox()
    logs = KeptLogs(box)
    journal = Log(None)
    gone = weakref.ref(journal)
    box.put(b"response.completed")
    logs.streamed(journal)  # type: ignore[arg-type]  # a journal's keep() is all it reads
    del journal
    async with asyncio.timeout(5):
        await box.flushed()
    gc.collect()
    assert gone() is None


@pytest.mark.usefixtures("young_heap")
async def test_a_run_whose_frames_went_out_before_it_is_told_streamed_is_not_kept() -> None:
    box = await outbox()
    logs = KeptLogs(box)
    box.put(b"response.completed")
    async with asyncio.timeout(5):
        await box.flushed()  # drained before the lane tells its run streamed
    journal = Log(None)
    gone = weakref.ref(journal)
    logs.streamed(journal)  # type: ignore[arg-type]  # a journal's keep() is all it reads
    del journal
    gc.collect()
    assert gone() is None
