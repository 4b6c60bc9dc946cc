"""Calls from web pages of other origins (CORS), for the origins ``[server] cors_origins``
lists: a browser app using the openai or anthropic SDK, the Vercel AI SDK, a web UI on
another port.

Starlette's ``CORSMiddleware`` wraps the whole application, its express routes
(:mod:`.express`) and error middleware included, inside the request observer (so that a
preflight has its ``x-request-id`` too). So:

- a preflight (``OPTIONS`` with ``Origin`` and ``Access-Control-Request-Method``) is
  answered before any check or route: it carries no credential, and is neither a JSON
  body (the 415 check) nor a request the rate limits count;
- every other answer carries the CORS headers, whoever gave it: a route's (JSON, an SSE
  stream), an error (401 from authentication, 421 from the Host check, 429, 500);
- the request itself is checked as any other: its credential is still required.

Any request header is allowed (the preflight's are echoed back): the SDKs add headers
from release to release (``x-stainless-retry-count``, ``x-stainless-timeout``,
``x-stainless-helper-method``, ``openai-beta`` each broke a fixed list elsewhere), MCP
clients send ``Mcp-Param-*`` headers, and a listed origin is trusted with the gateway
already. The headers clients read are exposed. Credentials mode (cookies) is not
allowed: the gateway takes none. A listed origin may call a gateway on a private
network (Chrome's ``Access-Control-Request-Private-Network``): listing it said so.

With no origins listed no middleware is added at all: nothing is sent, nothing costs.
"""

from __future__ import annotations

from collections.abc import Collection
from typing import Final

from starlette.middleware.cors import CORSMiddleware
from starlette.types import ASGIApp

METHODS: Final = ("GET", "POST", "DELETE")
"""The methods the routes serve (HEAD, a simple method, needs no preflight)."""

EXPOSED: Final = (
    "x-request-id",
    "request-id",
    "retry-after",
    "retry-after-ms",
    "x-should-retry",
    "mcp-session-id",
    "mcp-protocol-version",
    "stateway-token-count",
)
"""Headers a page's script may read besides the safelisted ones: the request id (the
openai SDK's ``_request_id``, the anthropic SDK's ``request-id``), what the SDKs' retries
read, an MCP session's id and version, and where a token count came from."""


def cross_origin(app: ASGIApp, origins: Collection[str]) -> ASGIApp:
    """``app`` answering the web pages of ``origins`` (``"*"``: any page's)."""
    return CORSMiddleware(
        app,
        allow_origins=origins,
        allow_methods=METHODS,
        allow_headers=("*",),
        allow_private_network=True,
        expose_headers=EXPOSED,
    )
