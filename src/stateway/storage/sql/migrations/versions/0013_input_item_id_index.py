"""Index input items by id too, for ``item_reference`` input items.

Revision ID: 0013
Revises: 0012
Create Date: 2026-12-07

``ix_items_input_item`` (``tenant_id``, ``item_id``, input items only), beside ``0008``'s
index of output items: a reference that names no response's output item (an item the
Conversations API added, a request's own input item, an id that names nothing) was looked
up among the tenant's input items by a scan of all of them, in every such request (0.5 s
on PostgreSQL and 2 s on SQLite for a tenant of 150,000 responses, growing with it). Now
each is found, or found missing, by the index. Storing a response's input costs one
B-tree insert per input item more.
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0013"
down_revision: str | Sequence[str] | None = "0012"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


_INPUT = "role = 'input'"


def upgrade() -> None:
    op.create_index(
        "ix_items_input_item",
        "items",
        ["tenant_id", "item_id"],
        sqlite_where=sa.text(_INPUT),
        postgresql_where=sa.text(_INPUT),
    )


def downgrade() -> None:
    op.drop_index("ix_items_input_item", table_name="items")
