"""The logs a closing connection keeps: its close waits for those kept after their run's
end until they are written, and for nothing when none is."""

from __future__ import annotations

import asyncio

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
