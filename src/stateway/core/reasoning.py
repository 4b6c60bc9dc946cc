"""How a canonical ``reasoning`` item carries an upstream's opaque seal on its thinking.

Anthropic signs each ``thinking`` block (``signature``) and sometimes sends the thinking
encrypted whole (``redacted_thinking`` with ``data``); both must come back unchanged for
the model to continue from them. A reasoning item keeps either in ``encrypted_content``,
the Responses field for exactly this (opaque, returned by clients that ask for
``reasoning.encrypted_content``):

- a signed thinking block: its text as the item's ``reasoning_text`` part, its signature
  as ``encrypted_content``;
- a redacted thinking block: no text, ``encrypted_content`` = :data:`REDACTED` + ``data``.

Signatures are base64, so the prefix (with its ``:``) cannot begin one.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final

from stateway.core.items import REASONING, Item, item_text

REDACTED: Final = "redacted_thinking:"


@dataclass(slots=True, frozen=True)
class Thinking:
    """A reasoning item's thinking: its text and seal (``signature``, or the ``data`` of
    redacted thinking)."""

    text: str
    seal: str | None
    redacted: bool = False


def thinking_of(item: Item) -> Thinking:
    """The thinking a reasoning item holds (text from its content, else its summary)."""
    sealed = item.get("encrypted_content")
    seal = sealed if isinstance(sealed, str) and sealed else None
    if seal is not None and seal.startswith(REDACTED):
        return Thinking("", seal.removeprefix(REDACTED), redacted=True)
    text = item_text(item) or item_text({"content": item.get("summary")})
    return Thinking(text, seal)


def redacted_item(item_id: str, data: str) -> Item:
    """A reasoning item holding one redacted thinking block."""
    return {
        "id": item_id,
        "type": REASONING,
        "summary": [],
        "content": [],
        "encrypted_content": REDACTED + data,
        "status": "completed",
    }
