"""Deleted conversation items leave a tombstone.

Revision ID: 0007
Revises: 0006
Create Date: 2026-12-02

``conversation_items.deleted_at``: deleting an item empties its ``body`` and sets this
instead of removing the row, so that the item's ``position`` still bounds a page whose
``after`` cursor names it (a client deleting items while it pages through them, as the
``openai`` SDK's auto-pager does, goes on to the next page). Every read of items skips
tombstones; an item's id is never given to another item of the conversation.
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0007"
down_revision: str | Sequence[str] | None = "0006"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.add_column("conversation_items", sa.Column("deleted_at", sa.Double(), nullable=True))


def downgrade() -> None:
    op.execute("DELETE FROM conversation_items WHERE deleted_at IS NOT NULL")
    with op.batch_alter_table("conversation_items") as batch:
        batch.drop_column("deleted_at")
