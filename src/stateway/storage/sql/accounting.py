"""The :class:`~stateway.core.accounting.UsageLedger` port over the responses table.

Every write of a response row copies its state's ``model`` and ``usage`` counts out into
columns (:func:`usage_columns`); one aggregate query sums them by tenant, model and UTC
day, reading no body::

    SELECT tenant_id, model, day, count(*), sum(input_tokens), sum(output_tokens)
      FROM (SELECT tenant_id, model, CAST(created_at / 86400 AS INTEGER) AS day,
                   input_tokens, output_tokens
              FROM responses
             WHERE status NOT IN ('queued', 'in_progress') [AND tenant_id = :tenant]
                   [AND created_at >= :start] [AND created_at < :end])
     GROUP BY tenant_id, model, day ORDER BY day, tenant_id, model

PostgreSQL takes the day with ``floor`` (its cast to an integer rounds). Deleted responses
count (their tokens were spent) until a retention sweep removes them
(:mod:`stateway.core.retention`), the erasure of their content leaving these columns as
they were; unfinished ones count once they end.

No index serves the query but the primary key, whose first column is ``tenant_id``:
none on ``created_at``. Usage is an operator's question, asked now and then, while every
stored response would pay for such an index's entry in its save, the hot path. Without
it a time window is read by a scan of the tenant's rows (of every row, for all tenants),
which reads columns and parses nothing: at 150,000 responses, every tenant's usage took
0.2 to 0.4 s on PostgreSQL (a body stored out of line is not read) and 0.45 to 0.9 s on
SQLite (2 busy cores), some 3 and 6 µs a row at most: PostgreSQL's ``[storage]
database_timeout`` (30 s) is some ten million rows away. Read out of each row's ``body``,
the counts took 7 and 5 to 6 s. Migration ``0016`` filled the columns in for the rows
stored before them; a row an older release's process writes after the upgrade (a rolling
restart's mixed period) has them NULL: it counts under no model, without tokens.

A model holding NUL is kept with U+FFFD in its place (PostgreSQL's text cannot hold the
character). A count is kept when it is an integer of at most 18 digits (a ``BIGINT``
holds it; orjson writes integers up to 2**64 - 1), unknown (NULL) otherwise, as is a
model that is no string: the response is stored all the same.
"""

from __future__ import annotations

import datetime
from collections.abc import Mapping
from typing import Any, Final

from sqlalchemy import BigInteger, Integer, Select, cast, func, select, text
from sqlalchemy.ext.asyncio import AsyncEngine

from stateway.core.accounting import UsageBucket
from stateway.core.commands import GetUsage
from stateway.storage.sql.errors import storage_errors
from stateway.storage.sql.schema import IN_PROGRESS_WHERE, responses

DAY: Final = 86400
EPOCH: Final = datetime.date(1970, 1, 1)
MAX_COUNT: Final = 10**18
"""Counts kept are below it in magnitude: 18 digits, inside a ``BIGINT``."""


def usage_columns(body: Mapping[str, Any]) -> tuple[str | None, int | None, int | None]:
    """The ``model``, ``input_tokens`` and ``output_tokens`` columns of a response whose
    state is ``body`` (:func:`stateway.core.response.dump_state`)."""
    model = body.get("model")
    usage = body.get("usage")
    if not isinstance(usage, dict):
        usage = {}
    return (
        model.replace("\x00", "\ufffd") if isinstance(model, str) else None,
        _count(usage.get("input_tokens")),
        _count(usage.get("output_tokens")),
    )


def _count(value: object) -> int | None:
    return value if type(value) is int and -MAX_COUNT < value < MAX_COUNT else None


class SqlUsageLedger:
    def __init__(self, engine: AsyncEngine) -> None:
        """``engine``: the response store's reader."""
        self._engine = engine

    async def usage(self, query: GetUsage) -> list[UsageBucket]:
        statement = usage_statement(self._engine.dialect.name, query)
        with storage_errors("reading usage"):
            async with self._engine.connect() as connection:
                rows = (await connection.execute(statement)).all()
        return [
            UsageBucket(
                tenant_id=tenant,
                model=model or "",
                day=EPOCH + datetime.timedelta(days=int(day)),
                responses=int(responses),
                input_tokens=int(input_tokens),
                output_tokens=int(output_tokens),
            )
            for tenant, model, day, responses, input_tokens, output_tokens in rows
        ]


def usage_statement(dialect: str, query: GetUsage) -> Select[Any]:
    """The aggregate query for ``dialect`` (``postgresql``, else SQLite)."""
    created = responses.c.created_at
    if dialect == "postgresql":
        day = cast(func.floor(created / DAY), BigInteger)
    else:
        day = cast(created / DAY, Integer)
    finished = select(
        responses.c.tenant_id,
        responses.c.model,
        day.label("day"),
        responses.c.input_tokens,
        responses.c.output_tokens,
    ).where(text(f"NOT ({IN_PROGRESS_WHERE})"))
    if query.tenant_id is not None:
        finished = finished.where(responses.c.tenant_id == query.tenant_id)
    if query.start_time is not None:
        finished = finished.where(created >= query.start_time)
    if query.end_time is not None:
        finished = finished.where(created < query.end_time)
    rows = finished.subquery()
    return (
        select(
            rows.c.tenant_id,
            rows.c.model,
            rows.c.day,
            func.count(),
            func.coalesce(func.sum(rows.c.input_tokens), 0),
            func.coalesce(func.sum(rows.c.output_tokens), 0),
        )
        .group_by(rows.c.tenant_id, rows.c.model, rows.c.day)
        .order_by(rows.c.day, rows.c.tenant_id, rows.c.model)
    )
