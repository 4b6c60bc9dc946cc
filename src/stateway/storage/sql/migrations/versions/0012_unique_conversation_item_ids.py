"""Make a conversation's item ids unique, as a unique index.

Revision ID: 0012
Revises: 0011
Create Date: 2026-12-06

A page of a conversation's items goes on after the item its cursor names, by position;
two items sharing an id made that position ambiguous, and the ``openai`` SDK's auto-pager
looped or skipped items. Until now only a ``local_shell_call_output`` could share one (its
``id`` names its call, and was kept whatever the conversation held). Each such later copy
of an id gets a new one (``item_<hex>`` for that item type, the gateway's id of its type
for any other) and answers its call by ``call_id`` instead; a tombstone's id is renamed
alike. The first item with the id keeps it (the one lookups by id found). Then the index
on (``tenant_id``, ``item_id``, ``conversation_id``) becomes unique. Rendered offline
(``--sql``) the renaming is left out, as rows cannot be read there; going back leaves the
ids as they are, under the former index.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

import sqlalchemy as sa
from alembic import op

from stateway.core.items import new_item_id

revision: str = "0012"
down_revision: str | Sequence[str] | None = "0011"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

_TABLE = "conversation_items"
_INDEX = "ix_conversation_items_tenant_id_item_id_conversation_id"
_COLUMNS = ["tenant_id", "item_id", "conversation_id"]
_REFERENCES = frozenset({"local_shell_call_output"})
"""Item types whose ``id`` names another item (their call)."""

_SHARED = sa.text(
    "SELECT c.tenant_id, c.conversation_id, c.position, c.item_id, c.body"
    " FROM conversation_items c JOIN ("
    "  SELECT tenant_id, conversation_id, item_id, MIN(position) AS first"
    "  FROM conversation_items GROUP BY tenant_id, conversation_id, item_id"
    "  HAVING COUNT(*) > 1"
    " ) d ON c.tenant_id = d.tenant_id AND c.conversation_id = d.conversation_id"
    " AND c.item_id = d.item_id AND c.position > d.first"
)
"""Every row holding an id an earlier row of its conversation holds."""
_RENAME = sa.text(
    "UPDATE conversation_items SET item_id = :item_id, body = :body"
    " WHERE tenant_id = :tenant_id AND conversation_id = :conversation_id"
    " AND position = :position"
)


def upgrade() -> None:
    if not op.get_context().as_sql:
        connection = op.get_bind()
        renamed = [_renamed(*row) for row in connection.execute(_SHARED)]
        if renamed:
            connection.execute(_RENAME, renamed)
    op.drop_index(_INDEX, table_name=_TABLE)
    op.create_index(_INDEX, _TABLE, _COLUMNS, unique=True)


def _renamed(
    tenant_id: str, conversation_id: str, position: int, item_id: str, body: str
) -> dict[str, Any]:
    try:
        item = json.loads(body) if body else None
    except ValueError:
        item = None
    kind = item.get("type") if isinstance(item, dict) else None
    new_id = new_item_id(kind)
    if isinstance(item, dict):
        if kind in _REFERENCES and not item.get("call_id"):
            item["call_id"] = item_id
        item["id"] = new_id
        body = json.dumps(item, ensure_ascii=False, separators=(",", ":"))
    return {
        "tenant_id": tenant_id,
        "conversation_id": conversation_id,
        "position": position,
        "item_id": new_id,
        "body": body,
    }


def downgrade() -> None:
    op.drop_index(_INDEX, table_name=_TABLE)
    op.create_index(_INDEX, _TABLE, _COLUMNS)
