"""``stateway serve`` on a SQLite file it may not write: a real refusal, the file's
permissions (``0444``) keeping the gateway's process from writing it, so SQLite opens it
read-only. Root ignores file permissions: run as root, the gateway runs without the
capabilities that let it (``setpriv``), as any other user would.

With its sealing key stored already, the gateway starts without a write: it serves what
needs no storing (``store: false``), refuses what does naming why, and ``/ready`` answers
503 naming it; once the file is writable again, it is ready by itself and registers its
lease. Without the key, it cannot start: one line says why."""

from __future__ import annotations

import base64
import json
import os
import shutil
import sqlite3
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

import pytest

from stateway.launch import child_env, launch

READ_ONLY = (
    "The database is read-only (a standby server, as after a failover, a database set"
    " read-only, or a database file, or the directory holding it, the gateway cannot"
    " write)."
)


def unprivileged() -> list[str]:
    """The command prefix running a command without root's power over file permissions
    (none for any other user)."""
    if os.geteuid() != 0:
        return []
    setpriv = shutil.which("setpriv")
    if setpriv is None:
        pytest.skip("run as root, and no setpriv to run the gateway without root's file access")
    dropped = "-dac_override,-dac_read_search"
    return [setpriv, f"--inh-caps={dropped}", f"--bounding-set={dropped}"]


def migrated(path: Path, *, key: bool) -> str:
    database = f"sqlite:///{path}"
    command = [sys.executable, "-m", "stateway", "migrate", "--database", database]
    subprocess.run(command, check=True, capture_output=True, env=child_env(), timeout=60)
    if key:
        stored = base64.b64encode(os.urandom(32)).decode()
        with sqlite3.connect(path) as db:
            db.execute("INSERT INTO gateway_secrets VALUES ('sealing_key', ?, 0)", (stored,))
    return database


def set_mode(path: Path, mode: int) -> None:
    """``mode`` on the database file and the WAL files SQLite keeps beside it."""
    for each in path.parent.glob(path.name + "*"):
        each.chmod(mode)


def answer(url: str, body: dict[str, Any] | None = None) -> tuple[int, Any]:
    data = None if body is None else json.dumps(body).encode()
    headers = {"content-type": "application/json"}
    try:
        with urllib.request.urlopen(urllib.request.Request(url, data, headers)) as reply:
            return reply.status, json.load(reply)
    except urllib.error.HTTPError as refused:
        return refused.code, json.load(refused)


def test_a_read_only_sqlite_with_its_key_serves_unstored_requests_and_is_not_ready(
    tmp_path: Path, fake_upstream: str
) -> None:
    path = tmp_path / "stateway.db"
    database = migrated(path, key=True)
    set_mode(path, 0o444)
    log = tmp_path / "gateway.log"
    command = [*unprivileged(), sys.executable, "-m", "stateway", "serve", "--port", "0"]
    command += ["--database", database, "--upstream", fake_upstream]
    env = {"STATEWAY_LEASE_TIMEOUT": "0.6"}
    with (
        log.open("w") as stderr,
        launch(command, "listening on ", env=env, stderr=stderr) as served,
    ):
        status, ready = answer(served.url + "/ready")
        assert (status, ready["storage"]) == (
            503,
            f"Storage failed while checking the database. {READ_ONLY}",
        )
        status, unstored = answer(
            served.url + "/v1/responses", {"model": "fake-model", "input": "hi", "store": False}
        )
        assert (status, unstored["status"]) == (200, "completed")
        status, refused = answer(
            served.url + "/v1/responses", {"model": "fake-model", "input": "hi"}
        )
        assert status == 503
        assert refused["error"]["code"] == "storage_read_only"

        set_mode(path, 0o644)
        deadline = time.monotonic() + 60  # a loaded machine's probes take a while
        while (ready_again := answer(served.url + "/ready"))[0] != 200:
            assert time.monotonic() < deadline, ready_again
            time.sleep(0.1)
        status, stored = answer(
            served.url + "/v1/responses", {"model": "fake-model", "input": "hi"}
        )
        assert (status, stored.get("status")) == (200, "completed"), stored
        for _ in range(100):  # the next beat registers this process's lease
            with sqlite3.connect(path) as db:
                owners = db.execute("SELECT owner FROM run_owners").fetchall()
            if owners:
                break
            time.sleep(0.1)
        assert len(owners) == 1
    logged = log.read_text()
    assert (
        "ERROR stateway.app.gateway: the database takes no writes: Storage failed while"
        f" registering a run owner. {READ_ONLY} (OperationalError: attempt to write a readonly"
        " database); serving only what needs no storing (store: false), not ready (GET"
        " /ready) until a write lands\n"
    ) in logged
    assert "Traceback" not in logged


def test_a_read_only_sqlite_without_its_key_is_a_one_line_error(tmp_path: Path) -> None:
    path = tmp_path / "stateway.db"
    database = migrated(path, key=False)
    set_mode(path, 0o444)
    command = [*unprivileged(), sys.executable, "-m", "stateway", "serve", "--port", "0"]
    command += ["--database", database, "--upstream", "http://127.0.0.1:9/v1"]
    result = subprocess.run(
        command, capture_output=True, text=True, env=child_env(), timeout=60, check=False
    )
    assert result.returncode == 1, result.stderr
    assert result.stderr == (
        f"stateway: SQLite database at {path}: Storage failed while storing a gateway"
        f" secret. {READ_ONLY} (OperationalError: attempt to write a readonly database)\n"
    )


HELD_ACROSS_THE_FIX = """
import asyncio, sys
from pathlib import Path
from sqlalchemy import text
from stateway.core.errors import StorageReadOnly
from stateway.storage.sql.leases import SqlOwnerLeases
from stateway.storage.sql.store import open_store

async def main(path: Path) -> None:
    store = open_store(f"sqlite:///{path}")
    leases = SqlOwnerLeases(store)
    try:
        async with store.reader.connect() as first:  # leaves the shared memory's file 0444
            await first.execute(text("SELECT 1"))
        await store.engine.dispose()
        async with store.reader.connect() as held:  # so it is opened read-only
            await held.execute(text("SELECT 1"))
            for refused in (leases.register("owner", 1.0), store.ping()):
                try:
                    await refused
                except StorageReadOnly:
                    pass
                else:
                    sys.exit("a write landed on a file opened read-only")
            for each in path.parent.glob(path.name + "*"):
                each.chmod(0o644)
        await store.ping()
        await leases.register("owner", 1.0)
    finally:
        await store.aclose()

asyncio.run(main(Path(sys.argv[1])))
"""


def test_a_read_only_sqlite_heals_once_a_connection_held_across_the_fix_comes_back(
    tmp_path: Path,
) -> None:
    """SQLite keeps a file's shared memory once per process, as the first connection
    opening it found it: read-only, for every connection the process opens while any
    connection of that time is open. A request holding one while the file is fixed (and
    while the ping renews the engine's connections) must not keep the store read-only
    after it lets it go: the store then takes writes again, its ping first."""
    path = tmp_path / "stateway.db"
    migrated(path, key=False)
    set_mode(path, 0o444)
    command = [*unprivileged(), sys.executable, "-c", HELD_ACROSS_THE_FIX, str(path)]
    result = subprocess.run(
        command, capture_output=True, text=True, env=child_env(), timeout=60, check=False
    )
    assert result.returncode == 0, result.stderr
