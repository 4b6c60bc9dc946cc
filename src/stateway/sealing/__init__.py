"""Sealing: content the gateway hands to clients that they may carry but neither read nor
forge (``encrypted_content`` of ``compaction`` and ``reasoning`` items).

The core sees only the :class:`~stateway.core.ports.Sealer` port. This package holds its
adapter, :class:`AesGcmSealer` (AES-256-GCM, :mod:`.aesgcm`), and the server key's
life cycle (:mod:`.keys`: from the configuration, else generated once and kept in the
database). See ``docs/adr/0013-sealing.md``. The same key, through a sub-key of their own,
keys each tenant's ``cache_salt`` (:mod:`.cache_salts`).
"""

from stateway.sealing.aesgcm import AesGcmSealer
from stateway.sealing.cache_salts import TenantCacheSalts
from stateway.sealing.keys import SEALING_KEY_SECRET, SecretStore, load_sealing_key, parse_key

__all__ = [
    "SEALING_KEY_SECRET",
    "AesGcmSealer",
    "SecretStore",
    "TenantCacheSalts",
    "load_sealing_key",
    "parse_key",
]
