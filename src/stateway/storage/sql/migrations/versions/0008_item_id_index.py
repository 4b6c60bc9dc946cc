"""Index output items by id, for ``item_reference`` input items.

Revision ID: 0008
Revises: 0007
Create Date: 2026-12-02

``ix_items_output_item`` (``tenant_id``, ``item_id``, output items only): a request's
``item_reference`` items name stored items by id, nearly always a response's output
(``queries.FIND_OUTPUT_ITEMS``); without it each reference would scan the tenant's items.
Input items are left out, so that storing a request's input costs no more.
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0008"
down_revision: str | Sequence[str] | None = "0007"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


_OUTPUT = "role = 'output'"


def upgrade() -> None:
    op.create_index(
        "ix_items_output_item",
        "items",
        ["tenant_id", "item_id"],
        sqlite_where=sa.text(_OUTPUT),
        postgresql_where=sa.text(_OUTPUT),
    )


def downgrade() -> None:
    op.drop_index("ix_items_output_item", table_name="items")
