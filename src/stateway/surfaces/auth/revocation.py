"""An API key checked again while a connection outlasts the request that opened it.

Every request is authenticated as it arrives, so a revoked key's next one is refused
(401). What outlasts its arrival (an HTTP SSE stream, a background response's watch, an
MCP stream or long tool call) has its key checked again every ``recheck_every`` seconds
of its :class:`~.authenticator.Identity` (5 by default), through the key cache as a
WebSocket's request frames are (:func:`~.authenticator.current_principal`: a revocation
is seen within the cache's TTL). A :class:`RevocationWatch` is that check: a timer
between checks and a task only while one runs, so a stream pays one timer for it, and
only when its identity can be revoked (an API key: not a gateway without auth, not the
admin credential, not an OIDC token). A key that no longer holds (revoked, or gone from
the store) is reported once, and the surface ends what it serves, in its protocol's
shape. An expired credential is only refused from then on, its streams going on, as a
WebSocket's do.
"""

from __future__ import annotations

import asyncio
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
"""Told once that the key no longer holds, with the error to end the connection with."""


class RevocationWatch:
    """Checks a request's API key every ``recheck_every`` seconds until :meth:`stop`,
    calling ``revoked`` once it no longer holds (then checking no more)."""

    __slots__ = ("_check", "_every", "_revoked", "_scope", "_timer")

    def __init__(self, scope: Scope, revoked: Revoked, every: float) -> None:
        self._scope = scope
        self._revoked = revoked
        self._every = every
        self._check: asyncio.Task[None] | None = None
        self._timer: asyncio.TimerHandle | None = asyncio.get_running_loop().call_later(
            every, self._due
        )

    @staticmethod
    def applies(scope: Scope) -> bool:
        """Whether the request's credential can be revoked (an API key's)."""
        identity: Identity | None = scope.get(IDENTITY)
        return identity is not None and identity.recheck is not None

    @classmethod
    def start(cls, scope: Scope, revoked: Revoked) -> RevocationWatch | None:
        """A watch over the request's key; None when its credential cannot be revoked
        (no API key)."""
        if not cls.applies(scope):
            return None
        return cls(scope, revoked, identity_of(scope).recheck_every)

    def _due(self) -> None:
        self._timer = None
        self._check = asyncio.get_running_loop().create_task(self._checking())

    async def _checking(self) -> None:
        try:
            await current_principal(self._scope)
        except CredentialRevoked as revoked:
            self._check = None
            self._revoked(revoked)
            return
        except GatewayError:  # expired (refused from now on), or the store unreachable
            pass
        self._check = None
        self._timer = asyncio.get_running_loop().call_later(self._every, self._due)

    def stop(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        if self._check is not None:
            self._check.cancel()
            self._check = None
