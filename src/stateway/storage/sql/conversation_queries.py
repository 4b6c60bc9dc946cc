"""Every statement of conversations, built once at import (see :mod:`.queries`).

Bind parameters: ``tenant`` and ``conversation`` in reads and updates; per statement
``response`` (the turn), ``seen`` (the length a turn's context was read at), ``count``
(items being appended), ``start`` and ``end`` (positions), ``item``, ``after``, ``limit``,
``now``, ``new_metadata`` and ``ids`` (an expanding list). The inserts take rows named
after their table's columns, plus ``conversation_id`` (a turn's row), ``offset``,
``fresh_id`` and ``fresh_body`` (an appended item); their rows are built in
:mod:`.conversation_rows`.

The lock
--------
``conversations.active_response_id`` names the turn holding the conversation. A turn takes
it with :data:`CLAIM`, in the batch that inserts its in-progress row::

    UPDATE conversations SET active_response_id = :response
     WHERE tenant_id = :tenant AND id = :conversation AND deleted_at IS NULL
       AND next_position = :seen
       AND (active_response_id IS NULL OR EXISTS (
            SELECT 1 FROM responses WHERE tenant_id = :tenant
               AND id = conversations.active_response_id
               AND status NOT IN ('queued', 'in_progress')))

and its row and input go in only if it now holds the conversation
(:data:`INSERT_TURN_RESPONSE`, then :data:`INSERT_TURN_ITEMS` if that row is there): a
refused claim writes nothing, and the batch needs no answer in between. The store tells a
refused turn afterwards by its missing row.

A holder whose response has ended is stale and loses the lock (an end written without
letting go: an earlier release's start-up marking of a dead process's turn as failed;
migration ``0014`` lets go of those, and of those whose rows a retention sweep deleted).
The test is that the holder's row *exists and has ended*, never that no unfinished row
exists: on PostgreSQL a claim that waited for a concurrent claim's commit re-checks the
updated row, but its subquery still reads its own snapshot, in which the winner's new
row is missing; read as "holder ended" that would let both turns in. The holder's row is
there while it holds the lock: it is inserted in the transaction that takes the lock,
and every end lets go in the transaction that writes it (the retention deletes ended
rows only).
``seen`` refuses a turn whose context is out of date: something was appended between its
read and its claim.

A turn's end appends its items after the conversation's last position while it still
holds it (:data:`APPEND_TURN_ITEMS`, one row per item at ``next_position + offset``), then
lets go and moves ``next_position`` past them (:data:`END_TURN`). Outside turns, items are
appended (:data:`APPEND_ITEMS`) at positions :data:`RESERVE` made room for.

Item ids
--------
Each appended row carries its item twice: as given (``item_id``, ``body``) and with a new
gateway id (``fresh_id``, ``fresh_body``); the row takes the fresh one when the
conversation already has the given id (a deleted item's included), so ids stay unique
without a read first. A unique index holds it whatever writes the rows, so the item a
page's cursor names has one position (:func:`_items_page`).
"""

from __future__ import annotations

from typing import Any, Final, Literal

from sqlalchemy import (
    Integer,
    String,
    and_,
    bindparam,
    case,
    exists,
    func,
    insert,
    literal_column,
    null,
    or_,
    select,
    update,
)
from sqlalchemy.sql import ColumnElement, Insert, Select, Update

from stateway.storage.sql.schema import conversation_items, conversations, items, responses

_tenant: Final = bindparam("tenant", type_=String)
_conversation: Final = bindparam("conversation", type_=String)
_count: Final = bindparam("count", type_=Integer)

_this = and_(conversations.c.tenant_id == _tenant, conversations.c.id == _conversation)
_live = and_(_this, conversations.c.deleted_at.is_(None))
_its_items = and_(
    conversation_items.c.tenant_id == _tenant,
    conversation_items.c.conversation_id == _conversation,
)
_its_live_items = and_(_its_items, conversation_items.c.deleted_at.is_(None))
"""The conversation's items, without the tombstones deleted items leave."""
_holder_ended = exists(
    select(literal_column("1", Integer)).where(
        responses.c.tenant_id == _tenant,
        responses.c.id == conversations.c.active_response_id,
        responses.c.status.not_in([literal_column("'queued'"), literal_column("'in_progress'")]),
    )
)
_free = or_(conversations.c.active_response_id.is_(None), _holder_ended)
"""No turn holds the conversation (or only one that has ended)."""

INSERT_CONVERSATION: Final[Insert] = insert(conversations)
INSERT_ITEMS: Final[Insert] = insert(conversation_items)

SELECT_CONVERSATION: Final[Select[float, str]] = select(
    conversations.c.created_at, conversations.c.metadata
).where(_live)

CONVERSATION_IS_LIVE: Final[Select[int]] = select(literal_column("1", Integer)).where(_live)

CONVERSATION_DELETED_AT: Final[Select[float | None]] = select(conversations.c.deleted_at).where(
    _this
)
"""Why a write was refused: no row (unknown), a time (deleted), or NULL (held by a turn)."""

UPDATE_METADATA: Final = (
    update(conversations)
    .where(_live)
    .values(metadata=bindparam("new_metadata"))
    .returning(conversations.c.created_at)
)

SOFT_DELETE: Final[Update] = update(conversations).where(_live).values(deleted_at=bindparam("now"))
"""Hides the conversation (a 404 everywhere); a turn holding it still ends on its row. A
sweep erases it later, with its items (:class:`~.retention.SqlConversationPurger`)."""

CLAIM: Final[Update] = (
    update(conversations)
    .where(_live, conversations.c.next_position == bindparam("seen", type_=Integer), _free)
    .values(active_response_id=bindparam("response", type_=String))
)


def _values(table: Any) -> dict[str, Any]:
    """A bind parameter per column of ``table``, named and typed after it."""
    return {column.name: bindparam(column.name, type_=column.type) for column in table.c}


def _insert_if(table: Any, values: dict[str, Any], condition: ColumnElement[bool]) -> Insert:
    """Insert one row of ``values`` when ``condition`` holds (nothing otherwise)."""
    return insert(table).from_select(list(values), select(*values.values()).where(condition))


_turn_response = _values(responses)
INSERT_TURN_RESPONSE: Final = _insert_if(
    responses,
    _turn_response,
    exists(
        select(literal_column("1", Integer)).where(
            conversations.c.tenant_id == _turn_response["tenant_id"],
            conversations.c.id == bindparam("conversation_id", type_=String),
            conversations.c.active_response_id == _turn_response["id"],
        )
    ),
)
"""A turn's in-progress row (a response row plus ``conversation_id``), if it holds the
conversation."""

_turn_item = _values(items)
INSERT_TURN_ITEMS: Final = _insert_if(
    items,
    _turn_item,
    exists(
        select(literal_column("1", Integer)).where(
            responses.c.tenant_id == _turn_item["tenant_id"],
            responses.c.id == _turn_item["response_id"],
        )
    ),
)
"""A turn's input items (item rows), if its row went in."""

_appended = {
    name: value for name, value in _values(conversation_items).items() if name != "deleted_at"
}
_offset = bindparam("offset", type_=Integer)
_held = conversation_items.alias("held")
_id_taken = exists(
    select(literal_column("1", Integer)).where(
        _held.c.tenant_id == _appended["tenant_id"],
        _held.c.conversation_id == _appended["conversation_id"],
        _held.c.item_id == _appended["item_id"],
    )
)


def _appended_row(position: ColumnElement[int]) -> list[ColumnElement[Any]]:
    """An appended item's columns at ``position``: the fresh id (and body) when the
    conversation has the given one."""
    fresh_id = bindparam("fresh_id", type_=String)
    fresh_body = bindparam("fresh_body", type_=conversation_items.c.body.type)
    chosen = {
        "position": position,
        "item_id": case((_id_taken, fresh_id), else_=_appended["item_id"]),
        "body": case((_id_taken, fresh_body), else_=_appended["body"]),
    }
    return [chosen.get(name, value) for name, value in _appended.items()]


APPEND_TURN_ITEMS: Final = insert(conversation_items).from_select(
    list(_appended),
    select(*_appended_row(conversations.c.next_position + _offset)).where(
        conversations.c.tenant_id == _appended["tenant_id"],
        conversations.c.id == _appended["conversation_id"],
        conversations.c.deleted_at.is_(None),
        conversations.c.active_response_id == _appended["response_id"],
    ),
)
"""A turn's item at ``next_position + offset``, if the turn holds the (live) conversation."""

APPEND_ITEMS: Final = insert(conversation_items).from_select(
    list(_appended),
    select(*_appended_row(bindparam("start", type_=Integer) + _offset)),
)
"""An item at ``start + offset``, positions :data:`RESERVE` made room for."""

END_TURN: Final[Update] = (
    update(conversations)
    .where(_this, conversations.c.active_response_id == bindparam("response", type_=String))
    .values(next_position=conversations.c.next_position + _count, active_response_id=null())
)
"""Let go of the conversation and move past the turn's ``count`` items; nothing when the
turn no longer holds it."""

RESERVE: Final = (
    update(conversations)
    .where(_live, _free)
    .values(next_position=conversations.c.next_position + _count)
    .returning(conversations.c.next_position)
)
"""Room for ``count`` items appended outside a turn; refused while a turn holds it."""

ITEMS_BETWEEN: Final[Select[str]] = (
    select(conversation_items.c.body)
    .where(
        _its_items,
        conversation_items.c.position >= bindparam("start", type_=Integer),
        conversation_items.c.position < bindparam("end", type_=Integer),
    )
    .order_by(conversation_items.c.position)
)
"""The items at positions ``start`` to ``end`` (excluded): an append's, as stored."""

_by_turn = conversation_items.alias("by_turn")  # an alias: not correlated to the outer one
_last_turn = (
    select(_by_turn.c.response_id)
    .where(
        _by_turn.c.tenant_id == _tenant,
        _by_turn.c.conversation_id == _conversation,
        _by_turn.c.response_id.is_not(None),
    )
    .order_by(_by_turn.c.position.desc())
    .limit(1)
    .scalar_subquery()
)
_last_served_by = (
    select(responses.c.served_by)
    .where(responses.c.tenant_id == _tenant, responses.c.id == _last_turn)
    .scalar_subquery()
)
"""The candidate that served the last turn whose items the conversation holds: a
backward scan of its items' primary key to the first one a turn appended, then that
response's primary key. Uncorrelated, so both databases evaluate it once."""

LOAD_ITEMS: Final[Select[int, str | None, str | None, str | None]] = (
    select(
        conversations.c.next_position,
        conversation_items.c.body,
        _last_served_by.label("served_by"),
        _last_turn.label("last_turn"),
    )
    .select_from(
        conversations.outerjoin(
            conversation_items,
            and_(
                conversation_items.c.tenant_id == conversations.c.tenant_id,
                conversation_items.c.conversation_id == conversations.c.id,
                conversation_items.c.deleted_at.is_(None),
            ),
        )
    )
    .where(_live)
    .order_by(conversation_items.c.position)
)
"""The conversation's length, items, and last turn (its response, a Messages thread's
latest, and that response's ``served_by``, a turn's cache affinity hint) in one statement
(one snapshot); a conversation without items yields one row with a NULL body, an unknown
one none."""

_of_live_conversation = exists(select(literal_column("1", Integer)).where(_live))


def _not_indexed(position: ColumnElement[int]) -> ColumnElement[int]:
    """``position`` as no index holds it (``position + 0``), where an item is looked up by
    id: SQLite, which has no statistics (nothing runs ``ANALYZE``), would otherwise walk
    the conversation's primary key in position order up to the item, reading every item
    before it (``min(position)``, or ``ORDER BY position LIMIT 1``, read off that index),
    instead of finding the id in its index. PostgreSQL looks the id up either way."""
    return position + literal_column("0", Integer)


_the_item = and_(
    _its_live_items, conversation_items.c.item_id == bindparam("item"), _of_live_conversation
)

SELECT_ITEM: Final[Select[str]] = (
    select(conversation_items.c.body)
    .where(_the_item)
    .order_by(_not_indexed(conversation_items.c.position))
    .limit(1)
)

DELETE_ITEM: Final[Update] = (
    update(conversation_items).where(_the_item).values(deleted_at=bindparam("now"), body="")
)
"""Leaves a tombstone: the body is gone, the id and position stay (see :func:`_items_page`)."""


def _items_page(order: Literal["asc", "desc"], *, after: bool) -> Select[str]:
    """``limit`` items in ``order``, after the item whose id is ``after`` when given (none
    when the conversation has no such item: the bound is NULL). The cursor may name a
    deleted item: its tombstone keeps its position, so a client deleting the items it
    pages through still gets the next page."""
    ascending = order == "asc"
    position = conversation_items.c.position
    page = (
        select(conversation_items.c.body)
        .where(_its_live_items)
        .order_by(position if ascending else position.desc())
        .limit(bindparam("limit", type_=Integer))
    )
    if not after:
        return page
    marked = conversation_items.alias("cursor_item")
    cursor_position = _not_indexed(marked.c.position)
    bound = (
        select(func.min(cursor_position) if ascending else func.max(cursor_position))
        .where(
            marked.c.tenant_id == _tenant,
            marked.c.conversation_id == _conversation,
            marked.c.item_id == bindparam("after"),
        )
        .scalar_subquery()
    )
    return page.where(position > bound if ascending else position < bound)


ITEMS_PAGE: Final = {
    (order, after): _items_page(order, after=after)
    for order in ("asc", "desc")
    for after in (False, True)
}
"""Keyed by ``(order, whether there is an `after` cursor)``."""
