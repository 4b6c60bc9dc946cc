"""Leave the ``compaction_trigger`` items turns appended to conversations as tombstones.

Revision ID: 0010
Revises: 0009
Create Date: 2026-12-05

Until 2026-12-04 a conversation turn appended its whole input, a ``compaction_trigger``
included; now it appends only the ``compaction`` item answering it, as no conversation
item type is a trigger (the ``openai`` SDK reads one listed as a message). Each such item
stored before becomes a tombstone (``body`` emptied, ``deleted_at`` its ``created_at``),
as if deleted as it was appended: every read of items skips it, and its ``position``
still bounds a page whose cursor names it. A data change only: rendered offline
(``--sql``) it is left out, as rows cannot be read there; going back leaves the
tombstones, which the older schema reads as such.
"""

from __future__ import annotations

import json
from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0010"
down_revision: str | Sequence[str] | None = "0009"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

_TRIGGER = "compaction_trigger"
_CANDIDATES = sa.text(
    "SELECT tenant_id, conversation_id, position, body FROM conversation_items"
    " WHERE deleted_at IS NULL AND body LIKE :pattern"
)
_TOMBSTONE = sa.text(
    "UPDATE conversation_items SET body = '', deleted_at = created_at"
    " WHERE tenant_id = :tenant_id AND conversation_id = :conversation_id"
    " AND position = :position"
)


def upgrade() -> None:
    if op.get_context().as_sql:
        return
    connection = op.get_bind()
    candidates = connection.execute(_CANDIDATES, {"pattern": f"%{_TRIGGER}%"})
    triggers = [
        {"tenant_id": row[0], "conversation_id": row[1], "position": row[2]}
        for row in candidates
        if _is_trigger(row[3])
    ]
    if triggers:
        connection.execute(_TOMBSTONE, triggers)


def _is_trigger(body: str) -> bool:
    """Whether ``body`` is a trigger item (the word may also be in another's text)."""
    try:
        item = json.loads(body)
    except ValueError:
        return False
    return isinstance(item, dict) and item.get("type") == _TRIGGER


def downgrade() -> None:
    pass
