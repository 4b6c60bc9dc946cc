"""Migrations on SQLite keep rows and are all or nothing, however they are run.

Going back a revision keeps the rows of the tables that reference the one altered:
dropping a column copies its table (Alembic's batch mode), and the copy's ``DROP TABLE``
of the original must not cascade (SQLite's foreign keys are enforced on every connection
the gateway opens). An upgrade run with Alembic's command API is one transaction, as
start-up's is (the ``sqlite3`` module would commit each DDL statement by itself)."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest
from alembic import command
from sqlalchemy import Connection
from sqlalchemy.exc import OperationalError

from stateway.storage.sql import migrator
from stateway.storage.sql.migrator import alembic_config

_TABLES = "SELECT name FROM sqlite_master WHERE type = 'table'"
_COUNTS = {
    table: f"SELECT count(*) FROM {table}" for table in ("responses", "items", "response_events")
}


def counts(path: Path) -> dict[str, int]:
    with sqlite3.connect(path) as connection:
        return {table: connection.execute(sql).fetchone()[0] for table, sql in _COUNTS.items()}


def test_dropping_a_responses_column_keeps_their_items_and_event_logs(tmp_path: Path) -> None:
    path = tmp_path / "stateway.db"
    config = alembic_config(f"sqlite:///{path}")
    command.upgrade(config, "0004")
    with sqlite3.connect(path) as connection:
        connection.execute(
            "INSERT INTO responses (tenant_id, id, status, created_at, body, served_by)"
            " VALUES ('t', 'resp_1', 'completed', 1.0, '{}', 'default/m')"
        )
        connection.execute(
            "INSERT INTO items (tenant_id, response_id, role, position, item_id, body)"
            " VALUES ('t', 'resp_1', 'input', 0, 'msg_1', '{}'),"
            " ('t', 'resp_1', 'output', 0, 'msg_2', '{}')"
        )
        connection.execute(
            "INSERT INTO response_events (tenant_id, response_id, sequence_number, body)"
            " VALUES ('t', 'resp_1', 0, '{}')"
        )

    command.downgrade(config, "0003")  # served_by dropped: responses copied
    assert counts(path) == {"responses": 1, "items": 2, "response_events": 1}

    command.downgrade(config, "0001")  # owner dropped: responses copied again
    with sqlite3.connect(path) as connection:
        items = connection.execute("SELECT count(*) FROM items").fetchone()[0]
    assert items == 2


async def test_start_up_upgrades_run_with_foreign_keys_unenforced_too(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """No upgrade copies a table yet; the first to do so must not empty another."""
    enforced: list[int] = []
    upgrade = migrator._upgrade_to_head

    def recording(connection: Connection) -> None:
        enforced.append(connection.exec_driver_sql("PRAGMA foreign_keys").scalar_one())
        upgrade(connection)

    monkeypatch.setattr(migrator, "_upgrade_to_head", recording)
    await migrator.migrate(f"sqlite:///{tmp_path}/stateway.db")

    assert enforced == [0]


def test_an_upgrade_from_alembics_command_fails_whole(tmp_path: Path) -> None:
    """Run with Alembic's command API (a developer's way in, env.py opening the database
    itself), an upgrade failing part-way leaves the schema as it was, as start-up's does:
    not tables made by the revision that failed, which the next upgrade would trip on."""
    path = tmp_path / "stateway.db"
    config = alembic_config(f"sqlite:///{path}")
    command.upgrade(config, "0002")
    with sqlite3.connect(path) as connection:  # in the way of 0003's third table
        connection.execute("CREATE TABLE response_events (x)")

    with pytest.raises(OperationalError, match="table response_events already exists"):
        command.upgrade(config, "head")

    with sqlite3.connect(path) as connection:
        tables = {row[0] for row in connection.execute(_TABLES)}
        (revision,) = connection.execute("SELECT version_num FROM alembic_version").fetchone()
    assert tables == {"alembic_version", "responses", "items", "response_events"}
    assert revision == "0002"
