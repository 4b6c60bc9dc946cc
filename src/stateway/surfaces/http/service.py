"""Service routes: model listing, liveness and readiness."""

from __future__ import annotations

from starlette.requests import Request
from starlette.responses import Response

from stateway.core.commands import CheckReadiness, ListModels, Principal
from stateway.core.gateway import Gateway
from stateway.protocols.messages.encode import encode_model_list
from stateway.surfaces.auth.authenticator import principal_of
from stateway.surfaces.http.transport import JSONResponse


class ServiceRoutes:
    def __init__(self, gateway: Gateway) -> None:
        self._gateway = gateway

    async def models(self, request: Request) -> Response:
        listing = await self._gateway.execute(principal_of(request.scope), ListModels())
        if "anthropic-version" in request.headers:  # an Anthropic client: its shape
            return JSONResponse(encode_model_list(listing.models))
        data = [
            {"id": model, "object": "model", "created": 0, "owned_by": backend}
            for model, backend in listing.models
        ]
        return JSONResponse({"object": "list", "data": data})

    async def health(self, request: Request) -> Response:
        return JSONResponse({"status": "ok"})

    async def ready(self, request: Request) -> Response:
        """200 when storage answers, else 503; upstream reachability is reported only.
        Open to anyone (probes send no credential), like ``/health``."""
        readiness = await self._gateway.execute(Principal(), CheckReadiness())
        body = {
            "status": "ready" if readiness.ready else "not_ready",
            "storage": "ok" if readiness.storage_error is None else readiness.storage_error,
            "upstreams": {
                name: "reachable" if answered else "unreachable"
                for name, answered in readiness.upstreams.items()
            },
        }
        return JSONResponse(body, status_code=200 if readiness.ready else 503)
