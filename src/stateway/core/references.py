"""Item references: ``{"type": "item_reference", "id": ...}`` input items, replaced by
the stored item they name before anything else reads the input.

Clients that keep their history and resend it whole (the Vercel AI SDK with ``store``
on, its default) send a reference instead of an item the API already holds: an earlier
response's message, reasoning or hosted tool call. A reference resolves among the items
of the tenant's stored responses that are not deleted, an output item before an input
item with the same id, and the latest response first (client ids are labels, so one may
appear more than once). One that names no such item is a 404 naming the input item, as
hosted: items of a ``store: false`` response were never kept.
"""

from __future__ import annotations

from stateway.core.errors import NotFound
from stateway.core.items import Item
from stateway.core.ports import ResponseStore

ITEM_REFERENCE = "item_reference"


def has_references(items: list[Item]) -> bool:
    return any(item.get("type") == ITEM_REFERENCE for item in items)


async def resolve_references(store: ResponseStore, tenant_id: str, items: list[Item]) -> list[Item]:
    """``items`` with every reference replaced by the stored item it names (a copy)."""
    wanted = [str(item["id"]) for item in items if item.get("type") == ITEM_REFERENCE]
    if not wanted:
        return items
    found = await store.find_items(tenant_id, sorted(set(wanted)))
    resolved: list[Item] = []
    for index, item in enumerate(items):
        if item.get("type") != ITEM_REFERENCE:
            resolved.append(item)
            continue
        stored = found.get(str(item["id"]))
        if stored is None:
            raise NotFound(
                f"Item with id '{item['id']}' not found. Items are not persisted when "
                "`store` is set to false. Try again with `store` set to true, or remove "
                "this item from your input.",
                param=f"input[{index}]",
            )
        resolved.append(dict(stored))
    return resolved
