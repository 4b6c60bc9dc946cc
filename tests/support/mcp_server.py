"""A real MCP server on loopback, built with the ``mcp`` SDK, for tests and benchmarks.

``serve_mcp()`` runs uvicorn in a background thread (its own event loop) on a free port and
speaks both Streamable HTTP (``server.url``, path ``/mcp``) and SSE (``server.sse_url``,
path ``/sse``). Being a thread rather than a process, its counters (:class:`ServerStats`)
are read directly by the test: how many sessions it initialized, how many it saw closed.

    from tests.support.mcp_server import serve_mcp

    with serve_mcp() as server:
        McpServer(label="t", url=server.url)            # Streamable HTTP
        McpServer(label="t", url=server.sse_url, transport="sse")
        server.stats.initializations                    # sessions the server initialized

Tools: ``add(a, b)`` (read-only), ``echo(text, times=1)``, ``fail(message)`` (an ``isError``
result; ``{authorization}`` in the message stands for the ``Authorization`` header the call
carried, as a server echoing request headers in its errors does), ``sleep(seconds)``,
``whoami()`` (the ``Authorization`` header it received), ``picture()`` (text plus an
image), ``tally()`` (structured content only), ``read_slowly(seconds)`` (read-only;
counts how many of its calls overlap), ``refuse(status | code, message)`` (the call
answered with HTTP ``status`` before the MCP server sees it, as an HTTP layer that turns
one call away does; or with the JSON-RPC error ``code``). ``tools/list`` pages
``page_size`` tools at a time so clients must follow cursors.

``python -m tests.support.mcp_server [--page-size N]`` serves it in a process of its own
(for benchmarks) and prints ``MCP server listening on http://HOST:PORT``.

Misbehaving peers: :func:`unreachable_url` (a closed port), :func:`hanging_server` (accepts
connections, never answers), :func:`serve_misbehaving` (answers every request with a fixed
status, content type and body: not MCP).
"""

from __future__ import annotations

import argparse
import json
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

import anyio
import mcp_types as types
import uvicorn
from mcp.server.context import CallNext, HandlerResult, ServerRequestContext
from mcp.server.lowlevel import Server
from mcp.server.sse import SseServerTransport
from mcp.shared.exceptions import MCPError
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Mount, Route
from starlette.types import ASGIApp, Receive, Scope, Send

from stateway.serving import bind_socket, server_config, socket_url

PICTURE_PNG = "iVBORw0KGgo="
"""Base64 of the PNG signature: the image content ``picture`` returns."""


@dataclass
class ServerStats:
    """What the server saw, updated from its thread, read from the test's."""

    initializations: int = 0
    """``initialize`` requests answered (one per session)."""
    calls_started: int = 0
    """``tools/call`` requests received (counted before the tool runs)."""
    listings: int = 0
    """``tools/list`` requests answered (pages, not whole listings)."""
    closed_sessions: int = 0
    """Sessions a client ended: Streamable HTTP ``DELETE``s and SSE streams that ended."""
    running: int = 0
    """``read_slowly`` calls running now."""
    most_at_once: int = 0
    """The most ``read_slowly`` calls that ever ran at once (concurrency limits)."""
    traceparents: list[str | None] = field(default_factory=list)
    """Each ``tools/call``'s ``params._meta.traceparent`` (MCP's trace context, SEP-414)."""
    hang_pings: bool = False
    """A switch, not a count: while set, ``ping`` requests never get an answer (a session
    that stopped answering)."""
    _changed: threading.Condition = field(default_factory=threading.Condition, repr=False)

    def bump(self, name: str) -> None:
        with self._changed:
            setattr(self, name, getattr(self, name) + 1)
            self._changed.notify_all()

    def enter(self) -> None:
        with self._changed:
            self.running += 1
            self.most_at_once = max(self.most_at_once, self.running)
            self._changed.notify_all()

    def leave(self) -> None:
        with self._changed:
            self.running -= 1
            self._changed.notify_all()

    def wait_for(self, predicate: Callable[[ServerStats], bool], timeout: float = 10.0) -> bool:
        """Block until ``predicate(self)`` holds (from a test: ``asyncio.to_thread``)."""
        with self._changed:
            return self._changed.wait_for(lambda: predicate(self), timeout)


@dataclass(frozen=True)
class RunningMcpServer:
    base_url: str
    stats: ServerStats

    @property
    def port(self) -> int:
        return int(self.base_url.rsplit(":", 1)[1])

    @property
    def url(self) -> str:
        """The Streamable HTTP endpoint."""
        return f"{self.base_url}/mcp"

    @property
    def sse_url(self) -> str:
        """The SSE endpoint (the client is told where to POST)."""
        return f"{self.base_url}/sse"


def _tool(name: str, properties: Mapping[str, Any], **extra: Any) -> types.Tool:
    schema = {"type": "object", "properties": dict(properties), "required": list(properties)}
    return types.Tool(name=name, input_schema=schema, **extra)


TOOLS: list[types.Tool] = [
    _tool(
        "add",
        {"a": {"type": "integer"}, "b": {"type": "integer"}},
        description="Add two integers.",
        annotations=types.ToolAnnotations(read_only_hint=True),
    ),
    types.Tool(
        name="echo",
        input_schema={
            "type": "object",
            "properties": {"text": {"type": "string"}, "times": {"type": "integer"}},
            "required": ["text"],
        },
        description="Echo the text back (repeated `times`, 1 by default).",
    ),
    _tool("files.read", {"path": {"type": "string"}}, description="A dotted name, as MCP allows."),
    _tool("fail", {"message": {"type": "string"}}, description="Report an error result."),
    _tool("sleep", {"seconds": {"type": "number"}}, description="Sleep, then answer."),
    _tool("whoami", {}, description="The Authorization header this call carried."),
    _tool("picture", {}, description="Text and an image."),
    _tool("tally", {}, description="Structured content only."),
    _tool(
        "read_slowly",
        {"seconds": {"type": "number"}},
        description="Sleep, then answer; read-only, so calls may overlap (counted).",
        annotations=types.ToolAnnotations(read_only_hint=True),
    ),
    types.Tool(
        name="refuse",
        input_schema={
            "type": "object",
            "properties": {
                "status": {"type": "integer"},
                "code": {"type": "integer"},
                "message": {"type": "string"},
            },
        },
        description="Answer HTTP `status`, or the JSON-RPC error `code` with `message`.",
    ),
]


def _text(text: str, *, is_error: bool = False) -> types.CallToolResult:
    return types.CallToolResult(content=[types.TextContent(text=text)], is_error=is_error)


def _authorization(ctx: ServerRequestContext[Any, Any]) -> str:
    """The ``Authorization`` header the request carried (``anonymous``: none)."""
    request = ctx.request
    headers = request.headers if isinstance(request, Request) else {}
    return str(headers.get("authorization", "anonymous"))


async def _call_tool(
    ctx: ServerRequestContext[Any, Any], params: types.CallToolRequestParams
) -> types.CallToolResult:
    args = params.arguments or {}
    match params.name:
        case "add":
            return _text(str(int(args["a"]) + int(args["b"])))
        case "echo":
            return _text(str(args["text"]) * int(args.get("times", 1)))
        case "files.read":
            return _text(f"contents of {args['path']}")
        case "fail":
            message = str(args["message"]).replace("{authorization}", _authorization(ctx))
            return _text(message, is_error=True)
        case "sleep":
            await anyio.sleep(float(args["seconds"]))
            return _text("slept")
        case "whoami":
            return _text(_authorization(ctx))
        case "picture":
            image = types.ImageContent(data=PICTURE_PNG, mime_type="image/png")
            return types.CallToolResult(content=[types.TextContent(text="a picture"), image])
        case "tally":
            return types.CallToolResult(content=[], structured_content={"count": 3})
        case "refuse":
            raise MCPError(code=int(args["code"]), message=str(args.get("message", "")))
    raise MCPError(code=types.INVALID_PARAMS, message=f"Unknown tool: {params.name}")


def _counting(stats: ServerStats) -> Callable[..., Any]:
    """``_call_tool``, with ``read_slowly`` counting how many of its calls overlap."""

    async def call_tool(
        ctx: ServerRequestContext[Any, Any], params: types.CallToolRequestParams
    ) -> types.CallToolResult:
        if params.name != "read_slowly":
            return await _call_tool(ctx, params)
        stats.enter()
        try:
            await anyio.sleep(float((params.arguments or {})["seconds"]))
        finally:
            stats.leave()
        return _text("read")

    return call_tool


def _list_tools(page_size: int) -> Callable[..., Any]:
    async def list_tools(
        ctx: ServerRequestContext[Any, Any], params: types.PaginatedRequestParams | None
    ) -> types.ListToolsResult:
        start = int(params.cursor) if params is not None and params.cursor else 0
        end = start + page_size
        next_cursor = str(end) if end < len(TOOLS) else None
        return types.ListToolsResult(tools=TOOLS[start:end], next_cursor=next_cursor)

    return list_tools


def build_app(stats: ServerStats, *, page_size: int = 3) -> ASGIApp:
    """The ASGI app: Streamable HTTP on ``/mcp``, SSE on ``/sse`` + ``/messages/``."""
    server: Server[Any] = Server(
        "stateway-test", on_list_tools=_list_tools(page_size), on_call_tool=_counting(stats)
    )

    async def observe(ctx: ServerRequestContext[Any, Any], call_next: CallNext) -> HandlerResult:
        if ctx.method == "ping" and stats.hang_pings:
            await anyio.sleep_forever()
        if ctx.method == "tools/call":
            stats.traceparents.append((ctx.meta or {}).get("traceparent"))
            stats.bump("calls_started")
        result = await call_next(ctx)
        if ctx.method == "initialize":
            stats.bump("initializations")
        elif ctx.method == "tools/list":
            stats.bump("listings")
        return result

    server.middleware.append(observe)
    app = server.streamable_http_app(streamable_http_path="/mcp", host="127.0.0.1")
    sse = SseServerTransport("/messages/")

    async def handle_sse(request: Request) -> Response:
        try:
            async with sse.connect_sse(request.scope, request.receive, request._send) as streams:
                await server.run(streams[0], streams[1], server.create_initialization_options())
        finally:
            stats.bump("closed_sessions")
        return Response()

    app.router.routes.extend(
        [
            Route("/sse", endpoint=handle_sse, methods=["GET"]),
            Mount("/messages/", app=sse.handle_post_message),
        ]
    )
    return _CountDeletes(_RefuseByStatus(app), stats)


class _RefuseByStatus:
    """Answers a ``tools/call`` of ``refuse`` with a ``status`` argument with that HTTP
    status, before the MCP server sees the request (the rest passes through, its body
    replayed)."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope["method"] != "POST":
            await self.app(scope, receive, send)
            return
        received = []
        while True:
            message = await receive()
            received.append(message)
            if message["type"] != "http.request" or not message.get("more_body"):
                break
        status = _refused_status(b"".join(m.get("body", b"") for m in received))
        if status is not None:
            refusal = Response(b'{"error": "refused"}', status, media_type="application/json")
            await refusal(scope, receive, send)
            return

        async def replay() -> Any:
            return received.pop(0) if received else await receive()

        await self.app(scope, replay, send)


def _refused_status(body: bytes) -> int | None:
    try:
        message = json.loads(body)
    except ValueError:
        return None
    if not isinstance(message, dict) or message.get("method") != "tools/call":
        return None
    params = message.get("params") or {}
    arguments = params.get("arguments") or {}
    if params.get("name") != "refuse" or "status" not in arguments:
        return None
    return int(arguments["status"])


class _CountDeletes:
    """Counts Streamable HTTP session terminations (the client's ``DELETE``)."""

    def __init__(self, app: ASGIApp, stats: ServerStats) -> None:
        self.app = app
        self.stats = stats

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        await self.app(scope, receive, send)
        if scope["type"] == "http" and scope["method"] == "DELETE":
            self.stats.bump("closed_sessions")


@contextmanager
def serve_app(
    app: ASGIApp, *, lifespan: bool = True, port: int = 0, graceful_shutdown: int = 2
) -> Iterator[str]:
    """Serve ``app`` with uvicorn in a background thread; yields its base URL. The socket
    listens before the thread starts, so the URL is usable at once (early connections wait
    in the backlog). On exit, requests still open get ``graceful_shutdown`` seconds."""
    sock = bind_socket("127.0.0.1", port)
    sock.listen(128)
    config = server_config(app, lifespan=lifespan, graceful_shutdown=graceful_shutdown)
    server = uvicorn.Server(config)
    thread = threading.Thread(
        target=server.run, kwargs={"sockets": [sock]}, name="mcp-test-server", daemon=True
    )
    thread.start()
    try:
        yield socket_url(sock)
    finally:
        server.should_exit = True
        thread.join(timeout=10)
        sock.close()


@contextmanager
def serve_mcp(
    *, page_size: int = 3, port: int = 0, graceful_shutdown: int = 2
) -> Iterator[RunningMcpServer]:
    """The test MCP server (see the module docstring), stopped on exit. ``port`` 0 picks a
    free one; passing a stopped server's port stands for that server restarted. Clients
    still connected at exit get ``graceful_shutdown`` seconds (0: cut off at once)."""
    stats = ServerStats()
    app = build_app(stats, page_size=page_size)
    with serve_app(app, port=port, graceful_shutdown=graceful_shutdown) as base_url:
        yield RunningMcpServer(base_url=base_url, stats=stats)


def unreachable_url() -> str:
    """A loopback URL nothing listens on (a port bound, then released)."""
    with bind_socket("127.0.0.1", 0) as sock:
        url = socket_url(sock)
    return f"{url}/mcp"


@contextmanager
def hanging_server() -> Iterator[str]:
    """A URL whose server accepts TCP connections (the kernel's backlog) and never answers."""
    with bind_socket("127.0.0.1", 0) as sock:
        sock.listen(128)
        yield f"{socket_url(sock)}/mcp"


@contextmanager
def serve_misbehaving(
    *, status: int = 200, content_type: str = "application/json", body: bytes = b'{"hello": 1}'
) -> Iterator[str]:
    """A URL answering every request with ``status``, ``content_type`` and ``body``."""

    async def app(scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            return
        response = Response(body, status_code=status, media_type=content_type)
        await response(scope, receive, send)

    with serve_app(app, lifespan=False) as base_url:
        yield f"{base_url}/mcp"


ANNOUNCEMENT = "MCP server listening on "


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tests.support.mcp_server")
    parser.add_argument("--page-size", type=int, default=100)
    args = parser.parse_args(argv)
    with serve_mcp(page_size=args.page_size) as server:
        print(ANNOUNCEMENT + server.base_url, flush=True)
        while True:
            time.sleep(3600)


if __name__ == "__main__":
    raise SystemExit(main())
