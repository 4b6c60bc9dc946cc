"""``SqlResponsePurger``: the :class:`~stateway.core.ports.ResponsePurger` port over the
responses table (:mod:`stateway.core.retention` decides when).

One transaction per batch: a ``SELECT`` of up to ``limit`` finished responses created
before the cutoff, then a ``DELETE`` of each by its primary key; their items and event
log rows go with them (``ON DELETE CASCADE``; SQLite's foreign keys are on for every
connection: :data:`~stateway.storage.sql.engine.SQLITE_PRAGMAS`). There is no index on
``created_at``: the search reads the table, which on SQLite (WAL) holds up no writer
until the ``DELETE``, and keeps every save of the hot path one index cheaper.
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
)
_DELETE: Final[Delete] = delete(responses).where(
    responses.c.tenant_id == bindparam("tenant", type_=String),
    responses.c.id == bindparam("response", type_=String),
    _finished,
)


class SqlResponsePurger:
    def __init__(self, engine: AsyncEngine) -> None:
        self._engine = engine

    async def purge(self, before: float, limit: int) -> int:
        with storage_errors("deleting responses older than the retention"):
            async with self._engine.begin() as connection:
                found = await connection.execute(_EXPIRED, {"before": before, "limit": limit})
                rows = [{"tenant": tenant, "response": id_} for tenant, id_ in found]
                if rows:
                    await connection.execute(_DELETE, rows)
        return len(rows)
