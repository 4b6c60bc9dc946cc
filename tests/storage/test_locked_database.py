"""A SQLite database another process holds locked (a ``sqlite3`` shell left in a
transaction, a backup tool, another program on the file): reads answer (WAL), writes wait
SQLite's busy timeout, then fail naming the lock; the ping (``GET /ready``) then fails,
within its own time, naming it too, and passes again by itself once the lock is let go.

The lock is a real one, ``BEGIN EXCLUSIVE`` in another process. SQLite's busy timeout
is shortened to a second, and the ping's time to less than that, as they stand in
production (5 s and 2 s): a write probe then outlasts the ping."""

from __future__ import annotations

import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from stateway.core.errors import StorageError
from stateway.storage.sql import engine, migrate, open_store, ping
from tests.storage.test_unwritable_database import _record

BUSY_TIMEOUT = 1.0
PING_TIMEOUT = 0.3

_HOLD = """
import sqlite3, sys
connection = sqlite3.connect(sys.argv[1], isolation_level=None)
connection.execute("BEGIN EXCLUSIVE")
print("locked", flush=True)
sys.stdin.readline()
connection.execute("COMMIT")
"""


@contextmanager
def locked(path: Path) -> Iterator[None]:
    """Another process holds ``path``'s write lock meanwhile."""
    holder = subprocess.Popen(
        [sys.executable, "-c", _HOLD, str(path)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    assert holder.stdin is not None
    assert holder.stdout is not None
    try:
        assert holder.stdout.readline().strip() == "locked"
        yield
    finally:
        holder.stdin.write("\n")
        holder.stdin.close()
        holder.wait(timeout=10)
        holder.stdout.close()


def shorten_waits(monkeypatch: pytest.MonkeyPatch) -> None:
    """SQLite's busy timeout a second, the ping's time shorter still (see the module)."""
    pragmas = tuple(
        f"PRAGMA busy_timeout={int(BUSY_TIMEOUT * 1000)}" if p.startswith("PRAGMA busy") else p
        for p in engine.SQLITE_PRAGMAS
    )
    monkeypatch.setattr(engine, "SQLITE_PRAGMAS", pragmas)
    monkeypatch.setattr(ping, "PING_TIMEOUT", PING_TIMEOUT)


@pytest.fixture
def short_waits(monkeypatch: pytest.MonkeyPatch) -> None:
    shorten_waits(monkeypatch)


@pytest.mark.usefixtures("short_waits")
async def test_a_sqlite_locked_by_another_process_fails_saves_and_the_ping_until_let_go(
    tmp_path: Path,
) -> None:
    path = tmp_path / "stateway.db"
    url = f"sqlite:///{path}"
    await migrate(url)
    tenant = f"tenant-{uuid.uuid4().hex}"
    store = open_store(url)
    try:
        await store.save(_record(tenant, "r0"))
        with locked(path):
            await store.ping()  # reads answer, and no write failed yet
            started = time.monotonic()
            with pytest.raises(StorageError) as saving:
                await store.save(_record(tenant, "r1"))
            waited = time.monotonic() - started
            assert BUSY_TIMEOUT * 0.9 <= waited < BUSY_TIMEOUT + 2  # the busy timeout
            assert (saving.value.status, saving.value.code) == (503, "storage_unavailable")
            assert "saving a response" in saving.value.message
            assert "locked by another process" in saving.value.message
            assert "database is locked" in str(saving.value)  # for the log

            for _ in range(2):  # still locked: every probe says so, in the ping's time
                started = time.monotonic()
                with pytest.raises(StorageError) as probing:
                    await store.ping()
                assert time.monotonic() - started < PING_TIMEOUT * 2 + 0.5
                assert probing.value.code == "storage_unavailable"
                assert probing.value.message.startswith("Storage failed while checking")
                assert "locked by another process" in probing.value.message
            assert await store.get(tenant, "r0") is not None  # reads answer meanwhile

        await store.ping()
        await store.save(_record(tenant, "r2"))
        assert await store.get(tenant, "r2") is not None
        assert await store.get(tenant, "r1") is None
        written: list[str] = []
        store.write_watchers.append(written.append)
        await store.ping()
        assert written == []  # writable again: pings only read
    finally:
        await store.aclose()
