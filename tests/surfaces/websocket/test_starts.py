"""A create whose connection closes while it starts: started all the same (the
connection lasting until it is), its run going on unwatched with its log kept for a
resume from another connection; a start that fails then has no one to tell but the log."""

from __future__ import annotations

import asyncio
import logging
from typing import Any

import pytest

from stateway.core.commands import CreateResponse
from stateway.core.errors import InvalidRequest
from stateway.core.gateway import Gateway
from stateway.core.principal import Principal
from stateway.core.runs import Run
from stateway.surfaces.websocket.endpoint import WebSocketResponses
from tests.surfaces.websocket.client import Client, surface
from tests.surfaces.websocket.test_session import CREATE

FAILED = "websocket: a request failed after its connection closed"


class HeldStarts:
    """Every create's start waits for :attr:`release` (then raises ``fails``); the runs
    started."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch, fails: BaseException | None = None):
        self.release = asyncio.Event()
        self.runs: list[Run] = []
        real = Gateway.execute

        async def execute(gateway: Gateway, principal: Principal, command: Any) -> Any:
            if not isinstance(command, CreateResponse):
                return await real(gateway, principal, command)
            await self.release.wait()
            if fails is not None:
                raise fails
            run = await real(gateway, principal, command)
            self.runs.append(run)
            return run

        monkeypatch.setattr(Gateway, "execute", execute)


async def closed_while_starting(starts: HeldStarts) -> WebSocketResponses:
    """A create sent, its client gone while it starts: the app, once it returned."""
    app = surface()
    client = Client(app)
    client.put(**CREATE)
    await asyncio.sleep(0.01)  # the lane has taken it up and waits for its start
    client._inbox.put_nowait({"type": "websocket.disconnect", "code": 1006})
    await asyncio.sleep(0.01)
    assert not client.task.done()  # the connection lasts until the create started
    starts.release.set()
    await asyncio.wait_for(client.task, 5)
    assert client.frames == []
    return app


async def test_a_create_started_after_its_client_left_keeps_its_log_for_a_resume(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    starts = HeldStarts(monkeypatch)
    app = await closed_while_starting(starts)
    [run] = starts.runs
    await asyncio.wait_for(run.wait(), 5)
    other = Client(app)
    other.put(type="response.resume", response_id=run.id)
    frames = await other.ended(1)
    assert [f["sequence_number"] for f in frames] == list(range(len(frames)))
    assert frames[-1]["type"] == "response.completed"
    await other.leave()
    assert FAILED not in caplog.text


async def test_a_start_that_fails_unexpectedly_after_its_client_left_is_logged(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    await closed_while_starting(HeldStarts(monkeypatch, TypeError("broken")))
    [record] = [r for r in caplog.records if r.message == FAILED]
    assert record.levelno == logging.ERROR
    assert record.exc_info is not None
    assert isinstance(record.exc_info[1], TypeError)


async def test_a_start_refused_after_its_client_left_is_not_logged(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """A refusal is the client's to be told, and it is gone."""
    await closed_while_starting(HeldStarts(monkeypatch, InvalidRequest("No.")))
    assert FAILED not in caplog.text
