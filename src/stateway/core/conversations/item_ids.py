"""Which items a conversation keeps under the ids they came with, and the refusal of one
whose id the conversation holds.

Within a conversation an id names one item for good: a page goes on after the item its
cursor names, a deleted one's included (its tombstone keeps its place). Items added
through the Conversations API get new ids (:func:`.service.with_new_ids`), but for one
whose ``id`` names another item (a ``local_shell_call_output``'s, its call); a turn's
input items keep theirs. Such an item naming an item the conversation holds is refused
as hosted refuses it: ``Duplicate item found with id ...`` (400), before anything is
written, since the model would otherwise see the item twice. An id only a deleted item
had is no duplicate: storage gives the item a new one (see
:class:`~stateway.core.conversations.ports.ConversationStore`).
"""

from __future__ import annotations

from stateway.core.errors import DuplicateItem
from stateway.core.items import ID_IS_REFERENCE, Item


def keeps_its_id(item: Item) -> bool:
    """Whether the Conversations API adds ``item`` under the ``id`` it came with."""
    return item.get("type") in ID_IS_REFERENCE


def check_not_held(
    held: list[Item], added: list[Item], field: str, *, only_kept: bool = False
) -> None:
    """Refuse the first of ``added`` (``field[i]``) whose ``id`` one of ``held`` has (of
    those that keep their id, with ``only_kept``)."""
    ids = {item.get("id") for item in held}
    for index, item in enumerate(added):
        item_id = item.get("id")
        if isinstance(item_id, str) and item_id in ids and (keeps_its_id(item) or not only_kept):
            raise DuplicateItem(item_id, param=f"{field}[{index}].id")
