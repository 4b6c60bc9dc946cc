"""OpenID Connect bearer tokens, verified with PyJWT.

The issuer's discovery document (``{issuer}/.well-known/openid-configuration``) names
its JWKS (read again after a fetch of the key set failed: a provider may move it). Both
are fetched for the first token, not at start-up (a gateway starts while
its identity provider is down, and answers tokens with 503 until it is back), each
within ``timeout`` seconds in all and ``MAX_DOCUMENT`` bytes (:mod:`.oidc_documents`).
The key set is kept for ``JWKS_MAX_AGE`` seconds, and fetched again at once for a token
naming a key it lacks (the provider rotated its keys), at most once per
``refetch_cooldown`` seconds from the end of the last fetch: a flood of tokens with
made-up key ids costs the provider one fetch per cooldown, and the tokens that waited
for a slow fetch do not each fetch again. A fetch that fails is not retried within the
cooldown either; while it fails, a key set already fetched keeps serving, however old.
While a fetch is under way, a token whose key the set already holds does not wait for
it: a slow provider holds up the token that asked, not every token.

A token verified once is remembered (up to ``MAX_VERIFIED`` of them) until it expires or
the key set is fetched again, so that a client sending the same token on every request
pays for one signature check (tens of microseconds for RSA, more for ECDSA), not one per
request.

A token is accepted when it is signed with an asymmetric algorithm (``none`` and HMAC
are refused: a public key is no shared secret) by a published key, its ``iss`` is the
issuer's, its ``aud`` holds the audience, and it has not expired (``exp`` is required;
``nbf`` and ``iat`` are checked when present, the issuer's clock allowed to run up to
``CLOCK_SKEW`` seconds ahead: a token used as soon as it is issued is not refused for
being dated a second in the future; ``exp`` is kept to the second, as the streams a
token opened end then). Its tenant is the ``tenant_claim`` claim, its subject ``sub``.
No token ever reaches a log line or an error message.

This module is imported only where OIDC is configured (PyJWT and what it loads are ~6 MiB
of a process).
"""

from __future__ import annotations

import asyncio
import logging
import math
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Final

import jwt
from jwt import PyJWK

from stateway.core.errors import IdentityUnavailable, Unauthorized
from stateway.exposure import check_url_transport
from stateway.identity.keys import TENANT_PATTERN
from stateway.identity.oidc_documents import DocumentUnusable, fetch_document
from stateway.identity.oidc_settings import OidcSettings

log = logging.getLogger(__name__)

ALGORITHMS: Final = (
    "RS256",
    "RS384",
    "RS512",
    "PS256",
    "PS384",
    "PS512",
    "ES256",
    "ES384",
    "ES512",
    "EdDSA",
)
"""Signing algorithms accepted: asymmetric ones only."""
JWKS_MAX_AGE: Final = 300.0
"""Seconds a fetched key set is used before it is fetched again."""
CLOCK_SKEW: Final = 60
"""Seconds a token's ``nbf`` and ``iat`` may lie ahead of this gateway's clock."""
MAX_SUBJECT: Final = 255
MAX_VERIFIED: Final = 4096
"""Verified tokens remembered (the oldest forgotten first)."""
DISCOVERY_PATH: Final = "/.well-known/openid-configuration"


@dataclass(frozen=True, slots=True)
class VerifiedToken:
    tenant_id: str
    subject: str
    expires_at: float


class OidcVerifier:
    def __init__(
        self,
        settings: OidcSettings,
        *,
        clock: Callable[[], float] = time.monotonic,
        wall: Callable[[], float] = time.time,
    ) -> None:
        """``clock`` times fetches; ``wall`` (Unix time) expires remembered tokens."""
        self._settings = settings
        self._clock = clock
        self._wall = wall
        self._verified: dict[str, VerifiedToken] = {}
        self._issuer = settings.issuer
        """As the discovery document spells it: what ``iss`` must be."""
        self._jwks_uri: str | None = None
        """The key set's URL, as the discovery document names it (None: not read yet)."""
        self._keys: tuple[PyJWK, ...] = ()
        """The key set's signing keys, as it lists them."""
        self._fetched_at: float | None = None
        """When the key set was last fetched (``clock``), None before the first time."""
        self._attempted_at: float | None = None
        """When the last fetch ended (``clock``): the cooldown runs from there."""
        self._failing = False
        """Whether the last fetch failed."""
        self._lock = asyncio.Lock()

    async def verify(self, token: str) -> VerifiedToken:
        """The token's tenant, subject and expiry. Raises :class:`Unauthorized` for a
        token that is not valid, :class:`IdentityUnavailable` when the identity provider
        cannot say (its discovery document or JWKS could not be fetched)."""
        known = self._verified.get(token)
        if known is not None:
            if known.expires_at <= self._wall():
                del self._verified[token]
                raise Unauthorized("The token has expired.")
            return known
        alg, kid = _header(token)
        key = self._fresh_key(alg, kid) or await self._fetched_key(alg, kid)
        verified = self._identity(self._decode(token, key, alg))
        self._verified[token] = verified
        if len(self._verified) > MAX_VERIFIED:
            del self._verified[next(iter(self._verified))]
        return verified

    def _fresh_key(self, alg: str, kid: str | None) -> PyJWK | None:
        fetched = self._fetched_at
        if fetched is None or self._clock() - fetched >= JWKS_MAX_AGE:
            return None
        return self._key(alg, kid)

    def _key(self, alg: str, kid: str | None) -> PyJWK | None:
        """The key of the token's algorithm under its ``kid`` (keys of different types may
        share one, RFC 7517); for a token naming none, the only key of its algorithm (a
        provider with a single key may leave ``kid`` out)."""
        keys = [key for key in self._keys if key.algorithm_name == alg]
        if kid is None:
            return keys[0] if len(keys) == 1 else None
        return next((key for key in keys if key.key_id == kid), None)

    async def _fetched_key(self, alg: str, kid: str | None) -> PyJWK:
        if self._lock.locked():  # a fetch under way: a key already known serves meanwhile
            known = self._key(alg, kid)
            if known is not None:
                return known
        async with self._lock:
            key = self._fresh_key(alg, kid)  # fetched by another request meanwhile
            if key is not None:
                return key
            attempted = self._attempted_at
            now = self._clock()
            if attempted is not None and now - attempted < self._settings.refetch_cooldown:
                return self._known_key(alg, kid)
            try:
                keys = await self._fetch()
            except IdentityUnavailable:
                self._attempted_at, self._failing = self._clock(), True
                if self._keys:  # keep serving what was fetched before
                    return self._known_key(alg, kid)
                raise
            self._keys, self._fetched_at, self._failing = keys, self._clock(), False
            self._attempted_at = self._fetched_at
            self._verified.clear()  # a key may have gone: its tokens are checked again
            return self._known_key(alg, kid)

    def _known_key(self, alg: str, kid: str | None) -> PyJWK:
        key = self._key(alg, kid)
        if key is not None:
            return key
        if self._failing:
            raise _unavailable(self._settings.refetch_cooldown)
        raise Unauthorized("The token is signed with a key the identity provider does not publish.")

    async def _fetch(self) -> tuple[PyJWK, ...]:
        """Discovery (until it has once succeeded, and again after a failed fetch: the
        provider may have moved its key set), then the key set's signing keys."""
        try:
            if self._jwks_uri is None:
                self._jwks_uri = await self._discover()
            document = await fetch_document(self._jwks_uri, "the key set", self._settings.timeout)
            return _signing_keys(document)
        except DocumentUnusable as unusable:
            self._jwks_uri = None
            log.warning(
                "oidc: the identity provider %s gave no key set: %s", self._issuer, unusable
            )
            raise _unavailable(self._settings.refetch_cooldown) from None

    async def _discover(self) -> str:
        """The key set's URL; what ``iss`` must be, as the document spells it, kept."""
        issuer = self._settings.issuer
        url = issuer.rstrip("/") + DISCOVERY_PATH
        document = await fetch_document(url, "the discovery document", self._settings.timeout)
        named, jwks_uri = document.get("issuer"), document.get("jwks_uri")
        if not isinstance(named, str) or named.rstrip("/") != issuer.rstrip("/"):
            raise DocumentUnusable(f"the discovery document names another issuer: {named!r}")
        if not isinstance(jwks_uri, str):
            raise DocumentUnusable("the discovery document has no jwks_uri")
        try:
            check_url_transport(jwks_uri, "jwks_uri")
        except ValueError as refused:
            raise DocumentUnusable(str(refused)) from None
        self._issuer = named
        return jwks_uri

    def _decode(self, token: str, key: PyJWK, alg: str) -> dict[str, Any]:
        try:
            claims: dict[str, Any] = jwt.decode(
                token,
                key,  # verifies with the key's own algorithm, which must be the token's
                algorithms=[alg],
                audience=self._settings.audience,
                issuer=self._issuer,
                leeway=CLOCK_SKEW,  # for nbf and iat: exp is checked to the second below
                options={"require": ["exp", "iss", "aud", "sub"]},
            )
        except jwt.ExpiredSignatureError:
            raise Unauthorized("The token has expired.") from None
        except jwt.ImmatureSignatureError:
            raise Unauthorized("The token is not valid yet.") from None
        except jwt.InvalidAudienceError:
            raise Unauthorized("The token is not meant for this gateway (audience).") from None
        except jwt.InvalidIssuerError:
            raise Unauthorized("The token was issued by another issuer.") from None
        except jwt.InvalidSignatureError:
            raise Unauthorized("The token's signature does not verify.") from None
        except jwt.PyJWTError:
            raise Unauthorized("The token is not valid.") from None
        return claims

    def _identity(self, claims: dict[str, Any]) -> VerifiedToken:
        try:
            expires_at = float(claims["exp"])
        except OverflowError:  # an integer past any float: no time a timer could keep
            raise Unauthorized("The token is not valid.") from None
        if expires_at <= self._wall():  # within CLOCK_SKEW past its exp
            raise Unauthorized("The token has expired.")
        claim = self._settings.tenant_claim
        tenant = claims.get(claim)
        if not isinstance(tenant, str) or TENANT_PATTERN.fullmatch(tenant) is None:
            raise Unauthorized(f"The token's '{claim}' claim names no valid tenant.")
        subject = claims["sub"]
        if not isinstance(subject, str) or not subject or len(subject) > MAX_SUBJECT:
            raise Unauthorized("The token's 'sub' claim is not a valid subject.")
        return VerifiedToken(tenant, subject, expires_at)


def _signing_keys(document: dict[str, Any]) -> tuple[PyJWK, ...]:
    """A key set's keys that can check a token: for signatures (``use`` ``sig``, or none
    said), of an accepted algorithm (RFC 7517 makes ``kid`` and ``alg`` optional: a key
    naming neither has its type's), those PyJWT can read (others are skipped, as a
    provider's keys of another kind are)."""
    listed = document.get("keys")
    if not isinstance(listed, list):
        raise DocumentUnusable("the key set has no 'keys' list")
    keys: list[PyJWK] = []
    for jwk in listed:
        if not isinstance(jwk, dict) or jwk.get("use", "sig") != "sig":
            continue
        try:
            key = PyJWK(jwk)
        except (jwt.PyJWTError, TypeError, ValueError):  # TypeError: an "alg" not a string
            continue
        if key.algorithm_name in ALGORITHMS:
            keys.append(key)
    if not keys:
        raise DocumentUnusable("the key set has no signing key of an accepted algorithm")
    return tuple(keys)


def _header(token: str) -> tuple[str, str | None]:
    """The token's algorithm (an accepted one) and key id, read before verifying."""
    try:
        header = jwt.get_unverified_header(token)
    except jwt.PyJWTError:
        raise Unauthorized("The bearer token is not a well-formed JWT.") from None
    alg, kid = header.get("alg"), header.get("kid")
    if alg not in ALGORITHMS:
        raise Unauthorized(
            f"The token's signing algorithm is not accepted; use one of {', '.join(ALGORITHMS)}."
        )
    if kid is not None and not isinstance(kid, str):
        raise Unauthorized("The token's 'kid' header is not a string.")
    return alg, kid


def _unavailable(cooldown: float) -> IdentityUnavailable:
    """The 503 of a provider that failed: retried before ``cooldown`` passes, a token
    meets the same failure unasked (whole seconds, at least one)."""
    return IdentityUnavailable(
        "The identity provider could not be reached to check the token.",
        retry_after=max(1, math.ceil(cooldown)),
    )
