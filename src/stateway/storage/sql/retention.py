"""``SqlResponsePurger``: the :class:`~stateway.core.ports.ResponsePurger` port over the
responses table; ``SqlConversationPurger``: the
:class:`~stateway.core.conversations.ports.ConversationPurger` port over the conversations
table; ``SqlResponseEraser``: the :class:`~stateway.core.ports.ResponseEraser` port over
the responses table (:mod:`stateway.core.retention` decides when).

One transaction per batch: a ``SELECT`` of up to ``limit`` finished responses created
before the cutoff, then a ``DELETE`` of them by primary key (one per tenant among them,
its ids in a list); their items and event log rows go with them (``ON DELETE CASCADE``;
SQLite's foreign keys are on for every connection:
:data:`~stateway.storage.sql.engine.SQLITE_PRAGMAS`).

A sweep walks the primary key once: each batch's search starts after the last key the
one before it found (for the same cutoff), in key order, so no batch reads again what an
earlier one read (or deleted: PostgreSQL keeps a deleted row's tuple until a vacuum, and
a search from the table's start would read the dead tuples of every earlier batch, each
batch slower than the last). A batch finds fewer than ``limit`` only at the end of the
walk, which ends the sweep. There is no index on ``created_at``: a save of the hot path
pays for no other index, and a sweep reads the table once, which on SQLite (WAL) holds
up no writer until the ``DELETE``.

Replicas sweeping side by side share the work: on PostgreSQL the search skips the rows
another's batch holds (``FOR UPDATE SKIP LOCKED``) rather than waiting to find them gone;
on SQLite, which has no row locks, it may find rows another then deletes first, and the
``DELETE`` counts only its own.

Deleted conversations go the same way, a conversation's items with it (``ON DELETE
CASCADE``), but found by ``ix_conversations_deleted`` (deleted ones only, by deletion
time then key) and walked in its order: a sweep reads only what it erases. One a running
turn holds (its row ``queued`` or ``in_progress``) is left for a later sweep, in the
search and again in the ``DELETE``: the turn's end still finds the row it lets go of
(ADR 0006). No turn can take a deleted conversation, so once free it stays free.

Deleted responses are not deleted but erased: ``/v1/usage`` still counts them (their
tokens were spent), so the row stays with its usage columns and an empty body (``{}``),
written without reading the old one, and its items and event log rows go. Only a row
whose usage columns are filled in is erased (its body is what they would be read out of:
:mod:`~stateway.storage.sql.usage_backfill`; a sweep fills them in before it erases). Its
``status`` becomes ``erased`` (which takes it out of ``ix_responses_to_erase``, the index
of deleted responses not yet erased, walked like the conversations' in deletion order, so
a sweep reads what it erases and what it keeps) and its ``previous_response_id`` is
cleared. A deleted response is erased only when no response row names it as its previous
one (``ix_responses_continued`` answers, a probe per response), checked in the search and
again in the ``UPDATE`` that marks it (a statement of its own, which on PostgreSQL sees a
child committed since the search); one still running is left until it ends. Clearing the
link is what lets a chain go: once its last response is erased, the deleted one before it
has no child left, and the same transaction, having erased a batch, searches the
responses they continued from, and so on up the chain, while it has erased fewer than its
limit (so fewer than twice that in all: SQLite's one writer waits behind it); where it
stops, the sweep's next batch goes on, before searching further. A deleted chain goes in
one sweep, its kept ancestors (a live response's, or a running one's) staying. No lock is
taken beyond the rows erased: a response inserted while the sweep runs names its previous
one without locking it, so the sweep's own conditions cannot close the window between a
run reading the response it continues from and storing its own row;
:data:`~stateway.core.retention.ERASE_AFTER` does (see there).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Final

from sqlalchemy import (
    Double,
    Integer,
    Row,
    Select,
    String,
    bindparam,
    delete,
    exists,
    literal_column,
    select,
    text,
    tuple_,
    update,
)
from sqlalchemy.ext.asyncio import AsyncConnection
from sqlalchemy.sql import Delete, Update

from stateway.storage.sql.errors import storage_errors
from stateway.storage.sql.schema import (
    ERASED,
    ERASED_BODY,
    IN_PROGRESS_WHERE,
    TO_ERASE_WHERE,
    conversations,
    items,
    response_events,
    responses,
)
from stateway.storage.sql.store import SqlResponseStore
from stateway.storage.sql.tenant_keys import ids_by_tenant

_finished = text(f"NOT ({IN_PROGRESS_WHERE})")

_EXPIRED: Final[Select[str, str]] = (
    select(responses.c.tenant_id, responses.c.id)
    .where(responses.c.created_at < bindparam("before"), _finished)
    .order_by(responses.c.tenant_id, responses.c.id)
    .limit(bindparam("limit"))
    .with_for_update(skip_locked=True)
)
_EXPIRED_AFTER: Final[Select[str, str]] = _EXPIRED.where(
    tuple_(responses.c.tenant_id, responses.c.id)
    > tuple_(bindparam("after_tenant", type_=String), bindparam("after_id", type_=String))
)
_DELETE: Final[Delete] = delete(responses).where(
    responses.c.tenant_id == bindparam("tenant", type_=String),
    responses.c.id.in_(bindparam("ids", expanding=True)),
    _finished,
)


class SqlResponsePurger:
    def __init__(self, store: SqlResponseStore) -> None:
        """On ``store``'s engine; a lasting refusal met fails its ping
        (:mod:`~stateway.storage.sql.refusals`)."""
        self._engine = store.engine
        self._refusals = store.refusals
        self._walk: tuple[float, tuple[str, str]] | None = None
        """The cutoff of the sweep under way and the last key its batches found; None
        between sweeps."""

    async def purge(self, before: float, limit: int) -> int:
        values: dict[str, object] = {"before": before, "limit": limit}
        search = _EXPIRED
        if self._walk is not None and self._walk[0] == before:  # the sweep goes on
            search = _EXPIRED_AFTER
            values["after_tenant"], values["after_id"] = self._walk[1]
        with storage_errors("deleting responses older than the retention", self._refusals):
            async with self._engine.begin() as connection:
                found = (await connection.execute(search, values)).all()
                deleted = 0
                for tenant, ids in ids_by_tenant(found).items():
                    values = {"tenant": tenant, "ids": ids}
                    deleted += (await connection.execute(_DELETE, values)).rowcount
        if len(found) < limit:  # the walk's end: the next search starts a sweep
            self._walk = None
        else:
            self._walk = (before, (found[-1][0], found[-1][1]))
        return deleted


_held = exists(
    select(literal_column("1", Integer)).where(
        responses.c.tenant_id == conversations.c.tenant_id,
        responses.c.id == conversations.c.active_response_id,
        responses.c.status.in_([literal_column("'queued'"), literal_column("'in_progress'")]),
    )
)
"""A running turn holds the conversation: its row has not ended (one whose row is gone
holds nothing)."""
_erasable = (
    conversations.c.deleted_at.is_not(None),  # the partial index's own condition
    conversations.c.deleted_at < bindparam("before", type_=Double),
    ~_held,
)
_DELETED: Final[Select[float, str, str]] = (
    select(conversations.c.deleted_at, conversations.c.tenant_id, conversations.c.id)
    .where(*_erasable)
    .order_by(conversations.c.deleted_at, conversations.c.tenant_id, conversations.c.id)
    .limit(bindparam("limit"))
    .with_for_update(skip_locked=True)
)
_DELETED_AFTER: Final[Select[float, str, str]] = _DELETED.where(
    tuple_(conversations.c.deleted_at, conversations.c.tenant_id, conversations.c.id)
    > tuple_(
        bindparam("after_deleted", type_=Double),
        bindparam("after_tenant", type_=String),
        bindparam("after_id", type_=String),
    )
)
_ERASE: Final[Delete] = delete(conversations).where(
    conversations.c.tenant_id == bindparam("tenant", type_=String),
    conversations.c.id.in_(bindparam("ids", expanding=True)),
    *_erasable,
)


class SqlConversationPurger:
    def __init__(self, store: SqlResponseStore) -> None:
        """On ``store``'s engine; a lasting refusal met fails its ping
        (:mod:`~stateway.storage.sql.refusals`)."""
        self._engine = store.engine
        self._refusals = store.refusals
        self._walk: tuple[float, tuple[float, str, str]] | None = None
        """The cutoff of the sweep under way and the last key its batches found; None
        between sweeps."""

    async def purge(self, before: float, limit: int) -> int:
        values: dict[str, object] = {"before": before, "limit": limit}
        search = _DELETED
        if self._walk is not None and self._walk[0] == before:  # the sweep goes on
            search = _DELETED_AFTER
            values["after_deleted"], values["after_tenant"], values["after_id"] = self._walk[1]
        with storage_errors("erasing deleted conversations", self._refusals):
            async with self._engine.begin() as connection:
                found = (await connection.execute(search, values)).all()
                erased = 0
                for tenant, ids in ids_by_tenant((tenant, id_) for _, tenant, id_ in found).items():
                    values = {"tenant": tenant, "ids": ids, "before": before}
                    erased += (await connection.execute(_ERASE, values)).rowcount
        if len(found) < limit:  # the walk's end: the next search starts a sweep
            self._walk = None
        else:
            last = found[-1]
            self._walk = (before, (last[0], last[1], last[2]))
        return erased


_child = responses.alias("child")
_continued = exists(
    select(literal_column("1", Integer)).where(
        _child.c.tenant_id == responses.c.tenant_id,
        _child.c.previous_response_id == responses.c.id,
    )
)
"""Another response continues from this one, live or deleted (an erased one no longer
names it)."""
_unneeded = (
    text(TO_ERASE_WHERE),  # the partial index's own condition
    responses.c.deleted_at < bindparam("before", type_=Double),
    _finished,
    responses.c.model.is_not(None),  # its usage columns filled in
    ~_continued,
)
_ERASABLE: Final[Select[float, str, str, str | None]] = select(
    responses.c.deleted_at,
    responses.c.tenant_id,
    responses.c.id,
    responses.c.previous_response_id,
).where(*_unneeded)
_TO_ERASE: Final = (
    _ERASABLE.order_by(responses.c.deleted_at, responses.c.tenant_id, responses.c.id)
    .limit(bindparam("limit"))
    .with_for_update(skip_locked=True)
)
_TO_ERASE_AFTER: Final = _TO_ERASE.where(
    tuple_(responses.c.deleted_at, responses.c.tenant_id, responses.c.id)
    > tuple_(
        bindparam("after_deleted", type_=Double),
        bindparam("after_tenant", type_=String),
        bindparam("after_id", type_=String),
    )
)
_PARENTS: Final = _ERASABLE.where(
    responses.c.tenant_id == bindparam("tenant", type_=String),
    responses.c.id.in_(bindparam("ids", expanding=True)),
).with_for_update(skip_locked=True)
"""The responses the ones just erased continued from, among them those now erasable."""
_MARK: Final[Update] = (
    update(responses)
    .where(
        responses.c.tenant_id == bindparam("tenant", type_=String),
        responses.c.id.in_(bindparam("ids", expanding=True)),
        *_unneeded,
    )
    .values(status=ERASED, previous_response_id=None, served_by=None, body=ERASED_BODY)
    .returning(responses.c.id)
)
"""Checked again as it erases: a response continuing from one stored since the search
keeps it."""
_ERASE_ITEMS: Final[Delete] = delete(items).where(
    items.c.tenant_id == bindparam("tenant", type_=String),
    items.c.response_id.in_(bindparam("ids", expanding=True)),
)
_ERASE_EVENTS: Final[Delete] = delete(response_events).where(
    response_events.c.tenant_id == bindparam("tenant", type_=String),
    response_events.c.response_id.in_(bindparam("ids", expanding=True)),
)

_Found = Row[float, str, str, str | None]
"""A response the search found: deleted, tenant, id, previous id."""


@dataclass(frozen=True, slots=True)
class _Sweep:
    """Where a sweep erasing deleted responses is, between its batches."""

    before: float
    after: tuple[float, str, str] | None = None
    """The last key its searches found (None: none yet)."""
    searched: bool = False
    """Whether a search found fewer than it looked for: the walk's end."""
    above: dict[str, list[str]] = field(default_factory=dict)
    """By tenant, the responses the last batch's erasures continued from, which it left
    for the next (it had erased its limit)."""


class SqlResponseEraser:
    def __init__(self, store: SqlResponseStore) -> None:
        """On ``store``'s engine; a lasting refusal met fails its ping
        (:mod:`~stateway.storage.sql.refusals`)."""
        self._engine = store.engine
        self._refusals = store.refusals
        self._sweep: _Sweep | None = None
        """The sweep under way; None between sweeps."""

    async def purge(self, before: float, limit: int) -> int:
        sweep = self._sweep
        if sweep is None or sweep.before != before:
            sweep = _Sweep(before)
        after, searched, above = sweep.after, sweep.searched, {}
        with storage_errors("erasing deleted responses", self._refusals):
            async with self._engine.begin() as connection:
                rows = await _continued_from(connection, sweep.above, before)
                room = limit - len(rows)
                if room > 0 and not searched:
                    values: dict[str, object] = {"before": before, "limit": room}
                    search = _TO_ERASE
                    if after is not None:
                        search = _TO_ERASE_AFTER
                        values["after_deleted"], values["after_tenant"], values["after_id"] = after
                    found = (await connection.execute(search, values)).all()
                    searched = len(found) < room
                    if found:
                        after = (found[-1][0], found[-1][1], found[-1][2])
                    rows += found
                erased = 0
                while rows:  # erased, then the responses they continued from, up the chains
                    count, continued = await _erase(connection, rows, before)
                    erased += count
                    if erased >= limit:  # the next batch goes on up
                        above = continued
                        break
                    rows = await _continued_from(connection, continued, before)
        self._sweep = None if searched and not above else _Sweep(before, after, searched, above)
        return erased


async def _continued_from(
    connection: AsyncConnection, ids: dict[str, list[str]], before: float
) -> list[_Found]:
    """Of the responses named (by tenant), those erasable now, locked."""
    found: list[_Found] = []
    for tenant, named in ids.items():
        values = {"tenant": tenant, "ids": named, "before": before}
        found += (await connection.execute(_PARENTS, values)).all()
    return found


async def _erase(
    connection: AsyncConnection, rows: list[_Found], before: float
) -> tuple[int, dict[str, list[str]]]:
    """Erase the content of the responses found (those still erasable); how many were,
    and, by tenant, the responses they continued from."""
    by_tenant: dict[str, dict[str, str | None]] = {}
    for _, tenant, id_, previous in rows:
        by_tenant.setdefault(tenant, {})[id_] = previous
    erased = 0
    continued: dict[str, list[str]] = {}
    for tenant, found in by_tenant.items():
        values = {"tenant": tenant, "ids": list(found), "before": before}
        marked = list((await connection.execute(_MARK, values)).scalars())
        if not marked:
            continue
        values = {"tenant": tenant, "ids": marked}
        await connection.execute(_ERASE_ITEMS, values)
        await connection.execute(_ERASE_EVENTS, values)
        erased += len(marked)
        parents = sorted({p for id_ in marked if (p := found[id_]) is not None})
        if parents:
            continued[tenant] = parents
    return erased, continued
