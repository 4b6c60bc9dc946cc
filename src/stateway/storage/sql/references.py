"""The statements that resolve ``item_reference`` input items: one row per named id.

An id can be stored many times: a client that resends its history with ``store: true``
stores the same input items with every response, and items added to a conversation keep
their ids, so one item can sit in many conversations. Each statement answers one row per
id whatever the number of copies: it ranks the copies on keys and times and reads the
winner's body alone. The database still visits every copy (100,000 copies of one id take
about 340 ms on PostgreSQL, 540 ms on SQLite); only an index ordered by time could stop at
the first live one.

The winner is the copy in the latest response (or the conversation where it was appended
latest). Within one response, the first copy wins: the only items that share an id there
are those whose ``id`` names another item (a ``local_shell_call_output`` carries its
call's), and a reference to that id means the item that owns it, the call. Within one
conversation no two items share an id (a unique index).

Bind parameters: ``tenant``, and ``ids`` (an expanding list).
"""

from __future__ import annotations

from typing import Final

from sqlalchemy import (
    ColumnElement,
    String,
    Table,
    and_,
    bindparam,
    func,
    literal_column,
    select,
)
from sqlalchemy.sql import Select

from stateway.storage.sql.schema import (
    INPUT,
    OUTPUT,
    conversation_items,
    conversations,
    items,
    responses,
)

_tenant: Final = bindparam("tenant", type_=String)


def _one_per_id(
    table: Table,
    scope: ColumnElement[str],
    created_at: ColumnElement[float],
    where: ColumnElement[bool],
    *same_row: ColumnElement[bool],
) -> Select[str, str]:
    """``(item_id, body)`` of ``table``'s winning copy of each named id among the rows
    ``where`` selects: the first in its ``scope`` (a response, a conversation), of the
    scope whose copy is the latest (by ``created_at``). ``same_row``: what else, beside
    the tenant, the scope and the position, picks the winner's row out of ``table``."""
    item_id, position = table.c.item_id, table.c.position
    # Materialized, so that the copies are found by the index on the id: left to itself,
    # SQLite (which keeps no statistics) scans the tenant's rows in key order to spare the
    # windows a sort, when one id is named.
    matches = (
        select(
            item_id.label("item_id"),
            scope.label("scope"),
            position.label("position"),
            created_at.label("created_at"),
        )
        .where(where, item_id.in_(bindparam("ids", expanding=True)))
        .cte("matches")
        .prefix_with("MATERIALIZED")
    )
    in_scope = func.row_number().over(
        partition_by=(matches.c.item_id, matches.c.scope), order_by=matches.c.position
    )
    copies = select(*matches.c, in_scope.label("in_scope")).subquery("copies")
    rank = func.row_number().over(
        partition_by=copies.c.item_id,
        order_by=(copies.c.created_at.desc(), copies.c.scope.desc()),
    )
    ranked = (
        select(copies.c.item_id, copies.c.scope, copies.c.position, rank.label("rank"))
        .where(copies.c.in_scope == 1)
        .subquery("ranked")
    )
    winner = (
        select(ranked.c.item_id, ranked.c.scope, ranked.c.position)
        .where(ranked.c.rank == 1)
        .subquery("winner")
    )
    return select(winner.c.item_id, table.c.body).join_from(
        winner,
        table,
        and_(
            table.c.tenant_id == _tenant,
            scope == winner.c.scope,
            position == winner.c.position,
            *same_row,
        ),
    )


def _find_items(role: str) -> Select[str, str]:
    """Items of ``role`` of live responses, found by the partial index of that role's
    items (``ix_items_output_item``, ``ix_items_input_item``; the role a literal, so that
    the index serves it)."""
    the_role: ColumnElement[str] = literal_column(f"'{role}'")
    live = and_(
        items.c.tenant_id == _tenant,
        items.c.role == the_role,
        responses.c.tenant_id == items.c.tenant_id,
        responses.c.id == items.c.response_id,
        responses.c.deleted_at.is_(None),
    )
    return _one_per_id(
        items, items.c.response_id, responses.c.created_at, live, items.c.role == the_role
    )


FIND_OUTPUT_ITEMS: Final = _find_items(OUTPUT)
FIND_INPUT_ITEMS: Final = _find_items(INPUT)

FIND_CONVERSATION_ITEMS: Final = _one_per_id(
    conversation_items,
    conversation_items.c.conversation_id,
    conversation_items.c.created_at,
    and_(
        conversation_items.c.tenant_id == _tenant,
        conversation_items.c.deleted_at.is_(None),
        conversations.c.tenant_id == conversation_items.c.tenant_id,
        conversations.c.id == conversation_items.c.conversation_id,
        conversations.c.deleted_at.is_(None),
    ),
)
"""Live items of live conversations, in any of the tenant's conversations; found by the
conversation items' index, which leads with the item id."""

FIND_ITEMS: Final = (FIND_OUTPUT_ITEMS, FIND_INPUT_ITEMS, FIND_CONVERSATION_ITEMS)
"""Where :meth:`~.store.SqlResponseStore.find_items` looks, in order of precedence (see
:meth:`~stateway.core.ports.ResponseStore.find_items`): responses' output items, their
input items, then the items of conversations."""
