"""``AesGcmSealer``: the :class:`~stateway.core.ports.Sealer` port over AES-256-GCM.

A sealed value is text: ``"sw1."`` (the format version) followed by the unpadded URL-safe
base64 of a random 96-bit nonce, the ciphertext and its 128-bit tag. The associated data
binds it to its use: the version, the item kind (``compaction``, ``reasoning``) and the
tenant, so a blob sealed for one tenant or kind does not open as another's. Any change to
a single bit, a truncation, another key, kind or tenant makes :meth:`AesGcmSealer.unseal`
answer None; nothing tells the caller which.

Random nonces are safe for far more seals than one key will see (the usual bound for
AES-GCM with random 96-bit nonces is 2**32 messages per key).
"""

from __future__ import annotations

import base64
import binascii
import os
from typing import Final

from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives.ciphers.aead import AESGCM

VERSION: Final = "sw1"
PREFIX: Final = VERSION + "."
KEY_BYTES: Final = 32
NONCE_BYTES: Final = 12
TAG_BYTES: Final = 16


class AesGcmSealer:
    """Seals and opens with one 256-bit key."""

    def __init__(self, key: bytes) -> None:
        if len(key) != KEY_BYTES:
            raise ValueError(f"a sealing key is {KEY_BYTES} bytes, not {len(key)}")
        self._aead = AESGCM(key)

    def seal(self, kind: str, tenant_id: str, plaintext: bytes) -> str:
        nonce = os.urandom(NONCE_BYTES)
        sealed = self._aead.encrypt(nonce, plaintext, _associated(kind, tenant_id))
        return PREFIX + base64.urlsafe_b64encode(nonce + sealed).rstrip(b"=").decode("ascii")

    def owns(self, sealed: str) -> bool:
        return sealed.startswith(PREFIX)

    def unseal(self, kind: str, tenant_id: str, sealed: str) -> bytes | None:
        if not sealed.startswith(PREFIX) or not sealed.isascii():
            return None
        body = sealed[len(PREFIX) :]
        if "=" in body:  # never written: one text per sealed value
            return None
        try:  # strict: a character outside the alphabet is an error, not skipped
            raw = base64.b64decode(body + "=" * (-len(body) % 4), altchars=b"-_", validate=True)
        except (binascii.Error, ValueError):
            return None
        if len(raw) < NONCE_BYTES + TAG_BYTES:
            return None
        nonce, ciphertext = raw[:NONCE_BYTES], raw[NONCE_BYTES:]
        try:
            return self._aead.decrypt(nonce, ciphertext, _associated(kind, tenant_id))
        except InvalidTag:
            return None


def _associated(kind: str, tenant_id: str) -> bytes:
    """Version, kind and tenant, each length-prefixed so no two triples encode alike."""
    parts = [VERSION.encode(), kind.encode(), tenant_id.encode()]
    return b"".join(len(part).to_bytes(4, "big") + part for part in parts)
