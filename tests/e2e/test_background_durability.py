"""Background runs across processes: killed and restarted, followed from a sibling sharing
the database, given the drain window at SIGTERM, and a watcher that stops reading dropped
while the run goes on. The real ``stateway serve``, over SQLite and PostgreSQL."""

from __future__ import annotations

import asyncio
import os
import re
import signal
import socket
import sqlite3
import time
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import asyncpg
import openai
import pytest
from openai import AsyncOpenAI, OpenAI

from stateway.core.response import UNFINISHED
from tests.e2e.test_background import dump, watch
from tests.e2e.test_durability import gateway, wait_until_gone

MODEL = "fake-model"
Event = dict[str, Any]


@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def database(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    if request.param == "sqlite":
        return f"sqlite:///{tmp_path / 'stateway.db'}"
    url: str = request.getfixturevalue("postgres_url")
    return url


def sdk(url: str) -> AsyncOpenAI:
    return AsyncOpenAI(base_url=url + "/v1", api_key="sk-test", max_retries=0)


async def logged(database: str, response_id: str) -> int:
    """How many events of the response's log are stored."""
    sql = "SELECT count(*) FROM response_events WHERE response_id = "
    if database.startswith("sqlite:///"):
        with sqlite3.connect(database.removeprefix("sqlite:///")) as connection:
            count: int = connection.execute(sql + "?", (response_id,)).fetchone()[0]
            return count
    connection = await asyncpg.connect(database)
    try:
        return int(await connection.fetchval(sql + "$1", response_id))
    finally:
        await connection.close()


async def until_logged(database: str, response_id: str, count: int) -> None:
    deadline = time.monotonic() + 30
    while await logged(database, response_id) < count:
        assert time.monotonic() < deadline, f"{count} events were never stored"
        await asyncio.sleep(0.05)


async def test_a_killed_background_run_fails_after_restart_and_its_log_replays(
    fake_upstream: str, database: str, tmp_path: Path
) -> None:
    log = tmp_path / "gateway.log"
    live: list[Event] = []
    with gateway(fake_upstream, database, log) as first:
        client = sdk(first.url)
        created = await client.responses.create(
            model=MODEL, input="[[slow:100]] [[words:100]]", background=True
        )

        async def follow() -> None:
            async for event in await client.responses.retrieve(created.id, stream=True):
                live.append(dump(event))

        following = asyncio.create_task(follow())
        await until_logged(database, created.id, 5)
        os.kill(first.pid, signal.SIGKILL)
        wait_until_gone(first.pid)
        await asyncio.wait([following])

    with gateway(fake_upstream, database, log) as second:
        client = sdk(second.url)
        stored = await client.responses.retrieve(created.id)
        assert (stored.status, stored.background) == ("failed", True)
        assert stored.error is not None
        assert stored.error.code == "server_restarted"

        replay = await watch(client, created.id)
        assert [e["sequence_number"] for e in replay] == list(range(len(replay)))
        assert replay[-1]["type"] == "response.failed"
        assert replay[-1]["response"]["error"]["code"] == "server_restarted"
        assert len(replay) >= 6
        assert replay[:-1] == live[: len(replay) - 1], "what was stored is what was sent"
        assert await watch(client, created.id, 1) == replay[2:]
        # A watcher of the dead process may have been sent events that were never stored
        # (numbered past the terminal event appended since): resuming after them, it is
        # told how the response ended.
        beyond = max(live[-1]["sequence_number"], replay[-1]["sequence_number"]) + 3
        assert await watch(client, created.id, beyond) == replay[-1:]


def partial_text(events: list[Event]) -> str:
    """The text a log's ``response.output_text.delta`` events streamed, in order."""
    return "".join(e["delta"] for e in events if e["type"] == "response.output_text.delta")


def cut_message(output: list[Any], text: str) -> None:
    """``output`` is one message cut off after ``text``: ``incomplete``, as a cancelled
    run's is."""
    assert [(item["type"], item["status"]) for item in output] == [("message", "incomplete")]
    assert [part["text"] for part in output[0]["content"]] == [text]


async def test_a_killed_background_turn_keeps_its_partial_output_and_adds_nothing(
    fake_upstream: str, database: str, tmp_path: Path
) -> None:
    log = tmp_path / "gateway.log"
    with gateway(fake_upstream, database, log) as first:
        client = sdk(first.url)
        conversation = await client.conversations.create(
            items=[{"type": "message", "role": "user", "content": "before"}]
        )
        created = await client.responses.create(
            model=MODEL,
            input="[[slow:100]] [[words:100]]",
            background=True,
            conversation=conversation.id,
        )
        await until_logged(database, created.id, 8)
        os.kill(first.pid, signal.SIGKILL)
        wait_until_gone(first.pid)

    with gateway(fake_upstream, database, log) as second:
        client = sdk(second.url)
        replay = await watch(client, created.id)
        text = partial_text(replay)
        assert text.startswith("w1"), "some text was stored before the kill"
        failed = replay[-1]["response"]
        assert (replay[-1]["type"], failed["error"]["code"]) == (
            "response.failed",
            "server_restarted",
        )
        cut_message(failed["output"], text)
        assert failed["usage"] is None, "nothing says how many tokens were used"

        stored = (await client.responses.retrieve(created.id)).model_dump(mode="json")
        assert stored["status"] == "failed"
        assert stored["output"] == failed["output"]
        # as a cancelled turn: a failed one adds nothing to its conversation
        items = await client.conversations.items.list(conversation.id)
        assert [item.model_dump()["content"][0]["text"] for item in items.data] == ["before"]


async def test_a_sibling_process_replays_and_follows_a_background_run(
    fake_upstream: str, database: str, tmp_path: Path
) -> None:
    log = tmp_path / "gateway.log"
    with gateway(fake_upstream, database, log) as first:
        owner = sdk(first.url)
        created = await owner.responses.create(
            model=MODEL, input="[[slow:50]] [[words:30]]", background=True
        )
        with gateway(fake_upstream, database, log) as sibling:
            other = sdk(sibling.url)
            from_owner, from_sibling = await asyncio.gather(
                watch(owner, created.id), watch(other, created.id)
            )
            assert from_sibling == from_owner
            assert from_owner[-1]["type"] == "response.completed"
            middle = len(from_owner) // 2
            assert await watch(other, created.id, middle) == from_owner[middle + 1 :]
            done = await other.responses.retrieve(created.id)
            assert done.status == "completed"


async def test_a_sibling_stopping_ends_its_watch_of_a_run_elsewhere_in_the_error_shape(
    fake_upstream: str, database: str, tmp_path: Path
) -> None:
    """A process watching a run another process runs (following its stored log) ends
    that watch at SIGTERM once its drain window is over, with an ``error`` event
    (``server_shutting_down``): its client resumes from another process while the run
    goes on. Before, the watch outlived the window until uvicorn's last resort cancelled
    it: a traceback logged, the connection cut without a word, five seconds later."""
    log = tmp_path / "gateway.log"
    with gateway(fake_upstream, database, log) as first:
        owner = sdk(first.url)
        created = await owner.responses.create(
            model=MODEL, input="[[slow:100]] [[words:300]]", background=True
        )
        seen: list[Event] = []
        stopping: list[float] = []  # when SIGTERM was sent
        with gateway(fake_upstream, database, log, {"STATEWAY_DRAIN_TIMEOUT": "1"}) as sibling:

            async def follow() -> None:
                stream = await sdk(sibling.url).responses.retrieve(created.id, stream=True)
                async for event in stream:
                    seen.append(dump(event))
                    if len(seen) == 5:
                        stopping.append(time.monotonic())
                        os.kill(sibling.pid, signal.SIGTERM)

            with pytest.raises(openai.APIError) as ended:
                await follow()
            took = time.monotonic() - stopping[0]
            wait_until_gone(sibling.pid, within=20)

        assert ended.value.code == "server_shutting_down", ended.value
        assert took < 4, f"the watch outlived the 1 s drain window by {took - 1:.1f} s"
        assert (await owner.responses.retrieve(created.id)).status == "in_progress"
        await owner.responses.cancel(created.id)
        rest = await watch(owner, created.id, seen[-1]["sequence_number"])
        assert seen + rest == await watch(owner, created.id)
        assert rest[-1]["response"]["status"] == "cancelled"
    assert "Traceback" not in log.read_text()


async def test_sigterm_gives_background_runs_the_drain_window_then_ends_them(
    fake_upstream: str, tmp_path: Path
) -> None:
    database = f"sqlite:///{tmp_path / 'stateway.db'}"
    log = tmp_path / "gateway.log"
    env = {"STATEWAY_DRAIN_TIMEOUT": "4"}
    with gateway(fake_upstream, database, log, env) as server:
        client = sdk(server.url)
        slow = await client.responses.create(
            model=MODEL, input="[[slow:200]] [[words:100]]", background=True
        )
        quick = await client.responses.create(
            model=MODEL, input="[[slow:300]] [[words:4]]", background=True
        )
        running = (await client.responses.retrieve(quick.id)).status
        assert running in {"queued", "in_progress"}  # queued until its upstream call is seated
        os.kill(server.pid, signal.SIGTERM)
        wait_until_gone(server.pid, within=20)

    with gateway(fake_upstream, database, log) as again:
        client = sdk(again.url)
        finished = await client.responses.retrieve(quick.id)
        assert (finished.status, finished.output_text) == ("completed", "w1 w2 w3 w4")
        ended = await client.responses.retrieve(slow.id)
        assert ended.status == "failed"
        assert ended.error is not None
        assert ended.error.code == "server_shutting_down"
        replay = await watch(client, slow.id)
        assert replay[-1]["type"] == "response.failed"
        assert replay[-1]["response"]["error"]["code"] == "server_shutting_down"
    assert "Traceback" not in log.read_text()


async def test_an_end_left_unstored_at_shutdown_is_failed_by_a_sibling_after_the_lease(
    fake_upstream: str, tmp_path: Path
) -> None:
    """A process stopped while the database refuses its run's end (its settler still
    retrying) leaves its lease to expire rather than removing it: its sibling fails the
    response then, and a watcher gets that end. Its lease removed, nobody would ever judge
    it, and the response stayed in progress for ever (its conversation held, its watchers
    waiting, a cancel answered 409)."""
    path = tmp_path / "stateway.db"
    database, log = f"sqlite:///{path}", tmp_path / "gateway.log"
    env = {"STATEWAY_LEASE_TIMEOUT": "1"}
    with gateway(fake_upstream, database, log, env) as sibling:
        with gateway(fake_upstream, database, log, env) as owner:
            client = sdk(owner.url)
            created = await client.responses.create(
                model=MODEL, input="[[slow:100]] [[words:10]]", background=True
            )
            refuse_ends(path, created.id)
            ended = await watch(client, created.id)  # told its end could not be stored
            assert ended[-1]["response"]["status"] == "failed"
            assert ended[-1]["response"]["error"]["code"] != "server_restarted"
        # the owner stopped (SIGTERM) with that end unstored; the database takes it again
        accept_ends(path)
        other = sdk(sibling.url)
        deadline = time.monotonic() + 30  # the lease is 1 s: failed well within this
        while (stored := await other.responses.retrieve(created.id)).status in UNFINISHED:
            assert time.monotonic() < deadline, "the response stayed in progress"
            await asyncio.sleep(0.1)
        assert stored.status == "failed"
        assert stored.error is not None
        assert stored.error.code == "server_restarted"
        replay = await watch(other, created.id)
        assert replay[-1]["type"] == "response.failed"
        assert replay[-1]["response"]["error"]["code"] == "server_restarted"


async def test_a_resume_past_what_an_outage_kept_of_the_log_gets_the_end(
    fake_upstream: str, tmp_path: Path
) -> None:
    """The database refuses a background run's events, then its end, while a watcher is
    sent them live. Once the settler's retry stored that end (after the last event
    stored), a resume from an event the watcher was sent gets how the response ended, as
    a resume past the log of a run whose process died does, not a 400 for a position past
    the stored log."""
    path = tmp_path / "stateway.db"
    database = f"sqlite:///{path}"
    with gateway(fake_upstream, database, tmp_path / "gateway.log") as server:
        client = sdk(server.url)
        created = await client.responses.create(
            model=MODEL, input="[[slow:50]] [[words:20]]", background=True
        )
        await until_logged(database, created.id, 1)
        refuse_ends(path, created.id)
        live = await watch(client, created.id)
        assert live[-1]["type"] == "response.failed"  # its end could not be stored
        unstored = live[-1]["response"]["error"]
        assert unstored["message"] == "The response could not be stored."
        accept_ends(path)
        deadline = time.monotonic() + 30  # the settler retries after 1 s, 2 s, 4 s...
        while stored_status(path, created.id) == "in_progress":
            assert time.monotonic() < deadline, "the end was never stored"
            await asyncio.sleep(0.05)

        resumed = await watch(client, created.id, live[-2]["sequence_number"])

        assert [e["type"] for e in resumed] == ["response.failed"]
        assert resumed[0]["response"]["error"] == unstored
        stored = await watch(client, created.id)  # the end, after the last event stored
        assert resumed == stored[-1:]
        assert live[-2]["sequence_number"] > stored[-1]["sequence_number"], "sent, not stored"


def refuse_ends(path: Path, response_id: str) -> None:
    """Have the database refuse to store more of ``response_id``: its events, its end (its
    row stays in progress)."""
    with sqlite3.connect(path) as connection:
        connection.executescript(
            "CREATE TABLE IF NOT EXISTS refused_ends (id TEXT);"
            "CREATE TRIGGER IF NOT EXISTS refuse_ends BEFORE UPDATE OF status ON responses "
            "WHEN EXISTS (SELECT 1 FROM refused_ends WHERE refused_ends.id = NEW.id) "
            "BEGIN SELECT RAISE(ABORT, 'refused for the test'); END;"
            "CREATE TRIGGER IF NOT EXISTS refuse_events BEFORE INSERT ON response_events "
            "WHEN EXISTS (SELECT 1 FROM refused_ends WHERE refused_ends.id = NEW.response_id) "
            "BEGIN SELECT RAISE(ABORT, 'refused for the test'); END;"
        )
        connection.execute("INSERT INTO refused_ends VALUES (?)", (response_id,))


def stored_status(path: Path, response_id: str) -> str:
    with sqlite3.connect(path) as connection:
        row = connection.execute("SELECT status FROM responses WHERE id = ?", (response_id,))
        status: str = row.fetchone()[0]
        return status


def accept_ends(path: Path) -> None:
    with sqlite3.connect(path) as connection:
        connection.execute("DELETE FROM refused_ends")


def test_a_watcher_that_stops_reading_is_dropped_while_the_run_completes(
    fake_upstream: str, tmp_path: Path
) -> None:
    log = tmp_path / "gateway.log"
    with gateway(fake_upstream, f"sqlite:///{tmp_path / 'stateway.db'}", log) as server:
        client = OpenAI(base_url=server.url + "/v1", api_key="sk-test", max_retries=0)
        # 5 MB of text in 16 KiB pieces, ~2 ms apart: more than the kernel buffers the
        # gateway's writes (up to 4 MB) while the run still goes on
        created = client.responses.create(
            model=MODEL, input="[[slow:2]] [[huge:5000000]]", background=True
        )
        address = urlsplit(server.url)
        with socket.socket() as reader:
            reader.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
            reader.connect((address.hostname, address.port))
            reader.sendall(
                f"GET /v1/responses/{created.id}?stream=true HTTP/1.1\r\n"
                f"Host: {address.netloc}\r\n\r\n".encode()
            )
            deadline = time.monotonic() + 60
            while "disconnecting a stream watcher" not in log.read_text():
                assert time.monotonic() < deadline, "the watcher was never dropped"
                time.sleep(0.05)
            while client.responses.retrieve(created.id).status != "completed":
                assert time.monotonic() < deadline, "the run did not complete"
                time.sleep(0.05)
            received = read_to_end(reader)

        assert b"response.completed" not in received
        last = max(int(n) for n in re.findall(rb'"sequence_number":(\d+)', received))
        rest = list(client.responses.retrieve(created.id, stream=True, starting_after=last - 1))
        assert rest[0].sequence_number == last
        assert rest[-1].type == "response.completed"


def read_to_end(reader: socket.socket) -> bytes:
    reader.settimeout(30)
    chunks = []
    while chunk := reader.recv(65536):
        chunks.append(chunk)
    return b"".join(chunks)
