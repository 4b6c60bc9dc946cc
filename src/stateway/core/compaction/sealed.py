"""Sealed ``encrypted_content``: a compaction item's summary, a reasoning item's text, and
an upstream's own seal on its reasoning (:mod:`stateway.core.reasoning`).

Each is a small JSON object (``{"summary": ...}``, ``{"text": ...}``, ``{"seal": ...,
"text": ...}``: an upstream's seal with the thinking it signs) sealed for the tenant and its
kind through the :class:`~stateway.core.ports.Sealer` port, so clients can
carry it (``store: false`` clients must) but neither read nor forge it, and it opens only
for the tenant and the item kind it was sealed for. One that does not open is a 400
``invalid_encrypted_content`` naming the item.

A compaction item may also show its summary in the clear (``content``: a Messages
``compaction`` block, whose ``signature`` is the seal): :func:`signed_summary` then holds
the two together, a seal that does not open being ``compaction_signature_invalid`` and a
``content`` other than the sealed summary ``compaction_content_mismatch``.
"""

from __future__ import annotations

from collections.abc import Mapping
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
SIGNATURE_INVALID: Final = "compaction_signature_invalid"
CONTENT_MISMATCH: Final = "compaction_content_mismatch"
_FIELDS: Final = {COMPACTION: "summary", REASONING: "text", UPSTREAM_REASONING: "seal"}
_NOUNS: Final = {UPSTREAM_REASONING: REASONING}


def seal(
    sealer: Sealer | None,
    kind: str,
    tenant_id: str,
    text: str,
    more: Mapping[str, str] | None = None,
) -> str:
    """``text`` sealed as the ``encrypted_content`` of an item of ``kind``, with the
    ``more`` fields beside it (:func:`opened_payload` reads them back)."""
    if sealer is None:  # the composition root always wires one
        raise InternalError()
    return sealer.seal(kind, tenant_id, orjson.dumps({**(more or {}), _FIELDS[kind]: text}))


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
    payload = opened_payload(sealer, kind, tenant_id, sealed)
    text = payload.get(_FIELDS[kind]) if payload is not None else None
    return text if isinstance(text, str) else None


def opened_payload(
    sealer: Sealer | None, kind: str, tenant_id: str, sealed: object
) -> dict[str, object] | None:
    """The whole object sealed in ``sealed`` (its text and any ``more`` fields :func:`seal`
    put beside it), or None unless it was sealed here, for this tenant and kind,
    unaltered."""
    plain = (
        sealer.unseal(kind, tenant_id, sealed)
        if sealer is not None and isinstance(sealed, str)
        else None
    )
    try:
        payload = orjson.loads(plain) if plain is not None else None
    except orjson.JSONDecodeError:
        payload = None
    return payload if isinstance(payload, dict) else None


def invalid(kind: str, param: str) -> InvalidRequest:
    """The 400 of an item's ``encrypted_content`` that does not open."""
    return InvalidRequest(
        f"The encrypted content of this {_NOUNS.get(kind, kind)} item could not be verified: "
        "it was not produced by this gateway for this organization, or it was altered.",
        param=param,
        code=INVALID_CODE,
    )


def signed_summary(
    sealer: Sealer | None, tenant_id: str, sealed: object, shown: str, param: str
) -> str:
    """The summary ``shown`` in the clear beside its seal ``sealed``, once the seal opens
    for ``tenant_id`` (as a compaction's) and holds that very text; a 400 at ``param``
    otherwise."""
    text = opened(sealer, COMPACTION, tenant_id, sealed)
    if text is None:
        raise InvalidRequest(
            "The signature of this compaction could not be verified: it was not produced "
            "by this gateway for this organization, or it was altered.",
            param=param,
            code=SIGNATURE_INVALID,
        )
    if text != shown:
        raise InvalidRequest(
            "The content of this compaction differs from the summary its signature "
            "records; send it back as it was returned.",
            param=param,
            code=CONTENT_MISMATCH,
        )
    return text
