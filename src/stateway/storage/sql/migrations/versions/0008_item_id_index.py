"""Index items by id, for ``item_reference`` input items.

Revision ID: 0008
Revises: 0007
Create Date: 2026-12-02

``ix_items_item`` (``tenant_id``, ``item_id``): a request's ``item_reference`` items name
stored items by id (``queries.FIND_ITEMS``); without it each reference would scan the
tenant's items.
"""

from __future__ import annotations

from collections.abc import Sequence

from alembic import op

revision: str = "0008"
down_revision: str | Sequence[str] | None = "0007"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_index("ix_items_item", "items", ["tenant_id", "item_id"])


def downgrade() -> None:
    op.drop_index("ix_items_item", table_name="items")
