"""The bound on the notifications a call may see (the transport's part: ``test_calls.py``)."""

from __future__ import annotations

import asyncio

import anyio
import mcp_types as types
import pytest
from mcp.shared.message import SessionMessage

from stateway.mcp_client.notifications import (
    CountedReads,
    CountedWrites,
    NotificationFlood,
    Notifications,
)


async def bounded_wait(notifications: Notifications, started: asyncio.Event) -> str:
    with notifications.bounded():
        started.set()
        await asyncio.Event().wait()
    return "never"


async def test_each_call_counts_what_arrived_since_it_began() -> None:
    floods: list[int] = []
    notifications = Notifications(limit=3, on_flood=lambda: floods.append(notifications.count))
    first_started, second_started = asyncio.Event(), asyncio.Event()
    first = asyncio.create_task(bounded_wait(notifications, first_started))
    await first_started.wait()
    notifications.received()
    notifications.received()
    second = asyncio.create_task(bounded_wait(notifications, second_started))
    await second_started.wait()
    notifications.received()
    await asyncio.sleep(0)
    assert not first.done()  # three during it: at its limit, not past it

    notifications.received()

    with pytest.raises(NotificationFlood, match="more than 3 notifications during one call"):
        await first
    assert not second.done()
    assert floods == [4]
    notifications.received()
    notifications.received()
    with pytest.raises(NotificationFlood):
        await second
    assert floods == [4, 6]


async def test_a_call_that_ended_is_not_failed_by_later_notifications() -> None:
    floods: list[int] = []
    notifications = Notifications(limit=2, on_flood=lambda: floods.append(notifications.count))
    with notifications.bounded():
        notifications.received()

    notifications.received()
    notifications.received()  # three since the call began, but idle ones: at that limit

    assert floods == []


async def test_past_the_limit_with_no_call_running_the_session_is_flooded() -> None:
    floods: list[int] = []
    notifications = Notifications(limit=2, on_flood=lambda: floods.append(notifications.count))
    notifications.received()
    notifications.received()
    with notifications.bounded():  # a call begins: the idle count starts again
        pass
    notifications.received()
    notifications.received()
    assert floods == []

    notifications.received()

    assert floods == [5]


def _notification(method: str, params: dict[str, object]) -> SessionMessage:
    return SessionMessage(types.JSONRPCNotification(jsonrpc="2.0", method=method, params=params))


async def test_the_read_stream_counts_all_but_replies_and_skips_logs_and_progress() -> None:
    send, receive = anyio.create_memory_object_stream[SessionMessage | Exception](10)
    log = _notification("notifications/message", {"level": "info", "data": "x"})
    progress = _notification("notifications/progress", {"progressToken": 1, "progress": 1})
    changed = _notification("notifications/tools/list_changed", {})
    reply = SessionMessage(types.JSONRPCResponse(jsonrpc="2.0", id=1, result={}))
    unreadable = ValueError("not JSON")
    for item in (log, progress, changed, log, reply, unreadable):
        send.send_nowait(item)
    send.close()
    notifications = Notifications()
    notifications.awaited.add("1")

    seen = [item async for item in CountedReads(receive, notifications)]

    assert seen == [changed, reply, unreadable]
    assert notifications.count == 5


async def test_a_reply_counts_unless_it_answers_a_request_sent_and_unanswered() -> None:
    sent, _ = anyio.create_memory_object_stream[SessionMessage](10)
    send, receive = anyio.create_memory_object_stream[SessionMessage | Exception](10)
    notifications = Notifications()
    request = types.JSONRPCRequest(jsonrpc="2.0", id=7, method="ping")
    await CountedWrites(sent, notifications).send(SessionMessage(request))
    answer = SessionMessage(types.JSONRPCResponse(jsonrpc="2.0", id=7, result={}))
    error = types.ErrorData(code=-1, message="no")
    unasked = SessionMessage(types.JSONRPCError(jsonrpc="2.0", id="8", error=error))
    for item in (answer, answer, unasked):  # the second answer answers nothing left
        send.send_nowait(item)
    send.close()

    seen = [item async for item in CountedReads(receive, notifications)]

    assert seen == [answer, answer, unasked]  # the SDK drops them, as it would have
    assert notifications.count == 2


async def test_a_call_is_failed_past_its_own_limit_not_at_it_while_another_fails() -> None:
    """Two calls whose limits are one notification apart: the first's flood is not the
    second's, which is at its limit then, not past it."""
    notifications = Notifications(limit=2)
    first_started, second_started = asyncio.Event(), asyncio.Event()
    first = asyncio.create_task(bounded_wait(notifications, first_started))
    await first_started.wait()
    notifications.received()
    second = asyncio.create_task(bounded_wait(notifications, second_started))
    await second_started.wait()
    notifications.received()
    notifications.received()  # three during the first, two during the second

    with pytest.raises(NotificationFlood):
        await first
    await asyncio.sleep(0)
    assert not second.done()
    second.cancel()


async def test_a_call_begun_after_another_was_flooded_is_bounded_afresh() -> None:
    notifications = Notifications(limit=1)
    started = asyncio.Event()
    flooded = asyncio.create_task(bounded_wait(notifications, started))
    await started.wait()
    notifications.received()
    notifications.received()
    with pytest.raises(NotificationFlood):
        await flooded

    started = asyncio.Event()
    later = asyncio.create_task(bounded_wait(notifications, started))
    await started.wait()
    notifications.received()
    await asyncio.sleep(0)
    assert not later.done()
    notifications.received()
    with pytest.raises(NotificationFlood):
        await later
