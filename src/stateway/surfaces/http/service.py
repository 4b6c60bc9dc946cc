"""Service routes: model listing, liveness and readiness."""

from __future__ import annotations

import asyncio

from starlette.requests import Request
from starlette.responses import Response

from stateway.core.commands import ListModels, Principal
from stateway.core.errors import GatewayError, StorageError
from stateway.core.gateway import Gateway
from stateway.core.ports import Backend, ResponseStore
from stateway.surfaces.http.transport import JSONResponse


class ServiceRoutes:
    def __init__(self, gateway: Gateway, store: ResponseStore, backends: list[Backend]) -> None:
        self._gateway = gateway
        self._store = store
        self._backends = backends

    async def models(self, request: Request) -> Response:
        listing = await self._gateway.execute(Principal(), ListModels())
        data = [
            {"id": model, "object": "model", "created": 0, "owned_by": backend}
            for model, backend in listing.models
        ]
        return JSONResponse({"object": "list", "data": data})

    async def health(self, request: Request) -> Response:
        return JSONResponse({"status": "ok"})

    async def ready(self, request: Request) -> Response:
        """Ready when storage answers; upstream reachability is reported, not required."""
        storage = "ok"
        try:
            await self._store.ping()
        except StorageError as exc:
            storage = f"unreachable: {exc.message}"
        reachability = await asyncio.gather(*(_probe(b) for b in self._backends))
        upstreams = {b.name: state for b, state in zip(self._backends, reachability, strict=True)}
        ready = storage == "ok"
        body = {
            "status": "ready" if ready else "not_ready",
            "storage": storage,
            "upstreams": upstreams,
        }
        return JSONResponse(body, status_code=200 if ready else 503)


async def _probe(backend: Backend) -> str:
    try:
        await backend.list_models()
    except GatewayError:
        return "unreachable"
    return "reachable"
