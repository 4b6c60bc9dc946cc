"""The :class:`~stateway.core.accounting.UsageLedger` port over the responses table.

One aggregate query reads each finished response's ``model`` and ``usage`` out of its
``body`` (JSON text) and sums them by tenant, model and UTC day::

    SELECT tenant_id, model, day, count(*), sum(input_tokens), sum(output_tokens)
      FROM (SELECT tenant_id,
                   json_extract(body, '$.model')                AS model,   -- SQLite
                   CAST(created_at / 86400 AS INTEGER)          AS day,
                   json_extract(body, '$.usage.input_tokens')   AS input_tokens, ...
              FROM responses
             WHERE status NOT IN ('queued', 'in_progress') [AND tenant_id = :tenant]
                   [AND created_at >= :start] [AND created_at < :end])
     GROUP BY tenant_id, model, day ORDER BY day, tenant_id, model

PostgreSQL reads the JSON with ``jsonb_extract_path_text`` and the day with ``floor``
(its cast to an integer rounds). A body holding NUL (written ``\\u0000``, which jsonb
refuses) is read with U+FFFD in its place, on both databases. No column or migration is
added: the numbers are already in the body, and this is an operator's question, not a hot
path; the tenant filter uses the primary key's first column. Deleted responses count (their tokens
were spent) until a retention sweep removes them (:mod:`stateway.core.retention`);
unfinished ones count once they end.
"""

from __future__ import annotations

import datetime
from collections.abc import Callable
from typing import Any, Final

from sqlalchemy import (
    BigInteger,
    ColumnElement,
    Integer,
    Select,
    case,
    cast,
    func,
    select,
    text,
)
from sqlalchemy.dialects.postgresql import JSONB
from sqlalchemy.ext.asyncio import AsyncEngine

from stateway.core.accounting import UsageBucket
from stateway.core.commands import GetUsage
from stateway.storage.sql.errors import storage_errors
from stateway.storage.sql.schema import IN_PROGRESS_WHERE, responses

DAY: Final = 86400
EPOCH: Final = datetime.date(1970, 1, 1)


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
    """The aggregate query for ``dialect`` (``postgresql``, else SQLite's JSON1)."""
    created = responses.c.created_at
    model, day, tokens = _json_columns(dialect)
    finished = select(
        responses.c.tenant_id.label("tenant_id"),
        model.label("model"),
        day.label("day"),
        tokens("input_tokens").label("input_tokens"),
        tokens("output_tokens").label("output_tokens"),
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


TokenColumn = Callable[[str], ColumnElement[Any]]


def _json_columns(dialect: str) -> tuple[ColumnElement[Any], ColumnElement[Any], TokenColumn]:
    """The model, the UTC day number, and a function giving a usage field's column."""
    created = responses.c.created_at
    if dialect == "postgresql":
        document = cast(_without_nul(func.strpos), JSONB)

        def pg_tokens(name: str) -> ColumnElement[Any]:
            return cast(func.jsonb_extract_path_text(document, "usage", name), BigInteger)

        model = func.jsonb_extract_path_text(document, "model")
        return model, cast(func.floor(created / DAY), BigInteger), pg_tokens
    body = _without_nul(func.instr)

    def sqlite_tokens(name: str) -> ColumnElement[Any]:
        return func.json_extract(body, f"$.usage.{name}")

    return func.json_extract(body, "$.model"), cast(created / DAY, Integer), sqlite_tokens


NUL_ESCAPE: Final = "\\u0000"
"""How orjson writes U+0000 in a string: PostgreSQL's jsonb refuses it (its text cannot hold
the character), SQLite's ``json_extract`` ends the text it returns there."""

_ESCAPED_BACKSLASH: Final = "\\\\"
_STAND_IN: Final = "\x01"
"""Never in orjson's JSON text, which escapes every control character."""


def _without_nul(position: Callable[..., ColumnElement[Any]]) -> ColumnElement[Any]:
    r"""``body``, each NUL in its strings written as U+FFFD, so that a body holding one (in
    instructions, metadata, a model's name) counts all the same; ``position(body, part)``
    is the dialect's ``strpos`` or ``instr``. The escaped backslashes are set aside first,
    so each ``\u0000`` left is an escape: ``\\u0000`` is a backslash, then ``u0000``.
    Bodies without one, nearly all, are read as they are."""
    body = responses.c.body
    kept = func.replace(body, _ESCAPED_BACKSLASH, _STAND_IN)
    replaced = func.replace(
        func.replace(kept, NUL_ESCAPE, "\\ufffd"), _STAND_IN, _ESCAPED_BACKSLASH
    )
    return case((position(body, NUL_ESCAPE) == 0, body), else_=replaced)
