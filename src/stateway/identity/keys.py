"""API keys: their format, what is stored of them, and the port that stores them.

A key is ``sk-sw-`` followed by 43 base64url characters: 32 random bytes (256 bits).
Only its SHA-256 digest is stored, never the key: a key that random cannot be guessed
from its digest, so a slow password hash would only cost every request time
(docs/adr/0016-authentication.md). The digest is also how a key is looked up.
"""

from __future__ import annotations

import base64
import hashlib
import os
import re
from dataclasses import dataclass
from typing import Final, Protocol

KEY_PREFIX: Final = "sk-sw-"
KEY_BYTES: Final = 32
KEY_LENGTH: Final = len(KEY_PREFIX) + 43
"""Characters in a key: the prefix and 32 bytes in unpadded base64url."""
KEY_PATTERN: Final = re.compile(re.escape(KEY_PREFIX) + r"[A-Za-z0-9_-]{43}")

TENANT_PATTERN: Final = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,127}")
"""A tenant id: it appears in resource URIs (``stateway://{tenant}/...``) and keys of the
shared coordination store, so it is kept to letters, digits, ``.``, ``_`` and ``-``."""


@dataclass(frozen=True, slots=True)
class ApiKey:
    """What is stored of a key."""

    id: str
    tenant_id: str
    name: str | None
    digest: str
    """SHA-256 of the key, hexadecimal."""
    created_at: float
    expires_at: float | None = None
    revoked_at: float | None = None

    def expired(self, now: float) -> bool:
        return self.expires_at is not None and self.expires_at <= now


class KeyStore(Protocol):
    """Where keys are kept (the database a gateway uses)."""

    async def add(self, key: ApiKey) -> None: ...

    async def find(self, digest: str) -> ApiKey | None:
        """The key with this digest, revoked or not; None when there is none."""
        ...

    async def list(self) -> list[ApiKey]:
        """Every key, oldest first."""
        ...

    async def revoke(self, key_id: str, now: float) -> ApiKey | None:
        """Mark the key revoked at ``now`` (a revoked key keeps its first revocation
        time); None when no key has this id."""
        ...


def new_key() -> str:
    """A fresh key, shown once to whoever creates it."""
    random = base64.urlsafe_b64encode(os.urandom(KEY_BYTES)).rstrip(b"=").decode()
    return KEY_PREFIX + random


def key_digest(key: str) -> str:
    return hashlib.sha256(key.encode()).hexdigest()


def looks_like_key(credential: str) -> bool:
    """Whether ``credential`` has a key's shape (not whether such a key exists): what
    has not is refused before any lookup."""
    return KEY_PATTERN.fullmatch(credential) is not None


def checked_tenant(tenant_id: str) -> str:
    """``tenant_id`` when it is a usable tenant id, else :class:`ValueError`."""
    if TENANT_PATTERN.fullmatch(tenant_id) is None:
        raise ValueError(
            f"tenant {tenant_id!r} is not a valid tenant id: 1 to 128 letters, digits, "
            "'.', '_' or '-', starting with a letter or digit"
        )
    return tenant_id
