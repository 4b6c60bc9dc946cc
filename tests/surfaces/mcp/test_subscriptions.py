"""A ``resources/subscribe`` subscription lives no longer than its session; sessions are
kept no longer than clients use them."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import AsyncExitStack
from types import SimpleNamespace
from typing import Any, cast

import pytest
from mcp_types import SubscribeRequestParams

from stateway.core.commands import Principal
from stateway.core.gateway import Gateway
from stateway.surfaces.mcp import server


class Endless:
    """Updates of a response that runs for as long as the test lasts."""

    async def changes(self) -> AsyncIterator[None]:
        await asyncio.Event().wait()
        yield


async def test_a_subscription_ends_with_its_session(monkeypatch: pytest.MonkeyPatch) -> None:
    """A dead session's notifications are dropped without an error, so only the session's
    own teardown (the SDK unwinds its connection's exit stack: DELETE, idle, lost) can end
    a subscription to a response that still runs."""
    surface = server.McpSurface(cast(Gateway, object()))

    async def updates(principal: Principal, uri: str) -> Endless:
        return Endless()

    monkeypatch.setattr(surface, "_updates", updates)
    monkeypatch.setattr(server, "_principal", lambda ctx: Principal())
    connection = SimpleNamespace(exit_stack=AsyncExitStack())
    ctx: Any = SimpleNamespace(session=SimpleNamespace(_connection=connection), request=None)
    params = SubscribeRequestParams(uri="stateway://default/responses/resp_1")
    await surface._subscribe(ctx, params)
    [task] = surface._subscriptions.values()
    await asyncio.sleep(0.01)
    assert not task.done()

    await connection.exit_stack.aclose()
    await asyncio.wait([task], timeout=5)
    assert task.cancelled()
    assert surface._subscriptions == {}


def test_idle_sessions_are_closed_and_their_number_is_bounded() -> None:
    manager = server.McpSurface(cast(Gateway, object()))._manager
    assert manager.session_idle_timeout == server.SESSION_IDLE_TIMEOUT <= 300
    assert manager.max_sessions == server.MAX_SESSIONS <= 1000
