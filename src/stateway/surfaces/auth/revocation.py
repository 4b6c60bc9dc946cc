"""A credential checked again while a connection outlasts the request that opened it.

Every request is authenticated as it arrives, so a revoked or expired credential's next
one is refused (401). What outlasts its arrival (an HTTP SSE stream, a background
response's watch, an MCP stream or long tool call) is ended once its credential no
longer holds, as a WebSocket connection is. A :class:`RevocationWatch` sees to it with
at most two timers and a task only while a check runs:

- an API key is checked again every ``recheck_every`` seconds of its
  :class:`~.authenticator.Identity` (5 by default), through the key cache as a
  WebSocket's request frames are (:func:`~.authenticator.current_principal`: a
  revocation is seen within the cache's TTL);
- a credential that expires (an API key with an expiry, an OIDC token) is ended at its
  ``expires_at``, on a timer: no check needed, refused in the words it would be refused
  with at admission.

A credential that can neither be revoked nor expire (a gateway without auth, the admin
credential, a key without expiry: its revocation only) costs no timer. A credential that
no longer holds is reported once, and the surface ends what it serves, in its protocol's
shape.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable

from starlette.types import Scope

from stateway.core.errors import CredentialRevoked, GatewayError
from stateway.surfaces.auth.authenticator import (
    IDENTITY,
    Identity,
    current_principal,
    identity_of,
)

Revoked = Callable[[CredentialRevoked], None]
"""Told once that the credential no longer holds, with the error to end the connection
with."""


class RevocationWatch:
    """Checks a request's API key every ``recheck_every`` seconds, and ends its credential
    at its expiry, until :meth:`stop`: calls ``revoked`` once it no longer holds (then
    watches no more)."""

    __slots__ = ("_check", "_expiry", "_identity", "_revoked", "_scope", "_timer")

    def __init__(self, scope: Scope, revoked: Revoked) -> None:
        self._scope = scope
        self._revoked = revoked
        self._identity = identity = identity_of(scope)
        self._check: asyncio.Task[None] | None = None
        loop = asyncio.get_running_loop()
        self._timer: asyncio.TimerHandle | None = None
        if identity.recheck is not None:
            self._timer = loop.call_later(identity.recheck_every, self._due)
        self._expiry: asyncio.TimerHandle | None = None
        if identity.expires_at is not None:
            left = identity.expires_at - time.time()
            self._expiry = loop.call_later(max(0.0, left), self._expired)

    @staticmethod
    def applies(scope: Scope) -> bool:
        """Whether the request's credential can stop holding (an API key's, a token's)."""
        identity: Identity | None = scope.get(IDENTITY)
        return identity is not None and (
            identity.recheck is not None or identity.expires_at is not None
        )

    @classmethod
    def start(cls, scope: Scope, revoked: Revoked) -> RevocationWatch | None:
        """A watch over the request's credential; None when it can neither be revoked nor
        expire."""
        if not cls.applies(scope):
            return None
        return cls(scope, revoked)

    def _expired(self) -> None:
        self._expiry = None
        self._report(CredentialRevoked(self._identity.expired))

    def _due(self) -> None:
        self._timer = None
        self._check = asyncio.get_running_loop().create_task(self._checking())

    async def _checking(self) -> None:
        try:
            await current_principal(self._scope)
        except CredentialRevoked as revoked:
            self._check = None
            self._report(revoked)
            return
        except GatewayError:  # the store unreachable: checked again next time
            pass
        self._check = None
        every = self._identity.recheck_every
        self._timer = asyncio.get_running_loop().call_later(every, self._due)

    def _report(self, revoked: CredentialRevoked) -> None:
        self.stop()
        self._revoked(revoked)

    def stop(self) -> None:
        for timer in (self._timer, self._expiry):
            if timer is not None:
                timer.cancel()
        self._timer = self._expiry = None
        if self._check is not None:
            self._check.cancel()
            self._check = None
