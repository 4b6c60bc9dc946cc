"""The tables, as SQLAlchemy Core metadata.

Tenant data is keyed by ``tenant_id`` first: every query names the tenant, so isolation
is a matter of the primary key, and nothing is ever looked up across tenants.

``responses``
    One row per stored response. ``body`` is the response state (see
    :func:`stateway.core.response.dump_state`) as orjson-written JSON text, which reads and
    writes identically on SQLite and PostgreSQL. ``status``, ``created_at`` and
    ``previous_response_id`` are copied out of it as columns for queries. ``deleted_at``
    marks a soft delete: the row stops being retrievable, but its items keep serving as
    context for the responses that continue from it. Once none does (nor can: see
    :mod:`stateway.core.retention`), a sweep erases its content: its items and event log
    go, its ``body`` is emptied (``/v1/usage`` counts its columns), its ``status`` becomes
    :data:`ERASED` and its ``previous_response_id`` is cleared, so the response it
    continued from is needed by one fewer. ``owner`` names the process running
    a response while it is ``in_progress`` (see :mod:`stateway.core.ownership`); a partial
    index over in-progress rows keeps the start-up search for abandoned runs cheap.
    ``served_by`` is the candidate (``backend/model``) whose attempt last succeeded, written
    with the run's end (NULL before, or when none did): read with a chain or a
    conversation, it steers a continuation back to that candidate's cache when this
    process's affinity table does not know the chain (see
    :mod:`stateway.core.routing.affinity`).
    ``model``, ``input_tokens`` and ``output_tokens`` are the body's ``model`` and
    ``usage`` counts, copied out by every write of the row (NULL counts when the body has
    none: no usage yet, or none reported; ``''`` when it has no model) for ``GET
    /v1/usage``, which sums them without reading a body (see
    :mod:`stateway.storage.sql.accounting`). A NULL ``model`` marks a row stored without
    them (by an earlier release), until a sweep fills them in.

``items``
    Every item exactly once, under the response that introduced it: the response's own
    input items (``role='input'``) and the items it produced (``role='output'``), numbered
    by ``position`` within each role. Context for a chain is assembled by walking
    ``previous_response_id`` links, never by copying items forward. ``item_id`` is the
    client-visible ``id`` of the item when it has one; clients choose input ids, so they
    are labels rather than keys and are not unique.

``conversations`` / ``conversation_items``
    A conversation is a mutable, ordered list of items, each with an ``item_id`` unique
    within the conversation (a unique index holds it) and numbered by ``position``;
    ``next_position`` is where the next append goes. Items are copied in when appended:
    a conversation is edited (items deleted) while the responses that used its items stay
    as they were. ``response_id`` names the turn that appended an item, if any.
    ``active_response_id`` is the turn currently holding the conversation. A deleted
    item stays as a tombstone (``deleted_at`` set, ``body`` emptied): its position still
    bounds a page whose cursor names it, and its id is not given to another item. A
    deleted conversation (``deleted_at`` set) stays until the next sweep erases it with its
    items (:mod:`stateway.core.retention`), once no running turn holds it.

``response_events``
    The persisted event log of a background run, written in batches: one row per batch of
    consecutive events, keyed by its first event's ``sequence_number``, their wire JSON
    as ``body``, one event per line; replayed to watchers that resume after the run ended
    or from another process (ADR 0008). A batch for an :data:`ERASED` response is not
    written (a log kept late, after its run's end, would outlive the erasure).

``gateway_secrets``
    Server-wide keys (not tenant data), such as the one sealing ``encrypted_content``;
    generated once and shared by every process on the database.

``run_owners``
    One row per gateway process serving the database (not tenant data), named as its
    in-progress rows name their ``owner``: ``beat`` counts up while it lives; a process
    that sees another's beat stand still for that owner's ``lease_timeout`` fails its
    unfinished responses and deletes its row (see :mod:`stateway.core.leases`).

``api_keys``
    The keys ``stateway keys create`` made (not tenant data: a key names its tenant):
    each key's SHA-256 ``digest`` (unique; the key itself is never stored), its tenant,
    name, and creation, expiry and revocation times (ADR 0016).

``write_probes``
    Empty but for a moment: while the database refuses writes for a lasting cause (out of
    space, read-only), each readiness probe inserts a page-sized row and deletes it again
    in one committed transaction, to learn whether a write lands again (see
    :mod:`stateway.storage.sql.ping`). No key: probes of several processes never wait on
    each other; on PostgreSQL its rows are identified whole (``REPLICA IDENTITY FULL``,
    set by its migration), so a publication of every table takes their ``DELETE``.

``previous_response_id`` deliberately has no foreign key: a chain is read by following
the links, and a missing ancestor (a retention purge's) ends the walk instead of blocking
the purge or failing the read. Items reference their response and go with it.

This module describes the current schema for queries; the schema in a database is made
by the migrations in ``migrations/versions``, and a test checks that the two agree.
"""

from __future__ import annotations

from typing import Final, TypeGuard

from sqlalchemy import (
    BigInteger,
    CheckConstraint,
    Column,
    Double,
    ForeignKeyConstraint,
    Index,
    Integer,
    LargeBinary,
    MetaData,
    PrimaryKeyConstraint,
    String,
    Table,
    Text,
    UniqueConstraint,
    text,
)

INPUT: Final = "input"
OUTPUT: Final = "output"
"""Values of ``items.role``. ``'input' < 'output'``, so ordering by role puts a response's
input items before its output items."""

MAX_ITEM_ID_BYTES: Final = 1024
"""The longest item id (UTF-8) kept as an indexed id, in a response's items and a
conversation's: PostgreSQL refuses an index row over 2704 bytes (the tenant's and the
conversation's ids with it). A client's longer one names nothing, on both databases: its
item is stored whole, unindexed (a conversation gives it a new id)."""


def indexable_id(item_id: object) -> TypeGuard[str]:
    """An item id the columns and indexes can hold on both databases: a non-empty string
    without NUL (PostgreSQL text refuses it) of at most :data:`MAX_ITEM_ID_BYTES`."""
    return (
        isinstance(item_id, str)
        and bool(item_id)
        and "\x00" not in item_id
        and len(item_id.encode()) <= MAX_ITEM_ID_BYTES
    )


NAMING_CONVENTION: Final = {
    "ix": "ix_%(table_name)s_%(column_0_N_name)s",
    "uq": "uq_%(table_name)s_%(column_0_N_name)s",
    "ck": "ck_%(table_name)s_%(constraint_name)s",
    "fk": "fk_%(table_name)s_%(column_0_N_name)s_%(referred_table_name)s",
    "pk": "pk_%(table_name)s",
}

metadata: Final = MetaData(naming_convention=NAMING_CONVENTION)

responses: Final = Table(
    "responses",
    metadata,
    Column("tenant_id", String, nullable=False),
    Column("id", String, nullable=False),
    Column("previous_response_id", String, nullable=True),
    Column("status", String, nullable=False),
    Column("created_at", Double, nullable=False),
    Column("deleted_at", Double, nullable=True),
    Column("body", Text, nullable=False),
    Column("owner", String, nullable=True),
    Column("served_by", String, nullable=True),
    Column("model", String, nullable=True),
    Column("input_tokens", BigInteger, nullable=True),
    Column("output_tokens", BigInteger, nullable=True),
    PrimaryKeyConstraint("tenant_id", "id"),
)

IN_PROGRESS_WHERE: Final = "status IN ('queued', 'in_progress')"
"""Unfinished responses: a background run is ``queued`` before it starts."""

ERASED: Final = "erased"
"""The ``status`` of a deleted response whose content a sweep erased: its items and event
log are gone, its body is :data:`ERASED_BODY`; ``/v1/usage`` reads its columns
(:class:`~stateway.storage.sql.retention.SqlResponseEraser`)."""
ERASED_BODY: Final = "{}"
TO_ERASE_WHERE: Final = f"deleted_at IS NOT NULL AND status <> '{ERASED}'"
"""Deleted responses whose content is still stored."""
CONTINUED_WHERE: Final = "previous_response_id IS NOT NULL"
UNFILLED_WHERE: Final = "model IS NULL"
"""Responses whose usage columns are not filled in yet (stored by an earlier release)."""

Index(
    "ix_responses_in_progress",
    responses.c.owner,
    sqlite_where=text(IN_PROGRESS_WHERE),
    postgresql_where=text(IN_PROGRESS_WHERE),
)

Index(
    "ix_responses_to_erase",
    responses.c.deleted_at,
    responses.c.tenant_id,
    responses.c.id,
    sqlite_where=text(TO_ERASE_WHERE),
    postgresql_where=text(TO_ERASE_WHERE),
)
"""Finds the deleted responses a sweep erases, in the order it walks them
(:class:`~stateway.storage.sql.retention.SqlResponseEraser`); only deleted ones not yet
erased are in it, so a save pays for no entry, only a delete (and its erasure takes it
out)."""

Index(
    "ix_responses_continued",
    responses.c.tenant_id,
    responses.c.previous_response_id,
    sqlite_where=text(CONTINUED_WHERE),
    postgresql_where=text(CONTINUED_WHERE),
)
"""Finds the responses continuing from one: a deleted response is erased only once none
does. A first response (no ``previous_response_id``) pays for no entry."""

Index(
    "ix_responses_unfilled",
    responses.c.tenant_id,
    responses.c.id,
    sqlite_where=text(UNFILLED_WHERE),
    postgresql_where=text(UNFILLED_WHERE),
)
"""Finds the responses whose usage columns a sweep fills in
(:class:`~stateway.storage.sql.usage_backfill.SqlUsageBackfill`): every write of a row
fills them, so a save pays for no entry."""

items: Final = Table(
    "items",
    metadata,
    Column("tenant_id", String, nullable=False),
    Column("response_id", String, nullable=False),
    Column("role", String, nullable=False),
    Column("position", Integer, nullable=False),
    Column("item_id", String, nullable=True),
    Column("body", Text, nullable=False),
    PrimaryKeyConstraint("tenant_id", "response_id", "role", "position"),
    ForeignKeyConstraint(
        ["tenant_id", "response_id"],
        ["responses.tenant_id", "responses.id"],
        ondelete="CASCADE",
    ),
    CheckConstraint(f"role IN ('{INPUT}', '{OUTPUT}')", name="role"),
)

OUTPUT_ITEMS_WHERE: Final = f"role = '{OUTPUT}'"
Index(
    "ix_items_output_item",
    items.c.tenant_id,
    items.c.item_id,
    sqlite_where=text(OUTPUT_ITEMS_WHERE),
    postgresql_where=text(OUTPUT_ITEMS_WHERE),
)
"""Finds the output items ``item_reference`` input items name
(:data:`references.FIND_OUTPUT_ITEMS`): what clients reference is what a response produced."""

INPUT_ITEMS_WHERE: Final = f"role = '{INPUT}'"
Index(
    "ix_items_input_item",
    items.c.tenant_id,
    items.c.item_id,
    sqlite_where=text(INPUT_ITEMS_WHERE),
    postgresql_where=text(INPUT_ITEMS_WHERE),
)
"""Finds the input items a reference names that no output item has
(:data:`references.FIND_INPUT_ITEMS`): rarely an input item, but each reference to an
item the Conversations API added, or to nothing, is looked for here first; without it,
that is a scan of all the tenant's input items."""

conversations: Final = Table(
    "conversations",
    metadata,
    Column("tenant_id", String, nullable=False),
    Column("id", String, nullable=False),
    Column("created_at", Double, nullable=False),
    Column("deleted_at", Double, nullable=True),
    Column("metadata", Text, nullable=False),
    Column("next_position", Integer, nullable=False),
    Column("active_response_id", String, nullable=True),
    PrimaryKeyConstraint("tenant_id", "id"),
)

DELETED_WHERE: Final = "deleted_at IS NOT NULL"
Index(
    "ix_conversations_deleted",
    conversations.c.deleted_at,
    conversations.c.tenant_id,
    conversations.c.id,
    sqlite_where=text(DELETED_WHERE),
    postgresql_where=text(DELETED_WHERE),
)
"""Finds the deleted conversations a sweep erases, in the order it walks them
(:class:`~stateway.storage.sql.retention.SqlConversationPurger`); only deleted ones are
in it, so creating a conversation or a turn's claim pays for no entry, only a delete."""

conversation_items: Final = Table(
    "conversation_items",
    metadata,
    Column("tenant_id", String, nullable=False),
    Column("conversation_id", String, nullable=False),
    Column("position", Integer, nullable=False),
    Column("item_id", String, nullable=False),
    Column("response_id", String, nullable=True),
    Column("created_at", Double, nullable=False),
    Column("body", Text, nullable=False),
    Column("deleted_at", Double, nullable=True),
    PrimaryKeyConstraint("tenant_id", "conversation_id", "position"),
    ForeignKeyConstraint(
        ["tenant_id", "conversation_id"],
        ["conversations.tenant_id", "conversations.id"],
        ondelete="CASCADE",
    ),
)

Index(
    None,
    conversation_items.c.tenant_id,
    conversation_items.c.item_id,
    conversation_items.c.conversation_id,
    unique=True,
)
"""Finds a conversation's item by id (every lookup that names the conversation names the
id too), and the items ``item_reference`` input items name by id alone, in any of the
tenant's conversations (:data:`references.FIND_CONVERSATION_ITEMS`). Unique: an id names
one item of a conversation (a tombstone included), so a page's cursor names one
position."""

response_events: Final = Table(
    "response_events",
    metadata,
    Column("tenant_id", String, nullable=False),
    Column("response_id", String, nullable=False),
    Column("sequence_number", Integer, nullable=False),
    Column("body", Text, nullable=False),
    PrimaryKeyConstraint("tenant_id", "response_id", "sequence_number"),
    ForeignKeyConstraint(
        ["tenant_id", "response_id"],
        ["responses.tenant_id", "responses.id"],
        ondelete="CASCADE",
    ),
)

gateway_secrets: Final = Table(
    "gateway_secrets",
    metadata,
    Column("name", String, nullable=False),
    Column("value", Text, nullable=False),
    Column("created_at", Double, nullable=False),
    PrimaryKeyConstraint("name"),
)

run_owners: Final = Table(
    "run_owners",
    metadata,
    Column("owner", String, nullable=False),
    Column("beat", Integer, nullable=False),
    Column("lease_timeout", Double, nullable=False),
    Column("renewed_at", Double, nullable=False),
    PrimaryKeyConstraint("owner"),
)

api_keys: Final = Table(
    "api_keys",
    metadata,
    Column("id", String, nullable=False),
    Column("tenant_id", String, nullable=False),
    Column("name", String, nullable=True),
    Column("digest", String, nullable=False),
    Column("created_at", Double, nullable=False),
    Column("expires_at", Double, nullable=True),
    Column("revoked_at", Double, nullable=True),
    PrimaryKeyConstraint("id"),
    UniqueConstraint("digest"),
)

write_probes: Final = Table(
    "write_probes",
    metadata,
    Column("body", LargeBinary, nullable=False),
)
