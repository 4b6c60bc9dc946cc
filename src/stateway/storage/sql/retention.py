"""``SqlResponsePurger``: the :class:`~stateway.core.ports.ResponsePurger` port over the
responses table (:mod:`stateway.core.retention` decides when).

One transaction per batch: a ``SELECT`` of up to ``limit`` finished responses created
before the cutoff, then a ``DELETE`` of them by primary key (one per tenant among them,
its ids in a list); their items and event log rows go with them (``ON DELETE CASCADE``;
SQLite's foreign keys are on for every connection:
:data:`~stateway.storage.sql.engine.SQLITE_PRAGMAS`). Replicas sweeping side by side
share the work: on PostgreSQL the search skips the rows another's batch holds (``FOR
UPDATE SKIP LOCKED``) rather than waiting to find them gone; on SQLite, which has no row
locks, it may find rows another then deletes first, and the ``DELETE`` counts only its
own. There is no index on ``created_at``: the search reads the table, which on SQLite
(WAL) holds up no writer until the ``DELETE``, and keeps every save of the hot path one
index cheaper.
"""

from __future__ import annotations

from typing import Final

from sqlalchemy import Select, String, bindparam, delete, select, text
from sqlalchemy.ext.asyncio import AsyncEngine
from sqlalchemy.sql import Delete

from stateway.storage.sql.errors import storage_errors
from stateway.storage.sql.schema import IN_PROGRESS_WHERE, responses

_finished = text(f"NOT ({IN_PROGRESS_WHERE})")

_EXPIRED: Final[Select[str, str]] = (
    select(responses.c.tenant_id, responses.c.id)
    .where(responses.c.created_at < bindparam("before"), _finished)
    .limit(bindparam("limit"))
    .with_for_update(skip_locked=True)
)
_DELETE: Final[Delete] = delete(responses).where(
    responses.c.tenant_id == bindparam("tenant", type_=String),
    responses.c.id.in_(bindparam("ids", expanding=True)),
    _finished,
)


class SqlResponsePurger:
    def __init__(self, engine: AsyncEngine) -> None:
        self._engine = engine

    async def purge(self, before: float, limit: int) -> int:
        with storage_errors("deleting responses older than the retention"):
            async with self._engine.begin() as connection:
                found = await connection.execute(_EXPIRED, {"before": before, "limit": limit})
                by_tenant: dict[str, list[str]] = {}
                for tenant, id_ in found:
                    by_tenant.setdefault(tenant, []).append(id_)
                deleted = 0
                for tenant, ids in by_tenant.items():
                    values = {"tenant": tenant, "ids": ids}
                    deleted += (await connection.execute(_DELETE, values)).rowcount
        return deleted
