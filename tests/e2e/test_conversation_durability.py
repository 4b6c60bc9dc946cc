"""A conversation's lock across processes: a sibling sharing the database is refused
while a turn runs elsewhere, and a turn whose process was killed leaves the conversation
to the next turn once a gateway has started again."""

from __future__ import annotations

import asyncio
import os
import signal
import time
from pathlib import Path

import aiohttp
import pytest

from tests.e2e.test_durability import (
    SLOW,
    STARTED,
    call,
    gateway,
    sse_events,
    wait_until_gone,
)


@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def database(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    if request.param == "sqlite":
        return f"sqlite:///{tmp_path / 'stateway.db'}"
    url: str = request.getfixturevalue("postgres_url")
    return url


async def started_turn(session: aiohttp.ClientSession, url: str, conversation_id: str) -> str:
    """Start a slow streamed turn; return its response id once output flows (the stream
    stays open in ``session``)."""
    body = {"model": "fake-model", "input": SLOW, "conversation": conversation_id, "stream": True}
    reply = await session.post(url + "/v1/responses", json=body)
    assert reply.status == 200
    response_id = None
    async for event in sse_events(reply.content):
        if event["type"] == "response.created":
            response_id = event["response"]["id"]
        if event["type"] == STARTED:
            break
    assert response_id is not None
    return response_id


async def test_a_sibling_is_refused_and_a_killed_turn_lets_go_after_restart(
    fake_upstream: str, database: str, tmp_path: Path
) -> None:
    log = tmp_path / "gateway.log"
    with gateway(fake_upstream, database, log) as first:
        status, conversation = await call("POST", first.url + "/v1/conversations", {})
        assert status == 200
        items_url = f"{first.url}/v1/conversations/{conversation['id']}/items"
        async with aiohttp.ClientSession() as session:
            response_id = await started_turn(session, first.url, conversation["id"])
            with gateway(fake_upstream, database, log) as sibling:
                turn = {"model": "fake-model", "input": "hi", "conversation": conversation["id"]}
                status, refused = await call("POST", sibling.url + "/v1/responses", turn)
                assert status == 409
                assert refused["error"]["code"] == "conversation_locked"
            os.kill(first.pid, signal.SIGKILL)
            wait_until_gone(first.pid)

    with gateway(fake_upstream, database, log) as second:
        status, stored = await call("GET", f"{second.url}/v1/responses/{response_id}")
        assert (status, stored["status"]) == (200, "failed")
        assert stored["conversation"] == {"id": conversation["id"]}
        turn = {"model": "fake-model", "input": "after", "conversation": conversation["id"]}
        status, reply = await call("POST", second.url + "/v1/responses", turn)
        assert (status, reply["status"]) == (200, "completed")
        status, items = await call("GET", items_url.replace(first.url, second.url) + "?order=asc")
        assert status == 200
        texts = [item["content"][0]["text"] for item in items["data"]]
        assert texts == ["after", "Hello! You said: after"], "the killed turn added nothing"


async def test_a_killed_turn_purged_by_the_retention_leaves_the_conversation_free(
    fake_upstream: str, tmp_path: Path
) -> None:
    """The killed turn, failed at start-up, lets its conversation go then and there: once
    the retention sweep has deleted it for good, the next turn and an append still get in
    (not a 409 for ever, a lock held by a response no longer stored). SQLite only: a sweep
    deletes every old enough response of its database (see ``test_retention.py``)."""
    database = f"sqlite:///{tmp_path / 'stateway.db'}"
    log = tmp_path / "gateway.log"
    with gateway(fake_upstream, database, log) as first:
        status, conversation = await call("POST", first.url + "/v1/conversations", {})
        assert status == 200
        async with aiohttp.ClientSession() as session:
            response_id = await started_turn(session, first.url, conversation["id"])
            os.kill(first.pid, signal.SIGKILL)
            wait_until_gone(first.pid)

    with gateway(fake_upstream, database, log, env={"STATEWAY_RETENTION": "1s"}) as second:
        response_url = f"{second.url}/v1/responses/{response_id}"
        deadline = time.monotonic() + 15
        while (await call("GET", response_url))[0] != 404:
            assert time.monotonic() < deadline, "the sweep never deleted the killed turn"
            await asyncio.sleep(0.2)
        items_url = f"{second.url}/v1/conversations/{conversation['id']}/items"
        added = {"items": [{"type": "message", "role": "user", "content": "added"}]}
        status, appended = await call("POST", items_url, added)
        assert status == 200, appended
        turn = {"model": "fake-model", "input": "after", "conversation": conversation["id"]}
        status, reply = await call("POST", second.url + "/v1/responses", turn)
        assert (status, reply.get("status")) == (200, "completed"), reply
