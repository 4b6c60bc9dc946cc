"""JSON answers: a body rendered by orjson, and a :class:`GatewayError` in the OpenAI
error shape (``{"error": {...}}`` with the error's status and headers), what every
surface answers before a protocol of its own is spoken (a refused upgrade, ``/mcp``'s
refusals) and what the HTTP routes answer in the OpenAI shape.
"""

from __future__ import annotations

from typing import Any

import orjson
from starlette.responses import Response

from stateway.core.errors import GatewayError


class JSONResponse(Response):
    media_type = "application/json"

    def render(self, content: Any) -> bytes:
        return orjson.dumps(content)


def error_response(error: GatewayError) -> JSONResponse:
    return JSONResponse(
        {"error": error.to_dict()}, status_code=error.status, headers=error.headers or None
    )
