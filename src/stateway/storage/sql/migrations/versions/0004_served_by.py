"""The candidate that served each response.

Revision ID: 0004
Revises: 0003
Create Date: 2027-01-15

``responses.served_by`` names the candidate (``backend/model``) whose attempt last
succeeded, written with the run's end; read with a chain or a conversation, it is the
cache affinity hint of a continuation this process's table does not know (after a
restart, or on another replica). Rows stored before it stay NULL: no hint.
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0004"
down_revision: str | Sequence[str] | None = "0003"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

_UNFINISHED = sa.text("status IN ('queued', 'in_progress')")


def upgrade() -> None:
    op.add_column("responses", sa.Column("served_by", sa.String(), nullable=True))


def downgrade() -> None:
    # SQLite drops a column by copying the table: the partial index is made again after.
    op.drop_index("ix_responses_in_progress", table_name="responses")
    with op.batch_alter_table("responses") as batch:
        batch.drop_column("served_by")
    op.create_index(
        "ix_responses_in_progress",
        "responses",
        ["owner"],
        sqlite_where=_UNFINISHED,
        postgresql_where=_UNFINISHED,
    )
