"""Index deleted conversations, for the sweep that erases them.

Revision ID: 0015
Revises: 0014
Create Date: 2026-12-07

Until now a deleted conversation stayed in the database for ever, with its items (their
content included): only its ``deleted_at`` hid it. Every process now sweeps deleted
conversations away with their items (:mod:`stateway.core.retention`), finding them by
``ix_conversations_deleted`` (``deleted_at``, ``tenant_id``, ``id``; deleted ones only):
a sweep reads what it erases, not every conversation, and only a delete pays for an
entry. The first sweep after the upgrade erases the conversations deleted before it.
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0015"
down_revision: str | Sequence[str] | None = "0014"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


_DELETED = "deleted_at IS NOT NULL"


def upgrade() -> None:
    op.create_index(
        "ix_conversations_deleted",
        "conversations",
        ["deleted_at", "tenant_id", "id"],
        sqlite_where=sa.text(_DELETED),
        postgresql_where=sa.text(_DELETED),
    )


def downgrade() -> None:
    op.drop_index("ix_conversations_deleted", table_name="conversations")
