"""A Deadline ends its block with TimeoutError when it expires, and only then: an outside
cancellation stays a cancellation, and a block done in time is untouched."""

from __future__ import annotations

import asyncio

import pytest

from stateway.core.deadline import Deadline


async def test_an_expired_deadline_ends_the_block_with_timeout_error() -> None:
    deadline = Deadline(0.01)
    with pytest.raises(TimeoutError), deadline:
        await asyncio.Event().wait()
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
            await asyncio.Event().wait()

    task = asyncio.create_task(blocked())
    await entered.wait()
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
            await asyncio.Event().wait()

    task = asyncio.create_task(blocked())
    await entered.wait()
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert deadline.expired
