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
now, before any sweep. A holder still running keeps its conversation: the test is the
one a claim makes (the holder's row exists and has ended), so a claim committing
meanwhile is never undone. Going back leaves them let go.
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
    " WHERE active_response_id IS NOT NULL AND EXISTS ("
    "  SELECT 1 FROM responses WHERE responses.tenant_id = conversations.tenant_id"
    "  AND responses.id = conversations.active_response_id"
    "  AND responses.status NOT IN ('queued', 'in_progress'))"
)


def upgrade() -> None:
    op.execute(_LET_GO)


def downgrade() -> None:
    pass
