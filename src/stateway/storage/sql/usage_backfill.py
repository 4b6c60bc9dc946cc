"""``SqlUsageBackfill``: the :class:`~stateway.core.accounting.UsageBackfill` port over the
responses table (:mod:`~stateway.storage.sql.accounting` tells why and when).

One ``UPDATE`` a batch: the finished rows whose ``model`` is NULL, in key order, up to
the batch's limit (found by ``ix_responses_unfilled``, which holds only such rows), their
columns read out of their body as the usage query reads it
(:mod:`~stateway.storage.sql.body_usage`). A row another process's batch holds is
skipped on PostgreSQL (``FOR UPDATE SKIP LOCKED``), not waited for; on SQLite, which has
one writer, batches take turns. A row still running is left (its end fills it in); one
written since the search is filled in by the next batch.
"""

from __future__ import annotations

from sqlalchemy import text

from stateway.storage.sql import body_usage
from stateway.storage.sql.errors import storage_errors
from stateway.storage.sql.schema import IN_PROGRESS_WHERE
from stateway.storage.sql.store import SqlResponseStore


class SqlUsageBackfill:
    """The :class:`~stateway.core.accounting.UsageBackfill` port: fills in the usage
    columns of the finished rows that lack them."""

    def __init__(self, store: SqlResponseStore) -> None:
        """On ``store``'s engine; a lasting refusal met fails its ping
        (:mod:`~stateway.storage.sql.refusals`)."""
        self._engine = store.engine
        self._refusals = store.refusals
        self._fill = text(fill_statement(self._engine.dialect.name))

    async def fill(self, limit: int) -> int:
        with storage_errors("filling in the usage columns", self._refusals):
            async with self._engine.begin() as connection:
                filled = await connection.execute(self._fill, {"limit": limit})
                return len(filled.all())


def fill_statement(dialect: str) -> str:
    """The ``UPDATE`` filling in the columns of up to ``:limit`` finished rows lacking
    them, in key order (``ix_responses_unfilled``'s), skipping the rows another process's
    fill holds on PostgreSQL. The batch is searched once, in a ``WITH`` (PostgreSQL may
    run a locking ``IN`` subquery again for rows of the ``UPDATE``, each time finding
    rows the last one left, and fill in more than the limit)."""
    unfilled = f"model IS NULL AND NOT ({IN_PROGRESS_WHERE})"
    postgres = dialect == "postgresql"
    materialized, skip, once = (
        ("MATERIALIZED ", " FOR UPDATE SKIP LOCKED", " OFFSET 0") if postgres else ("", "", "")
    )
    model, input_tokens, output_tokens = body_usage.fields(dialect)
    return (
        f"WITH batch AS {materialized}(SELECT tenant_id, id FROM responses WHERE {unfilled}"
        f" ORDER BY tenant_id, id LIMIT :limit{skip})"
        " UPDATE responses SET (model, input_tokens, output_tokens) ="
        f" (SELECT {model}, {input_tokens}, {output_tokens}"
        f" FROM (SELECT {body_usage.parsed(dialect, 'responses.body')} AS state{once})"
        f" AS parsed) WHERE {unfilled} AND (tenant_id, id) IN (SELECT tenant_id, id FROM batch)"
        " RETURNING id"
    )
