"""The request-loop check: a request the gateway itself sent upstream, come back to it
(a backend's URL pointing at the gateway: :mod:`stateway.core.hops`), is refused before
any route or credential check with 508 ``loop_detected``, in the OpenAI error shape, so
that the gateway's own upstream call fails at once with a message that says why.

A request passes with one header scan; only one carrying a ``Via`` is looked at further.
"""

from __future__ import annotations

import logging
from typing import Final

from starlette.types import ASGIApp, Receive, Scope, Send

from stateway.core.errors import RequestLoop
from stateway.core.hops import Hop
from stateway.surfaces.asgi.answers import error_response

LOOP_STATUS: Final = RequestLoop.status

log = logging.getLogger(__name__)


class LoopGuard:
    """Pure ASGI middleware: an HTTP request whose ``Via`` names ``hop`` (this process)
    is answered 508; others pass untouched."""

    def __init__(self, app: ASGIApp, hop: Hop) -> None:
        self.app = app
        self.hop = hop

    def passes(self, scope: Scope) -> bool:
        """Whether the request passes untouched (what an express route asks first,
        :mod:`stateway.surfaces.http.express`): it is not one this process sent."""
        for name, value in scope["headers"]:
            if name == b"via" and self.hop.sent(value.decode("latin-1")):
                return False
        return True

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or self.passes(scope):
            await self.app(scope, receive, send)
            return
        log.error(
            "request loop: refused %s %s, which this gateway sent itself: a backend's url "
            "points at the gateway",
            scope["method"],
            scope["path"],
        )
        await error_response(RequestLoop())(scope, receive, send)
