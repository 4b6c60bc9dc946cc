"""Admin routes: the config generation's status, and reloading it.

Served only when the admin credential's variable (``[admin] api_key_env``) is set; the
reload route only with ``[admin] reload_endpoint`` too (otherwise it does not exist: 404).
Both want the admin credential, as ``Authorization: Bearer <key>`` or ``x-api-key``
(recognized by the authenticator, ``surfaces/auth``): 401 without it or with a wrong
one, 403 with a tenant's valid API key or token.
"""

from __future__ import annotations

from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import BaseRoute, Route

from stateway.core.commands import GetConfigStatus, ReloadConfig
from stateway.core.errors import Forbidden, Unauthorized
from stateway.core.gateway import Gateway
from stateway.core.generations import ConfigStatus
from stateway.core.principal import Principal
from stateway.surfaces.asgi.answers import JSONResponse
from stateway.surfaces.auth.authenticator import identity_of


class AdminRoutes:
    def __init__(self, gateway: Gateway, reload_endpoint: bool) -> None:
        self._gateway = gateway
        self._reload_endpoint = reload_endpoint

    def routes(self) -> list[BaseRoute]:
        served: list[BaseRoute] = [Route("/admin/config/status", self.status, methods=["GET"])]
        if self._reload_endpoint:
            served.append(Route("/admin/config/reload", self.reload, methods=["POST"]))
        return served

    async def status(self, request: Request) -> Response:
        authorize_admin(request)
        status = await self._gateway.execute(Principal(), GetConfigStatus())
        return JSONResponse(_encode(status))

    async def reload(self, request: Request) -> Response:
        """200 with the new status; a rejected configuration is a 400 ``config_invalid``
        naming what is wrong (the status then reports it as ``last_error``)."""
        authorize_admin(request)
        status = await self._gateway.execute(Principal(), ReloadConfig())
        return JSONResponse(_encode(status))


def authorize_admin(request: Request) -> None:
    """Refuse a request that does not carry the admin credential."""
    identity = identity_of(request.scope)
    if identity.admin:
        return
    if identity.authenticated:
        raise Forbidden("This route needs the admin credential; a tenant's does not reach it.")
    raise Unauthorized("The admin routes need 'Authorization: Bearer <admin key>'.")


async def require_admin(request: Request) -> None:
    """:func:`authorize_admin` for routes that take an awaitable check (``/metrics``)."""
    authorize_admin(request)


def _encode(status: ConfigStatus) -> dict[str, object]:
    return {
        "generation": status.generation,
        "loaded_at": status.loaded_at,
        "last_error": status.last_error,
        "restart_required": list(status.restart_required),
        "retiring": list(status.retiring),
    }
