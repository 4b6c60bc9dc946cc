"""What an ``[auth.oidc]`` table configures (:mod:`stateway.auth_config`), apart from the
verifier (:mod:`.oidc`), which loads PyJWT and with it ~6 MiB a gateway without OIDC
does not need."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class OidcSettings:
    issuer: str
    audience: str
    tenant_claim: str
    refetch_cooldown: float = 1.0
    timeout: float = 5.0
    """Seconds a fetch of the discovery document or the JWKS may take in all."""
