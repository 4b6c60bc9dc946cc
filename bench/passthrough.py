"""The floor: a bare pass-through hop, the least any Python HTTP hop costs on this machine.

A raw ASGI app served by uvicorn (httptools, uvloop, access log off, one process) that
forwards each request's body bytes to the upstream with aiohttp (one pooled
``ClientSession``, configured like the gateway's in ``stateway.backends.upstream_sessions``)
and streams the upstream's status, content type and body bytes back, parsing nothing.

``python -m bench.passthrough --upstream http://127.0.0.1:PORT/v1 --port 0`` prints
``bench-passthrough listening on http://127.0.0.1:PORT`` once it accepts connections.
A request to ``/v1/chat/completions`` goes to ``<upstream>/chat/completions``.
"""

from __future__ import annotations

import argparse
from collections.abc import Awaitable, Callable, MutableMapping
from typing import Any

import aiohttp

from stateway.serving import AnnouncingServer, bind_socket, server_config, socket_url

ANNOUNCEMENT = "bench-passthrough listening on "

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]


class Hop:
    """A bare ASGI hop: one pooled aiohttp session (configured like the gateway's), opened
    and closed by the lifespan; :meth:`handle` answers each HTTP request."""

    session: aiohttp.ClientSession | None = None

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http":
            await self.handle(scope, receive, send)
        elif scope["type"] == "lifespan":
            await self._lifespan(receive, send)

    async def handle(self, scope: Scope, receive: Receive, send: Send) -> None:
        raise NotImplementedError

    async def _lifespan(self, receive: Receive, send: Send) -> None:
        while True:
            message = await receive()
            if message["type"] == "lifespan.startup":
                self.session = aiohttp.ClientSession(
                    connector=aiohttp.TCPConnector(limit=256),
                    timeout=aiohttp.ClientTimeout(total=None, connect=10.0, sock_read=600.0),
                    headers={"Content-Type": "application/json"},
                    skip_auto_headers=("User-Agent",),
                    auto_decompress=False,
                )
                await send({"type": "lifespan.startup.complete"})
            elif message["type"] == "lifespan.shutdown":
                if self.session is not None:
                    await self.session.close()
                await send({"type": "lifespan.shutdown.complete"})
                return


async def request_body(receive: Receive) -> bytes | None:
    """The whole request body; None when the client left first."""
    chunks: list[bytes] = []
    while True:
        message = await receive()
        if message["type"] == "http.disconnect":
            return None
        chunks.append(message.get("body", b""))
        if not message.get("more_body", False):
            return b"".join(chunks)


class PassThrough(Hop):
    """Forward bytes to ``upstream`` and stream the answer back."""

    def __init__(self, upstream_base_url: str) -> None:
        base = upstream_base_url.rstrip("/")
        self.upstream = base.removesuffix("/v1")

    async def handle(self, scope: Scope, receive: Receive, send: Send) -> None:
        body = await request_body(receive)
        if body is None:
            return
        assert self.session is not None
        url = self.upstream + scope["path"]
        async with self.session.post(url, data=body) as upstream:
            headers = [(b"content-type", upstream.headers.get("Content-Type", "").encode())]
            length = upstream.headers.get("Content-Length")
            if length is not None:
                headers.append((b"content-length", length.encode()))
            await send(
                {"type": "http.response.start", "status": upstream.status, "headers": headers}
            )
            async for chunk in upstream.content.iter_any():
                await send({"type": "http.response.body", "body": chunk, "more_body": True})
        await send({"type": "http.response.body", "body": b"", "more_body": False})


def serve(hop: Hop, announcement: str, host: str = "127.0.0.1", port: int = 0) -> None:
    """Run ``hop`` until interrupted (SIGINT/SIGTERM), announcing its URL once it listens."""
    sock = bind_socket(host, port)
    config = server_config(hop, lifespan=True, graceful_shutdown=2)
    server = AnnouncingServer(config, f"{announcement}{socket_url(sock)}")
    with sock:
        server.run(sockets=[sock])


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.passthrough", description=__doc__)
    parser.add_argument("--upstream", required=True, help="the upstream's .../v1 base URL")
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=0)
    args = parser.parse_args(argv)
    serve(PassThrough(args.upstream), ANNOUNCEMENT, args.host, args.port)


if __name__ == "__main__":
    main()
