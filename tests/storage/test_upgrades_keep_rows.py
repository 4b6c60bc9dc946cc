"""Upgrading from every revision keeps every row as it was: a database at revision R holding
rows of each table R has (each column R has), upgraded to the head as start-up does it,
holds the same rows, the columns added since empty (NULL).

The rows are of no shape a data migration changes (``0010``'s compaction triggers,
``0012``'s shared conversation item ids: their own tests cover them). Through the gateway,
``tests/e2e/test_old_release.py`` serves a database two releases wrote."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from alembic import command
from alembic.script import ScriptDirectory
from sqlalchemy import Connection, MetaData, inspect, select

from stateway.storage.sql import migrate
from stateway.storage.sql.engine import create_engine
from stateway.storage.sql.migrator import HEAD_REVISION, alembic_config

_MESSAGE = '{"type":"message","role":"user","content":[{"type":"input_text","text":"é"}]}'
_ROWS: dict[str, list[dict[str, Any]]] = {
    "responses": [
        {"tenant_id": "t", "id": "resp_1", "previous_response_id": None, "status": "completed",
         "created_at": 1.5, "deleted_at": None, "body": '{"id":"resp_1"}', "owner": None,
         "served_by": "default/m", "model": None, "input_tokens": None, "output_tokens": None},
        {"tenant_id": "t", "id": "resp_2", "previous_response_id": "resp_1",
         "status": "completed", "created_at": 2.5, "deleted_at": 3.5, "body": '{"id":"resp_2"}',
         "owner": None, "served_by": None, "model": None, "input_tokens": None,
         "output_tokens": None},
    ],
    "items": [
        {"tenant_id": "t", "response_id": response, "role": role, "position": position,
         "item_id": None if role == "input" else f"msg_{response}_{position}", "body": _MESSAGE}
        for response in ("resp_1", "resp_2")
        for role in ("input", "output")
        for position in (0, 1)
    ],
    "conversations": [
        {"tenant_id": "t", "id": "conv_1", "created_at": 1.0, "deleted_at": None,
         "metadata": '{"k":"v"}', "next_position": 3, "active_response_id": None},
    ],
    "conversation_items": [
        {"tenant_id": "t", "conversation_id": "conv_1", "position": position,
         "item_id": f"msg_c{position}", "response_id": "resp_1" if position else None,
         "created_at": 1.0, "body": _MESSAGE, "deleted_at": None}
        for position in (0, 1)
    ] + [
        {"tenant_id": "t", "conversation_id": "conv_1", "position": 2, "item_id": "msg_c2",
         "response_id": None, "created_at": 1.0, "body": "", "deleted_at": 2.0},
    ],
    "response_events": [
        {"tenant_id": "t", "response_id": "resp_1", "sequence_number": 0,
         "body": '{"type":"response.created","sequence_number":0}'},
    ],
    "gateway_secrets": [{"name": "sealing_key", "value": "a2V5", "created_at": 1.0}],
    "run_owners": [{"owner": "h 1 1", "beat": 3, "lease_timeout": 30.0, "renewed_at": 1.0}],
    "api_keys": [
        {"id": "key_1", "tenant_id": "t", "name": None, "digest": "d1", "created_at": 1.0,
         "expires_at": None, "revoked_at": 2.0},
    ],
}  # fmt: skip
_REVISIONS = [
    script.revision
    for script in reversed(list(ScriptDirectory.from_config(alembic_config()).walk_revisions()))
    if script.revision != HEAD_REVISION
]


def _plant(connection: Connection) -> dict[str, list[str]]:
    """Insert the rows of each table the database has, as its columns allow; return the
    columns of each planted table."""
    tables = MetaData()
    tables.reflect(connection)
    planted = {}
    for name, rows in _ROWS.items():
        if name not in tables.tables:
            continue
        table = tables.tables[name]
        columns = [column.name for column in table.columns]
        kept = [row for row in rows if row.get("deleted_at") is None or "deleted_at" in columns]
        connection.execute(table.insert(), [{c: row[c] for c in columns} for row in kept])
        planted[name] = columns
    return planted


def _read(connection: Connection, name: str) -> list[dict[str, Any]]:
    tables = MetaData()
    tables.reflect(connection, only=[name])
    table = tables.tables[name]
    key = list(inspect(connection).get_pk_constraint(name)["constrained_columns"])
    rows = connection.execute(select(table).order_by(*(table.c[c] for c in key)))
    return [dict(row._mapping) for row in rows]


@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def empty_url(request: pytest.FixtureRequest, sqlite_url: str) -> str:
    """An empty database of each kind (on PostgreSQL a new one: no other test's rows)."""
    if request.param == "sqlite":
        return sqlite_url
    url: str = request.getfixturevalue("fresh_postgres_url")
    return url


@pytest.mark.parametrize("revision", _REVISIONS)
async def test_upgrading_from_each_revision_keeps_every_row(revision: str, empty_url: str) -> None:
    url = empty_url
    await asyncio.to_thread(command.upgrade, alembic_config(url), revision)
    engine = create_engine(url)
    try:
        async with engine.begin() as connection:
            planted = await connection.run_sync(_plant)
        await migrate(url)
        async with engine.connect() as connection:
            for name, columns in planted.items():
                rows = await connection.run_sync(_read, name)
                kept = [
                    row
                    for row in _ROWS[name]
                    if row.get("deleted_at") is None or "deleted_at" in columns
                ]
                expected = [{c: (row[c] if c in columns else None) for c in row} for row in kept]
                assert rows == expected, name
    finally:
        await engine.dispose()
