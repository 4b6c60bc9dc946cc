"""A PostgreSQL function reading a response's body as JSON, NULL where it is not JSON.

Revision ID: 0019
Revises: 0018
Create Date: 2026-12-07

The usage query reads the ``model`` and ``usage`` of the rows whose columns are not filled
in yet out of their ``body``, and the sweeps' backfill fills them in so
(:mod:`stateway.storage.sql.body_usage`). A cast to ``jsonb`` fails the whole statement on
one body that is not JSON (cut short, written by hand): every tenant's ``GET /v1/usage``
failed, and every sweep's backfill, which finds the row first again each time.
``stateway_body(text)`` is the cast, NULL where it fails (what a body that is no object
reads as: no model, no tokens). PostgreSQL 15 has no cast that does not fail (16's
``pg_input_is_valid``); an exception block is the way, a subtransaction a call, which
cannot run in a parallel worker (``PARALLEL RESTRICTED``): some 4 µs more a row read.
SQLite asks ``json_valid`` in the query and needs no function. Going back drops it.
"""

from __future__ import annotations

from collections.abc import Sequence

from alembic import op

revision: str = "0019"
down_revision: str | Sequence[str] | None = "0018"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

_CREATE = """\
CREATE OR REPLACE FUNCTION stateway_body(body text) RETURNS jsonb
LANGUAGE plpgsql IMMUTABLE STRICT PARALLEL RESTRICTED AS $$
BEGIN
  RETURN CAST(body AS jsonb);
EXCEPTION WHEN invalid_text_representation OR untranslatable_character THEN
  RETURN NULL;
END
$$"""


def upgrade() -> None:
    if op.get_context().dialect.name == "postgresql":
        op.execute(_CREATE)


def downgrade() -> None:
    if op.get_context().dialect.name == "postgresql":
        op.execute("DROP FUNCTION IF EXISTS stateway_body(text)")
