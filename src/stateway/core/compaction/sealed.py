"""Sealed ``encrypted_content``: a compaction item's summary and a reasoning item's text.

Each is a small JSON object (``{"summary": ...}``, ``{"text": ...}``) sealed for the
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
INVALID_CODE: Final = "invalid_encrypted_content"
_FIELDS: Final = {COMPACTION: "summary", REASONING: "text"}


def seal(sealer: Sealer | None, kind: str, tenant_id: str, text: str) -> str:
    """``text`` sealed as the ``encrypted_content`` of an item of ``kind``."""
    if sealer is None:  # the composition root always wires one
        raise InternalError()
    return sealer.seal(kind, tenant_id, orjson.dumps({_FIELDS[kind]: text}))


def unseal(sealer: Sealer | None, kind: str, tenant_id: str, sealed: object, param: str) -> str:
    """The text sealed in ``sealed``; a 400 at ``param`` when it was not sealed here, for
    this tenant and kind, or was altered."""
    opened = (
        sealer.unseal(kind, tenant_id, sealed)
        if sealer is not None and isinstance(sealed, str)
        else None
    )
    try:
        payload = orjson.loads(opened) if opened is not None else None
    except orjson.JSONDecodeError:
        payload = None
    text = payload.get(_FIELDS[kind]) if isinstance(payload, dict) else None
    if not isinstance(text, str):
        raise InvalidRequest(
            f"The encrypted content of this {kind} item could not be verified: it was not "
            "produced by this gateway for this organization, or it was altered.",
            param=param,
            code=INVALID_CODE,
        )
    return text
