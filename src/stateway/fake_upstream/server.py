"""Serving the fake upstream with uvicorn on a socket we bind, announcing its URL.

``serve`` binds the socket itself (port 0 picks a free port), runs uvicorn on it (uvloop
and httptools when installed, access log off, log level warning) and, once listening,
prints exactly one line to stdout: ``fake-upstream listening on http://HOST:PORT/v1``.
"""

from __future__ import annotations

import socket
import sys

import uvicorn

from stateway.fake_upstream.app import build_app

ANNOUNCEMENT = "fake-upstream listening on "


class _AnnouncingServer(uvicorn.Server):
    """A uvicorn server that prints the announcement line once it accepts connections."""

    def __init__(self, config: uvicorn.Config, base_url: str) -> None:
        super().__init__(config)
        self.base_url = base_url

    async def startup(self, sockets: list[socket.socket] | None = None) -> None:
        await super().startup(sockets=sockets)
        if self.started:
            sys.stdout.write(f"{ANNOUNCEMENT}{self.base_url}\n")
            sys.stdout.flush()


def bind_socket(host: str, port: int) -> socket.socket:
    """A TCP socket bound to ``host:port`` (``port`` 0 for an ephemeral one)."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind((host, port))
    except BaseException:
        sock.close()
        raise
    return sock


def serve(
    host: str = "127.0.0.1",
    port: int = 8000,
    api_key: str | None = None,
    *,
    model_names: list[str] | None = None,
) -> None:
    """Run the fake upstream until interrupted (SIGINT/SIGTERM)."""
    sock = bind_socket(host, port)
    bound_port = sock.getsockname()[1]
    url_host = f"[{host}]" if ":" in host else host
    config = uvicorn.Config(
        build_app(api_key, model_names),
        loop="auto",
        http="auto",
        ws="none",
        lifespan="off",
        access_log=False,
        log_level="warning",
        timeout_graceful_shutdown=2,
    )
    server = _AnnouncingServer(config, f"http://{url_host}:{bound_port}/v1")
    with sock:
        server.run(sockets=[sock])
