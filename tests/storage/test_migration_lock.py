"""Processes starting together on one SQLite file: the one that finds the schema behind
waits for another's upgrade, however long it takes, and then finds the work done (or
done by a newer release: refused as such).

The other process is a real one holding the database's write lock (``BEGIN IMMEDIATE``),
as a migrating process does; SQLite's busy timeout is shortened to a second (5 s in
production), so that an upgrade longer than it is one second long here."""

from __future__ import annotations

import asyncio
import sqlite3
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
from alembic import command

from stateway.core.errors import StorageError
from stateway.storage.sql import migrate
from stateway.storage.sql.migrator import HEAD_REVISION, alembic_config
from tests.storage.test_locked_database import BUSY_TIMEOUT, shorten_waits

_MIGRATING = """
import sqlite3, sys
connection = sqlite3.connect(sys.argv[1], isolation_level=None)
connection.execute("BEGIN IMMEDIATE")
print("locked", flush=True)
revision = sys.stdin.readline().strip()
if revision:
    connection.execute("UPDATE alembic_version SET version_num = ?", (revision,))
connection.execute("COMMIT")
"""


@contextmanager
def migrating(path: Path) -> Iterator[subprocess.Popen[str]]:
    """Another process holds ``path``'s write lock, as one upgrading it would, until a
    line is written to it: the revision it leaves the database at (empty: as it was)."""
    holder = subprocess.Popen(
        [sys.executable, "-c", _MIGRATING, str(path)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    assert holder.stdin is not None
    assert holder.stdout is not None
    try:
        assert holder.stdout.readline().strip() == "locked"
        yield holder
    finally:
        if not holder.stdin.closed:
            holder.stdin.close()
        holder.wait(timeout=10)
        holder.stdout.close()


def finish(holder: subprocess.Popen[str], revision: str = "") -> None:
    assert holder.stdin is not None
    holder.stdin.write(revision + "\n")
    holder.stdin.close()


@pytest.fixture
def behind(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A SQLite database a revision behind the head, SQLite's busy timeout shortened."""
    path = tmp_path / "stateway.db"
    command.upgrade(alembic_config(f"sqlite:///{path}"), "0011")
    shorten_waits(monkeypatch)
    return path


def revision_of(path: Path) -> str:
    with sqlite3.connect(path) as connection:
        (revision,) = connection.execute("SELECT version_num FROM alembic_version").fetchone()
    return str(revision)


async def test_an_upgrade_waits_for_another_process_upgrading_past_the_busy_timeout(
    behind: Path,
) -> None:
    with migrating(behind) as holder:
        upgrade = asyncio.create_task(migrate(f"sqlite:///{behind}"))
        done, _ = await asyncio.wait([upgrade], timeout=BUSY_TIMEOUT * 2)
        assert not done, upgrade.exception()  # still waiting: not "database is locked"
        finish(holder)
        await upgrade

    assert revision_of(behind) == HEAD_REVISION


async def test_an_upgrade_that_waited_for_a_newer_release_is_refused_as_such(
    behind: Path,
) -> None:
    """The other process was a newer release: the database is at a revision this one does
    not know once the lock is let go. Refused saying so, not Alembic's error."""
    with migrating(behind) as holder:
        upgrade = asyncio.create_task(migrate(f"sqlite:///{behind}"))
        await asyncio.wait([upgrade], timeout=BUSY_TIMEOUT * 2)
        finish(holder, "9999_future")
        with pytest.raises(StorageError) as raised:
            await upgrade

    assert "'9999_future'" in raised.value.message
    assert "newer stateway" in raised.value.message
    assert revision_of(behind) == "9999_future"
