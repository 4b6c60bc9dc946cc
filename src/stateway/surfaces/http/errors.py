"""The HTTP surface's error boundary: what an error a route lets out answers, and its log
line (used by the Starlette app's exception handlers and by the express routes)."""

from __future__ import annotations

import logging
from typing import Final

from starlette.types import Scope

from stateway.core.errors import GatewayError
from stateway.surfaces.http.transport import JSONResponse, error_response

log = logging.getLogger(__name__)


def error_answer(scope: Scope, error: Exception) -> JSONResponse:
    """The answer to an error a route let out: a :class:`GatewayError` in its own status
    and the OpenAI shape (logged when it is the gateway's or the upstream's fault), any
    other exception a generic 500, never a stack trace (logged with its traceback).

    The error's traceback is dropped once answered: a run's error raised by the route
    would otherwise hold the frames it went through, and the run in their locals, in a
    cycle only the garbage collector frees."""
    if isinstance(error, GatewayError):
        if error.status >= 500:
            method, path = scope["method"], scope["path"]
            log.warning("%s %s -> %d %s", method, path, error.status, error.message)
        answer = error_response(error)
    else:
        log.error("unhandled error on %s %s", scope["method"], scope["path"], exc_info=error)
        answer = JSONResponse(_INTERNAL_ERROR, status_code=500)
    error.__traceback__ = None
    return answer


_INTERNAL_ERROR: Final = {
    "error": {
        "message": "The gateway failed to handle the request.",
        "type": "server_error",
        "param": None,
        "code": "internal_error",
    }
}
