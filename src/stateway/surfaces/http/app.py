"""The Starlette application of the HTTP surface: routes and the error boundary.

Errors leave in the OpenAI shape ``{"error": {message, type, param, code}}``; an
unexpected exception is logged and answered with a generic 500, never a stack trace.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from contextlib import AbstractAsyncContextManager
from typing import Any

from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from stateway.core.errors import GatewayError, InvalidRequest, NotFound
from stateway.surfaces.http.responses import ResponsesRoutes
from stateway.surfaces.http.service import ServiceRoutes
from stateway.surfaces.http.transport import JSONResponse, error_response

log = logging.getLogger(__name__)

Lifespan = Callable[[Starlette], AbstractAsyncContextManager[None]]


def build_http_app(
    responses: ResponsesRoutes, service: ServiceRoutes, lifespan: Lifespan | None = None
) -> Starlette:
    routes = [
        Route("/v1/responses", responses.create, methods=["POST"]),
        Route("/v1/responses/{response_id}", responses.retrieve, methods=["GET"]),
        Route("/v1/responses/{response_id}", responses.delete, methods=["DELETE"]),
        Route("/v1/responses/{response_id}/input_items", responses.input_items, methods=["GET"]),
        Route("/v1/models", service.models, methods=["GET"]),
        Route("/health", service.health, methods=["GET"]),
        Route("/ready", service.ready, methods=["GET"]),
    ]
    handlers: dict[Any, Any] = {
        GatewayError: _gateway_error,
        HTTPException: _http_error,
        Exception: _unexpected,
    }
    return Starlette(routes=routes, exception_handlers=handlers, lifespan=lifespan)


async def _gateway_error(request: Request, exc: Exception) -> Response:
    assert isinstance(exc, GatewayError)
    if exc.status >= 500:
        log.warning("%s %s -> %d %s", request.method, request.url.path, exc.status, exc.message)
    return error_response(exc)


async def _http_error(request: Request, exc: Exception) -> Response:
    assert isinstance(exc, HTTPException)
    if exc.status_code == 404:
        return error_response(NotFound(f"Unknown route: {request.method} {request.url.path}."))
    if exc.status_code == 405:
        return error_response(
            InvalidRequest(
                f"Method {request.method} is not allowed on {request.url.path}.", status=405
            )
        )
    error = InvalidRequest(str(exc.detail), status=exc.status_code)
    return error_response(error)


async def _unexpected(request: Request, exc: Exception) -> Response:
    log.error("unhandled error on %s %s", request.method, request.url.path, exc_info=exc)
    body = {
        "error": {
            "message": "The gateway failed to handle the request.",
            "type": "server_error",
            "param": None,
            "code": "internal_error",
        }
    }
    return JSONResponse(body, status_code=500)
