"""Service routes: model listing, liveness and readiness."""

from __future__ import annotations

from typing import Any

from starlette.requests import Request
from starlette.responses import Response

from stateway.core.commands import CheckReadiness, ListModels
from stateway.core.gateway import Gateway
from stateway.core.principal import Principal
from stateway.core.routing.route import ListedModel
from stateway.protocols.messages.models import model_info, model_page
from stateway.surfaces.asgi.answers import JSONResponse
from stateway.surfaces.auth.authenticator import principal_of
from stateway.surfaces.http.messages import answers_anthropic, request_id_header


class ServiceRoutes:
    def __init__(self, gateway: Gateway) -> None:
        self._gateway = gateway

    async def models(self, request: Request) -> Response:
        """``GET /v1/models``: in Anthropic's shape (a page, with its ``request-id``
        header) for a client that sent ``anthropic-version``, else OpenAI's (every
        model)."""
        listing = await self._gateway.execute(principal_of(request.scope), ListModels())
        if answers_anthropic(request.scope):
            page = model_page(listing.models, request.query_params)
            return JSONResponse(page, headers=request_id_header())
        data = [_openai_model(model) for model in listing.models]
        return JSONResponse({"object": "list", "data": data})

    async def model(self, request: Request) -> Response:
        """``GET /v1/models/{model_id}``: a model a request could name, in the client's
        shape (a 404, ``model_not_found``, for another: see :class:`ListModels`)."""
        wanted = request.path_params["model_id"]
        if not wanted:  # ``/v1/models/``: the listing
            return await self.models(request)
        command = ListModels(model=wanted)
        [model] = (await self._gateway.execute(principal_of(request.scope), command)).models
        if answers_anthropic(request.scope):
            return JSONResponse(model_info(model), headers=request_id_header())
        return JSONResponse(_openai_model(model))

    async def health(self, request: Request) -> Response:
        return JSONResponse({"status": "ok"})

    async def ready(self, request: Request) -> Response:
        """200 when storage answers and takes writes, else 503 (``storage`` says why);
        upstream reachability and (with Redis) the coordination store's are reported
        only. Open to anyone (probes send no credential), like ``/health``."""
        readiness = await self._gateway.execute(Principal(), CheckReadiness())
        body: dict[str, Any] = {
            "status": "ready" if readiness.ready else "not_ready",
            "storage": "ok" if readiness.storage_error is None else readiness.storage_error,
            "upstreams": {
                name: "reachable" if answered else "unreachable"
                for name, answered in readiness.upstreams.items()
            },
        }
        if readiness.shared_coordination:
            error = readiness.coordination_error
            body["coordination"] = "ok" if error is None else error
        return JSONResponse(body, status_code=200 if readiness.ready else 503)


def _openai_model(model: ListedModel) -> dict[str, Any]:
    return {"id": model.name, "object": "model", "created": 0, "owned_by": model.backend}
