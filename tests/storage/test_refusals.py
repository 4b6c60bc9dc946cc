"""A lasting refusal met by any write of the store fails its ping (readiness), not only
one met by a save: a conversation's writes, a response's delete, a lease's heartbeat, a
retention sweep, the erasure of deleted conversations and of deleted responses, the
filling in of usage columns each run in a transaction of their own, and may be the first
to meet it, or the only ones for a while. The ping then tries a write of its own until
one lands.

SQLite read-only and full as in :mod:`tests.storage.test_unwritable_database`;
PostgreSQL read-only as a failover to a standby looks (``ReadOnly``)."""

from __future__ import annotations

import time
import uuid
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path

import pytest
from sqlalchemy import text

from stateway.core.conversations.ports import Conversation
from stateway.core.errors import StorageError
from stateway.core.ports import ResponseRecord
from stateway.storage.sql import SqlConversationStore, SqlResponseStore, open_store
from stateway.storage.sql.leases import SqlOwnerLeases
from stateway.storage.sql.retention import (
    SqlConversationPurger,
    SqlResponseEraser,
    SqlResponsePurger,
)
from stateway.storage.sql.usage_backfill import SqlUsageBackfill
from tests.storage.conftest import ReadOnly
from tests.storage.test_conversations import message
from tests.storage.test_unwritable_database import (
    BIG,
    ballasted,
    free_space,
    full_disk,
    read_only_file,
)

OWNER = "host 1 1"


@pytest.fixture
async def sqlite_file(tmp_path: Path) -> Path:
    path = tmp_path / "stateway.db"
    await ballasted(path)
    return path


def response(
    tenant: str, response_id: str, text: str = "hi", created_at: float = 1.0
) -> ResponseRecord:
    return ResponseRecord(
        tenant_id=tenant,
        id=response_id,
        previous_response_id=None,
        status="completed",
        created_at=created_at,
        body={"id": response_id},
        input_items=[message(text)],
        output_items=[],
    )


@dataclass
class Writers:
    """Every writer over one store, and the tenant its rows are in."""

    store: SqlResponseStore
    conversations: SqlConversationStore
    leases: SqlOwnerLeases
    purger: SqlResponsePurger
    erasure: SqlConversationPurger
    eraser: SqlResponseEraser
    backfill: SqlUsageBackfill
    tenant: str

    @classmethod
    def over(cls, store: SqlResponseStore, tenant: str) -> Writers:
        return cls(
            store,
            SqlConversationStore(store),
            SqlOwnerLeases(store),
            SqlResponsePurger(store),
            SqlConversationPurger(store),
            SqlResponseEraser(store),
            SqlUsageBackfill(store),
            tenant,
        )

    async def prepare(self) -> None:
        """What each write below changes: a conversation with an item, a deleted one, an
        old response, a deleted one, one stored without its usage columns, this
        process's lease."""
        conversation = Conversation(self.tenant, "conv_1", 1.0, {})
        await self.conversations.create(conversation, [message("a", "msg_1")])
        await self.conversations.create(Conversation(self.tenant, "conv_gone", 1.0, {}), [])
        await self.conversations.delete(self.tenant, "conv_gone")
        await self.store.save(response(self.tenant, "resp_old", created_at=0.5))
        await self.store.save(response(self.tenant, "resp_gone", created_at=1.0))
        await self.store.delete(self.tenant, "resp_gone")
        await self.store.save(response(self.tenant, "resp_unfilled"))
        async with self.store.engine.begin() as connection:
            await connection.execute(_UNFILL, {"tenant": self.tenant})
        await self.leases.register(OWNER, 10.0)


_UNFILL = text(
    "UPDATE responses SET model = NULL WHERE tenant_id = :tenant AND id = 'resp_unfilled'"
)

Write = Callable[[Writers], Awaitable[object]]

WRITES: dict[str, Write] = {
    "a conversation created": lambda w: w.conversations.create(
        Conversation(w.tenant, "conv_2", 1.0, {}), [message("b")]
    ),
    "its metadata updated": lambda w: w.conversations.update(w.tenant, "conv_1", {"k": "v"}),
    "its items added": lambda w: w.conversations.add_items(w.tenant, "conv_1", [message("b")]),
    "an item deleted": lambda w: w.conversations.delete_item(w.tenant, "conv_1", "msg_1"),
    "a conversation deleted": lambda w: w.conversations.delete(w.tenant, "conv_1"),
    "a response deleted": lambda w: w.store.delete(w.tenant, "resp_old"),
    "an owner registered": lambda w: w.leases.register("host 2 2", 10.0),
    "a lease renewed": lambda w: w.leases.renew(OWNER),
    "owners forgotten": lambda w: w.leases.forget([OWNER]),
    "a retention sweep": lambda w: w.purger.purge(0.75, 100),
    "deleted conversations erased": lambda w: w.erasure.purge(time.time() + 60, 100),
    "deleted responses erased": lambda w: w.eraser.purge(time.time() + 60, 100),
    "usage columns filled in": lambda w: w.backfill.fill(100),
}


SAID: dict[str, str] = {
    "a conversation created": "creating a conversation",
    "its metadata updated": "updating a conversation",
    "its items added": "adding conversation items",
    "an item deleted": "deleting a conversation item",
    "a conversation deleted": "deleting a conversation",
    "a response deleted": "deleting a response",
    "an owner registered": "registering a run owner",
    "a lease renewed": "renewing a run owner's lease",
    "owners forgotten": "removing run owners",
    "a retention sweep": "deleting responses older than the retention",
    "deleted conversations erased": "erasing deleted conversations",
    "deleted responses erased": "erasing deleted responses",
    "usage columns filled in": "filling in the usage columns",
}
"""What each write's refusal says it was doing (the 503's message)."""


@pytest.mark.parametrize(
    ("write", "action"), [(WRITES[name], SAID[name]) for name in WRITES], ids=WRITES.keys()
)
async def test_any_write_refused_by_a_read_only_sqlite_fails_the_ping_until_one_lands(
    sqlite_file: Path, write: Write, action: str
) -> None:
    tenant = f"tenant-{uuid.uuid4().hex}"
    url = f"sqlite:///{sqlite_file}"
    writable = open_store(url)
    try:
        await Writers.over(writable, tenant).prepare()
    finally:
        await writable.aclose()

    store = open_store(url)
    writers = Writers.over(store, tenant)
    try:
        with read_only_file(sqlite_file):
            with pytest.raises(StorageError) as refused:
                await write(writers)
            assert (refused.value.status, refused.value.code) == (503, "storage_read_only")
            assert refused.value.message.startswith(
                f"Storage failed while {action}. The database is read-only"
            )
            for _ in range(2):
                with pytest.raises(StorageError) as probing:
                    await store.ping()
                assert probing.value.code == "storage_read_only"
                assert probing.value.message.startswith(
                    "Storage failed while checking the database. The database is read-only"
                )

        await store.ping()  # its write probe lands, on connections opened since
        await write(writers)
    finally:
        await store.aclose()


async def test_items_a_full_sqlite_refuses_fail_the_ping_until_space_is_freed(
    sqlite_file: Path,
) -> None:
    tenant = f"tenant-{uuid.uuid4().hex}"
    with full_disk(sqlite_file):
        store = open_store(f"sqlite:///{sqlite_file}")
        conversations = SqlConversationStore(store)
        try:
            await conversations.create(Conversation(tenant, "conv_1", 1.0, {}), [])
            await store.ping()
            with pytest.raises(StorageError) as adding:
                await conversations.add_items(tenant, "conv_1", [message(BIG)])
            assert (adding.value.status, adding.value.code) == (503, "storage_full")
            assert adding.value.message.startswith(
                "Storage failed while adding conversation items. The database is out of space"
            )
            with pytest.raises(StorageError) as probing:
                await store.ping()
            assert probing.value.code == "storage_full"

            free_space(sqlite_file)
            await store.ping()
            assert await conversations.add_items(tenant, "conv_1", [message(BIG)])
        finally:
            await store.aclose()


async def test_a_heartbeat_landing_says_nothing_of_room_for_a_save(sqlite_file: Path) -> None:
    """A heartbeat rewrites its row in place, which a full file lets land while it has no
    page for a save: only a save or a probe landing clears the refusal."""
    tenant = f"tenant-{uuid.uuid4().hex}"
    with full_disk(sqlite_file):
        store = open_store(f"sqlite:///{sqlite_file}")
        leases = SqlOwnerLeases(store)
        try:
            await leases.register(OWNER, 10.0)
            with pytest.raises(StorageError, match="out of space"):
                await store.save(response(tenant, "r1", BIG))
            assert await leases.renew(OWNER)
            with pytest.raises(StorageError, match="out of space"):
                await store.ping()
        finally:
            await store.aclose()


@pytest.mark.postgres
@pytest.mark.parametrize(
    "write",
    [WRITES["its items added"], WRITES["a lease renewed"]],
    ids=["its items added", "a lease renewed"],
)
async def test_a_write_a_read_only_postgres_refuses_has_the_ping_try_one(
    read_only: ReadOnly, pg_store: SqlResponseStore, write: Write
) -> None:
    """Refused as read-only and said so; once the database is writable again (no ping
    between), the next ping tries a write before it answers."""
    writers = Writers.over(pg_store, f"tenant-{uuid.uuid4().hex}")
    await writers.prepare()
    await read_only.on()
    with pytest.raises(StorageError) as refused:
        await write(writers)
    assert (refused.value.status, refused.value.code) == (503, "storage_read_only")
    assert "read-only" in refused.value.message

    await read_only.off()
    written: list[str] = []
    pg_store.write_watchers.append(written.append)
    await pg_store.ping()
    assert any("write_probes" in sql for sql in written), written
    await write(writers)
