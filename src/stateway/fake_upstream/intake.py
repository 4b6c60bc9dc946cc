"""Taking a request in: its JSON body, the key it presents, the headers the log keeps.

The counterpart of :mod:`~stateway.fake_upstream.delivery`, which gets the answer out.
"""

from __future__ import annotations

from typing import Any

import orjson

from stateway.fake_upstream.delivery import Receive, Scope
from stateway.fake_upstream.errors import invalid_request

LOGGED_HEADERS = frozenset(
    {
        b"authorization",
        b"x-api-key",
        b"anthropic-version",
        b"anthropic-beta",
        b"x-proxy-token",
        b"traceparent",
        b"tracestate",
    }
)
"""The headers a logged request keeps: those carrying the key, the Anthropic version and
betas, a test proxy's token, and the W3C trace context (which vLLM reads to parent its
own spans)."""


def header(scope: Scope, name: bytes) -> str | None:
    for key, value in scope["headers"]:
        if key == name:
            return str(value.decode("latin-1"))
    return None


def logged_headers(scope: Scope) -> dict[str, str]:
    return {
        key.decode(): value.decode("latin-1")
        for key, value in scope["headers"]
        if key in LOGGED_HEADERS
    }


def presented_key(scope: Scope) -> str | None:
    """The key the request presents: ``x-api-key`` (Anthropic's way), else the bearer token."""
    return header(scope, b"x-api-key") or _bearer(scope)


def _bearer(scope: Scope) -> str | None:
    """The bearer token the request presents, if any."""
    for name, value in scope["headers"]:
        if name == b"authorization":
            scheme, _, token = value.decode("latin-1").partition(" ")
            return token.strip() if scheme.lower() == "bearer" else ""
    return None


async def read_json(receive: Receive) -> dict[str, Any] | None:
    chunks: list[bytes] = []
    while True:
        message = await receive()
        if message["type"] == "http.disconnect":
            return None
        chunks.append(message.get("body", b""))
        if not message.get("more_body", False):
            break
    try:
        body = orjson.loads(b"".join(chunks))
    except orjson.JSONDecodeError as exc:
        raise invalid_request(f"We could not parse the JSON body of your request: {exc}") from exc
    if not isinstance(body, dict):
        raise invalid_request("The request body must be a JSON object.")
    return body
