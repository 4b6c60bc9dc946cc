"""The storage port of conversations, implemented in ``storage/``."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal, Protocol

from stateway.core.items import Item
from stateway.core.ports import ItemPage


@dataclass(slots=True, frozen=True)
class Conversation:
    tenant_id: str
    id: str
    created_at: float
    metadata: dict[str, str] = field(default_factory=dict)


@dataclass(slots=True, frozen=True)
class ConversationItems:
    """A conversation's items in order (a turn's context) and how many were ever appended
    (``next_position``: deleted items still count), read together."""

    items: list[Item]
    next_position: int
    served_by: str | None = None
    """The candidate that served the last turn whose items the conversation holds (its
    response's :attr:`~stateway.core.ports.ResponseRecord.served_by`), read with them."""
    last_response_id: str | None = None
    """That turn's response: the latest whose items the conversation holds (a Messages
    thread continues only from it)."""


class ConversationStore(Protocol):
    """Conversations and their items, scoped by tenant. Every method is one transaction.

    Items are copies: appending stores the item given, deleting one removes it from the
    conversation only (responses keep their own). Within a conversation item ids are
    unique, a deleted item's included: an appended item keeps its ``id`` unless it has
    none or the conversation (or the same append) already has it; it then gets a new
    gateway id of its type (:func:`stateway.core.items.new_item_id`), and one whose
    ``id`` named its call (``local_shell_call_output``) keeps that as its ``call_id``.
    Appends of a turn go through :class:`~stateway.core.ports.ResponseStore` (its
    ``turn``) and follow the same rule. A deleted conversation is unknown to every method.
    """

    async def create(self, conversation: Conversation, items: list[Item]) -> None:
        """Insert the conversation with its first items."""
        ...

    async def get(self, tenant_id: str, conversation_id: str) -> Conversation | None: ...

    async def update(
        self, tenant_id: str, conversation_id: str, metadata: dict[str, str]
    ) -> Conversation | None:
        """Replace the metadata; the updated conversation, or None when unknown."""
        ...

    async def delete(self, tenant_id: str, conversation_id: str) -> bool:
        """Make the conversation unknown (its erasure is a :class:`ConversationPurger`'s);
        False when it already is."""
        ...

    async def add_items(
        self, tenant_id: str, conversation_id: str, items: list[Item]
    ) -> list[Item] | None:
        """Append ``items``; return them as stored, or None when the conversation is
        unknown. Raises :class:`~stateway.core.errors.ConversationLocked` while a turn
        holds the conversation (nothing is written)."""
        ...

    async def load_items(self, tenant_id: str, conversation_id: str) -> ConversationItems | None:
        """Every item, oldest first, and the last turn that appended any (its response
        and the candidate that served it), in one read; None when unknown."""
        ...

    async def list_items(
        self,
        tenant_id: str,
        conversation_id: str,
        *,
        after: str | None,
        limit: int,
        order: Literal["asc", "desc"],
    ) -> ItemPage | None:
        """One page of items after the item ``after`` (an empty page when the conversation
        has no such item); None when the conversation is unknown."""
        ...

    async def get_item(self, tenant_id: str, conversation_id: str, item_id: str) -> Item | None:
        """The item, or None when it or the conversation is unknown."""
        ...

    async def delete_item(self, tenant_id: str, conversation_id: str, item_id: str) -> bool:
        """Remove the item from the conversation; False when it or the conversation is
        unknown."""
        ...


class ConversationPurger(Protocol):
    """Erases deleted conversations for good (:mod:`stateway.core.retention`)."""

    async def purge(self, before: float, limit: int) -> int:
        """Erase at most ``limit`` conversations deleted before ``before`` (a Unix time),
        with their items, in one transaction, but none a running turn holds (its end lets
        go of the row); how many were. Calls with the same ``before`` make one sweep, each
        going on where the last stopped, until one erases fewer than ``limit``; the next
        call starts another."""
        ...
