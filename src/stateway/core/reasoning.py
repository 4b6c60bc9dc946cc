"""How a canonical ``reasoning`` item carries an upstream's opaque seal on its thinking.

Anthropic signs each ``thinking`` block (``signature``) and sometimes sends the thinking
encrypted whole (``redacted_thinking`` with ``data``); both must come back unchanged for
the model to continue from them. A reasoning item keeps either in ``encrypted_content``,
the Responses field for exactly this (opaque, returned by clients that ask for
``reasoning.encrypted_content``):

- a signed thinking block: its text as the item's ``reasoning_text`` part, its signature
  as ``encrypted_content``;
- a redacted thinking block: no text, ``encrypted_content`` = :data:`REDACTED` + ``data``.

A Responses upstream seals its reasoning the same way when asked
(``include: ["reasoning.encrypted_content"]``: OpenAI encrypts it, for its account alone;
vLLM carries its reasoning in it, in its own form): the item keeps that blob behind the
prefix of the backend that made it (:func:`responses_maker`), so that it goes back to that
backend only (an Anthropic upstream would refuse it as a signature, a Responses upstream
an Anthropic signature, and another Responses server or account the blob). Items stored
before 2026-12-06 hold :data:`SEALED_BY_RESPONSES` + blob, naming no backend: any
Responses backend is sent those. Anthropic's signatures go to any Anthropic backend
(Anthropic takes them across its platforms).

Signatures are base64, so neither prefix (with its ``:``) can begin one.

Clients never see an upstream's seal as it came: every tenant reaches the upstream with
the gateway's credentials, so one tenant's seal, sent by another, would be opened for the
other. Where it enters an output item (:meth:`~stateway.core.assembler.OutputAssembler.
reasoning_signature`, or a whole redacted item) the seal, as the item keeps it (with its
prefix: which upstream made it), is sealed over for the tenant (:func:`wrapped`, kind
:data:`~stateway.core.compaction.sealed.UPSTREAM_REASONING`) with the thinking text it
signs; a redacted block keeps :data:`REDACTED` in front, so the Messages encoders still
show it as one. Stored items, events and every protocol's encoding carry that form; the
model's view of a context (:mod:`stateway.core.compaction.view`) opens it again
(:func:`unwrapped_thinking`) for the upstream, with that text: clients of hosted OpenAI
send a reasoning item back with its ``encrypted_content`` and an empty ``summary`` only
(hosted, the seal holds everything), and Anthropic refuses a signature over other text.
Seals made before 2026-12-05 hold no text: the text that comes with the item is used.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from typing import Final

from stateway.core.compaction import sealed
from stateway.core.items import REASONING, Item, item_text
from stateway.core.ports import Sealer

REDACTED: Final = "redacted_thinking:"
SEALED_BY_RESPONSES: Final = "responses:"
"""In front of a Responses upstream's blob stored before 2026-12-06 (its backend unnamed)."""
_MADE_BY_RESPONSES: Final = "responses@"
_RESPONSES_SEALS: Final = (SEALED_BY_RESPONSES, _MADE_BY_RESPONSES)


def responses_maker(backend: str) -> str:
    """The prefix in front of the blobs the Responses backend named ``backend`` seals its
    reasoning with: a digest of its name (names may hold any character)."""
    digest = hashlib.sha256(backend.encode()).hexdigest()[:16]
    return f"{_MADE_BY_RESPONSES}{digest}:"


@dataclass(slots=True, frozen=True)
class Thinking:
    """A reasoning item's thinking: its text and seal (``signature``, or the ``data`` of
    redacted thinking)."""

    text: str
    seal: str | None
    redacted: bool = False
    anthropic: bool = True
    """Whether the seal is Anthropic's (a signature or redacted data), not a Responses
    upstream's."""


def thinking_of(item: Item) -> Thinking:
    """The thinking a reasoning item holds (text from its content, else its summary)."""
    sealed = item.get("encrypted_content")
    seal = sealed if isinstance(sealed, str) and sealed else None
    if seal is not None and seal.startswith(REDACTED):
        return Thinking("", seal.removeprefix(REDACTED), redacted=True)
    text = item_text(item) or item_text({"content": item.get("summary")})
    return Thinking(text, seal, anthropic=seal is None or not seal.startswith(_RESPONSES_SEALS))


def responses_seal(item: Item, maker: str) -> str | None:
    """The blob the Responses backend whose prefix is ``maker`` (:func:`responses_maker`)
    sealed a reasoning item with, or one of an unnamed backend; else None (another's, or
    none)."""
    sealed = item.get("encrypted_content")
    if isinstance(sealed, str):
        for prefix in (maker, SEALED_BY_RESPONSES):
            if sealed.startswith(prefix):
                return sealed.removeprefix(prefix) or None
    return None


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


@dataclass(slots=True, frozen=True)
class Wrapped:
    """What :func:`wrapped` sealed over: an upstream's seal and the thinking it signs."""

    seal: str
    text: str | None
    """None: sealed without it (redacted thinking, or before 2026-12-05)."""


def wrapped(sealer: Sealer, tenant_id: str, seal: str, text: str | None = None) -> str:
    """An upstream's ``seal`` (as an item keeps it) sealed over for ``tenant_id`` with the
    thinking ``text`` it signs: what clients are given instead (redacted thinking, which
    has no text, keeps its :data:`REDACTED` prefix)."""
    redacted = seal.startswith(REDACTED)
    more = {"text": text} if text is not None and not redacted else None
    over = sealed.seal(sealer, sealed.UPSTREAM_REASONING, tenant_id, seal, more)
    return REDACTED + over if redacted else over


def sealed_over(item: Item, sealer: Sealer | None, tenant_id: str) -> Item:
    """A stored reasoning ``item`` of ``tenant_id`` with its upstream's seal as it came
    (releases before 2026-12-02 stored it so) sealed over, as a create stores it now;
    any other item as it is. Only for the tenant's own stored items: a seal as it came in
    a request is anyone's (:mod:`stateway.core.compaction.view` leaves it out)."""
    seal = item.get("encrypted_content")
    if (
        sealer is None
        or item.get("type") != REASONING
        or not isinstance(seal, str)
        or not seal
        or sealer.owns(seal.removeprefix(REDACTED))
    ):
        return item
    return {**item, "encrypted_content": wrapped(sealer, tenant_id, seal, thinking_of(item).text)}


def unwrapped(sealer: Sealer, tenant_id: str, blob: str) -> str | None:
    """The upstream's seal :func:`wrapped` sealed in ``blob`` (as an item keeps it), or
    None unless it was sealed here for ``tenant_id``, unaltered."""
    opened = unwrapped_thinking(sealer, tenant_id, blob)
    return opened.seal if opened is not None else None


def unwrapped_thinking(sealer: Sealer, tenant_id: str, blob: str) -> Wrapped | None:
    """The upstream's seal and thinking :func:`wrapped` sealed in ``blob``, or None unless
    it was sealed here for ``tenant_id``, unaltered."""
    payload = sealed.opened_payload(
        sealer, sealed.UPSTREAM_REASONING, tenant_id, blob.removeprefix(REDACTED)
    )
    seal = payload.get("seal") if payload is not None else None
    if not isinstance(seal, str):
        return None
    text = payload.get("text") if payload is not None else None
    return Wrapped(seal, text if isinstance(text, str) else None)
