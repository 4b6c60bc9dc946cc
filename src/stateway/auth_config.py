"""The ``[auth]`` section of the configuration: who may call the gateway.

::

    [auth]
    api_keys = true                 # accept keys made by `stateway keys create`
    [auth.oidc]
    issuer = "https://idp.example"  # discovery at {issuer}/.well-known/openid-configuration
    audience = "stateway"
    tenant_claim = "org"
    jwks_refetch_cooldown = 1.0     # seconds between refetches triggered by an unknown kid (>= 1)

Auth is *configured* when ``api_keys`` is true or an ``[auth.oidc]`` table is present;
without it the gateway serves loopback addresses only (``stateway.exposure``). Read once
at start-up (a change needs a restart).
"""

from __future__ import annotations

from typing import Final

from pydantic import Field, field_validator

from stateway.config_section import Section
from stateway.exposure import check_url_transport
from stateway.identity.oidc_settings import OidcSettings

MIN_JWKS_REFETCH_COOLDOWN: Final = 1.0
"""The shortest ``jwks_refetch_cooldown`` taken: each token naming a key the set lacks may
fetch it once per cooldown, so with none a client sending made-up ``kid`` values would
turn every request into a fetch from the identity provider (which may throttle the
gateway for it). One a second per process is what a provider rotating its keys needs
(Microsoft.IdentityModel's least refresh interval too)."""


class OidcConfig(Section):
    issuer: str
    """The issuer URL: ``https://``, or plain ``http://`` on a loopback host."""
    audience: str = Field(min_length=1)
    """What a token's ``aud`` must hold."""
    tenant_claim: str = Field(min_length=1)
    """The claim naming the caller's tenant."""
    jwks_refetch_cooldown: float = Field(default=1.0, ge=MIN_JWKS_REFETCH_COOLDOWN)
    """Seconds between fetches of the JWKS that a token with an unknown ``kid`` triggers
    (and between retries of a failed fetch); at least ``MIN_JWKS_REFETCH_COOLDOWN``."""
    timeout: float = Field(default=5.0, gt=0)
    """Seconds a fetch of the discovery document or the JWKS may take in all."""

    @field_validator("issuer")
    @classmethod
    def _issuer_url(cls, issuer: str) -> str:
        return check_url_transport(issuer, "auth.oidc.issuer")

    @property
    def settings(self) -> OidcSettings:
        return OidcSettings(
            self.issuer, self.audience, self.tenant_claim, self.jwks_refetch_cooldown, self.timeout
        )


class AuthConfig(Section):
    api_keys: bool = False
    """Accept the API keys made by ``stateway keys create`` (kept in the database)."""
    key_cache_ttl: float = Field(default=2.0, gt=0, le=300)
    """Seconds a looked-up key is trusted before the database is asked again: how long
    a new key may wait to be accepted, and a revoked one may still be."""
    oidc: OidcConfig | None = None

    @property
    def configured(self) -> bool:
        return self.api_keys or self.oidc is not None
