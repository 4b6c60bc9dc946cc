"""``/mcp`` as mounted: the MCP surface built and started by its first request.

The ``mcp`` SDK (its server, transports and protocol types) is the largest import of a
serving process, ~20 MiB. A gateway nobody drives over MCP should not carry it, so the
HTTP app mounts an :class:`McpMount`: at the first request to ``/mcp`` it imports
:mod:`.server`, builds the :class:`~.server.McpSurface` and enters its session manager in
a task of its own (the SDK's task group must be left by the task that entered it), which
:meth:`McpMount.aclose` ends at shutdown. A ``POST``'s body is read here, ahead of the
surface, within the bounds of every route's (:func:`~.limits.body_read_ahead`), so that
its bounds hold from its first byte, the first request's too, whose surface's start
(the SDK's import) holds the event loop for a while.
"""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING

from starlette.requests import ClientDisconnect
from starlette.types import Receive, Scope, Send

from stateway.core.errors import GatewayError, ServerShuttingDown
from stateway.core.gateway import Gateway
from stateway.surfaces.asgi.answers import error_response
from stateway.surfaces.mcp.limits import McpLimits, body_read_ahead

if TYPE_CHECKING:
    from stateway.surfaces.mcp.server import McpSurface


class McpMount:
    """The ``/mcp`` ASGI app; :meth:`aclose` when the server stops."""

    def __init__(
        self,
        gateway: Gateway,
        version: str = "",
        limits: McpLimits | None = None,
        origins: frozenset[str] = frozenset(),
    ) -> None:
        """``origins``: the web pages' origins allowed besides the gateway's own."""
        self._gateway = gateway
        self._version = version
        self._limits = limits or McpLimits()
        self._origins = origins
        self._surface: asyncio.Future[McpSurface] | None = None
        self._serving: asyncio.Task[None] | None = None
        self._stop = asyncio.Event()

    @property
    def started(self) -> bool:
        return self._surface is not None

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if self._stop.is_set():
            await error_response(ServerShuttingDown())(scope, receive, send)
            return
        try:  # before the surface: its first start (the SDK's import) holds the loop
            receive = await body_read_ahead(scope, receive, self._limits)
        except GatewayError as error:
            await error_response(error)(scope, receive, send)
            return
        except ClientDisconnect:
            return  # nobody to answer
        if self._surface is None:
            self._surface = asyncio.get_running_loop().create_future()
            self._serving = asyncio.create_task(self._serve(self._surface))
        # Shielded: a first caller that leaves does not take the start-up with it.
        surface = await asyncio.shield(self._surface)
        await surface(scope, receive, send)

    async def _serve(self, started: asyncio.Future[McpSurface]) -> None:
        try:
            from stateway.surfaces.mcp.server import McpSurface

            surface = McpSurface(self._gateway, self._version, self._limits, origins=self._origins)
            async with surface.running():
                started.set_result(surface)
                await self._stop.wait()
        except BaseException as exc:
            if not started.done():
                started.set_exception(exc)
            raise

    async def aclose(self) -> None:
        """Stop the surface (its sessions and subscriptions end), if it was started."""
        self._stop.set()
        if self._serving is not None:
            await self._serving
