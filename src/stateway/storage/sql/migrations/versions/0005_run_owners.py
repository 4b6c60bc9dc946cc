"""Run owners: one row per gateway process, its heartbeat.

Revision ID: 0005
Revises: 0004
Create Date: 2026-12-01

Each gateway process registers itself in ``run_owners`` under the name its in-progress
rows carry in ``responses.owner``, with the ``lease_timeout`` it promises to beat
within, and counts ``beat`` up while it serves; a process that sees another's beat stand
still for that owner's lease timeout marks its unfinished responses failed and deletes
its row (``stateway.core.leases``, ADR 0014).
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0005"
down_revision: str | Sequence[str] | None = "0004"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "run_owners",
        sa.Column("owner", sa.String(), nullable=False),
        sa.Column("beat", sa.Integer(), nullable=False),
        sa.Column("lease_timeout", sa.Double(), nullable=False),
        sa.Column("renewed_at", sa.Double(), nullable=False),
        sa.PrimaryKeyConstraint("owner", name="pk_run_owners"),
    )


def downgrade() -> None:
    op.drop_table("run_owners")
