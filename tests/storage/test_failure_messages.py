"""What each of the store's reads and its delete say when the database fails them (and
the API keys', the gateway secret's and the run owners' statements beside it): the
operation, named in the message an operator reads in the log and a client in its 503."""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest

from stateway.core.errors import StorageError
from stateway.identity.keys import ApiKey
from stateway.storage.sql import SqlResponseStore, open_store
from stateway.storage.sql.api_keys import SqlKeyStore
from stateway.storage.sql.leases import SqlOwnerLeases
from stateway.storage.sql.secrets import SqlSecrets

Operation = Callable[[SqlResponseStore], Awaitable[Any]]

OPERATIONS: list[tuple[str, Operation]] = [
    ("reading a response", lambda store: store.get("t", "r")),
    ("loading a previous_response_id chain", lambda store: store.load_context("t", "r")),
    ("resolving item references", lambda store: store.find_items("t", ["msg_1"])),
    ("reading an event log", lambda store: store.read_events("t", "r", -1)),
    ("finding responses in progress", lambda store: store.in_progress()),
    (
        "listing input items",
        lambda store: store.list_input_items("t", "r", after=None, limit=5, order="asc"),
    ),
    ("deleting a response", lambda store: store.delete("t", "r")),
    (
        "storing an API key",
        lambda store: SqlKeyStore(store.engine).add(ApiKey("k", "t", None, "d", 1.0)),
    ),
    ("looking up an API key", lambda store: SqlKeyStore(store.engine).find("d")),
    ("listing API keys", lambda store: SqlKeyStore(store.engine).list()),
    ("revoking an API key", lambda store: SqlKeyStore(store.engine).revoke("k", 1.0)),
    ("reading a gateway secret", lambda store: SqlSecrets(store.engine).put_if_absent("n", "v")),
    ("reading run owners' leases", lambda store: SqlOwnerLeases(store).beats()),
]


@pytest.fixture
async def unmigrated(tmp_path: Path) -> AsyncIterator[SqlResponseStore]:
    """A store over a database without tables: every statement fails."""
    store = open_store(f"sqlite:///{tmp_path}/never_migrated.db")
    yield store
    await store.aclose()


@pytest.mark.parametrize(("action", "operation"), OPERATIONS, ids=[a for a, _ in OPERATIONS])
async def test_a_failed_read_or_delete_names_its_operation(
    unmigrated: SqlResponseStore, action: str, operation: Operation
) -> None:
    with pytest.raises(StorageError) as failed:
        await operation(unmigrated)
    assert failed.value.message == f"Storage failed while {action}."
    assert "no such table" in str(failed.value)  # the reason, for the log
