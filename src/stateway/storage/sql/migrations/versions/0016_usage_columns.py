"""Each response's model and usage counts as columns, for ``GET /v1/usage``.

Revision ID: 0016
Revises: 0015
Create Date: 2026-12-07

``responses.model``, ``input_tokens`` and ``output_tokens``: the state's ``model`` and
``usage`` counts, copied out by every write of a row from now on. The usage query read
them out of each row's ``body``, parsing every stored response's JSON (seconds at 150,000
responses, past the statement timeout at a few million); it sums the columns now.

The upgrade only adds the columns, NULL (on both databases a change of the table's
definition alone, however many rows it holds): the sweeps fill them in for the rows
stored before, a batch at a time, found by the index migration ``0018`` adds, and the
usage query reads those rows' bodies until then (:mod:`stateway.storage.sql.accounting`).
Filling every row in here would hold the table locked for the whole upgrade: some 10 s at
150,000 responses on PostgreSQL, a minute or more at a million. Going back drops the
columns.
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


def upgrade() -> None:
    op.add_column("responses", sa.Column("model", sa.String(), nullable=True))
    op.add_column("responses", sa.Column("input_tokens", sa.BigInteger(), nullable=True))
    op.add_column("responses", sa.Column("output_tokens", sa.BigInteger(), nullable=True))


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
