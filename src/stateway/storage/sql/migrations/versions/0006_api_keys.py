"""API keys: what is stored of each (its SHA-256 digest, never the key).

Revision ID: 0006
Revises: 0005
Create Date: 2026-12-01

``api_keys`` holds one row per key made by ``stateway keys create``: its id, tenant,
optional name, digest (unique: how a presented key is found), creation, expiry and
revocation times (docs/adr/0016-authentication.md).
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0006"
down_revision: str | Sequence[str] | None = "0005"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "api_keys",
        sa.Column("id", sa.String(), nullable=False),
        sa.Column("tenant_id", sa.String(), nullable=False),
        sa.Column("name", sa.String(), nullable=True),
        sa.Column("digest", sa.String(), nullable=False),
        sa.Column("created_at", sa.Double(), nullable=False),
        sa.Column("expires_at", sa.Double(), nullable=True),
        sa.Column("revoked_at", sa.Double(), nullable=True),
        sa.PrimaryKeyConstraint("id", name="pk_api_keys"),
        sa.UniqueConstraint("digest", name="uq_api_keys_digest"),
    )


def downgrade() -> None:
    op.drop_table("api_keys")
