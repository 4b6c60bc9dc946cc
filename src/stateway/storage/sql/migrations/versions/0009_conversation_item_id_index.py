"""Index conversation items by id first, for ``item_reference`` input items.

Revision ID: 0009
Revises: 0008
Create Date: 2026-12-03

An ``item_reference`` may name an item the Conversations API added, by its id alone
(``conversation_queries.FIND_ITEMS``): the index on (``tenant_id``, ``conversation_id``,
``item_id``) cannot find it without scanning the tenant's conversation items. It becomes
(``tenant_id``, ``item_id``, ``conversation_id``): every other lookup it served names all
three columns, so it serves them as before, and appending an item costs no more (one
index still, not two).
"""

from __future__ import annotations

from collections.abc import Sequence

from alembic import op

revision: str = "0009"
down_revision: str | Sequence[str] | None = "0008"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

_TABLE = "conversation_items"
_BY_CONVERSATION = "ix_conversation_items_tenant_id_conversation_id_item_id"
_BY_ID = "ix_conversation_items_tenant_id_item_id_conversation_id"


def upgrade() -> None:
    op.create_index(_BY_ID, _TABLE, ["tenant_id", "item_id", "conversation_id"])
    op.drop_index(_BY_CONVERSATION, table_name=_TABLE)


def downgrade() -> None:
    op.create_index(_BY_CONVERSATION, _TABLE, ["tenant_id", "conversation_id", "item_id"])
    op.drop_index(_BY_ID, table_name=_TABLE)
