"""``GET /metrics``: the Prometheus text exposition.

Open while no authentication is configured (a gateway without auth binds loopback);
given an ``authorize`` (``admin.require_admin``, when auth is configured), only
what it lets through is answered: it raises the 401/403 error otherwise.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable

from starlette.requests import Request
from starlette.responses import Response

Exposition = Callable[[], tuple[bytes, str]]
"""The metrics' text and its content type."""

Authorize = Callable[[Request], Awaitable[None]]
"""Raises a :class:`~stateway.core.errors.GatewayError` for a caller who may not read."""


class MetricsRoutes:
    def __init__(self, exposition: Exposition, authorize: Authorize | None = None) -> None:
        self._exposition = exposition
        self._authorize = authorize

    async def metrics(self, request: Request) -> Response:
        if self._authorize is not None:
            await self._authorize(request)
        body, content_type = self._exposition()
        return Response(body, headers={"content-type": content_type})
