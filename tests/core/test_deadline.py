"""A Deadline ends its block with TimeoutError when it expires, and only then: an outside
cancellation stays a cancellation, a block done in time is untouched, and a cleared
deadline (a FirstOutput met) bounds nothing more."""

from __future__ import annotations

import asyncio

import pytest

from stateway.core.deadline import Deadline, FirstOutput

FOREVER = 5.0
"""Longer than any deadline here: a deadline that never fires fails its test, in seconds,
rather than hanging it."""


async def test_an_expired_deadline_ends_the_block_with_timeout_error() -> None:
    deadline = Deadline(0.01)
    with pytest.raises(TimeoutError), deadline:
        await asyncio.sleep(FOREVER)
    assert deadline.expired
    task = asyncio.current_task()
    assert task is not None
    assert task.cancelling() == 0


async def test_a_block_done_in_time_is_left_alone_and_its_timer_dropped() -> None:
    deadline = Deadline(0.05)
    with deadline:
        await asyncio.sleep(0)
    await asyncio.sleep(0.1)  # past the deadline: nothing is cancelled
    assert not deadline.expired


async def test_no_deadline_never_expires() -> None:
    with Deadline(None) as deadline:
        await asyncio.sleep(0)
    assert not deadline.expired


async def test_an_outside_cancellation_stays_a_cancellation() -> None:
    entered = asyncio.Event()

    async def blocked() -> None:
        with Deadline(60):
            entered.set()
            await asyncio.sleep(FOREVER)

    task = asyncio.create_task(blocked())
    await asyncio.wait_for(entered.wait(), FOREVER)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task


async def test_a_cancellation_beside_the_expiry_is_not_swallowed() -> None:
    """Expired, and cancelled from outside as well: the task is still being cancelled."""
    entered = asyncio.Event()
    deadline = Deadline(0)

    async def blocked() -> None:
        with deadline:
            entered.set()
            await asyncio.sleep(FOREVER)

    task = asyncio.create_task(blocked())
    await asyncio.wait_for(entered.wait(), FOREVER)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert deadline.expired


async def test_a_cleared_deadline_leaves_the_block_unbounded() -> None:
    with Deadline(0.02) as deadline:
        deadline.clear()
        await asyncio.sleep(0.06)
    assert not deadline.expired


async def test_clearing_a_deadline_whose_block_is_over_changes_nothing() -> None:
    """A first output may be met after the block that waited for it ended (in time, or
    not)."""
    with Deadline(60) as deadline:
        await asyncio.sleep(0)
    deadline.clear()
    with pytest.raises(TimeoutError), Deadline(0) as expired:
        await asyncio.sleep(FOREVER)
    expired.clear()
    assert (deadline.expired, expired.expired) == (False, True)


async def test_a_first_output_ends_the_wait_it_was_given() -> None:
    waiting = FirstOutput()
    waiting.came()  # before the wait began: nothing to end
    with waiting.within(0.02) as deadline:
        waiting.came()
        await asyncio.sleep(0.06)
    assert not deadline.expired
    with pytest.raises(TimeoutError), waiting.within(0.02):
        await asyncio.sleep(1)
