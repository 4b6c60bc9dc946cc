"""Conversations, run event logs, gateway secrets; queued runs count as unfinished.

Revision ID: 0003
Revises: 0002
Create Date: 2026-12-01

``conversations`` and their ``conversation_items`` (a mutable, ordered list of items with
gateway-assigned ids; ``active_response_id`` is the turn that holds the conversation),
``response_events`` (the persisted event log of background runs, by sequence number) and
``gateway_secrets`` (server-wide keys such as the one that seals ``encrypted_content``).
The partial index over unfinished responses now covers ``queued`` as well as
``in_progress`` rows, so a run queued when its process died is found at start-up too.
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0003"
down_revision: str | Sequence[str] | None = "0002"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

_IN_PROGRESS = sa.text("status = 'in_progress'")
_UNFINISHED = sa.text("status IN ('queued', 'in_progress')")


def upgrade() -> None:
    op.create_table(
        "conversations",
        sa.Column("tenant_id", sa.String(), nullable=False),
        sa.Column("id", sa.String(), nullable=False),
        sa.Column("created_at", sa.Double(), nullable=False),
        sa.Column("deleted_at", sa.Double(), nullable=True),
        sa.Column("metadata", sa.Text(), nullable=False),
        sa.Column("next_position", sa.Integer(), nullable=False),
        sa.Column("active_response_id", sa.String(), nullable=True),
        sa.PrimaryKeyConstraint("tenant_id", "id", name="pk_conversations"),
    )
    op.create_table(
        "conversation_items",
        sa.Column("tenant_id", sa.String(), nullable=False),
        sa.Column("conversation_id", sa.String(), nullable=False),
        sa.Column("position", sa.Integer(), nullable=False),
        sa.Column("item_id", sa.String(), nullable=False),
        sa.Column("response_id", sa.String(), nullable=True),
        sa.Column("created_at", sa.Double(), nullable=False),
        sa.Column("body", sa.Text(), nullable=False),
        sa.PrimaryKeyConstraint(
            "tenant_id", "conversation_id", "position", name="pk_conversation_items"
        ),
        sa.ForeignKeyConstraint(
            ["tenant_id", "conversation_id"],
            ["conversations.tenant_id", "conversations.id"],
            name="fk_conversation_items_tenant_id_conversation_id_conversations",
            ondelete="CASCADE",
        ),
    )
    op.create_index(
        "ix_conversation_items_tenant_id_conversation_id_item_id",
        "conversation_items",
        ["tenant_id", "conversation_id", "item_id"],
    )
    op.create_table(
        "response_events",
        sa.Column("tenant_id", sa.String(), nullable=False),
        sa.Column("response_id", sa.String(), nullable=False),
        sa.Column("sequence_number", sa.Integer(), nullable=False),
        sa.Column("body", sa.Text(), nullable=False),
        sa.PrimaryKeyConstraint(
            "tenant_id", "response_id", "sequence_number", name="pk_response_events"
        ),
        sa.ForeignKeyConstraint(
            ["tenant_id", "response_id"],
            ["responses.tenant_id", "responses.id"],
            name="fk_response_events_tenant_id_response_id_responses",
            ondelete="CASCADE",
        ),
    )
    op.create_table(
        "gateway_secrets",
        sa.Column("name", sa.String(), nullable=False),
        sa.Column("value", sa.Text(), nullable=False),
        sa.Column("created_at", sa.Double(), nullable=False),
        sa.PrimaryKeyConstraint("name", name="pk_gateway_secrets"),
    )
    op.drop_index("ix_responses_in_progress", table_name="responses")
    op.create_index(
        "ix_responses_in_progress",
        "responses",
        ["owner"],
        sqlite_where=_UNFINISHED,
        postgresql_where=_UNFINISHED,
    )


def downgrade() -> None:
    op.drop_index("ix_responses_in_progress", table_name="responses")
    op.create_index(
        "ix_responses_in_progress",
        "responses",
        ["owner"],
        sqlite_where=_IN_PROGRESS,
        postgresql_where=_IN_PROGRESS,
    )
    op.drop_table("gateway_secrets")
    op.drop_table("response_events")
    op.drop_index(
        "ix_conversation_items_tenant_id_conversation_id_item_id", table_name="conversation_items"
    )
    op.drop_table("conversation_items")
    op.drop_table("conversations")
