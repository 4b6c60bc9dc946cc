"""Input items that stand for stored ones, replaced by what is stored before anything else
reads the input.

- ``{"type": "item_reference", "id": ...}``: clients that keep their history and resend it
  whole (the Vercel AI SDK with ``store`` on, its default) send a reference instead of an
  item the API already holds: an earlier response's message, reasoning or hosted tool
  call. A reference resolves among the items of the tenant's stored responses that are
  not deleted, an output item before an input item with the same id, and the latest
  response first (client ids are labels, so one may appear more than once); then, as
  hosted, among the live items of the tenant's live conversations, the latest added first:
  the Conversations API gives the items it adds ids of their own, which name them too.
  Responses come first since a turn's items are copied into its conversation under their
  ids, so an id both hold names the response's original (see
  :meth:`~stateway.core.ports.ResponseStore.find_items`). One that names no such item is a
  404 naming the input item, as hosted: items of a ``store: false`` response were never
  kept, and a deleted conversation item is gone (unless a response took it in).
- A ``reasoning`` item sent back without its text (neither ``content`` nor ``summary``:
  LangChain keeps only a streamed item's id and ``encrypted_content``) gets the text of
  the stored reasoning item with its id, as the hosted API looks it up, when that item
  carries the same ``encrypted_content`` (the whole stored item when it came with none).
  Without it, the model would lose its reasoning (Chat upstreams), or an Anthropic
  upstream would refuse a signature with no thinking. When none is stored, the item goes
  on as it came.
- A ``reasoning`` item sent back with its text but without ``encrypted_content``
  (Pydantic AI, for a model it does not know as OpenAI's, sends a stored response's
  reasoning by its id, with ``encrypted_content: null``, as the hosted API looks the item
  up by its id) gets the ``encrypted_content`` of the stored reasoning item with its id,
  when that item holds the same text: an Anthropic upstream gets the thinking back signed,
  rather than left out as unsigned. Over other text it is another item under a reused
  label, and goes on as it came.

A stored reasoning item put in either way is the tenant's own, as a chain's items are: an
upstream's seal it holds as it came (stored by a release before seals were sealed over)
is sealed over for the tenant (:func:`~stateway.core.reasoning.sealed_over`), so that it
reaches its upstream as a chain's does, where a request's own is left out.
"""

from __future__ import annotations

from dataclasses import replace
from typing import TypeVar

from stateway.core.commands import CompactResponse, CreateResponse
from stateway.core.conversations.commands import AddConversationItems, CreateConversation
from stateway.core.errors import NotFound
from stateway.core.items import REASONING, Item, item_text
from stateway.core.ports import ResponseStore, Sealer
from stateway.core.reasoning import sealed_over, thinking_of

ITEM_REFERENCE = "item_reference"

Inputs = TypeVar("Inputs", CreateResponse, CompactResponse)
"""A command whose ``input`` items may stand for stored ones."""


async def resolved(
    store: ResponseStore, tenant_id: str, command: Inputs, sealer: Sealer | None
) -> Inputs:
    """``command`` with its input items that stand for stored ones replaced by what is
    stored (itself when none does)."""
    if not has_references(command.input):
        return command
    items = await resolve_references(store, tenant_id, command.input, sealer=sealer)
    return replace(command, input=items)


def has_references(items: list[Item]) -> bool:
    return any(map(_stands_for_stored, items))


Adding = TypeVar("Adding", CreateConversation, AddConversationItems)
"""A command adding items to a conversation: stored as resolved, since a reference kept
there would name nothing once the conversation gives it an id of its own."""


async def resolved_items(
    store: ResponseStore, tenant_id: str, command: Adding, sealer: Sealer | None
) -> Adding:
    """``command`` with its items that stand for stored ones replaced, as a create's input
    (a reference that names nothing is a 404 naming ``items[i]``)."""
    if not has_references(command.items):
        return command
    items = await resolve_references(store, tenant_id, command.items, "items", sealer=sealer)
    return replace(command, items=items)


async def resolve_references(
    store: ResponseStore,
    tenant_id: str,
    items: list[Item],
    field: str = "input",
    *,
    sealer: Sealer | None = None,
) -> list[Item]:
    """``items`` with every reference replaced by the stored item it names, every textless
    reasoning item given its stored text and every unsealed one its stored seal (a copy);
    ``field`` names the list in a 404's ``param``; ``sealer`` seals over a stored upstream
    seal as it came."""
    wanted = {item["id"] for item in items if _stands_for_stored(item) and _named(item)}
    if not wanted:
        return items
    found = await store.find_items(tenant_id, sorted(wanted))
    resolved: list[Item] = []
    for index, item in enumerate(items):
        if not _stands_for_stored(item):
            resolved.append(item)
            continue
        stored = found.get(item["id"]) if _named(item) else None
        if item["type"] == REASONING:
            filled = (_with_stored_text if _textless(item) else _with_stored_seal)(item, stored)
            resolved.append(item if filled is item else sealed_over(filled, sealer, tenant_id))
        elif stored is None:
            raise NotFound(
                f"Item with id '{item['id']}' not found. Items are not persisted when "
                "`store` is set to false. Try again with `store` set to true, or remove "
                "this item from your input.",
                param=f"{field}[{index}]",
            )
        else:
            resolved.append(sealed_over(dict(stored), sealer, tenant_id))
    return resolved


def _stands_for_stored(item: Item) -> bool:
    """A reference, or a reasoning item sent back without its text, or with its text but
    without its seal under an id."""
    kind = item.get("type")
    if kind == ITEM_REFERENCE:
        return True
    if kind != REASONING:
        return False
    return _textless(item) or (not item.get("encrypted_content") and _named(item))


def _named(item: Item) -> bool:
    return isinstance(item.get("id"), str)


def _textless(item: Item) -> bool:
    return not item.get("content") and not item.get("summary")


def _with_stored_text(item: Item, stored: Item | None) -> Item:
    """``item`` with the text of ``stored``, the reasoning item its id names; whole as
    stored when ``item`` came without ``encrypted_content`` (a bare id, as a reference)."""
    if stored is None or stored.get("type") != REASONING:
        return item
    sealed = item.get("encrypted_content")
    if not sealed:
        return dict(stored)
    if stored.get("encrypted_content") != sealed:
        return item  # not the item stored under that id (ids are the client's labels)
    return {**item, "summary": stored.get("summary") or [], "content": stored.get("content") or []}


def _with_stored_seal(item: Item, stored: Item | None) -> Item:
    """``item``, sent with its text and no ``encrypted_content``, with the seal of
    ``stored``, the reasoning item its id names, when ``stored`` holds the same text."""
    if stored is None or stored.get("type") != REASONING:
        return item
    sealed = stored.get("encrypted_content")
    if not isinstance(sealed, str) or not sealed:
        return item
    if thinking_of(item).text not in _texts(stored):
        return item  # not the item stored under that id (ids are the client's labels)
    return {**item, "encrypted_content": sealed}


def _texts(item: Item) -> set[str]:
    """The texts a reasoning item holds: its content's, its summary's."""
    return {item_text(item), item_text({"content": item.get("summary")})} - {""}
