"""Write probes: where readiness learns that a refused write would land again.

Revision ID: 0011
Revises: 0010
Create Date: 2026-12-06

``write_probes`` is empty but for a moment: while the database refuses writes for a
lasting cause (out of space, read-only), each readiness probe inserts a page-sized row and
deletes it again in one committed transaction. No key: probes of several processes never
wait on each other. On PostgreSQL its rows are identified whole (``REPLICA IDENTITY
FULL``): a publication of every table (change data capture) refuses a ``DELETE`` from a
table it cannot identify a row of.
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0011"
down_revision: str | Sequence[str] | None = "0010"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table("write_probes", sa.Column("body", sa.LargeBinary(), nullable=False))
    if op.get_context().dialect.name == "postgresql":
        op.execute("ALTER TABLE write_probes REPLICA IDENTITY FULL")


def downgrade() -> None:
    op.drop_table("write_probes")
