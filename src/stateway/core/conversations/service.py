"""The conversation commands, and what a turn reads of its conversation.

Items added through the Conversations API get new gateway ids by type (``msg_``, ``fc_``,
...): the conversation makes them, whatever ``id`` the client sent. The one exception is
an item whose ``id`` names another item (``local_shell_call_output``, whose ``id`` is its
call's): it is kept, and refused when an item of the conversation has it
(:mod:`.item_ids`). Unknown conversations and items are 404s; a lookup that misses asks
once more which of the two is unknown, so the common path costs one read.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

from stateway.core.compaction.view import check_added
from stateway.core.context import check_added_answers, has_tool_items
from stateway.core.conversations.commands import (
    AddConversationItems,
    ConversationCommand,
    CreateConversation,
    DeleteConversation,
    DeleteConversationItem,
    GetConversation,
    GetConversationItem,
    ListConversationItems,
    UpdateConversation,
)
from stateway.core.conversations.item_ids import check_not_held, keeps_its_id
from stateway.core.conversations.ports import Conversation, ConversationItems, ConversationStore
from stateway.core.errors import ConversationNotFound, InvalidRequest, NotFound
from stateway.core.ids import new_id
from stateway.core.items import Item, new_item_id
from stateway.core.ports import ItemPage, Sealer


@dataclass(slots=True, frozen=True)
class ConversationDeleted:
    id: str


ConversationResult = Conversation | ConversationDeleted | ItemPage | Item


class Conversations:
    def __init__(self, store: ConversationStore, sealer: Sealer | None = None) -> None:
        self._store = store
        self._sealer = sealer
        """Verifies the seals on the compaction and reasoning items added (:func:`check_added`)."""

    async def execute(self, tenant_id: str, command: ConversationCommand) -> ConversationResult:
        match command:
            case CreateConversation(items=items, metadata=metadata):
                check_added_answers([], items)
                check_added(items, tenant_id, self._sealer)
                conversation = Conversation(tenant_id, new_id("conv"), time.time(), metadata)
                await self._store.create(conversation, with_new_ids(items))
                return conversation
            case GetConversation(conversation_id=conversation_id):
                return await self._get(tenant_id, conversation_id)
            case UpdateConversation(conversation_id=conversation_id, metadata=metadata):
                updated = await self._store.update(tenant_id, conversation_id, metadata)
                if updated is None:
                    raise ConversationNotFound(conversation_id)
                return updated
            case DeleteConversation(conversation_id=conversation_id):
                if not await self._store.delete(tenant_id, conversation_id):
                    raise ConversationNotFound(conversation_id)
                return ConversationDeleted(conversation_id)
            case AddConversationItems(conversation_id=conversation_id, items=items):
                check_added(items, tenant_id, self._sealer)
                if has_tool_items(items):  # what they answer is among the items before
                    await self._check_answers(tenant_id, conversation_id, items)
                added = await self._store.add_items(tenant_id, conversation_id, with_new_ids(items))
                if added is None:
                    raise ConversationNotFound(conversation_id)
                return ItemPage(added, has_more=False)
            case ListConversationItems():
                page = await self._store.list_items(
                    tenant_id,
                    command.conversation_id,
                    after=command.after,
                    limit=command.limit,
                    order=command.order,
                )
                if page is None:
                    raise ConversationNotFound(command.conversation_id)
                return page
            case GetConversationItem(conversation_id=conversation_id, item_id=item_id):
                item = await self._store.get_item(tenant_id, conversation_id, item_id)
                if item is None:
                    await self._get(tenant_id, conversation_id)
                    raise _item_not_found(item_id)
                return item
            case DeleteConversationItem(conversation_id=conversation_id, item_id=item_id):
                deleted = await self._store.delete_item(tenant_id, conversation_id, item_id)
                conversation = await self._get(tenant_id, conversation_id)
                if not deleted:
                    raise _item_not_found(item_id)
                return conversation

    async def context(
        self, tenant_id: str, conversation_id: str, param: str = "conversation"
    ) -> ConversationItems:
        """The items a turn of the conversation starts from, and its length then; an
        unknown conversation is a 404 naming ``param``."""
        loaded = await self._store.load_items(tenant_id, conversation_id)
        if loaded is None:
            raise ConversationNotFound(conversation_id, param=param)
        return loaded

    async def _check_answers(self, tenant_id: str, conversation_id: str, items: list[Item]) -> None:
        """Refuse tool outputs that answer no call of the conversation, and an output
        whose ``id`` (its call's) an item of the conversation has; but while a turn holds
        it (whose calls are not written yet), the turn's 409 comes first: appending
        nothing is refused as appending would be, and writes nothing."""
        before = await self.context(tenant_id, conversation_id, "conversation_id")
        try:
            check_added_answers(before.items, items)
            check_not_held(before.items, items, "items", only_kept=True)
        except InvalidRequest:
            await self._store.add_items(tenant_id, conversation_id, [])
            raise

    async def _get(self, tenant_id: str, conversation_id: str) -> Conversation:
        conversation = await self._store.get(tenant_id, conversation_id)
        if conversation is None:
            raise ConversationNotFound(conversation_id)
        return conversation


def with_new_ids(items: list[Item]) -> list[Item]:
    """``items`` with new gateway ids (a reference ``id`` is kept)."""
    return [
        item if keeps_its_id(item) else {**item, "id": new_item_id(item.get("type"))}
        for item in items
    ]


def _item_not_found(item_id: str) -> NotFound:
    return NotFound(f"Item with id '{item_id}' not found.", param="item_id")
