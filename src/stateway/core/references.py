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
- A hosted tool's item sent back trimmed, by its id, as hosted fills it in from the stored
  item (Pydantic AI sends a stored response's so: "these can be read server-side"): an
  ``mcp_call`` without its ``output`` (null or absent, and no ``error``) gets the stored
  call's ``output``, ``error`` and ``status``; an ``mcp_list_tools`` without its
  ``tools`` gets the stored listing's (else the model would see an empty result, and an
  empty listing would stand for the server's tools in later turns); a
  ``web_search_call`` without ``action.sources`` gets the stored search's (else the
  model is told its results were not kept). Only from the stored item of that kind with
  its id that is the same item: the same ``server_label``, ``name`` and ``arguments``
  (as JSON: a client may write them anew) for a call, the same ``server_label`` for a
  listing, the same ``action.query`` and ``action.queries`` (those the item has, one at
  least) for a search. Any other goes on as it came.

A stored reasoning item put in either way is the tenant's own, as a chain's items are: an
upstream's seal it holds as it came (stored by a release before seals were sealed over)
is sealed over for the tenant (:func:`~stateway.core.reasoning.sealed_over`), so that it
reaches its upstream as a chain's does, where a request's own is left out.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Final, TypeVar

import orjson

from stateway.core.commands import CompactResponse, CreateResponse
from stateway.core.conversations.commands import AddConversationItems, CreateConversation
from stateway.core.errors import NotFound
from stateway.core.items import (
    MCP_CALL,
    MCP_LIST_TOOLS,
    REASONING,
    WEB_SEARCH_CALL,
    Item,
    item_text,
)
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
    reasoning item given its stored text, every unsealed one its stored seal and every
    trimmed hosted tool item what its stored item holds (a copy);
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
        elif item["type"] != ITEM_REFERENCE:
            resolved.append(_TRIMMED[item["type"]].fill(item, stored))
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
    without its seal under an id, or a hosted tool's item sent back trimmed under an id."""
    kind = item.get("type")
    if kind == ITEM_REFERENCE:
        return True
    if kind == REASONING:
        return _textless(item) or (not item.get("encrypted_content") and _named(item))
    trimmed = _TRIMMED.get(kind) if isinstance(kind, str) else None
    return trimmed is not None and _named(item) and trimmed.lacks(item)


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


@dataclass(frozen=True, slots=True)
class _Trimmed:
    """A hosted tool's item kind a client may send back without what the stored item
    holds: whether an item ``lacks`` it, and the item with it ``fill``-ed from the stored
    item its id names (itself when that is not the same item)."""

    lacks: Callable[[Item], bool]
    fill: Callable[[Item, Item | None], Item]


def _outputless(item: Item) -> bool:
    return item.get("output") is None and not item.get("error")


def _with_stored_output(item: Item, stored: Item | None) -> Item:
    """``item``, an ``mcp_call`` sent without its output, with the output, error and
    status of ``stored``, the call its id names, when that is the same call."""
    if stored is None or stored.get("type") != MCP_CALL:
        return item
    if any(item.get(key) != stored.get(key) for key in ("server_label", "name")):
        return item
    if not _same_arguments(item.get("arguments"), stored.get("arguments")):
        return item  # not the item stored under that id (ids are the client's labels)
    filled = {**item, "output": stored.get("output"), "error": stored.get("error")}
    if "status" in stored:
        filled["status"] = stored["status"]
    return filled


def _same_arguments(sent: object, stored: object) -> bool:
    """Whether a call's arguments as sent are those stored: the same text, or the same
    JSON written anew."""
    if sent == stored:
        return True
    if not isinstance(sent, str) or not isinstance(stored, str):
        return False
    try:
        return bool(orjson.loads(sent) == orjson.loads(stored))
    except orjson.JSONDecodeError:
        return False


def _toolless(item: Item) -> bool:
    return not item.get("tools")


def _with_stored_tools(item: Item, stored: Item | None) -> Item:
    """``item``, an ``mcp_list_tools`` sent without its tools, with the tools of
    ``stored``, the listing its id names, when that is a listing of the same server."""
    if stored is None or stored.get("type") != MCP_LIST_TOOLS:
        return item
    if stored.get("server_label") != item.get("server_label") or not stored.get("tools"):
        return item
    return {**item, "tools": stored["tools"]}


_QUERIES: Final = ("query", "queries")


def _sourceless(item: Item) -> bool:
    action = item.get("action")
    return isinstance(action, dict) and action.get("sources") is None


def _with_stored_sources(item: Item, stored: Item | None) -> Item:
    """``item``, a ``web_search_call`` sent without ``action.sources``, with the sources
    of ``stored``, the search its id names, when that searched for the same: each of
    ``query`` and ``queries`` the item has (one at least) the stored search's."""
    if stored is None or stored.get("type") != WEB_SEARCH_CALL:
        return item
    action, kept = item["action"], stored.get("action")
    if not isinstance(kept, dict) or not isinstance(kept.get("sources"), list):
        return item
    asked = [key for key in _QUERIES if action.get(key)]
    if not asked or any(action[key] != kept.get(key) for key in asked):
        return item  # not the item stored under that id (ids are the client's labels)
    return {**item, "action": {**action, "sources": kept["sources"]}}


_TRIMMED: Final = {
    MCP_CALL: _Trimmed(_outputless, _with_stored_output),
    MCP_LIST_TOOLS: _Trimmed(_toolless, _with_stored_tools),
    WEB_SEARCH_CALL: _Trimmed(_sourceless, _with_stored_sources),
}
"""The hosted tools' item kinds a client may send back trimmed, filled by their id."""
