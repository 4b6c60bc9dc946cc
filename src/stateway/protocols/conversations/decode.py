"""Conversations wire -> canonical commands.

Bodies are small JSON objects; unknown fields are ignored, as on ``/v1/responses``. Items
are Responses input items (a string item list is not accepted: a conversation is given
items), normalized the same way, at most :data:`MAX_ITEMS` per request as hosted, with at
most ten content parts for each (:mod:`~stateway.protocols.input_parts`); but not a
``compaction_trigger``, which no conversation item type is (a turn's last input item).
Metadata: at most 16 pairs, keys up to 64 characters, values strings up to 512. A
``safety_identifier`` is checked as on ``/v1/responses`` (up to 128 characters).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, Final

from stateway.core.compaction.sealed import COMPACTION_TRIGGER
from stateway.core.conversations.commands import (
    AddConversationItems,
    CreateConversation,
    GetConversationItem,
    ListConversationItems,
    UpdateConversation,
)
from stateway.core.errors import InvalidRequest
from stateway.core.items import Item
from stateway.protocols.responses.body import check_part_count, parse_body
from stateway.protocols.responses.include import read_include
from stateway.protocols.responses.items import decode_items
from stateway.protocols.responses.metadata import decode_metadata
from stateway.protocols.responses.reads import page_query
from stateway.protocols.safety_identifier import decode_safety_identifier
from stateway.protocols.validation import array_too_long, empty_array

MAX_ITEMS: Final = 20
"""Items one request may add (on creation or appended)."""


def decode_create_conversation(raw: bytes) -> CreateConversation:
    """``safety_identifier`` is checked as on a response create, and kept nowhere: creating
    a conversation calls no model, and a conversation has no such field."""
    body = _json_object(raw)
    decode_safety_identifier(body.get("safety_identifier"))
    items = body.get("items")
    metadata = body.get("metadata")
    return CreateConversation(
        items=[] if items is None else _items(items, allow_empty=True),
        metadata={} if metadata is None else decode_metadata(metadata),
    )


def decode_update_conversation(conversation_id: str, raw: bytes) -> UpdateConversation:
    body = _json_object(raw)
    if "metadata" not in body:
        raise InvalidRequest(
            "Missing required parameter: 'metadata'.",
            param="metadata",
            code="missing_required_parameter",
        )
    metadata = body["metadata"]
    return UpdateConversation(
        conversation_id, {} if metadata is None else decode_metadata(metadata)
    )


def decode_add_items(
    conversation_id: str, raw: bytes, include: Sequence[str] | None = None
) -> AddConversationItems:
    """The items to add; the ``include`` (query) the added items are answered with."""
    shown = read_include(include)
    body = _json_object(raw)
    if body.get("items") is None:
        raise InvalidRequest(
            "Missing required parameter: 'items'.",
            param="items",
            code="missing_required_parameter",
        )
    items = _items(body["items"], allow_empty=False)
    return AddConversationItems(conversation_id, items, shown)


def decode_get_item(
    conversation_id: str, item_id: str, include: Sequence[str] | None = None
) -> GetConversationItem:
    """One item, shown with the ``include`` of the query."""
    return GetConversationItem(conversation_id, item_id, read_include(include))


def decode_list_items(
    conversation_id: str, query: Mapping[str, str], include: Sequence[str] | None = None
) -> ListConversationItems:
    """A page of a conversation's items (:func:`page_query`), shown with ``include`` (the
    query's ``include[]`` values)."""
    shown = read_include(include)
    return ListConversationItems(conversation_id, *page_query(query), shown)


def _items(value: Any, *, allow_empty: bool) -> list[Item]:
    if not isinstance(value, list) or not all(isinstance(item, dict) for item in value):
        raise InvalidRequest(
            "Invalid type for 'items': expected an array of objects.",
            param="items",
            code="invalid_type",
        )
    if len(value) > MAX_ITEMS:
        raise array_too_long("items", MAX_ITEMS, len(value))
    check_part_count(value, MAX_ITEMS, "items")
    if not value and not allow_empty:
        raise empty_array("items")
    items = decode_items(value, field="items")
    for index, item in enumerate(items):
        if item.get("type") == COMPACTION_TRIGGER:
            raise InvalidRequest(
                "A 'compaction_trigger' item is not a conversation item: send it as the last "
                "input item of a response in the conversation, which adds the 'compaction' "
                "item it makes.",
                param=f"items[{index}].type",
                code="invalid_value",
            )
    return items


def _json_object(raw: bytes) -> dict[str, Any]:
    data = parse_body(raw, None)
    if not isinstance(data, dict):
        raise InvalidRequest("The request body must be a JSON object.", code="invalid_type")
    return data
