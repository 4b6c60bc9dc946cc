"""Run ownership: who runs an in-progress response.

Revision ID: 0002
Revises: 0001
Create Date: 2026-11-30

Responses are now written when their run starts (``in_progress``, with their input) and
updated when it ends. ``owner`` names the process running one, so that a restarted gateway
can mark the responses of a dead process ``failed``; the partial index covers only
in-progress rows, which the start-up search reads.
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0002"
down_revision: str | Sequence[str] | None = "0001"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

_IN_PROGRESS = sa.text("status = 'in_progress'")


def upgrade() -> None:
    with op.batch_alter_table("responses") as batch:
        batch.add_column(sa.Column("owner", sa.String(), nullable=True))
    op.create_index(
        "ix_responses_in_progress",
        "responses",
        ["owner"],
        sqlite_where=_IN_PROGRESS,
        postgresql_where=_IN_PROGRESS,
    )


def downgrade() -> None:
    op.drop_index("ix_responses_in_progress", table_name="responses")
    with op.batch_alter_table("responses") as batch:
        batch.drop_column("owner")
