"""Canonical -> Conversations wire: the conversation object, its deletion, item lists.
Items leave as stored: canonical items are the Responses wire's items."""

from __future__ import annotations

from typing import Any

from stateway.core.conversations.ports import Conversation
from stateway.core.conversations.service import ConversationDeleted
from stateway.core.ports import ItemPage


def encode_conversation(conversation: Conversation) -> dict[str, Any]:
    return {
        "id": conversation.id,
        "object": "conversation",
        "created_at": int(conversation.created_at),
        "metadata": conversation.metadata,
    }


def encode_deleted(deleted: ConversationDeleted) -> dict[str, Any]:
    return {"id": deleted.id, "object": "conversation.deleted", "deleted": True}


def encode_item_list(page: ItemPage) -> dict[str, Any]:
    data = page.items
    return {
        "object": "list",
        "data": data,
        "first_id": data[0].get("id") if data else None,
        "last_id": data[-1].get("id") if data else None,
        "has_more": page.has_more,
    }
