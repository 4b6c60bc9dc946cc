"""Initial schema: responses and their items, tenant-scoped.

Revision ID: 0001
Revises:
Create Date: 2025-01-01

Written out in full rather than derived from ``schema.py``: a revision is a frozen
snapshot, and must keep producing the same tables after the application's metadata moves
on. ``tests/storage/test_migrations.py`` checks that the head matches ``schema.py``.
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0001"
down_revision: str | Sequence[str] | None = None
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "responses",
        sa.Column("tenant_id", sa.String(), nullable=False),
        sa.Column("id", sa.String(), nullable=False),
        sa.Column("previous_response_id", sa.String(), nullable=True),
        sa.Column("status", sa.String(), nullable=False),
        sa.Column("created_at", sa.Double(), nullable=False),
        sa.Column("deleted_at", sa.Double(), nullable=True),
        sa.Column("body", sa.Text(), nullable=False),
        sa.PrimaryKeyConstraint("tenant_id", "id", name="pk_responses"),
    )
    op.create_table(
        "items",
        sa.Column("tenant_id", sa.String(), nullable=False),
        sa.Column("response_id", sa.String(), nullable=False),
        sa.Column("role", sa.String(), nullable=False),
        sa.Column("position", sa.Integer(), nullable=False),
        sa.Column("item_id", sa.String(), nullable=True),
        sa.Column("body", sa.Text(), nullable=False),
        sa.PrimaryKeyConstraint("tenant_id", "response_id", "role", "position", name="pk_items"),
        sa.ForeignKeyConstraint(
            ["tenant_id", "response_id"],
            ["responses.tenant_id", "responses.id"],
            name="fk_items_tenant_id_response_id_responses",
            ondelete="CASCADE",
        ),
        sa.CheckConstraint("role IN ('input', 'output')", name="ck_items_role"),
    )


def downgrade() -> None:
    op.drop_table("items")
    op.drop_table("responses")
