"""The Alembic migrations shipped in the package, run without an alembic.ini."""

from __future__ import annotations

import asyncio
import datetime
import json
import secrets
import sqlite3
import subprocess
import sys
from pathlib import Path

import orjson
import pytest
from alembic import command
from alembic.autogenerate import compare_metadata
from alembic.migration import MigrationContext
from alembic.script import ScriptDirectory
from sqlalchemy import Connection, inspect, text

from stateway import __version__
from stateway.core.accounting import UsageBucket
from stateway.core.commands import GetUsage
from stateway.core.errors import ConversationLocked, StorageError
from stateway.storage.sql import SqlConversationStore, migrate, open_store
from stateway.storage.sql.accounting import SqlUsageLedger
from stateway.storage.sql.engine import create_engine
from stateway.storage.sql.migrator import HEAD_REVISION, MIGRATIONS_DIR, alembic_config
from stateway.storage.sql.retention import SqlResponsePurger
from stateway.storage.sql.schema import metadata
from stateway.storage.sql.usage_backfill import SqlUsageBackfill

HEAD = "0019"
_HEAD_TABLES = {
    "responses",
    "items",
    "conversations",
    "conversation_items",
    "response_events",
    "gateway_secrets",
    "run_owners",
    "api_keys",
    "write_probes",
    "alembic_version",
}


_TABLES = "SELECT name FROM sqlite_master WHERE type = 'table'"


def sqlite_state(url: str) -> tuple[set[str], list[str]]:
    """Tables and recorded revision of a SQLite database, read with plain sqlite3."""
    path = url.removeprefix("sqlite:///")
    with sqlite3.connect(path) as connection:
        tables = {row[0] for row in connection.execute(_TABLES)}
        versions = []
        if "alembic_version" in tables:
            versions = [r[0] for r in connection.execute("SELECT version_num FROM alembic_version")]
    return {t for t in tables if not t.startswith("sqlite_")}, versions


def test_the_shipped_scripts_have_one_head() -> None:
    scripts = ScriptDirectory.from_config(alembic_config())

    assert Path(scripts.dir) == MIGRATIONS_DIR
    assert scripts.get_heads() == [HEAD]
    assert HEAD_REVISION == HEAD  # what start-up compares with, without Alembic


_MIGRATE_AND_REPORT = """
import asyncio, sys
from stateway.storage.sql import migrate
asyncio.run(migrate(sys.argv[1]))
print("alembic" in sys.modules)
"""


def test_an_up_to_date_database_is_not_handed_to_alembic(sqlite_url: str) -> None:
    def alembic_loaded() -> str:
        run = [sys.executable, "-c", _MIGRATE_AND_REPORT, sqlite_url]
        return subprocess.run(run, check=True, capture_output=True, text=True).stdout.strip()

    assert alembic_loaded() == "True"  # a new database: migrated
    assert alembic_loaded() == "False"  # at the head: only its version was read
    assert sqlite_state(sqlite_url)[1] == [HEAD]


async def test_an_older_revision_is_still_upgraded(sqlite_url: str) -> None:
    await asyncio.to_thread(command.upgrade, alembic_config(sqlite_url), "0005")

    await migrate(sqlite_url)

    tables, versions = sqlite_state(sqlite_url)
    assert versions == [HEAD]
    assert "api_keys" in tables


async def test_a_newer_revision_is_refused_with_what_to_do(sqlite_url: str) -> None:
    """A database a newer stateway migrated: a StorageError saying so, not Alembic's
    traceback (``Can't locate revision``), and the database left as it was."""
    await migrate(sqlite_url)
    with sqlite3.connect(sqlite_url.removeprefix("sqlite:///")) as connection:
        connection.execute("UPDATE alembic_version SET version_num = '9999_future'")

    with pytest.raises(StorageError) as raised:
        await migrate(sqlite_url)

    assert raised.value.message == (
        f"The database is at schema revision '9999_future', which stateway {__version__} "
        f"does not know (its newest is '{HEAD}'): a newer stateway has migrated it. Serve it "
        "with that version (a schema is never downgraded on start-up)."
    )
    assert sqlite_state(sqlite_url)[1] == ["9999_future"]


async def test_migrate_creates_the_schema_and_is_idempotent(sqlite_url: str) -> None:
    await migrate(sqlite_url)
    await migrate(sqlite_url)

    tables, versions = sqlite_state(sqlite_url)
    assert tables >= {"responses", "items", "alembic_version"}
    assert versions == [HEAD]


async def test_concurrent_migrations_take_turns(sqlite_url: str) -> None:
    await asyncio.gather(*(migrate(sqlite_url) for _ in range(4)))

    assert sqlite_state(sqlite_url)[1] == [HEAD]


async def test_the_migrated_schema_matches_the_metadata(database_url: str) -> None:
    await migrate(database_url)
    engine = create_engine(database_url)

    def differences(connection: Connection) -> list[object]:
        return list(compare_metadata(MigrationContext.configure(connection), metadata))

    try:
        async with engine.connect() as connection:
            assert await connection.run_sync(differences) == []
    finally:
        await engine.dispose()


def test_upgrade_and_downgrade_from_a_url_and_offline(
    sqlite_url: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """env.py's other entries: Alembic opening the database itself, and --sql."""
    config = alembic_config(sqlite_url)

    command.upgrade(config, "head")
    assert sqlite_state(sqlite_url) == (_HEAD_TABLES, [HEAD])
    command.downgrade(config, "base")
    assert sqlite_state(sqlite_url) == ({"alembic_version"}, [])

    command.upgrade(alembic_config("postgresql://u@h/db"), "head", sql=True)
    rendered = capsys.readouterr().out
    assert "CREATE TABLE responses" in rendered
    assert "CREATE TABLE items" in rendered


def test_0002_adds_the_run_owner_and_keeps_stored_responses(sqlite_url: str) -> None:
    config = alembic_config(sqlite_url)
    command.upgrade(config, "0001")
    path = sqlite_url.removeprefix("sqlite:///")
    with sqlite3.connect(path) as connection:
        connection.execute(
            "INSERT INTO responses (tenant_id, id, status, created_at, body) "
            "VALUES ('t', 'r1', 'completed', 1.0, '{}')"
        )
    command.upgrade(config, "head")

    with sqlite3.connect(path) as connection:
        rows = connection.execute("SELECT id, status, owner FROM responses").fetchall()
        indexes = {r[0] for r in connection.execute("SELECT name FROM sqlite_master")}
    assert rows == [("r1", "completed", None)]
    assert "ix_responses_in_progress" in indexes


@pytest.mark.postgres
async def test_postgres_from_empty_with_concurrent_migrations(fresh_postgres_url: str) -> None:
    await asyncio.gather(*(migrate(fresh_postgres_url) for _ in range(4)))
    await migrate(fresh_postgres_url)

    engine = create_engine(fresh_postgres_url)
    try:
        async with engine.connect() as connection:
            version = await connection.scalar(text("SELECT version_num FROM alembic_version"))
            tables = await connection.run_sync(lambda c: set(inspect(c).get_table_names()))
    finally:
        await engine.dispose()
    assert version == HEAD
    assert tables == _HEAD_TABLES


def test_0003_adds_conversations_events_and_secrets_and_counts_queued_as_unfinished(
    sqlite_url: str,
) -> None:
    config = alembic_config(sqlite_url)
    command.upgrade(config, "0002")
    path = sqlite_url.removeprefix("sqlite:///")
    with sqlite3.connect(path) as connection:
        connection.execute(
            "INSERT INTO responses (tenant_id, id, status, created_at, body, owner)"
            " VALUES ('t', 'resp_1', 'completed', 1.0, '{}', NULL)"
        )

    command.upgrade(config, "0003")
    tables, _ = sqlite_state(sqlite_url)
    assert tables == _HEAD_TABLES - {"run_owners", "api_keys", "write_probes"}
    with sqlite3.connect(path) as connection:
        (index_sql,) = connection.execute(
            "SELECT sql FROM sqlite_master WHERE name = 'ix_responses_in_progress'"
        ).fetchone()
        kept = connection.execute("SELECT id FROM responses").fetchall()
    assert "'queued'" in index_sql
    assert kept == [("resp_1",)]

    command.downgrade(config, "0002")
    tables, _ = sqlite_state(sqlite_url)
    assert tables == {"responses", "items", "alembic_version"}


def test_0004_adds_served_by_and_keeps_stored_responses(sqlite_url: str) -> None:
    config = alembic_config(sqlite_url)
    command.upgrade(config, "0003")
    path = sqlite_url.removeprefix("sqlite:///")
    with sqlite3.connect(path) as connection:
        connection.execute(
            "INSERT INTO responses (tenant_id, id, status, created_at, body, owner)"
            " VALUES ('t', 'resp_1', 'completed', 1.0, '{}', NULL)"
        )

    command.upgrade(config, "0004")
    with sqlite3.connect(path) as connection:
        rows = connection.execute("SELECT id, served_by FROM responses").fetchall()
    assert rows == [("resp_1", None)]

    command.downgrade(config, "0003")
    with sqlite3.connect(path) as connection:
        columns = [r[1] for r in connection.execute("PRAGMA table_info(responses)")]
        (index_sql,) = connection.execute(
            "SELECT sql FROM sqlite_master WHERE name = 'ix_responses_in_progress'"
        ).fetchone()
        kept = connection.execute("SELECT id FROM responses").fetchall()
    assert "served_by" not in columns
    assert "'queued'" in index_sql
    assert kept == [("resp_1",)]


def test_0005_adds_the_run_owners_and_drops_them_again(sqlite_url: str) -> None:
    config = alembic_config(sqlite_url)
    command.upgrade(config, "0004")
    assert "run_owners" not in sqlite_state(sqlite_url)[0]

    command.upgrade(config, "0005")
    path = sqlite_url.removeprefix("sqlite:///")
    with sqlite3.connect(path) as connection:
        connection.execute(
            "INSERT INTO run_owners (owner, beat, lease_timeout, renewed_at)"
            " VALUES ('h 1 1', 0, 10.0, 1.0)"
        )
        rows = connection.execute("SELECT owner, beat FROM run_owners").fetchall()
    assert rows == [("h 1 1", 0)]

    command.downgrade(config, "0004")
    assert sqlite_state(sqlite_url) == (
        _HEAD_TABLES - {"run_owners", "api_keys", "write_probes"},
        ["0004"],
    )


def test_0006_adds_the_api_keys_and_takes_them_away(sqlite_url: str) -> None:
    config = alembic_config(sqlite_url)
    command.upgrade(config, "0005")
    command.upgrade(config, "0006")
    assert sqlite_state(sqlite_url) == (_HEAD_TABLES - {"write_probes"}, ["0006"])
    path = sqlite_url.removeprefix("sqlite:///")
    row = "INSERT INTO api_keys (id, tenant_id, digest, created_at) VALUES (?, 't', 'd', 1.0)"
    with sqlite3.connect(path) as connection:
        connection.execute(row, ("key_1",))
        with pytest.raises(sqlite3.IntegrityError):  # one key per digest
            connection.execute(row, ("key_2",))

    command.downgrade(config, "0005")
    assert sqlite_state(sqlite_url) == (_HEAD_TABLES - {"api_keys", "write_probes"}, ["0005"])


def test_0007_keeps_deleted_items_as_tombstones_and_drops_them_going_back(sqlite_url: str) -> None:
    config = alembic_config(sqlite_url)
    command.upgrade(config, "0006")
    path = sqlite_url.removeprefix("sqlite:///")
    with sqlite3.connect(path) as connection:
        connection.execute(
            "INSERT INTO conversations (tenant_id, id, created_at, metadata, next_position)"
            " VALUES ('t', 'conv_1', 1.0, '{}', 2)"
        )
        for position in (0, 1):
            connection.execute(
                "INSERT INTO conversation_items"
                " (tenant_id, conversation_id, position, item_id, created_at, body)"
                " VALUES ('t', 'conv_1', ?, ?, 1.0, '{}')",
                (position, f"msg_{position}"),
            )

    command.upgrade(config, "0007")
    with sqlite3.connect(path) as connection:
        kept = connection.execute("SELECT item_id, deleted_at FROM conversation_items").fetchall()
        connection.execute("UPDATE conversation_items SET deleted_at = 2.0 WHERE position = 0")
    assert sorted(kept) == [("msg_0", None), ("msg_1", None)]

    command.downgrade(config, "0006")
    with sqlite3.connect(path) as connection:
        columns = [r[1] for r in connection.execute("PRAGMA table_info(conversation_items)")]
        left = connection.execute("SELECT item_id FROM conversation_items").fetchall()
    assert "deleted_at" not in columns
    assert left == [("msg_1",)], "a tombstone is not an item the older schema could show"


_LOOKUP = (
    "EXPLAIN QUERY PLAN SELECT body FROM conversation_items"
    " WHERE tenant_id = 't' AND item_id IN ('msg_1', 'msg_2')"
)


def test_0009_indexes_conversation_items_by_id_first_and_goes_back(sqlite_url: str) -> None:
    """An ``item_reference`` names a conversation item by id alone: the index leads with
    it, and still serves every lookup that also names the conversation."""
    config = alembic_config(sqlite_url)
    command.upgrade(config, "0008")
    path = sqlite_url.removeprefix("sqlite:///")

    def indexes_and_plan() -> tuple[list[str], str]:
        with sqlite3.connect(path) as connection:
            rows = connection.execute("PRAGMA index_list(conversation_items)").fetchall()
            names = sorted(row[1] for row in rows if row[1].startswith("ix_"))
            plan = " ".join(row[3] for row in connection.execute(_LOOKUP))
        return names, plan

    names, plan = indexes_and_plan()
    assert names == ["ix_conversation_items_tenant_id_conversation_id_item_id"]
    assert "item_id=?" not in plan, plan  # all the tenant's items read

    command.upgrade(config, "0009")
    names, plan = indexes_and_plan()
    assert names == ["ix_conversation_items_tenant_id_item_id_conversation_id"]
    assert "ix_conversation_items_tenant_id_item_id_conversation_id" in plan, plan
    assert "item_id=?" in plan, plan

    command.downgrade(config, "0008")
    assert indexes_and_plan()[0] == ["ix_conversation_items_tenant_id_conversation_id_item_id"]


_TRIGGER_ROWS = [
    # position, body, deleted_at
    (0, '{"type":"message","role":"user","content":"a \\"type\\":\\"compaction_trigger\\""}', None),
    (1, '{"type":"compaction_trigger","id":"item_1"}', None),
    (2, '{"id":"item_2","type":"compaction_trigger"}', None),
    (3, '{"type":"compaction","id":"cmp_1","encrypted_content":"sw1.x"}', None),
    (4, "", 2.0),
]


def test_0010_leaves_the_triggers_turns_appended_to_conversations_as_tombstones(
    sqlite_url: str,
) -> None:
    """A conversation turn's ``compaction_trigger`` was appended with its input until
    2026-12-04; no conversation item type is one, so listings showed an item the SDK
    reads as a message. Each becomes a tombstone, as if deleted as it was appended: its
    position still bounds a page. Nothing else changes."""
    config = alembic_config(sqlite_url)
    command.upgrade(config, "0009")
    path = sqlite_url.removeprefix("sqlite:///")
    with sqlite3.connect(path) as connection:
        connection.execute(
            "INSERT INTO conversations (tenant_id, id, created_at, metadata, next_position)"
            " VALUES ('t', 'conv_1', 1.0, '{}', 5)"
        )
        connection.executemany(
            "INSERT INTO conversation_items (tenant_id, conversation_id, position, item_id,"
            " created_at, body, deleted_at) VALUES ('t', 'conv_1', ?, ?, 1.5, ?, ?)",
            [(position, f"i{position}", body, gone) for position, body, gone in _TRIGGER_ROWS],
        )

    command.upgrade(config, "0010")
    with sqlite3.connect(path) as connection:
        rows = connection.execute(
            "SELECT position, body, deleted_at FROM conversation_items ORDER BY position"
        ).fetchall()
    assert rows == [_TRIGGER_ROWS[0], (1, "", 1.5), (2, "", 1.5), *_TRIGGER_ROWS[3:]]

    command.downgrade(config, "0009")  # tombstones, which the older schema reads as such
    assert sqlite_state(sqlite_url)[1] == ["0009"]


def test_0011_adds_the_write_probes_and_takes_them_away(sqlite_url: str) -> None:
    config = alembic_config(sqlite_url)
    command.upgrade(config, "0010")
    command.upgrade(config, "0011")
    assert sqlite_state(sqlite_url) == (_HEAD_TABLES, ["0011"])

    command.downgrade(config, "0010")
    assert sqlite_state(sqlite_url) == (_HEAD_TABLES - {"write_probes"}, ["0010"])


_SHARED_ID_ROWS = [
    # conversation, position, item_id, body, deleted_at
    ("conv_1", 0, "call_1", '{"type":"local_shell_call","id":"call_1","call_id":"call_1"}', None),
    ("conv_1", 1, "call_1", '{"type":"local_shell_call_output","id":"call_1","output":"ok"}', None),
    ("conv_1", 2, "call_1", "", 2.0),
    ("conv_1", 3, "msg_1", '{"type":"message","id":"msg_1","role":"user","content":"é"}', None),
    ("conv_1", 4, "msg_1", '{"type":"message","id":"msg_1","role":"user","content":"b"}', None),
    ("conv_2", 0, "call_1", '{"type":"local_shell_call_output","id":"call_1","output":"x"}', None),
]


def test_0012_gives_each_later_copy_of_an_id_a_new_one_and_makes_ids_unique(
    sqlite_url: str,
) -> None:
    """Items of one conversation sharing an id (a ``local_shell_call_output`` kept its
    call's) made a page's cursor ambiguous: the first keeps the id, each later one gets a
    new id (an output answering its call by ``call_id`` instead), and the index refuses
    another. Another conversation's copy is its own."""
    config = alembic_config(sqlite_url)
    command.upgrade(config, "0011")
    path = sqlite_url.removeprefix("sqlite:///")
    with sqlite3.connect(path) as connection:
        connection.executemany(
            "INSERT INTO conversations (tenant_id, id, created_at, metadata, next_position)"
            " VALUES ('t', ?, 1.0, '{}', 5)",
            [("conv_1",), ("conv_2",)],
        )
        connection.executemany(
            "INSERT INTO conversation_items (tenant_id, conversation_id, position, item_id,"
            " created_at, body, deleted_at) VALUES ('t', ?, ?, ?, 1.5, ?, ?)",
            _SHARED_ID_ROWS,
        )

    command.upgrade(config, "0012")
    with sqlite3.connect(path) as connection:
        rows = connection.execute(
            "SELECT conversation_id, position, item_id, body, deleted_at FROM conversation_items"
            " ORDER BY conversation_id, position"
        ).fetchall()
        with pytest.raises(sqlite3.IntegrityError):
            connection.execute(
                "INSERT INTO conversation_items (tenant_id, conversation_id, position, item_id,"
                " created_at, body) VALUES ('t', 'conv_1', 9, 'msg_1', 1.5, '{}')"
            )
    assert [rows[i] for i in (0, 3, 5)] == [_SHARED_ID_ROWS[i] for i in (0, 3, 5)]
    output, tombstone, message = rows[1], rows[2], rows[4]
    assert output[2].startswith("item_")
    assert json.loads(output[3]) == {
        "type": "local_shell_call_output",
        "id": output[2],
        "call_id": "call_1",
        "output": "ok",
    }
    assert tombstone[2].startswith("item_")
    assert tombstone[3:] == ("", 2.0)
    assert message[2].startswith("msg_")
    assert message[2] != "msg_1"
    assert json.loads(message[3]) == {**json.loads(_SHARED_ID_ROWS[4][3]), "id": message[2]}
    assert len({row[2] for row in rows[:5]}) == 5

    command.downgrade(config, "0011")
    with sqlite3.connect(path) as connection:
        connection.execute(
            "INSERT INTO conversation_items (tenant_id, conversation_id, position, item_id,"
            " created_at, body) VALUES ('t', 'conv_1', 9, 'msg_1', 1.5, '{}')"
        )


@pytest.mark.postgres
async def test_0012_renames_shared_ids_on_postgres(fresh_postgres_url: str) -> None:
    await asyncio.to_thread(command.upgrade, alembic_config(fresh_postgres_url), "0011")
    engine = create_engine(fresh_postgres_url)
    insert = text(
        "INSERT INTO conversation_items (tenant_id, conversation_id, position, item_id,"
        " created_at, body, deleted_at) VALUES ('t', :c, :p, :i, 1.5, :b, :d)"
    )
    read = text(
        "SELECT conversation_id, position, item_id, body FROM conversation_items"
        " ORDER BY conversation_id, position"
    )
    try:
        async with engine.begin() as connection:
            await connection.execute(
                text(
                    "INSERT INTO conversations (tenant_id, id, created_at, metadata,"
                    " next_position) VALUES ('t', 'conv_1', 1.0, '{}', 5), ('t', 'conv_2', 1.0,"
                    " '{}', 1)"
                )
            )
            await connection.execute(
                insert, [dict(zip("cpibd", row, strict=True)) for row in _SHARED_ID_ROWS]
            )
        await migrate(fresh_postgres_url)
        async with engine.connect() as connection:
            rows = (await connection.execute(read)).all()
    finally:
        await engine.dispose()
    assert [tuple(rows[i]) for i in (0, 3, 5)] == [_SHARED_ID_ROWS[i][:4] for i in (0, 3, 5)]
    assert json.loads(rows[1][3])["call_id"] == "call_1"
    assert len({row[2] for row in rows[:5]}) == 5


async def test_an_up_to_date_database_is_migrated_without_waiting_for_its_write_lock(
    sqlite_url: str,
) -> None:
    """A start-up finding the schema current only reads its version: a serving process's
    write transaction does not hold it up (an upgrade would wait for it)."""
    await migrate(sqlite_url)
    with sqlite3.connect(sqlite_url.removeprefix("sqlite:///"), isolation_level=None) as writer:
        writer.execute("BEGIN IMMEDIATE")
        migrating = asyncio.create_task(migrate(sqlite_url))
        try:
            done, _ = await asyncio.wait({migrating}, timeout=5)
        finally:
            writer.execute("ROLLBACK")  # a migration waiting for the lock then ends
            await migrating
    assert done, "the start-up waited for the write lock"


async def test_a_database_that_cannot_be_read_is_a_storage_error_naming_the_migration(
    tmp_path: Path,
) -> None:
    (tmp_path / "db").mkdir()
    with pytest.raises(StorageError) as raised:
        await migrate(f"sqlite:///{tmp_path / 'db'}")
    assert raised.value.message.startswith("Storage failed while migrating the database.")


def test_a_url_with_percent_signs_reaches_alembic_as_written() -> None:
    """Alembic's configuration is a ConfigParser, where ``%`` would start an
    interpolation: a password or path holding one must still be read back whole."""
    url = "postgresql://gw:p%40ss%25@db/stateway"
    assert alembic_config(url).get_main_option("sqlalchemy.url") == url


@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def empty_url(request: pytest.FixtureRequest, sqlite_url: str) -> str:
    """An empty database of each kind (on PostgreSQL a new one: no other test's rows)."""
    if request.param == "sqlite":
        return sqlite_url
    url: str = request.getfixturevalue("fresh_postgres_url")
    return url


_HELD = [("conv_stale", "resp_failed", "failed"), ("conv_running", "resp_running", "in_progress")]
"""Conversations an earlier release left held: by a turn it marked failed (its process
had died) without letting go, and by a turn still running."""
_PLANT_RESPONSE = text(
    "INSERT INTO responses (tenant_id, id, status, created_at, body)"
    " VALUES ('t', :response, :status, 0.5, '{}')"
)
_PLANT_CONVERSATION = text(
    "INSERT INTO conversations (tenant_id, id, created_at, metadata, next_position,"
    " active_response_id) VALUES ('t', :conversation, 0.5, '{}', 0, :response)"
)


async def test_0014_lets_go_of_conversations_held_by_ended_turns(empty_url: str) -> None:
    """Once a retention sweep deleted the ended turn holding a conversation, nothing
    told that the holder had ended: every later turn and append was refused (409
    ``conversation_locked``) for ever. The upgrade lets go of them; a turn still running
    keeps its conversation."""
    await asyncio.to_thread(command.upgrade, alembic_config(empty_url), "0013")
    engine = create_engine(empty_url)
    try:
        async with engine.begin() as connection:
            for conversation, response, status in _HELD:
                await connection.execute(_PLANT_RESPONSE, {"response": response, "status": status})
                values = {"conversation": conversation, "response": response}
                await connection.execute(_PLANT_CONVERSATION, values)
    finally:
        await engine.dispose()

    await migrate(empty_url)
    store = open_store(empty_url)
    try:
        assert await SqlResponsePurger(store).purge(1.0, 100) == 1  # the failed turn
        conversations = SqlConversationStore(store)
        item = {"type": "message", "role": "user", "content": "k"}
        added = await conversations.add_items("t", "conv_stale", [item])
        assert added is not None
        assert [i["content"] for i in added] == ["k"]
        with pytest.raises(ConversationLocked):
            await conversations.add_items("t", "conv_running", [item])
    finally:
        await store.aclose()


async def test_0014_lets_go_of_conversations_whose_ended_holder_was_swept(
    empty_url: str,
) -> None:
    """A conversation whose holder a retention sweep of an earlier release had already
    deleted was refused every later turn and append for ever: a holder's row is there
    while it holds the lock (inserted in the claim's transaction, deleted only once
    ended), so a missing one has ended too."""
    await asyncio.to_thread(command.upgrade, alembic_config(empty_url), "0013")
    engine = create_engine(empty_url)
    try:
        async with engine.begin() as connection:
            values = {"conversation": "conv_swept", "response": "resp_swept"}
            await connection.execute(_PLANT_CONVERSATION, values)
    finally:
        await engine.dispose()

    await migrate(empty_url)
    store = open_store(empty_url)
    try:
        item = {"type": "message", "role": "user", "content": "k"}
        added = await SqlConversationStore(store).add_items("t", "conv_swept", [item])
        assert added is not None
        assert [i["content"] for i in added] == ["k"]
    finally:
        await store.aclose()


async def test_0013_indexes_input_items_whose_ids_are_too_long_for_an_index(
    empty_url: str,
) -> None:
    """Earlier releases kept an input item's id however long (no index held it); one
    longer than PostgreSQL's index row (2704 bytes) failed the index's creation, and so
    every start. Such an id names nothing now (:func:`.schema.indexable_id`): the upgrade
    keeps its item unindexed."""
    await asyncio.to_thread(command.upgrade, alembic_config(empty_url), "0012")
    long_id = "msg_" + secrets.token_urlsafe(3000)  # incompressible
    engine = create_engine(empty_url)
    try:
        async with engine.begin() as connection:
            await connection.execute(_PLANT_RESPONSE, {"response": "resp_1", "status": "completed"})
            await connection.execute(
                text(
                    "INSERT INTO items (tenant_id, response_id, role, position, item_id, body)"
                    " VALUES ('t', 'resp_1', 'input', :p, :i, '{}')"
                ),
                [{"p": 0, "i": long_id}, {"p": 1, "i": "msg_short"}],
            )
    finally:
        await engine.dispose()

    await migrate(empty_url)
    engine = create_engine(empty_url)
    try:
        async with engine.connect() as connection:
            read = text("SELECT item_id FROM items ORDER BY position")
            assert list((await connection.execute(read)).scalars()) == [None, "msg_short"]
    finally:
        await engine.dispose()


def _state(model: object, usage: object, **more: object) -> str:
    return orjson.dumps({"model": model, "usage": usage, **more}).decode()


_USAGE = {"input_tokens": 10, "output_tokens": 2, "cached_tokens": 0}
_BODIES = {
    "resp_plain": ("completed", _state("m", _USAGE)),
    "resp_failed": ("failed", _state("m", None)),
    "resp_running": ("in_progress", _state("m", None)),
    "resp_nul_model": ("completed", _state("m\x00x", {"input_tokens": 1, "output_tokens": 1})),
    "resp_escaped": ("completed", _state("\\u0000\x00", {"input_tokens": 2, "output_tokens": 2})),
    "resp_nul_elsewhere": ("incomplete", _state("m", _USAGE, instructions="a\x00b \\\\u0000")),
    "resp_no_model": ("completed", orjson.dumps({"id": "resp_no_model"}).decode()),
    "resp_odd": ("completed", _state(7, {"input_tokens": 2**64 - 1, "output_tokens": 2.5})),
}
"""Bodies an earlier release wrote (orjson's JSON text): usage or none, a NUL in the model
(``\\u0000`` in the text, which PostgreSQL's jsonb refuses) or elsewhere, an escaped
backslash before ``u0000`` (no NUL), no model, counts no BIGINT column holds."""


async def test_0016_adds_usage_columns_the_sweeps_fill_in_counting_the_same_meanwhile(
    empty_url: str,
) -> None:
    """The usage query reads columns now: the upgrade adds them NULL, the usage of the
    responses earlier releases stored is read out of their bodies until a sweep fills
    them in, and it adds up to what it was, before and after."""
    await asyncio.to_thread(command.upgrade, alembic_config(empty_url), "0015")
    engine = create_engine(empty_url)
    plant = text(
        "INSERT INTO responses (tenant_id, id, status, created_at, deleted_at, body)"
        " VALUES ('t', :id, :status, 1699920000.5, :deleted_at, :body)"
    )
    try:
        async with engine.begin() as connection:
            for response_id, (status, body) in _BODIES.items():
                deleted = 1.0 if response_id == "resp_plain" else None
                values = {"id": response_id, "status": status, "deleted_at": deleted}
                await connection.execute(plant, {**values, "body": body})
    finally:
        await engine.dispose()

    await migrate(empty_url)
    store = open_store(empty_url)
    try:
        read = text("SELECT id, model, input_tokens, output_tokens FROM responses")
        ledger = SqlUsageLedger(store.reader)
        day = datetime.date(2023, 11, 14)
        expected = [
            UsageBucket("t", "", day, responses=2, input_tokens=0, output_tokens=0),
            UsageBucket("t", "\\u0000\ufffd", day, responses=1, input_tokens=2, output_tokens=2),
            UsageBucket("t", "m", day, responses=3, input_tokens=20, output_tokens=4),
            UsageBucket("t", "m\ufffdx", day, responses=1, input_tokens=1, output_tokens=1),
        ]
        async with store.reader.connect() as connection:
            rows = {row[0]: tuple(row[1:]) for row in (await connection.execute(read)).all()}
        assert set(rows.values()) == {(None, None, None)}
        assert sorted(await ledger.usage(GetUsage("t")), key=lambda b: b.model) == expected

        backfill = SqlUsageBackfill(store)
        assert await backfill.fill(3) == 3
        assert await backfill.fill(100) == 4  # the one running is left to its end
        assert await backfill.fill(100) == 0
        async with store.reader.connect() as connection:
            rows = {row[0]: tuple(row[1:]) for row in (await connection.execute(read)).all()}
        assert rows == {
            "resp_plain": ("m", 10, 2),
            "resp_failed": ("m", None, None),
            "resp_running": (None, None, None),
            "resp_nul_model": ("m\ufffdx", 1, 1),
            "resp_escaped": ("\\u0000\ufffd", 2, 2),
            "resp_nul_elsewhere": ("m", 10, 2),
            "resp_no_model": ("", None, None),
            "resp_odd": ("", None, None),
        }
        assert sorted(await ledger.usage(GetUsage("t")), key=lambda b: b.model) == expected
    finally:
        await store.aclose()


def _sqlite_schema(url: str) -> tuple[set[tuple[str, str]], set[tuple[str, str, str]]]:
    """A SQLite database's indexes (name, definition) and columns (table, name, type);
    the tables' own text is left out, which a column dropped by copying the table
    rewrites."""
    with sqlite3.connect(url.removeprefix("sqlite:///")) as connection:
        indexes = {
            (name, " ".join(sql.split()))
            for name, sql in connection.execute(
                "SELECT name, sql FROM sqlite_master WHERE type = 'index' AND sql IS NOT NULL"
            )
        }
        tables = [row[0] for row in connection.execute(_TABLES)]
        columns = {
            (table, row[1], row[2])
            for table in tables
            for row in connection.execute(f"PRAGMA table_info('{table}')")
        }
    return indexes, columns


@pytest.mark.parametrize("revision", ["0015", "0016", "0017", "0018"])
def test_going_back_from_the_usage_columns_leaves_the_schema_as_it_was(
    tmp_path: Path, revision: str
) -> None:
    """Each of 0016 to 0019 taken back leaves the schema as the upgrade to the revision
    before made it: the columns dropped, the indexes they added gone, and the index
    SQLite's copy of the table drops made again, partial as it was."""
    fresh, back = (f"sqlite:///{tmp_path}/{name}.db" for name in ("fresh", "back"))
    command.upgrade(alembic_config(fresh), revision)
    command.upgrade(alembic_config(back), "head")
    command.downgrade(alembic_config(back), revision)
    assert _sqlite_schema(back) == _sqlite_schema(fresh)


@pytest.mark.postgres
async def test_0019_adds_the_body_reader_on_postgres_and_takes_it_away(
    fresh_postgres_url: str,
) -> None:
    """``stateway_body``: a body's JSON, NULL where it is none."""
    config = alembic_config(fresh_postgres_url)
    await asyncio.to_thread(command.upgrade, config, "head")
    engine = create_engine(fresh_postgres_url)
    read = text("SELECT stateway_body('{\"a\": 1}') ->> 'a', stateway_body('{') IS NULL")
    exists = text("SELECT count(*) FROM pg_proc WHERE proname = 'stateway_body'")
    try:
        async with engine.connect() as connection:
            assert tuple((await connection.execute(read)).one()) == ("1", True)
        await asyncio.to_thread(command.downgrade, config, "0018")
        async with engine.connect() as connection:
            assert (await connection.execute(exists)).scalar() == 0
    finally:
        await engine.dispose()
