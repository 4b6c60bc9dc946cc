"""Sealed ``encrypted_content``: a compaction item's summary, a reasoning item's text, and
an upstream's own seal on its reasoning (:mod:`stateway.core.reasoning`).

Each is a small JSON object (``{"summary": ...}``, ``{"text": ...}``, ``{"seal": ...}``)
sealed for the
tenant and its kind through the :class:`~stateway.core.ports.Sealer` port, so clients can
carry it (``store: false`` clients must) but neither read nor forge it, and it opens only
for the tenant and the item kind it was sealed for. One that does not open is a 400
``invalid_encrypted_content`` naming the item.
"""

from __future__ import annotations

from typing import Final

import orjson

from stateway.core.errors import InternalError, InvalidRequest
from stateway.core.ports import Sealer

COMPACTION: Final = "compaction"
COMPACTION_TRIGGER: Final = "compaction_trigger"
REASONING: Final = "reasoning"
UPSTREAM_REASONING: Final = "upstream_reasoning"
"""The kind of an upstream's own seal on reasoning, sealed over for the tenant."""
INVALID_CODE: Final = "invalid_encrypted_content"
_FIELDS: Final = {COMPACTION: "summary", REASONING: "text", UPSTREAM_REASONING: "seal"}
_NOUNS: Final = {UPSTREAM_REASONING: REASONING}


def seal(sealer: Sealer | None, kind: str, tenant_id: str, text: str) -> str:
    """``text`` sealed as the ``encrypted_content`` of an item of ``kind``."""
    if sealer is None:  # the composition root always wires one
        raise InternalError()
    return sealer.seal(kind, tenant_id, orjson.dumps({_FIELDS[kind]: text}))


def unseal(sealer: Sealer | None, kind: str, tenant_id: str, sealed: object, param: str) -> str:
    """The text sealed in ``sealed``; a 400 at ``param`` when it was not sealed here, for
    this tenant and kind, or was altered."""
    text = opened(sealer, kind, tenant_id, sealed)
    if text is None:
        raise invalid(kind, param)
    return text


def opened(sealer: Sealer | None, kind: str, tenant_id: str, sealed: object) -> str | None:
    """The text sealed in ``sealed``, or None unless it was sealed here, for this tenant
    and kind, unaltered."""
    plain = (
        sealer.unseal(kind, tenant_id, sealed)
        if sealer is not None and isinstance(sealed, str)
        else None
    )
    try:
        payload = orjson.loads(plain) if plain is not None else None
    except orjson.JSONDecodeError:
        payload = None
    text = payload.get(_FIELDS[kind]) if isinstance(payload, dict) else None
    return text if isinstance(text, str) else None


def invalid(kind: str, param: str) -> InvalidRequest:
    """The 400 of an item's ``encrypted_content`` that does not open."""
    return InvalidRequest(
        f"The encrypted content of this {_NOUNS.get(kind, kind)} item could not be verified: "
        "it was not produced by this gateway for this organization, or it was altered.",
        param=param,
        code=INVALID_CODE,
    )
