"""``stateway backup`` of the SQLite database a real gateway serves and keeps writing to,
and a gateway started on the copy: it serves what was done before the backup, opens what
the first one sealed (the sealing key came along), and fails what was running
(``server_restarted``): at once when the first gateway is gone, by lease while it lives
(as on another host). The command's refusals and failures: ``tests/cli/test_backup.py``."""

from __future__ import annotations

import asyncio
import sqlite3
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager, closing, suppress
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Self

import aiohttp

from stateway.core.compaction.prompt import SUMMARY_PREFIX
from tests.cli.commands import stateway
from tests.e2e.test_durability import SLOW, body, call, gateway, streaming


class Writer:
    """Responses created one after another on the gateway at ``url`` until the block ends,
    each waited for; ``wrote()`` waits for the next one to land."""

    def __init__(self, url: str) -> None:
        self.url = url
        self.ids: list[str] = []
        self._landed = asyncio.Event()
        self._task: asyncio.Task[None] | None = None

    async def __aenter__(self) -> Self:
        self._task = asyncio.create_task(self._write())
        return self

    async def __aexit__(self, *_: object) -> None:
        assert self._task is not None
        self._task.cancel()
        with suppress(asyncio.CancelledError):
            await self._task

    async def wrote(self) -> int:
        """Wait for the next response to be stored; how many are, then."""
        assert self._task is not None
        self._landed.clear()
        landed = asyncio.create_task(self._landed.wait())
        await asyncio.wait([landed, self._task], return_when=asyncio.FIRST_COMPLETED)
        if self._task.done():  # failed: say why rather than wait for ever
            landed.cancel()
            self._task.result()
        return len(self.ids)

    async def _write(self) -> None:
        async with aiohttp.ClientSession() as session:
            while True:
                text = f"[[echo]] written {len(self.ids)}"
                async with session.post(self.url + "/v1/responses", json=body(text)) as reply:
                    answer = await reply.json()
                    assert reply.status == 200, answer
                    self.ids.append(answer["id"])
                self._landed.set()


@dataclass
class Held:
    """What the first gateway had done, and was doing, when the backup was taken."""

    done: dict[str, Any] = field(default_factory=dict)
    """Responses completed before the backup, by id."""
    sealed: dict[str, Any] = field(default_factory=dict)
    """A compaction item the first gateway made."""
    running: str = ""
    """A stored stream's response, still generating."""
    written: list[str] = field(default_factory=list)
    """Responses created while the backup was taken: those before it began first."""
    before: int = 0
    """How many of ``written`` were stored before the backup began."""


@asynccontextmanager
async def backed_up(url: str, source: Path, copy: Path) -> AsyncIterator[Held]:
    """``stateway backup`` of ``source`` to ``copy`` while the gateway at ``url`` writes
    responses one after another and streams one more; yields what it held while that
    stream still runs."""
    held = Held()
    for n in range(3):
        status, answer = await call("POST", url + "/v1/responses", body(f"[[echo]] before {n}"))
        assert (status, answer["status"]) == (200, "completed"), answer
        held.done[answer["id"]] = answer
    status, compacted = await call("POST", url + "/v1/responses/compact", body("I am Ada"))
    assert status == 200, compacted
    held.sealed = compacted["output"][-1]
    assert held.sealed["type"] == "compaction"
    async with streaming(url, f"running {SLOW}") as (running, _), Writer(url) as writer:
        held.running = running
        held.before = await writer.wrote()
        database = f"sqlite:///{source}"
        result = await asyncio.to_thread(stateway, "backup", str(copy), "--database", database)
        assert result.returncode == 0, result.stderr
        assert result.stdout.startswith(f"backed up SQLite database at {source} to {copy} (")
        await writer.wrote()  # and the gateway goes on writing after it
        held.written = list(writer.ids)
        yield held


async def served(url: str, held: Held) -> None:
    """What the gateway at ``url``, started on the copy, serves of what ``held`` says."""
    for response_id, answer in held.done.items():
        status, stored = await call("GET", f"{url}/v1/responses/{response_id}")
        assert status == 200, stored
        assert (stored["status"], stored["output"]) == ("completed", answer["output"])
    for n, response_id in enumerate(held.written):
        status, stored = await call("GET", f"{url}/v1/responses/{response_id}")
        if n < held.before:
            assert status == 200, stored
        assert status in (200, 404), stored  # later ones: in the copy whole, or not at all
        if status == 200:
            assert stored["status"] == "completed"
    # The first gateway's seal opens here: its key is the copy's.
    sent = [
        {"role": "user", "content": "hello"},
        held.sealed,
        {"role": "user", "content": "[[echo]]"},
    ]
    request = {"model": "fake-model", "input": sent, "store": False}
    status, answer = await call("POST", url + "/v1/responses", request)
    assert status == 200, answer
    assert SUMMARY_PREFIX in answer["output"][0]["content"][0]["text"]


async def test_a_copy_of_a_gateway_gone_serves_what_it_held_and_fails_what_ran(
    fake_upstream: str, tmp_path: Path
) -> None:
    source, copy, log = tmp_path / "stateway.db", tmp_path / "copy.db", tmp_path / "log"
    with gateway(fake_upstream, f"sqlite:///{source}", log) as first:
        async with backed_up(first.url, source, copy) as held:
            pass
    with closing(sqlite3.connect(f"file:{copy}?mode=ro", uri=True)) as db:
        assert db.execute("PRAGMA integrity_check").fetchall() == [("ok",)]
    with gateway(fake_upstream, f"sqlite:///{copy}", log) as second:
        await served(second.url, held)
        # Its process gone, the run it left in the copy was failed as the second started.
        status, stored = await call("GET", f"{second.url}/v1/responses/{held.running}")
        assert (status, stored["status"]) == (200, "failed"), stored
        assert stored["error"]["code"] == "server_restarted"


async def test_a_copy_served_beside_its_gateway_fails_what_ran_by_lease(
    fake_upstream: str, tmp_path: Path
) -> None:
    """The first gateway still serving (or the copy restored on another host): the run
    the copy holds is its to judge by its lease, which nothing renews in the copy."""
    source, copy, log = tmp_path / "stateway.db", tmp_path / "copy.db", tmp_path / "log"
    env = {"STATEWAY_LEASE_TIMEOUT": "1"}  # judged after a second of watching
    with gateway(fake_upstream, f"sqlite:///{source}", log) as first:
        async with backed_up(first.url, source, copy) as held:
            with gateway(fake_upstream, f"sqlite:///{copy}", log, env) as second:
                await served(second.url, held)
                stored = await ended(f"{second.url}/v1/responses/{held.running}")
                assert stored["status"] == "failed", stored
                assert stored["error"]["code"] == "server_restarted"
            # The first gateway's own run goes on, in its own database.
            status, stored = await call("GET", f"{first.url}/v1/responses/{held.running}")
            assert (status, stored["status"]) == (200, "in_progress")


async def ended(url: str) -> dict[str, Any]:
    """The stored response at ``url`` once it is no longer in progress (a bounded wait)."""
    for _ in range(600):
        status, stored = await call("GET", url)
        assert status == 200, stored
        if stored["status"] != "in_progress":
            return stored
        await asyncio.sleep(0.05)
    raise AssertionError(f"{url} still in progress")
