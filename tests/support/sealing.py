"""What a seal (``sw1.`` and URL-safe base64) carries, for tests that a conversation is not
readable in one: checked in its text and in its bytes, phrases whole, so that a random
seal cannot hold one by chance (three letters can: ``...5Adav0...``)."""

from __future__ import annotations

import base64


def readable_in(sealed: str, *phrases: str) -> list[str]:
    """The ``phrases`` that ``sealed`` holds, in its text or in the bytes it encodes."""
    body = sealed.removeprefix("sw1.")
    carried = base64.urlsafe_b64decode(body + "=" * (-len(body) % 4))
    return [p for p in phrases if p in sealed or p.encode() in carried]
