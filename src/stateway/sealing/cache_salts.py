"""``TenantCacheSalts``: each tenant's ``cache_salt``, keyed by the server key.

Every tenant reaches a model server with the gateway's one set of credentials, so they
share its prefix (KV) cache; a tenant could learn, from how fast an answer starts or from
the ``cached_tokens`` it is told, whether another tenant recently sent a given prompt
prefix. vLLM keeps the cache of requests apart by their ``cache_salt``, which its
documentation wants random, protected from third parties and long enough to be
unpredictable (43 characters of base64: 256 bits). A backend with ``cache_salt =
"tenant"`` sends each call with its tenant's salt (``backend_config.py``).

The salt is the unpadded URL-safe base64 of HMAC-SHA256 over the tenant id, keyed by a
sub-key that HKDF-SHA256 (RFC 5869) derives from the server key under a label of its own,
so the sealing key itself keys nothing but sealing. It is therefore the same for a tenant
in every process sharing the key (replicas, restarts), cannot be guessed without the key,
and tells the model server nothing of the tenant id. Changing the server key changes
every salt (each tenant's cache starts cold once).
"""

from __future__ import annotations

import base64
import hmac
from typing import Final

from cryptography.hazmat.primitives.hashes import SHA256
from cryptography.hazmat.primitives.kdf.hkdf import HKDF

from stateway.sealing.aesgcm import KEY_BYTES

LABEL: Final = b"stateway cache_salt v1"
"""The HKDF ``info`` the sub-key is derived under (a new label: new salts)."""


REMEMBERED: Final = 4096
"""Tenants whose salt is kept once computed (every run is given its tenant's, whether a
backend sends it or not: a lookup, not an HMAC, per request); past it, the table starts
over."""


class TenantCacheSalts:
    """The :class:`~stateway.core.ports.CacheSalts` port under one server key."""

    __slots__ = ("_key", "_salts")

    def __init__(self, server_key: bytes) -> None:
        if len(server_key) != KEY_BYTES:
            raise ValueError(f"a server key is {KEY_BYTES} bytes, not {len(server_key)}")
        self._key = HKDF(algorithm=SHA256(), length=32, salt=None, info=LABEL).derive(server_key)
        self._salts: dict[str, str] = {}

    def salt(self, tenant_id: str) -> str:
        salt = self._salts.get(tenant_id)
        if salt is None:
            digest = hmac.digest(self._key, tenant_id.encode("utf-8"), "sha256")
            salt = base64.urlsafe_b64encode(digest).rstrip(b"=").decode("ascii")
            if len(self._salts) >= REMEMBERED:
                self._salts.clear()
            self._salts[tenant_id] = salt
        return salt
