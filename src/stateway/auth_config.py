"""The ``[auth]`` section of the configuration: who may call the gateway.

::

    [auth]
    api_keys = true                 # accept keys made by `stateway keys create`
    [auth.oidc]
    issuer = "https://idp.example"  # discovery at {issuer}/.well-known/openid-configuration
    audience = "stateway"
    tenant_claim = "org"
    jwks_refetch_cooldown = 1.0     # seconds between refetches triggered by an unknown kid

Auth is *configured* when ``api_keys`` is true or an ``[auth.oidc]`` table is present;
without it the gateway serves loopback addresses only (``stateway.exposure``). Read once
at start-up (a change needs a restart).
"""

from __future__ import annotations

from pydantic import Field, field_validator

from stateway.config_section import Section
from stateway.exposure import check_url_transport
from stateway.identity.oidc_settings import OidcSettings


class OidcConfig(Section):
    issuer: str
    """The issuer URL: ``https://``, or plain ``http://`` on a loopback host."""
    audience: str = Field(min_length=1)
    """What a token's ``aud`` must hold."""
    tenant_claim: str = Field(min_length=1)
    """The claim naming the caller's tenant."""
    jwks_refetch_cooldown: float = Field(default=1.0, ge=0)
    """Seconds between fetches of the JWKS that a token with an unknown ``kid`` triggers
    (and between retries of a failed fetch)."""
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
