"""The conversation commands: what a surface asks of a conversation (the Conversations
API's routes, the MCP surface's tools), handled by :mod:`.service`."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

from stateway.core.items import Item


@dataclass(slots=True, frozen=True)
class CreateConversation:
    items: list[Item] = field(default_factory=list)
    metadata: dict[str, str] = field(default_factory=dict)


@dataclass(slots=True, frozen=True)
class GetConversation:
    conversation_id: str


@dataclass(slots=True, frozen=True)
class UpdateConversation:
    conversation_id: str
    metadata: dict[str, str]
    """Replaces the conversation's metadata."""


@dataclass(slots=True, frozen=True)
class DeleteConversation:
    conversation_id: str


@dataclass(slots=True, frozen=True)
class AddConversationItems:
    conversation_id: str
    items: list[Item]
    include: tuple[str, ...] | None = None
    """The ``include`` the items are shown with (:mod:`stateway.core.included`); None: as stored."""


@dataclass(slots=True, frozen=True)
class ListConversationItems:
    conversation_id: str
    after: str | None = None
    limit: int = 20
    order: Literal["asc", "desc"] = "desc"
    include: tuple[str, ...] | None = None
    """The ``include`` the items are shown with (:mod:`stateway.core.included`); None: as stored."""


@dataclass(slots=True, frozen=True)
class GetConversationItem:
    conversation_id: str
    item_id: str
    include: tuple[str, ...] | None = None
    """The ``include`` the item is shown with (:mod:`stateway.core.included`); None: as stored."""


@dataclass(slots=True, frozen=True)
class DeleteConversationItem:
    conversation_id: str
    item_id: str


ConversationCommand = (
    CreateConversation
    | GetConversation
    | UpdateConversation
    | DeleteConversation
    | AddConversationItems
    | ListConversationItems
    | GetConversationItem
    | DeleteConversationItem
)
