"""Nothing acknowledged is lost: the real ``stateway serve`` killed, restarted, shut down
and sharing its database with a sibling, over SQLite and PostgreSQL."""

from __future__ import annotations

import os
import signal
import sys
import time
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager, contextmanager
from pathlib import Path
from typing import Any

import aiohttp
import orjson
import pytest

from stateway.launch import GATEWAY_ANNOUNCEMENT, Launched, launch

SLOW = "[[slow:200]] [[words:100]]"
"""About 20 s of output: a run certainly still generating while a test acts on it."""
STARTED = "response.output_text.delta"


@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def database(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    if request.param == "sqlite":
        return f"sqlite:///{tmp_path / 'stateway.db'}"
    url: str = request.getfixturevalue("postgres_url")
    return url


@contextmanager
def gateway(
    upstream: str, database: str, log: Path, env: dict[str, str] | None = None
) -> Iterator[Launched]:
    command = [sys.executable, "-m", "stateway", "serve", "--port", "0"]
    command += ["--upstream", upstream, "--database", database]
    with (
        log.open("a") as stderr,
        launch(command, GATEWAY_ANNOUNCEMENT, env=env, timeout=60, stderr=stderr) as launched,
    ):
        yield launched


def body(text: str, **fields: Any) -> dict[str, Any]:
    return {"model": "fake-model", "input": text, **fields}


Events = AsyncIterator[dict[str, Any]]


@asynccontextmanager
async def streaming(url: str, text: str) -> AsyncIterator[tuple[str, Events]]:
    """Start a stream; yield its response id (once output flows) and its remaining events."""
    async with (
        aiohttp.ClientSession() as session,
        session.post(url + "/v1/responses", json=body(text, stream=True)) as reply,
    ):
        assert reply.status == 200
        events = sse_events(reply.content)
        response_id = None
        async for event in events:
            if event["type"] == "response.created":
                response_id = event["response"]["id"]
            if event["type"] == STARTED:
                break
        assert response_id is not None
        yield response_id, events


async def sse_events(lines: aiohttp.StreamReader) -> Events:
    async for line in lines:
        if line.startswith(b"data: "):
            yield orjson.loads(line[6:])


async def call(
    method: str, url: str, payload: dict[str, Any] | None = None
) -> tuple[int, dict[str, Any]]:
    async with (
        aiohttp.ClientSession() as session,
        session.request(method, url, json=payload) as reply,
    ):
        return reply.status, orjson.loads(await reply.read())


def wait_until_gone(pid: int, within: float = 30.0) -> None:
    """Bounded wait for ``pid`` to exit (a zombie counts as exited)."""
    deadline = time.monotonic() + within
    while time.monotonic() < deadline:
        try:
            state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
        except OSError:
            return
        if state in ("Z", "X"):
            return
        time.sleep(0.05)
    raise AssertionError(f"process {pid} still runs after {within}s")


async def test_kill_9_mid_stream_leaves_a_failed_response_after_restart(
    fake_upstream: str, database: str, tmp_path: Path
) -> None:
    log = tmp_path / "gateway.log"
    with gateway(fake_upstream, database, log) as first:
        async with streaming(first.url, f"remember me {SLOW}") as (response_id, _):
            os.kill(first.pid, signal.SIGKILL)
            wait_until_gone(first.pid)

    with gateway(fake_upstream, database, log) as second:
        url = f"{second.url}/v1/responses/{response_id}"
        status, stored = await call("GET", url)
        assert status == 200
        assert stored["status"] == "failed"
        assert stored["error"]["code"] == "server_restarted"
        assert stored["completed_at"] is None

        status, items = await call("GET", url + "/input_items")
        assert status == 200
        assert [i["content"][0]["text"] for i in items["data"]] == [f"remember me {SLOW}"]

        status, reply = await call(
            "POST", second.url + "/v1/responses", body("[[echo]]", previous_response_id=response_id)
        )
        if status == 200:
            assert reply["status"] == "completed"
        else:
            assert 400 <= status < 500
            assert reply["error"]["code"] not in (None, "previous_response_not_found")


async def test_a_sibling_process_sees_a_running_response_and_start_up_leaves_it_alone(
    fake_upstream: str, database: str, tmp_path: Path
) -> None:
    log = tmp_path / "gateway.log"
    with gateway(fake_upstream, database, log) as first:
        async with streaming(first.url, SLOW) as (response_id, _):
            with gateway(fake_upstream, database, log) as sibling:
                for server in (first.url, sibling.url):
                    url = f"{server}/v1/responses/{response_id}"
                    status, stored = await call("GET", url)
                    assert (status, stored["status"]) == (200, "in_progress")
                    assert stored["completed_at"] is None
                    status, items = await call("GET", url + "/input_items")
                    assert status == 200
                    assert [i["content"][0]["text"] for i in items["data"]] == [SLOW]
                    status, refused = await call(
                        "POST",
                        server + "/v1/responses",
                        body("next", previous_response_id=response_id),
                    )
                    assert status == 400
                    assert refused["error"]["code"] == "response_in_progress"
                    assert refused["error"]["param"] == "previous_response_id"


async def test_deleting_a_running_response_cancels_it_for_good(
    fake_upstream: str, database: str, tmp_path: Path
) -> None:
    log = tmp_path / "gateway.log"
    with gateway(fake_upstream, database, log) as server:
        async with streaming(server.url, SLOW) as (response_id, events):
            url = f"{server.url}/v1/responses/{response_id}"
            status, deleted = await call("DELETE", url)
            assert status == 200
            assert deleted == {"id": response_id, "object": "response.deleted", "deleted": True}
            rest = [event async for event in events]  # ends soon: the run was cancelled
        assert rest
        assert rest[-1]["type"] != "response.completed"
        assert rest[-1]["type"] in ("response.failed", "response.incomplete")
        assert (await call("GET", url))[0] == 404
        assert (await call("DELETE", url))[0] == 404
