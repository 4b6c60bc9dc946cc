"""The parameter rows of conversation writes (see :mod:`.conversation_queries`), and why a
conversation refused one.

A turn's start adds a claim and its row to the batch that writes it; its end adds its
items and its release. Appended items keep their ``id`` unless they have none (or one the
column cannot hold: with a NUL in it, or too long to index) or repeat one earlier in the
same append, in which case they get a new gateway id of their type; each row also
carries a fresh id for the statement to take when the conversation already has the given
one, so no two items of a conversation share an id (a unique index holds
it). An item whose ``id`` is a reference (a ``local_shell_call_output``'s names its call)
given a new id keeps the reference as its ``call_id``, by which it still answers the call.
"""

from __future__ import annotations

import time
from typing import Any

import orjson
from sqlalchemy.ext.asyncio import AsyncConnection

from stateway.core.errors import ConversationLocked, ConversationNotFound, GatewayError
from stateway.core.items import ID_IS_REFERENCE, Item, new_item_id
from stateway.core.ports import ConversationTurn
from stateway.storage.sql import conversation_queries as q
from stateway.storage.sql.schema import indexable_id


def claim_row(tenant_id: str, response_id: str, turn: ConversationTurn) -> dict[str, Any]:
    return {
        "tenant": tenant_id,
        "conversation": turn.conversation_id,
        "response": response_id,
        "seen": turn.seen,
    }


def end_row(tenant_id: str, response_id: str, turn: ConversationTurn) -> dict[str, Any]:
    return {
        "tenant": tenant_id,
        "conversation": turn.conversation_id,
        "response": response_id,
        "count": len(turn.items),
    }


def appended_rows(
    tenant_id: str,
    conversation_id: str,
    items: list[Item],
    response_id: str | None = None,
    start: int | None = None,
) -> list[dict[str, Any]]:
    """Rows of :data:`~.conversation_queries.APPEND_TURN_ITEMS` (a turn's, with its
    ``response_id``) or, with ``start``, of :data:`~.conversation_queries.APPEND_ITEMS`."""
    now = time.time()
    given: set[str] = set()
    rows: list[dict[str, Any]] = []
    for offset, item in enumerate(items):
        item_id = item.get("id")
        if not indexable_id(item_id) or item_id in given:
            item = _renamed(item)
        given.add(item["id"])
        fresh = _renamed(item)
        row = {
            "tenant_id": tenant_id,
            "conversation_id": conversation_id,
            "offset": offset,
            "item_id": item["id"],
            "fresh_id": fresh["id"],
            "response_id": response_id,
            "created_at": now,
            "body": _dumps(item),
            "fresh_body": _dumps(fresh),
        }
        if start is not None:
            row["start"] = start
        rows.append(row)
    return rows


async def refusal(
    connection: AsyncConnection, tenant_id: str, conversation_id: str
) -> GatewayError:
    """Why a claim or a reserve on a conversation took nothing: it is unknown or deleted
    (404), or a turn holds it, or it changed under a turn (409)."""
    values = {"tenant": tenant_id, "conversation": conversation_id}
    row = (await connection.execute(q.CONVERSATION_DELETED_AT, values)).one_or_none()
    if row is None or row.deleted_at is not None:
        return ConversationNotFound(conversation_id, param="conversation")
    return ConversationLocked()


def _renamed(item: Item) -> Item:
    """``item`` under a new gateway id of its type; a reference ``id`` it had (and no
    ``call_id``) becomes its ``call_id``."""
    kind = item.get("type")
    renamed = {**item, "id": new_item_id(kind)}
    reference = item.get("id")
    if (
        kind in ID_IS_REFERENCE
        and isinstance(reference, str)
        and reference
        and not item.get("call_id")
    ):
        renamed["call_id"] = item["id"]
    return renamed


def _dumps(value: Any) -> str:
    return orjson.dumps(value).decode()
