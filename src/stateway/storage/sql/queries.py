"""Every statement the store runs, built once at import.

Statements are module-level SQLAlchemy Core constructs with named bind parameters, so a
call only binds values: SQLAlchemy finds the compiled form in the engine's statement cache
and asyncpg reuses its prepared statement. Each statement filters on ``tenant_id``.

Bind parameters: ``tenant``, ``response`` and, per statement, ``now`` (soft delete),
``after`` and ``limit`` (input item pages), ``after`` (a sequence number, reading an event
log), ``new_status``, ``new_body``, ``new_served_by``, ``new_model``,
``new_input_tokens`` and ``new_output_tokens`` (finishing a response); they are not named
after columns, which an UPDATE reserves for its SET clause.

The chain query
---------------
:data:`LOAD_CONTEXT` assembles a conversation in one statement, whatever its length. A
recursive CTE walks ``previous_response_id`` links from the requested response upwards,
numbering each response by its distance (``depth``), and the result is joined to the
items of every response in the chain::

    WITH RECURSIVE chain(id, previous_response_id, status, served_by, depth) AS (
        SELECT id, previous_response_id, status, served_by, 0 FROM responses
         WHERE tenant_id = :tenant AND id = :response AND deleted_at IS NULL
        UNION ALL
        SELECT parent.id, parent.previous_response_id, parent.status, parent.served_by,
               chain.depth + 1
          FROM responses AS parent, chain
         WHERE parent.tenant_id = :tenant AND parent.id = chain.previous_response_id
           AND chain.depth < 10000
    )
    SELECT items.body, chain.status, chain.served_by FROM chain LEFT OUTER JOIN items
        ON items.tenant_id = :tenant AND items.response_id = chain.id
           AND (items.role = 'input' OR chain.status != 'failed')
     ORDER BY chain.depth DESC, items.role, items.position

Oldest response first; within a response ``'input' < 'output'`` puts its input items
before its output items. A ``failed`` response contributes its input only: its output was
cut off mid-way and must not reach the model as a finished turn. The last row carries the
requested response's own status (the caller refuses to continue one still in progress)
and the candidate that served it (a continuation's cache affinity hint, at no extra cost).

Only the starting response must be live: deleted ancestors still
contribute their items. A missing ancestor row ends the walk (its descendants' items are
returned), and the depth bound stops a corrupt cycle from recursing forever. The outer
join yields one row with a NULL body for a response without items, so an empty result
means exactly "no such live response" while a chain without items yields NULL rows only.
Both joins are primary-key lookups.
"""

from __future__ import annotations

from typing import Final, Literal

from sqlalchemy import (
    Boolean,
    Integer,
    String,
    and_,
    bindparam,
    delete,
    exists,
    func,
    insert,
    literal_column,
    or_,
    select,
    text,
    update,
)
from sqlalchemy.sql import Delete, Insert, Select, Update

from stateway.storage.sql.schema import (
    ERASED,
    IN_PROGRESS_WHERE,
    INPUT,
    OUTPUT,
    items,
    response_events,
    responses,
    write_probes,
)

MAX_CHAIN_DEPTH: Final = 10_000
"""Responses followed by :data:`LOAD_CONTEXT` before it stops; only a cycle (corrupt data)
gets near it: a real conversation overflows any context window long before."""

_tenant: Final = bindparam("tenant", type_=String)
_response: Final = bindparam("response", type_=String)

_live_response = and_(
    responses.c.tenant_id == _tenant,
    responses.c.id == _response,
    responses.c.deleted_at.is_(None),
)

_in_progress = text(IN_PROGRESS_WHERE)
"""Unfinished responses (``queued`` or ``in_progress``), in the very words of the partial
index's predicate: a literal, not bound values, so PostgreSQL matches the index."""

PING: Final[Select[int]] = select(literal_column("1", Integer))
READ_ONLY: Final[Select[bool]] = select(
    literal_column("current_setting('transaction_read_only') = 'on'", Boolean)
)
"""PostgreSQL's ping: whether this connection's transactions are read-only (a hot
standby's always are; so are a database's set ``default_transaction_read_only``)."""
INSERT_PROBE: Final[Insert] = insert(write_probes)
CLEAR_PROBES: Final[Delete] = delete(write_probes)

INSERT_RESPONSE: Final[Insert] = insert(responses)
INSERT_ITEMS: Final[Insert] = insert(items)

FINISH_RESPONSE: Final[Update] = (
    update(responses)
    .where(responses.c.tenant_id == _tenant, responses.c.id == _response, _in_progress)
    .values(
        status=bindparam("new_status"),
        body=bindparam("new_body"),
        served_by=bindparam("new_served_by"),
        model=bindparam("new_model"),
        input_tokens=bindparam("new_input_tokens"),
        output_tokens=bindparam("new_output_tokens"),
    )
)
"""A run's end over its in-progress row; ``deleted_at`` is left as it is, so a response
deleted while it ran stays deleted."""

SELECT_IN_PROGRESS: Final[Select[str, str, str | None, str, float, str, str | None]] = select(
    responses.c.tenant_id,
    responses.c.id,
    responses.c.previous_response_id,
    responses.c.status,
    responses.c.created_at,
    responses.c.body,
    responses.c.owner,
).where(_in_progress)

SELECT_RESPONSE: Final[Select[str | None, str, float, str]] = select(
    responses.c.previous_response_id,
    responses.c.status,
    responses.c.created_at,
    responses.c.body,
).where(_live_response)

RESPONSE_IS_LIVE: Final[Select[int]] = select(literal_column("1", Integer)).where(_live_response)

SELECT_OUTPUT_ITEMS: Final[Select[str]] = (
    select(items.c.body)
    .where(
        items.c.tenant_id == _tenant,
        items.c.response_id == _response,
        items.c.role == OUTPUT,
    )
    .order_by(items.c.position)
)

_event = {column.name: bindparam(column.name, type_=column.type) for column in response_events.c}
INSERT_EVENTS: Final[Insert] = insert(response_events).from_select(
    list(_event),
    select(*_event.values()).where(
        ~exists(
            select(literal_column("1", Integer)).where(
                responses.c.tenant_id == _event["tenant_id"],
                responses.c.id == _event["response_id"],
                responses.c.status == literal_column(f"'{ERASED}'"),
            )
        )
    ),
)
"""A batch of a response's event log, unless a sweep erased the response: a log kept
after the run's end (a WebSocket run's, its connection closing with frames unsent) is
written late, and would otherwise outlive the erasure, out of every later sweep's
reach. One of no response at all still fails on the foreign key."""

_events_of_response = and_(
    response_events.c.tenant_id == _tenant, response_events.c.response_id == _response
)

SELECT_EVENT_LOG_HEAD: Final[Select[str, str]] = select(responses.c.status, responses.c.body).where(
    _live_response
)
"""A live response's status and body, read before its log."""


def _select_events() -> Select[int, str]:
    """The batches of a response's log holding the events after ``after``: the one holding
    event ``after + 1`` (the last one starting at or before it) and every later one. Two
    range scans of the primary key."""
    first = bindparam("after", type_=Integer) + literal_column("1", Integer)
    holding = (
        select(func.max(response_events.c.sequence_number))
        .where(_events_of_response, response_events.c.sequence_number <= first)
        .scalar_subquery()
    )
    return (
        select(response_events.c.sequence_number, response_events.c.body)
        .where(
            _events_of_response,
            response_events.c.sequence_number >= func.coalesce(holding, literal_column("0")),
        )
        .order_by(response_events.c.sequence_number)
    )


SELECT_EVENTS: Final = _select_events()

SOFT_DELETE: Final[Update] = (
    update(responses).where(_live_response).values(deleted_at=bindparam("now"))
)


def _load_context() -> Select[str | None, str, str | None]:
    anchor = (
        select(
            responses.c.id,
            responses.c.previous_response_id,
            responses.c.status,
            responses.c.served_by,
            literal_column("0", Integer).label("depth"),
        )
        .where(_live_response)
        .cte("chain", recursive=True)
    )
    parent = responses.alias("parent")
    chain = anchor.union_all(
        select(
            parent.c.id,
            parent.c.previous_response_id,
            parent.c.status,
            parent.c.served_by,
            anchor.c.depth + literal_column("1", Integer),
        ).where(
            parent.c.tenant_id == _tenant,
            parent.c.id == anchor.c.previous_response_id,
            anchor.c.depth < literal_column(str(MAX_CHAIN_DEPTH), Integer),
        )
    )
    joined = chain.outerjoin(
        items,
        and_(
            items.c.tenant_id == _tenant,
            items.c.response_id == chain.c.id,
            or_(items.c.role == INPUT, chain.c.status != literal_column("'failed'")),
        ),
    )
    return (
        select(items.c.body, chain.c.status, chain.c.served_by)
        .select_from(joined)
        .order_by(chain.c.depth.desc(), items.c.role, items.c.position)
    )


LOAD_CONTEXT: Final = _load_context()


def _input_items_page(order: Literal["asc", "desc"], *, after: bool) -> Select[str]:
    """A page of input items, ``limit`` rows, optionally after the ``after`` cursor.

    The cursor is the first item, in this order, whose ``item_id`` is ``after``; when no
    item has that id, the bound is NULL and the page is empty.
    """
    ascending = order == "asc"
    position = items.c.position
    page = (
        select(items.c.body)
        .where(
            items.c.tenant_id == _tenant, items.c.response_id == _response, items.c.role == INPUT
        )
        .order_by(position if ascending else position.desc())
        .limit(bindparam("limit", type_=Integer))
    )
    if not after:
        return page
    marked = items.alias("cursor_item")  # an alias: the same table would be correlated away
    first_marked = select(
        func.min(marked.c.position) if ascending else func.max(marked.c.position)
    ).where(
        marked.c.tenant_id == _tenant,
        marked.c.response_id == _response,
        marked.c.role == INPUT,
        marked.c.item_id == bindparam("after"),
    )
    bound = first_marked.scalar_subquery()
    return page.where(position > bound if ascending else position < bound)


INPUT_ITEMS_PAGE: Final = {
    ("asc", False): _input_items_page("asc", after=False),
    ("asc", True): _input_items_page("asc", after=True),
    ("desc", False): _input_items_page("desc", after=False),
    ("desc", True): _input_items_page("desc", after=True),
}
"""Keyed by ``(order, whether there is an `after` cursor)``."""
