"""The :class:`~stateway.core.accounting.UsageLedger` port over the responses table, and
:class:`SqlUsageBackfill`, which fills in the columns it reads.

Every write of a response row copies its state's ``model`` and ``usage`` counts out into
columns (:func:`usage_columns`); one aggregate query sums them by tenant, model and UTC
day, reading no body::

    SELECT tenant_id, model, day, count(*), sum(input_tokens), sum(output_tokens)
      FROM (SELECT tenant_id, model, CAST(created_at / 86400 AS INTEGER) AS day,
                   input_tokens, output_tokens
              FROM responses
             WHERE model IS NOT NULL AND status NOT IN ('queued', 'in_progress')
                   [AND tenant_id = :tenant] [AND created_at >= :start] [AND created_at < :end]
            UNION ALL
            SELECT tenant_id, <model>, CAST(created_at / 86400 AS INTEGER) AS day,
                   <input_tokens>, <output_tokens>
              FROM (SELECT tenant_id, created_at, <parsed body> AS state
                      FROM responses
                     WHERE model IS NULL AND [the same] OFFSET 0) AS parsed)
     GROUP BY tenant_id, model, day ORDER BY day, tenant_id, model

PostgreSQL takes the day with ``floor`` (its cast to an integer rounds). SQLite sums with
``total``, a double, as its ``sum`` of integers fails the whole query once one bucket's
passes 2**63 (ten counts near the largest kept do): exact up to 2**53 tokens a bucket,
close beyond; PostgreSQL's ``sum`` is exact. The second part
reads the rows whose columns are not filled in yet (``model`` is NULL) out of their body
(:mod:`~stateway.storage.sql.body_usage`): those stored before the columns existed, until
a sweep fills them in, and those an older release's process stores during a rolling
upgrade; ``OFFSET 0`` keeps each parsed once (PostgreSQL would otherwise pull the parse
up into each use of ``state``). Deleted responses count (their tokens were spent) until a
retention sweep removes them (:mod:`stateway.core.retention`), the erasure of their
content leaving these columns as they were; unfinished ones count once they end.

No index serves the query but the primary key, whose first column is ``tenant_id``:
none on ``created_at``. Usage is an operator's question, asked now and then, while every
stored response would pay for such an index's entry in its save, the hot path. Without
it a time window is read by a scan of the tenant's rows (of every row, for all tenants),
which reads columns and parses nothing: at 150,000 responses, every tenant's usage took
0.2 to 0.4 s on PostgreSQL (a body stored out of line is not read) and 0.45 to 0.9 s on
SQLite (2 busy cores), some 3 and 6 µs a row at most: PostgreSQL's ``[storage]
database_timeout`` (30 s) is some ten million rows away. Read out of each row's ``body``,
the counts took 7 and 5 to 6 s.

:class:`SqlUsageBackfill` fills the columns of the finished rows that lack them, a batch
per statement, found by ``ix_responses_unfilled`` (rows whose ``model`` is NULL: none once
filled in, so a save pays for no entry). Migration ``0016`` added the columns without
filling them (an ``UPDATE`` of every row would hold the table for the whole upgrade, some
70 s at a million rows on PostgreSQL): every process's sweep fills them in from its
start (:mod:`stateway.core.retention`). A row still running is left to its end, which
writes them.

A model holding NUL is kept with U+FFFD in its place (PostgreSQL's text cannot hold the
character), a model that is no string as ``''``. A count is kept when it is an integer
of at most 18 digits (a ``BIGINT`` holds it; orjson writes integers up to 2**64 - 1),
unknown (NULL) otherwise: the response is stored all the same.
"""

from __future__ import annotations

import datetime
from collections.abc import Mapping
from typing import Any, Final

from sqlalchemy import (
    BigInteger,
    ColumnElement,
    Integer,
    Select,
    Text,
    TextClause,
    cast,
    func,
    literal_column,
    select,
    text,
    union_all,
)
from sqlalchemy.ext.asyncio import AsyncEngine

from stateway.core.accounting import UsageBucket
from stateway.core.commands import GetUsage
from stateway.storage.sql import body_usage
from stateway.storage.sql.errors import storage_errors
from stateway.storage.sql.schema import IN_PROGRESS_WHERE, responses

DAY: Final = 86400
EPOCH: Final = datetime.date(1970, 1, 1)
MAX_COUNT: Final = 10**18
"""Counts kept are below it in magnitude: 18 digits, inside a ``BIGINT``."""


def usage_columns(body: Mapping[str, Any]) -> tuple[str, int | None, int | None]:
    """The ``model``, ``input_tokens`` and ``output_tokens`` columns of a response whose
    state is ``body`` (:func:`stateway.core.response.dump_state`)."""
    model = body.get("model")
    usage = body.get("usage")
    if not isinstance(usage, dict):
        usage = {}
    return (
        model.replace("\x00", "\ufffd") if isinstance(model, str) else "",
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
    chosen: list[ColumnElement[bool] | TextClause] = [text(f"NOT ({IN_PROGRESS_WHERE})")]
    if query.tenant_id is not None:
        chosen.append(responses.c.tenant_id == query.tenant_id)
    if query.start_time is not None:
        chosen.append(created >= query.start_time)
    if query.end_time is not None:
        chosen.append(created < query.end_time)
    filled = select(
        responses.c.tenant_id,
        responses.c.model,
        _day(dialect, created).label("day"),
        responses.c.input_tokens,
        responses.c.output_tokens,
    ).where(responses.c.model.is_not(None), *chosen)
    state = literal_column(body_usage.parsed(dialect), Text).label("state")
    unfilled = (
        select(responses.c.tenant_id, created, state)
        .where(responses.c.model.is_(None), *chosen)
        .offset(0)
        .subquery("parsed")
    )
    model, input_tokens, output_tokens = body_usage.fields(dialect)
    read = select(
        unfilled.c.tenant_id,
        literal_column(model).label("model"),
        _day(dialect, unfilled.c.created_at).label("day"),
        literal_column(input_tokens).label("input_tokens"),
        literal_column(output_tokens).label("output_tokens"),
    )
    rows = union_all(filled, read).subquery()
    return (
        select(
            rows.c.tenant_id,
            rows.c.model,
            rows.c.day,
            func.count(),
            _sum(dialect, rows.c.input_tokens),
            _sum(dialect, rows.c.output_tokens),
        )
        .group_by(rows.c.tenant_id, rows.c.model, rows.c.day)
        .order_by(rows.c.day, rows.c.tenant_id, rows.c.model)
    )


def _sum(dialect: str, counts: ColumnElement[Any]) -> ColumnElement[Any]:
    """The sum of a bucket's ``counts``, 0 for none: PostgreSQL's exact (``numeric``);
    SQLite's a double (``total``), as its integer ``sum`` fails the query past 2**63."""
    if dialect == "postgresql":
        return func.coalesce(func.sum(counts), 0)
    return func.total(counts)


def _day(dialect: str, created: ColumnElement[float]) -> ColumnElement[int]:
    """The UTC day number of a Unix time."""
    if dialect == "postgresql":
        return cast(func.floor(created / DAY), BigInteger)
    return cast(created / DAY, Integer)
