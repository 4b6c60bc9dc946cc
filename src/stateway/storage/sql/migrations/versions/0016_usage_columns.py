"""Each response's model and usage counts as columns, for ``GET /v1/usage``.

Revision ID: 0016
Revises: 0015
Create Date: 2026-12-07

``responses.model``, ``input_tokens`` and ``output_tokens``: the state's ``model`` and
``usage`` counts, copied out by every write of a row from now on. The usage query read
them out of each row's ``body``, parsing every stored response's JSON (seconds at 150,000
responses, past the statement timeout at a few million); it sums the columns now.

The upgrade fills them in for every stored row, in the database, as the query read them:
a NUL in a body (``\\u0000`` in its JSON text, which PostgreSQL's ``jsonb`` refuses) is
read as U+FFFD; a model that is no string, and a count that is no integer of at most 18
digits (``schema``'s ``BIGINT`` holds it), stay NULL, as does what a body lacks. One
statement, in the upgrade's one transaction (the migrator's: an upgrade happens whole or
not at all, so batches would release no lock and save no work): each row is read and
written once, the table locked until the upgrade commits (PostgreSQL writes each row
anew; a large body stored out of line is not copied): some 10 s on PostgreSQL and 5 s on
SQLite for 150,000 responses. Going back drops the columns.
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0016"
down_revision: str | Sequence[str] | None = "0015"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

_UNFINISHED = sa.text("status IN ('queued', 'in_progress')")


def _without_nul(position: str, character: str) -> str:
    r"""``body``, each ``\u0000`` escape in its strings written ``\ufffd``, the escaped
    backslashes set aside first (as U+0001, never in orjson's text) so that each one left
    is an escape; ``position`` and ``character`` are the dialect's ``strpos`` or
    ``instr``, and ``chr`` or ``char``. Bodies without one, nearly all, are read as
    they are."""
    kept = f"replace(body, '\\\\', {character}(1))"
    replaced = f"replace(replace({kept}, '\\u0000', '\\ufffd'), {character}(1), '\\\\')"
    return f"CASE WHEN {position}(body, '\\u0000') = 0 THEN body ELSE {replaced} END"


_COUNT = "^-?[0-9]{1,18}$"

_POSTGRES = (
    "UPDATE responses SET (model, input_tokens, output_tokens) = ("
    " SELECT CASE WHEN jsonb_typeof(state -> 'model') = 'string'"
    " THEN state ->> 'model' END, "
    + ", ".join(
        f"CASE WHEN jsonb_typeof(state #> '{{usage,{name}}}') = 'number'"
        f" AND state #>> '{{usage,{name}}}' ~ '{_COUNT}'"
        f" THEN CAST(state #>> '{{usage,{name}}}' AS BIGINT) END"
        for name in ("input_tokens", "output_tokens")
    )
    + f" FROM (SELECT CAST({_without_nul('strpos', 'chr')} AS JSONB) AS state OFFSET 0)"
    " AS parsed)"
)
"""``OFFSET 0`` keeps the body parsed once a row: PostgreSQL would otherwise pull the cast
up into each use of ``state`` (eight parses, five times as long)."""
_SQLITE = (
    "UPDATE responses SET (model, input_tokens, output_tokens) = ("
    " SELECT CASE WHEN json_type(state, '$.model') = 'text'"
    " THEN json_extract(state, '$.model') END, "
    + ", ".join(
        f"CASE WHEN json_type(state, '$.usage.{name}') = 'integer'"
        f" AND json_extract(state, '$.usage.{name}')"
        " BETWEEN -999999999999999999 AND 999999999999999999"
        f" THEN json_extract(state, '$.usage.{name}') END"
        for name in ("input_tokens", "output_tokens")
    )
    + f" FROM (SELECT {_without_nul('instr', 'char')} AS state) AS parsed)"
)


def upgrade() -> None:
    op.add_column("responses", sa.Column("model", sa.String(), nullable=True))
    op.add_column("responses", sa.Column("input_tokens", sa.BigInteger(), nullable=True))
    op.add_column("responses", sa.Column("output_tokens", sa.BigInteger(), nullable=True))
    postgres = op.get_context().dialect.name == "postgresql"
    op.execute(_POSTGRES if postgres else _SQLITE)


def downgrade() -> None:
    # SQLite drops a column by copying the table: the partial index is made again after.
    op.drop_index("ix_responses_in_progress", table_name="responses")
    with op.batch_alter_table("responses") as batch:
        for name in ("output_tokens", "input_tokens", "model"):
            batch.drop_column(name)
    op.create_index(
        "ix_responses_in_progress",
        "responses",
        ["owner"],
        sqlite_where=_UNFINISHED,
        postgresql_where=_UNFINISHED,
    )
