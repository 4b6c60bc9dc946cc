"""``SqlConversationStore``: the :class:`~stateway.core.conversations.ports.ConversationStore`
port over SQL.

It shares the engine of the :class:`~stateway.storage.sql.store.SqlResponseStore` it is
built from (which owns and disposes it): a turn's own writes go through that store's
group committer, with its response rows. Each write here is one transaction of its own
on that engine (as a response's delete is: on SQLite, beside the writer's connection), a
lasting refusal it meets kept for that store's ping (its ``refusals``);
reads run as in the response store (autocommit on PostgreSQL), and a conversation's items
are read for a turn in a single statement, so they match the length read with them.
Metadata travels as JSON text.
"""

from __future__ import annotations

import time
from typing import Any, Literal

import orjson

from stateway.core.conversations.ports import Conversation, ConversationItems
from stateway.core.errors import ConversationNotFound
from stateway.core.items import Item
from stateway.core.ports import ItemPage
from stateway.storage.sql import conversation_queries as q
from stateway.storage.sql.conversation_rows import appended_rows, refusal
from stateway.storage.sql.errors import storage_errors
from stateway.storage.sql.store import SqlResponseStore


class SqlConversationStore:
    def __init__(self, responses: SqlResponseStore) -> None:
        self._engine = responses.engine
        self._reader = responses.reader
        self._refusals = responses.refusals

    async def create(self, conversation: Conversation, items: list[Item]) -> None:
        row = {
            "tenant_id": conversation.tenant_id,
            "id": conversation.id,
            "created_at": conversation.created_at,
            "deleted_at": None,
            "metadata": _dumps(conversation.metadata),
            "next_position": len(items),
            "active_response_id": None,
        }
        appended = appended_rows(conversation.tenant_id, conversation.id, items, start=0)
        with storage_errors("creating a conversation", self._refusals):
            async with self._engine.begin() as connection:
                await connection.execute(q.INSERT_CONVERSATION, row)
                if appended:
                    await connection.execute(q.APPEND_ITEMS, appended)

    async def get(self, tenant_id: str, conversation_id: str) -> Conversation | None:
        if not _storable(conversation_id):
            return None
        with storage_errors("reading a conversation"):
            async with self._reader.connect() as connection:
                result = await connection.execute(
                    q.SELECT_CONVERSATION, _key(tenant_id, conversation_id)
                )
                row = result.one_or_none()
        if row is None:
            return None
        return Conversation(tenant_id, conversation_id, row.created_at, orjson.loads(row.metadata))

    async def update(
        self, tenant_id: str, conversation_id: str, metadata: dict[str, str]
    ) -> Conversation | None:
        if not _storable(conversation_id):
            return None
        values = {**_key(tenant_id, conversation_id), "new_metadata": _dumps(metadata)}
        with storage_errors("updating a conversation", self._refusals):
            async with self._engine.begin() as connection:
                created_at = (await connection.execute(q.UPDATE_METADATA, values)).scalar()
        if created_at is None:
            return None
        return Conversation(tenant_id, conversation_id, created_at, metadata)

    async def delete(self, tenant_id: str, conversation_id: str) -> bool:
        if not _storable(conversation_id):
            return False
        values = {**_key(tenant_id, conversation_id), "now": time.time()}
        with storage_errors("deleting a conversation", self._refusals):
            async with self._engine.begin() as connection:
                result = await connection.execute(q.SOFT_DELETE, values)
        return result.rowcount == 1

    async def add_items(
        self, tenant_id: str, conversation_id: str, items: list[Item]
    ) -> list[Item] | None:
        if not _storable(conversation_id):
            return None
        key = _key(tenant_id, conversation_id)
        with storage_errors("adding conversation items", self._refusals):
            async with self._engine.begin() as connection:
                end = (await connection.execute(q.RESERVE, {**key, "count": len(items)})).scalar()
                if end is None:
                    refused = await refusal(connection, tenant_id, conversation_id)
                    if isinstance(refused, ConversationNotFound):
                        return None
                    raise refused
                start = end - len(items)
                rows = appended_rows(tenant_id, conversation_id, items, start=start)
                if rows:
                    await connection.execute(q.APPEND_ITEMS, rows)
                stored = await connection.execute(
                    q.ITEMS_BETWEEN, {**key, "start": start, "end": end}
                )
                bodies = stored.scalars().all()
        return [orjson.loads(body) for body in bodies]

    async def load_items(self, tenant_id: str, conversation_id: str) -> ConversationItems | None:
        if not _storable(conversation_id):
            return None
        with storage_errors("loading a conversation"):
            async with self._reader.connect() as connection:
                result = await connection.execute(q.LOAD_ITEMS, _key(tenant_id, conversation_id))
                rows = result.all()
        if not rows:
            return None
        items = [orjson.loads(row.body) for row in rows if row.body is not None]
        first = rows[0]
        return ConversationItems(items, first.next_position, first.served_by, first.last_turn)

    async def list_items(
        self,
        tenant_id: str,
        conversation_id: str,
        *,
        after: str | None,
        limit: int,
        order: Literal["asc", "desc"],
    ) -> ItemPage | None:
        """``limit`` must be positive."""
        if limit < 1:
            raise ValueError(f"limit must be positive, not {limit}")
        if not _storable(conversation_id):
            return None
        values: dict[str, Any] = {**_key(tenant_id, conversation_id), "limit": limit + 1}
        if after is not None:
            values["after"] = after
        with storage_errors("listing conversation items"):
            async with self._reader.connect() as connection:
                live = await connection.execute(q.CONVERSATION_IS_LIVE, values)
                if live.first() is None:
                    return None
                if after is not None and not _storable(after):
                    return ItemPage(items=[], has_more=False)
                page = q.ITEMS_PAGE[order, after is not None]
                bodies = (await connection.execute(page, values)).scalars().all()
        return ItemPage(
            items=[orjson.loads(body) for body in bodies[:limit]], has_more=len(bodies) > limit
        )

    async def get_item(self, tenant_id: str, conversation_id: str, item_id: str) -> Item | None:
        if not (_storable(conversation_id) and _storable(item_id)):
            return None
        values = {**_key(tenant_id, conversation_id), "item": item_id}
        with storage_errors("reading a conversation item"):
            async with self._reader.connect() as connection:
                body = (await connection.execute(q.SELECT_ITEM, values)).scalar()
        return None if body is None else orjson.loads(body)

    async def delete_item(self, tenant_id: str, conversation_id: str, item_id: str) -> bool:
        if not (_storable(conversation_id) and _storable(item_id)):
            return False
        values = {**_key(tenant_id, conversation_id), "item": item_id, "now": time.time()}
        with storage_errors("deleting a conversation item", self._refusals):
            async with self._engine.begin() as connection:
                result = await connection.execute(q.DELETE_ITEM, values)
        return result.rowcount > 0


def _key(tenant_id: str, conversation_id: str) -> dict[str, Any]:
    return {"tenant": tenant_id, "conversation": conversation_id}


def _dumps(value: Any) -> str:
    return orjson.dumps(value).decode()


def _storable(key: str) -> bool:
    """PostgreSQL text refuses NUL; no stored id contains one, so such a key matches
    nothing."""
    return "\x00" not in key
