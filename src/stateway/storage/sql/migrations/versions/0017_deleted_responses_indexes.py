"""Index deleted responses not yet erased, and the responses continuing from each.

Revision ID: 0017
Revises: 0016
Create Date: 2026-12-07

Until now a deleted response stayed in the database for ever, with its items, body and
event log (their content included), unless ``[storage] retention`` was set: only its
``deleted_at`` hid it. Every process now sweeps the content of deleted responses away
once no response continues from them (:mod:`stateway.core.retention`), finding them by
``ix_responses_to_erase`` (``deleted_at``, ``tenant_id``, ``id``; deleted ones whose
``status`` is not yet ``erased`` only: a delete pays for an entry, the erasure takes it
out) and asking ``ix_responses_continued`` (``tenant_id``, ``previous_response_id``;
continuations only) whether one continues from each. The first sweep after the upgrade
erases the responses deleted more than an hour before it that none continues from.
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0017"
down_revision: str | Sequence[str] | None = "0016"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


_TO_ERASE = "deleted_at IS NOT NULL AND status <> 'erased'"
_CONTINUED = "previous_response_id IS NOT NULL"


def upgrade() -> None:
    op.create_index(
        "ix_responses_to_erase",
        "responses",
        ["deleted_at", "tenant_id", "id"],
        sqlite_where=sa.text(_TO_ERASE),
        postgresql_where=sa.text(_TO_ERASE),
    )
    op.create_index(
        "ix_responses_continued",
        "responses",
        ["tenant_id", "previous_response_id"],
        sqlite_where=sa.text(_CONTINUED),
        postgresql_where=sa.text(_CONTINUED),
    )


def downgrade() -> None:
    op.drop_index("ix_responses_continued", table_name="responses")
    op.drop_index("ix_responses_to_erase", table_name="responses")
