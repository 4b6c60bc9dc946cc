"""Admin routes: the config generation's status, and reloading it.

Served only when the admin credential's variable (``[admin] api_key_env``) is set; the
reload route only with ``[admin] reload_endpoint`` too (otherwise it does not exist: 404).
Both want ``Authorization: Bearer <key>`` (401 without it, or with another key).
"""

from __future__ import annotations

import hmac

from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import BaseRoute, Route

from stateway.core.commands import GetConfigStatus, Principal, ReloadConfig
from stateway.core.errors import Unauthorized
from stateway.core.gateway import Gateway
from stateway.core.generations import ConfigStatus
from stateway.surfaces.http.transport import JSONResponse

_BEARER = "bearer "


class AdminRoutes:
    def __init__(self, gateway: Gateway, key: str, reload_endpoint: bool) -> None:
        self._gateway = gateway
        self._key = key.encode()
        self._reload_endpoint = reload_endpoint

    def routes(self) -> list[BaseRoute]:
        served: list[BaseRoute] = [Route("/admin/config/status", self.status, methods=["GET"])]
        if self._reload_endpoint:
            served.append(Route("/admin/config/reload", self.reload, methods=["POST"]))
        return served

    async def status(self, request: Request) -> Response:
        self._authorize(request)
        status = await self._gateway.execute(Principal(), GetConfigStatus())
        return JSONResponse(_encode(status))

    async def reload(self, request: Request) -> Response:
        """200 with the new status; a rejected configuration is a 400 ``config_invalid``
        naming what is wrong (the status then reports it as ``last_error``)."""
        self._authorize(request)
        status = await self._gateway.execute(Principal(), ReloadConfig())
        return JSONResponse(_encode(status))

    def is_admin(self, request: Request) -> bool:
        """Whether the request carries the admin credential."""
        header = request.headers.get("authorization", "")
        given = header[len(_BEARER) :].strip().encode()
        return header.lower().startswith(_BEARER) and hmac.compare_digest(given, self._key)

    def _authorize(self, request: Request) -> None:
        header = request.headers.get("authorization", "")
        if not header.lower().startswith(_BEARER):
            raise Unauthorized("The admin routes need 'Authorization: Bearer <admin key>'.")
        if not self.is_admin(request):
            raise Unauthorized("Incorrect admin key provided.")


def _encode(status: ConfigStatus) -> dict[str, object]:
    return {
        "generation": status.generation,
        "loaded_at": status.loaded_at,
        "last_error": status.last_error,
        "restart_required": list(status.restart_required),
        "retiring": list(status.retiring),
    }
