"""What a request's credential proves: the :class:`Identity` a surface acts for.

With auth configured (``[auth] api_keys = true`` or ``[auth.oidc]``) every request needs
a credential: an API key (``sk-sw-...``, looked up by digest through a short-lived
cache), or an OIDC token (three dot-separated parts, verified against the issuer). The
principal is the key's tenant with the key's id as subject, or the token's tenant claim
with its ``sub``, each marked with its kind of credential (a ``sub`` equal to a key's id
is another caller: :attr:`Principal.scope`). Without auth configured every caller is the
default tenant, whatever it sends. Either way, the admin credential
(``[admin] api_key_env``) is recognized: it opens the admin routes and acts for no tenant.
"""

from __future__ import annotations

import hmac
import time
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import field
from functools import partial
from typing import TYPE_CHECKING, Final

from starlette.types import Scope

from stateway.core.errors import CredentialRevoked, Forbidden, Unauthorized
from stateway.core.immutable import immutable
from stateway.core.principal import Credential, Principal
from stateway.identity.key_cache import KeyCache
from stateway.identity.keys import ApiKey, key_digest, looks_like_key
from stateway.surfaces.auth.credentials import credential_of

if TYPE_CHECKING:  # the verifier loads PyJWT: only where OIDC is configured
    from stateway.identity.oidc import OidcVerifier

RECHECK_INTERVAL: Final = 5.0
"""Seconds between checks of the API key of a connection that outlasts its request (a
stream): :mod:`.revocation`."""

KEY_EXPIRED: Final = "This API key has expired."
TOKEN_EXPIRED: Final = "The token has expired."
"""The words an expired API key and an expired token (as the OIDC verifier words it) are
refused with: at admission, and where a connection they opened is ended
(:mod:`.revocation`)."""

IDENTITY: Final = "stateway.identity"
"""The ASGI scope key under which the HTTP middleware leaves a request's identity."""


@immutable
class Identity:
    principal: Principal | None
    """Who the requests act for; None for the admin credential when auth is configured
    (it reaches the admin routes, and no tenant's data)."""
    admin: bool = False
    authenticated: bool = False
    """A credential proved it (False: the default tenant of a gateway without auth)."""
    expires_at: float | None = None
    """When the credential expires (Unix time), if it does."""
    recheck: Callable[[], Awaitable[None]] | None = field(default=None, compare=False)
    """Checks the credential again, raising :class:`CredentialRevoked` once it no longer
    holds (an API key revoked since); None when only its expiry can end it."""
    recheck_every: float = RECHECK_INTERVAL
    """Seconds between those checks while a connection outlasts its request."""

    @property
    def expired(self) -> str:
        """What the credential is refused with once past ``expires_at``: the words of its
        refusal at admission (an API key's, a token's)."""
        principal = self.principal
        if principal is not None and principal.credential is Credential.API_KEY:
            return KEY_EXPIRED
        return TOKEN_EXPIRED


ANONYMOUS: Final = Identity(Principal())
"""Every caller of a gateway without auth configured."""


class Authenticator:
    def __init__(
        self,
        *,
        keys: KeyCache | None = None,
        oidc: OidcVerifier | None = None,
        admin_key: str | None = None,
        clock: Callable[[], float] = time.time,
        recheck_every: float = RECHECK_INTERVAL,
    ) -> None:
        """``keys``: API keys are accepted; ``oidc``: tokens are; neither: auth is not
        configured. ``admin_key``: the admin credential, when there is one.
        ``recheck_every``: seconds between checks of a streaming request's API key."""
        self._keys = keys
        self._oidc = oidc
        self._admin_key = None if admin_key is None else admin_key.encode()
        self._clock = clock
        self._recheck_every = recheck_every
        self._admin = Identity(
            None if self.required else Principal(subject="admin"), admin=True, authenticated=True
        )
        self.ignores_credentials = not self.required and admin_key is None
        """Whether every request is the default tenant whatever it sends (no auth
        configured, no admin credential): there is no credential to read."""

    @property
    def required(self) -> bool:
        """Whether every request needs a credential (auth is configured)."""
        return self._keys is not None or self._oidc is not None

    async def identify(self, headers: Iterable[tuple[bytes, bytes]]) -> Identity:
        """The identity a request's headers prove. Raises :class:`Unauthorized` (a
        missing or bad credential), ``IdentityUnavailable`` or ``StorageError`` (the
        credential could not be checked)."""
        if self.ignores_credentials:
            return ANONYMOUS  # no credential to read: whatever is sent is ignored
        try:
            credential = credential_of(headers)
        except Unauthorized:
            if self.required:
                raise
            return ANONYMOUS  # without auth, whatever is sent is ignored
        if credential is not None and self._is_admin(credential):
            return self._admin
        if not self.required:
            return ANONYMOUS
        if credential is None:
            raise Unauthorized(
                "Missing credentials: send 'Authorization: Bearer <API key or token>' "
                "or 'x-api-key: <API key>'."
            )
        if self._oidc is not None and credential.count(".") == 2:
            token = await self._oidc.verify(credential)
            principal = Principal(token.tenant_id, token.subject, Credential.TOKEN)
            return Identity(principal, authenticated=True, expires_at=token.expires_at)
        if self._keys is not None and looks_like_key(credential):
            return await self._key_identity(credential)
        raise Unauthorized("Incorrect API key provided.")

    def _is_admin(self, credential: str) -> bool:
        return self._admin_key is not None and hmac.compare_digest(
            credential.encode(), self._admin_key
        )

    async def _key_identity(self, credential: str) -> Identity:
        digest = key_digest(credential)
        key = await self._usable_key(digest)
        principal = Principal(key.tenant_id, key.id, Credential.API_KEY)
        recheck = partial(self._recheck_key, digest)
        return Identity(
            principal,
            authenticated=True,
            expires_at=key.expires_at,
            recheck=recheck,
            recheck_every=self._recheck_every,
        )

    async def _usable_key(self, digest: str) -> ApiKey:
        assert self._keys is not None
        key = await self._keys.find(digest)
        if key is None or not hmac.compare_digest(key.digest, digest):
            raise Unauthorized("Incorrect API key provided.")
        if key.revoked_at is not None:
            raise Unauthorized("This API key has been revoked.")
        if key.expired(self._clock()):
            raise Unauthorized(KEY_EXPIRED)
        return key

    async def _recheck_key(self, digest: str) -> None:
        """A key a connection was opened with, as the store knows it now (through the
        cache: a revocation is seen within its ``ttl``); one no longer usable raises
        :class:`CredentialRevoked`."""
        try:
            await self._usable_key(digest)
        except Unauthorized as refused:
            raise CredentialRevoked(refused.message) from None


def identity_of(scope: Scope) -> Identity:
    """The identity the HTTP middleware left in an ASGI ``scope``."""
    identity: Identity = scope[IDENTITY]
    return identity


def principal_of(scope: Scope) -> Principal:
    """Who a request acts for; the admin credential acts for no tenant
    (:class:`Forbidden`)."""
    principal = identity_of(scope).principal
    if principal is None:
        raise Forbidden(
            "The admin credential reaches the admin routes only; use a tenant's API key "
            "or token here."
        )
    return principal


async def current_principal(scope: Scope, now: float | None = None) -> Principal:
    """:func:`principal_of`, refused with :class:`CredentialRevoked` once the credential
    no longer holds (expired, or an API key revoked since): what a long-lived connection
    (a WebSocket session) asks before each request frame, its credential having been
    checked when it connected."""
    identity = identity_of(scope)
    expires_at = identity.expires_at
    if expires_at is not None and expires_at <= (time.time() if now is None else now):
        raise CredentialRevoked(identity.expired)
    if identity.recheck is not None:
        await identity.recheck()
    return principal_of(scope)
