"""Let go of the conversations that ended turns still hold.

Revision ID: 0014
Revises: 0013
Create Date: 2026-12-07

Releases before 2026-12-06 marked a dead process's conversation turn ``failed`` without
letting go of its conversation (``active_response_id`` kept naming it). A claim takes
such a conversation (its holder has ended), but only while the holder's row is there:
once ``[storage] retention`` deleted that response, nothing told that the holder had
ended, and every later turn and item append on the conversation was refused (409
``conversation_locked``) for ever. Every conversation whose holder has ended is let go
now, before any sweep, and so is every conversation whose holder's row a sweep already
deleted (a holder's row is inserted in the transaction that takes the lock, and deleted
only once it has ended). A holder still running keeps its conversation, and so does a
claim committing meanwhile: a conversation is let go only if still held by the holder it
was seen held by (on PostgreSQL a row a claim updated meanwhile is re-checked as updated,
but a subquery about its holder would read a snapshot missing the claim's new row).
Going back leaves them let go.
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0014"
down_revision: str | Sequence[str] | None = "0013"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

_LET_GO = sa.text(
    "UPDATE conversations SET active_response_id = NULL"
    " WHERE (tenant_id, id, active_response_id) IN ("
    "  SELECT held.tenant_id, held.id, held.active_response_id FROM conversations AS held"
    "  WHERE held.active_response_id IS NOT NULL AND NOT EXISTS ("
    "   SELECT 1 FROM responses WHERE responses.tenant_id = held.tenant_id"
    "   AND responses.id = held.active_response_id"
    "   AND responses.status IN ('queued', 'in_progress')))"
)
"""The conversations whose holder has ended, or whose holder's row is gone, let go of, by
the holder each was seen held by: a claim committing meanwhile names another."""


def upgrade() -> None:
    op.execute(_LET_GO)


def downgrade() -> None:
    pass
