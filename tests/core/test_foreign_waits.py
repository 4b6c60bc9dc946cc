"""A request's waits on another process (:class:`ForeignWait`): ended, in the request's
own words, when this process shuts down; known to the run registry only while waiting."""

from __future__ import annotations

import asyncio

import pytest

from stateway.core.errors import ServerShuttingDown
from stateway.core.foreign_waits import ForeignWait
from stateway.core.run_registry import RunRegistry
from stateway.core.runs import CancelReason

WORDS = "The run goes on elsewhere: resume it with starting_after."


async def _forever() -> str:
    await asyncio.Event().wait()
    return "never"


async def _value() -> str:
    return "value"


async def test_without_a_registry_a_wait_is_only_a_wait() -> None:
    wait = ForeignWait(None, WORDS)
    assert await wait.waited(_value) == "value"
    wait.close()  # nothing to leave


async def test_shutting_down_ends_the_wait_under_way_and_every_later_one() -> None:
    runs = RunRegistry()
    wait = ForeignWait(runs, WORDS)
    waiting = asyncio.create_task(wait.waited(_forever))
    await asyncio.sleep(0)
    assert await runs.end_all(CancelReason.SHUTTING_DOWN) == 1  # the wait is known
    with pytest.raises(ServerShuttingDown) as ended:
        await asyncio.wait_for(waiting, 1)
    assert ended.value.message == WORDS  # its own words, not the registry's
    with pytest.raises(ServerShuttingDown) as again:
        await wait.waited(_value)  # ended: a later wait is not even begun
    assert again.value.message == WORDS
    wait.close()


async def test_a_wait_begun_once_shutting_down_began_is_refused_in_its_words() -> None:
    runs = RunRegistry()
    await runs.end_all(CancelReason.SHUTTING_DOWN)
    wait = ForeignWait(runs, WORDS)
    for _ in range(2):
        with pytest.raises(ServerShuttingDown) as refused:
            await wait.waited(_value)
        assert refused.value.message == WORDS


async def test_a_closed_wait_is_known_no_more() -> None:
    runs = RunRegistry()
    wait = ForeignWait(runs, WORDS)
    assert await wait.waited(_value) == "value"
    assert await wait.waited(_value) == "value"  # known once, however many waits
    wait.close()
    wait.close()
    assert await runs.end_all(CancelReason.SHUTTING_DOWN) == 0  # nothing left to end


async def test_a_wait_is_ended_only_by_shutting_down() -> None:
    runs = RunRegistry()
    wait = ForeignWait(runs, WORDS)
    waiting = asyncio.create_task(wait.waited(_forever))
    await asyncio.sleep(0)
    assert await runs.end_all(CancelReason.DELETED) == 0  # not a shutdown: runs only
    assert not waiting.done()
    waiting.cancel()
    with pytest.raises(asyncio.CancelledError):
        await waiting


async def test_the_waits_own_timeout_is_its_own() -> None:
    async def timing_out() -> str:
        raise TimeoutError

    wait = ForeignWait(RunRegistry(), WORDS)
    with pytest.raises(TimeoutError):
        await wait.waited(timing_out)
    assert await wait.waited(_value) == "value"  # not ended by it


async def test_a_wait_known_between_its_waits_is_ended_for_the_next_one() -> None:
    """Shutting down while no wait is under way (one done, the request about to wait
    again) ends the next one."""
    runs = RunRegistry()
    wait = ForeignWait(runs, WORDS)
    assert await wait.waited(_value) == "value"
    assert await runs.end_all(CancelReason.SHUTTING_DOWN) == 1
    with pytest.raises(ServerShuttingDown):
        await wait.waited(_value)
