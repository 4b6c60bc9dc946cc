"""``SqlUsageBackfill``: the :class:`~stateway.core.accounting.UsageBackfill` port over the
responses table (:mod:`~stateway.storage.sql.accounting` tells why and when).

A transaction a batch: a ``SELECT`` of the finished rows whose ``model`` is NULL, in key
order, up to the batch's limit (found by ``ix_responses_unfilled``, which holds only such
rows), then an ``UPDATE`` of them, a tenant's at a time, their columns read out of their
body as the usage query reads it (:mod:`~stateway.storage.sql.body_usage`). Nothing is
written when nothing is found, as on every sweep once all are filled in: on SQLite the
search takes no write lock, and a database that takes no writes (read-only) fails no
sweep. A row another process's batch holds is skipped on PostgreSQL (``FOR UPDATE SKIP
LOCKED``), not waited for; on SQLite, which has one writer, batches take turns. A row
still running is left (its end fills it in); one written since the search is filled in by
the next batch.
"""

from __future__ import annotations

from sqlalchemy import bindparam, text

from stateway.storage.sql import body_usage
from stateway.storage.sql.errors import storage_errors
from stateway.storage.sql.schema import IN_PROGRESS_WHERE
from stateway.storage.sql.store import SqlResponseStore
from stateway.storage.sql.tenant_keys import ids_by_tenant


class SqlUsageBackfill:
    """The :class:`~stateway.core.accounting.UsageBackfill` port: fills in the usage
    columns of the finished rows that lack them."""

    def __init__(self, store: SqlResponseStore) -> None:
        """On ``store``'s engine; a lasting refusal met fails its ping
        (:mod:`~stateway.storage.sql.refusals`)."""
        self._engine = store.engine
        self._refusals = store.refusals
        dialect = self._engine.dialect.name
        self._search = text(search_statement(dialect))
        self._fill = text(fill_statement(dialect)).bindparams(bindparam("ids", expanding=True))

    async def fill(self, limit: int) -> int:
        with storage_errors("filling in the usage columns", self._refusals):
            async with self._engine.begin() as connection:
                found = (await connection.execute(self._search, {"limit": limit})).all()
                filled = 0
                for tenant, ids in ids_by_tenant(found).items():
                    values = {"tenant": tenant, "ids": ids}
                    filled += len((await connection.execute(self._fill, values)).all())
        return filled


_UNFILLED = f"model IS NULL AND NOT ({IN_PROGRESS_WHERE})"


def search_statement(dialect: str) -> str:
    """The ``SELECT`` of up to ``:limit`` finished rows lacking the columns, in key order
    (``ix_responses_unfilled``'s), skipping and locking on PostgreSQL."""
    skip = " FOR UPDATE SKIP LOCKED" if dialect == "postgresql" else ""
    return (
        f"SELECT tenant_id, id FROM responses WHERE {_UNFILLED}"
        f" ORDER BY tenant_id, id LIMIT :limit{skip}"
    )


def fill_statement(dialect: str) -> str:
    """The ``UPDATE`` filling in the columns of one tenant's rows ``:ids`` (still lacking
    them)."""
    once = " OFFSET 0" if dialect == "postgresql" else ""
    model, input_tokens, output_tokens = body_usage.fields(dialect)
    return (
        "UPDATE responses SET (model, input_tokens, output_tokens) ="
        f" (SELECT {model}, {input_tokens}, {output_tokens}"
        f" FROM (SELECT {body_usage.parsed(dialect, 'responses.body')} AS state{once})"
        f" AS parsed) WHERE tenant_id = :tenant AND id IN :ids AND {_UNFILLED}"
        " RETURNING id"
    )
