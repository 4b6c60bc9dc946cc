"""``service_tier``, a field of both OpenAI wires (Responses and Chat Completions): the
processing tier asked for. Each API takes its own values (the SDK's: Chat Completions has
no ``ultrafast``, a compaction neither it nor ``scale``); another is refused by
:func:`check_service_tier`, naming the field, as hosted refuses it, rather than sent on for
an upstream to ignore or refuse in its words.
"""

from __future__ import annotations

from typing import Final

from stateway.protocols.validation import unsupported_value

RESPONSES_TIERS: Final = ("auto", "default", "flex", "scale", "priority", "fast", "ultrafast")
"""The Responses API's (the SDK's ``ServiceTier``)."""
CHAT_TIERS: Final = ("auto", "default", "flex", "scale", "priority", "fast")
"""The Chat Completions API's (``CompletionCreateParams.service_tier``)."""
COMPACT_TIERS: Final = ("auto", "default", "fast", "flex", "priority")
"""``POST /v1/responses/compact``'s (``ResponseCompactParams.service_tier``): fewer than a
create's, no ``scale`` or ``ultrafast``."""


def check_service_tier(tier: str, tiers: tuple[str, ...]) -> None:
    """A 400 (``invalid_value`` on ``service_tier``) for a tier not among ``tiers``, in
    hosted's words: the value, then the values there are."""
    if tier not in tiers:
        raise unsupported_value("service_tier", tier, sorted(tiers))


_SERVED_TIERS: Final = {"auto": "default", "fast": "priority"}
"""The tier a response was served at, for a requested one that names no tier of its own
(``auto``: the project's, ``default`` unless configured) or another name (``fast``)."""


def served_tier(requested: str | None) -> str:
    """The tier an answer says it was served at, as hosted: the one asked for, ``auto``
    (or none) as ``default``, ``fast`` as ``priority``."""
    tier = requested or "auto"
    return _SERVED_TIERS.get(tier, tier)
