"""In-memory conversations: the ConversationStore port, and a MemoryStore whose turn
writes take, extend and let go of them (the SQL store's rules, without SQL)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal

from stateway.core.conversations.ports import Conversation, ConversationItems
from stateway.core.errors import ConversationLocked, ConversationNotFound, StorageError
from stateway.core.items import Item, new_item_id
from stateway.core.ports import ItemPage, ResponseRecord
from tests.core.fakes import MemoryStore

_UNFINISHED = ("queued", "in_progress")


@dataclass
class _Stored:
    conversation: Conversation
    items: list[Item] = field(default_factory=list)
    next_position: int = 0
    holder: str | None = None
    last_turn: str | None = None
    """The last turn that appended items."""
    deleted: set[str] = field(default_factory=set)
    """The ids of deleted items, never given again (as their tombstones keep them)."""


class MemoryConversations:
    def __init__(self) -> None:
        self.stored: dict[tuple[str, str], _Stored] = {}
        self.responses: MemoryStore | None = None
        """The store whose records decide whether a holder has ended."""

    def live(self, tenant_id: str, conversation_id: str) -> _Stored | None:
        return self.stored.get((tenant_id, conversation_id))

    def free(self, stored: _Stored) -> bool:
        if stored.holder is None:
            return True
        assert self.responses is not None
        holder = self.responses.records.get((stored.conversation.tenant_id, stored.holder))
        return holder is not None and holder.status not in _UNFINISHED

    def append(self, stored: _Stored, items: list[Item]) -> list[Item]:
        taken = {item["id"] for item in stored.items} | stored.deleted
        added = []
        for item in items:
            if not item.get("id") or item["id"] in taken:
                item = {**item, "id": new_item_id(item.get("type"))}
            taken.add(item["id"])
            added.append(item)
        stored.items += added
        stored.next_position += len(added)
        return added

    async def create(self, conversation: Conversation, items: list[Item]) -> None:
        stored = _Stored(conversation)
        self.stored[(conversation.tenant_id, conversation.id)] = stored
        self.append(stored, items)

    async def get(self, tenant_id: str, conversation_id: str) -> Conversation | None:
        stored = self.live(tenant_id, conversation_id)
        return None if stored is None else stored.conversation

    async def update(
        self, tenant_id: str, conversation_id: str, metadata: dict[str, str]
    ) -> Conversation | None:
        stored = self.live(tenant_id, conversation_id)
        if stored is None:
            return None
        c = stored.conversation
        stored.conversation = Conversation(c.tenant_id, c.id, c.created_at, metadata)
        return stored.conversation

    async def delete(self, tenant_id: str, conversation_id: str) -> bool:
        return self.stored.pop((tenant_id, conversation_id), None) is not None

    async def add_items(
        self, tenant_id: str, conversation_id: str, items: list[Item]
    ) -> list[Item] | None:
        stored = self.live(tenant_id, conversation_id)
        if stored is None:
            return None
        if not self.free(stored):
            raise ConversationLocked()
        return self.append(stored, items)

    async def load_items(self, tenant_id: str, conversation_id: str) -> ConversationItems | None:
        stored = self.live(tenant_id, conversation_id)
        if stored is None:
            return None
        served_by = None
        if stored.last_turn is not None and self.responses is not None:
            turn = self.responses.records.get((tenant_id, stored.last_turn))
            served_by = None if turn is None else turn.served_by
        return ConversationItems(
            list(stored.items), stored.next_position, served_by, stored.last_turn
        )

    async def list_items(
        self,
        tenant_id: str,
        conversation_id: str,
        *,
        after: str | None,
        limit: int,
        order: Literal["asc", "desc"],
    ) -> ItemPage | None:
        stored = self.live(tenant_id, conversation_id)
        if stored is None:
            return None
        items = stored.items if order == "asc" else stored.items[::-1]
        if after is not None:
            ids = [item["id"] for item in items]
            items = items[ids.index(after) + 1 :] if after in ids else []
        return ItemPage(items[:limit], len(items) > limit)

    async def get_item(self, tenant_id: str, conversation_id: str, item_id: str) -> Item | None:
        stored = self.live(tenant_id, conversation_id)
        found = [] if stored is None else [i for i in stored.items if i["id"] == item_id]
        return found[0] if found else None

    async def delete_item(self, tenant_id: str, conversation_id: str, item_id: str) -> bool:
        stored = self.live(tenant_id, conversation_id)
        if stored is None or not any(i["id"] == item_id for i in stored.items):
            return False
        stored.items = [i for i in stored.items if i["id"] != item_id]
        stored.deleted.add(item_id)
        return True


class TurnStore(MemoryStore):
    """A MemoryStore whose turns go through ``conversations``; ``failing_finishes`` makes
    that many ``finish`` calls raise :class:`StorageError` first."""

    def __init__(self, conversations: MemoryConversations, **options: Any) -> None:
        super().__init__(**options)
        self.conversations = conversations
        conversations.responses = self
        self.failing_finishes = 0
        self.finishes: list[ResponseRecord] = []

    async def save(self, record: ResponseRecord) -> None:
        turn = record.turn
        if turn is None:
            await super().save(record)
            return
        stored = self.conversations.live(record.tenant_id, turn.conversation_id)
        if stored is None:
            raise ConversationNotFound(turn.conversation_id, param="conversation")
        if not self.conversations.free(stored) or stored.next_position != turn.seen:
            raise ConversationLocked()
        await super().save(record)
        stored.holder = record.id

    async def find_items(self, tenant_id: str, item_ids: list[str]) -> dict[str, Item]:
        """A response's items first, then the latest conversation's (deleted ones are
        gone from ``conversations``)."""
        found = await super().find_items(tenant_id, item_ids)
        for (tenant, _), stored in reversed(self.conversations.stored.items()):
            for item in reversed(stored.items) if tenant == tenant_id else []:
                if item["id"] in item_ids and item["id"] not in found:
                    found[item["id"]] = item
        return found

    async def finish(self, record: ResponseRecord) -> bool:
        self.finishes.append(record)
        if self.failing_finishes:
            self.failing_finishes -= 1
            raise StorageError("Storage failed while saving a response.")
        if not await super().finish(record):
            return False
        turn = record.turn
        if turn is None:
            return True
        stored = self.conversations.live(record.tenant_id, turn.conversation_id)
        if stored is not None and stored.holder == record.id:
            stored.holder = None
            self.conversations.append(stored, turn.items)
            if turn.items:
                stored.last_turn = record.id
        return True
