"""Stored items read with an ``include``: a response's output (``GET
/v1/responses/{id}``) as a create with that ``include`` answers it, and likewise its input
items and a conversation's items (listed, read, or answered to their adding), which the
hosted API shows by the same ``include``.

- ``reasoning.encrypted_content``: a reasoning item carries ``encrypted_content``, the
  gateway's seal of its text (sealed as it is read when the response was made without the
  include), or its upstream's own seal (sealed over for the tenant). Without the include
  the gateway's seal of the text is left out; an upstream's own stays, as on create
  (:mod:`.compaction.reasoning_output`).
- ``message.output_text.logprobs``: ``output_text`` parts carry the tokens stored with
  them (none when the response was made without the include). Without it, each part's
  ``logprobs`` is ``[]``.

The other values change nothing: output items are stored and shown whole, as on create.
Items are never changed in place (a running response's are its run's): a changed one is a
copy.
"""

from __future__ import annotations

from collections.abc import Collection
from dataclasses import replace

from stateway.core import logprobs
from stateway.core.compaction import sealed
from stateway.core.compaction.reasoning_output import INCLUDE_ENCRYPTED
from stateway.core.items import MESSAGE, REASONING, Item, item_text
from stateway.core.ports import Sealer
from stateway.core.response import ResponseState

_ENCRYPTED = "encrypted_content"


def included(
    state: ResponseState, include: Collection[str] | None, sealer: Sealer | None
) -> ResponseState:
    """``state`` with its output as ``include`` shows it (None: as stored)."""
    if include is None:
        return state
    return replace(state, output=included_items(state.output, include, sealer, state.tenant_id))


def included_items(
    items: list[Item], include: Collection[str] | None, sealer: Sealer | None, tenant_id: str
) -> list[Item]:
    """``items`` (of ``tenant_id``) as ``include`` shows them (None: as stored)."""
    if include is None:
        return items
    encrypted = INCLUDE_ENCRYPTED in include
    tokens = logprobs.INCLUDE in include
    shown = []
    for item in items:
        kind = item.get("type")
        if kind == REASONING:
            item = _reasoning(item, encrypted, sealer, tenant_id)
        elif kind == MESSAGE and not tokens:
            item = _without_tokens(item)
        shown.append(item)
    return shown


def _reasoning(item: Item, encrypted: bool, sealer: Sealer | None, tenant_id: str) -> Item:
    blob = item.get(_ENCRYPTED)
    if not encrypted:  # an upstream's own seal (sealed over or not) is no seal of the text
        text_sealed = (
            isinstance(blob, str)
            and sealer is not None
            and sealer.owns(blob)
            and sealed.opened(sealer, sealed.REASONING, tenant_id, blob) is not None
        )
        return {k: v for k, v in item.items() if k != _ENCRYPTED} if text_sealed else item
    if isinstance(blob, str) and blob:  # the gateway's seal, or an upstream's own
        return item
    text = item_text(item)
    return {**item, _ENCRYPTED: sealed.seal(sealer, sealed.REASONING, tenant_id, text)}


def _without_tokens(item: Item) -> Item:
    """A message whose ``output_text`` parts' ``logprobs`` are ``[]``: the item itself when
    none holds tokens (the common case)."""
    shown = logprobs.without_tokens(item)
    if shown is item:
        return item
    parts = [
        {**part, "logprobs": []}
        if isinstance(part, dict) and part.get("type") == "output_text"
        else part
        for part in shown["content"]
    ]
    return {**shown, "content": parts}
