"""The sealing key: from the configuration, else generated once and kept in the database.

``[security] sealing_key`` (or ``STATEWAY_SEALING_KEY``) is the base64 of 32 random bytes;
several gateways that share a database, or move to another one, agree on it by
configuration. Without one, the first gateway to start on a database generates a key and
inserts it into ``gateway_secrets`` unless a key is there already, then every gateway
(that first one included) reads back what the database holds: gateways starting together
for the first time agree on the one that won. The key is loaded once, at start-up.
"""

from __future__ import annotations

import base64
import binascii
import os
from typing import Final, Protocol

from stateway.sealing.aesgcm import KEY_BYTES

SEALING_KEY_SECRET: Final = "sealing_key"
"""Its name in ``gateway_secrets``."""


class SecretStore(Protocol):
    """Server-wide secrets by name (``storage/sql/secrets.py``)."""

    async def put_if_absent(self, name: str, value: str) -> str:
        """Store ``value`` under ``name`` unless a value is there; return the stored one."""
        ...


def parse_key(text: str) -> bytes:
    """The 32 bytes of a base64 key (standard or URL-safe alphabet, padding optional).
    Raises :class:`ValueError` saying what is wrong, never echoing the key."""
    cleaned = text.strip()
    padded = cleaned + "=" * (-len(cleaned) % 4)
    try:
        key = base64.b64decode(padded.replace("-", "+").replace("_", "/"), validate=True)
    except (binascii.Error, ValueError):
        raise ValueError("the sealing key is not valid base64") from None
    if len(key) != KEY_BYTES:
        raise ValueError(
            f"the sealing key must decode to {KEY_BYTES} bytes, not {len(key)} "
            "(make one with: openssl rand -base64 32)"
        )
    return key


def new_key_text() -> str:
    """A fresh random key, as base64 text."""
    return base64.b64encode(os.urandom(KEY_BYTES)).decode("ascii")


async def load_sealing_key(configured: str | None, secrets: SecretStore) -> bytes:
    """The configured key, else the database's (generated and stored on first use)."""
    if configured is not None:
        return parse_key(configured)
    stored = await secrets.put_if_absent(SEALING_KEY_SECRET, new_key_text())
    try:
        return parse_key(stored)
    except ValueError as exc:
        raise ValueError(f"the sealing key stored in the database is unusable: {exc}") from None
