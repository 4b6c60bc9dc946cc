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

Earlier releases kept an input item's id however long (no index held it), and one longer
than PostgreSQL's index row (2704 bytes) would fail the index's creation, and so every
start. An id longer than ``MAX_ITEM_ID_BYTES`` (1024) names nothing now
(``schema.indexable_id``): such an item is kept, its id unindexed (``item_id`` NULL, as
one is stored now), before the index is made. On PostgreSQL that rewrites the table, in
the rare database holding one: an updated row's old version, still the upgrade's own
transaction's, would be indexed too. Going back leaves them unindexed.
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
_MAX_ITEM_ID_BYTES = 1024
"""``schema.MAX_ITEM_ID_BYTES`` as of this revision."""
_TOO_LONG = f"{_INPUT} AND octet_length(item_id) > {_MAX_ITEM_ID_BYTES}"
"""PostgreSQL's test of an input item's id too long to index."""


def upgrade() -> None:
    if op.get_context().dialect.name == "postgresql":
        # The rewrite leaves no old row version for the index to take (a DO block, so
        # that the offline SQL decides as an upgrade does).
        op.execute(
            f"DO $$ BEGIN IF EXISTS (SELECT 1 FROM items WHERE {_TOO_LONG}) THEN"
            " ALTER TABLE items ALTER COLUMN item_id TYPE VARCHAR USING"
            f" CASE WHEN {_TOO_LONG} THEN NULL ELSE item_id END; END IF; END $$"
        )
    else:
        op.execute(
            f"UPDATE items SET item_id = NULL WHERE {_INPUT}"
            f" AND length(CAST(item_id AS BLOB)) > {_MAX_ITEM_ID_BYTES}"
        )
    op.create_index(
        "ix_items_input_item",
        "items",
        ["tenant_id", "item_id"],
        sqlite_where=sa.text(_INPUT),
        postgresql_where=sa.text(_INPUT),
    )


def downgrade() -> None:
    op.drop_index("ix_items_input_item", table_name="items")
