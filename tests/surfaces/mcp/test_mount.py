"""``/mcp`` as mounted: the surface is built and started by its first request, once, and
stopped at shutdown; a process that never serves MCP never loads the SDK."""

from __future__ import annotations

import asyncio
import subprocess
import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any, cast

import orjson
import pytest

from stateway.core.gateway import Gateway
from stateway.storage.sql import migrate
from stateway.surfaces.mcp import server
from stateway.surfaces.mcp.limits import McpLimits
from stateway.surfaces.mcp.mount import McpMount


class FakeSurface:
    built: list[FakeSurface] = []

    def __init__(
        self, gateway: object, version: str, limits: object = None, origins: object = None
    ) -> None:
        self.version = version
        self.limits = limits
        self.origins = origins
        self.running_now = False
        self.requests: list[str] = []
        self.entered = asyncio.Event()
        FakeSurface.built.append(self)

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        assert self.running_now
        self.requests.append(scope["path"])
        await send({"type": "http.response.start", "status": 200, "headers": []})
        await send({"type": "http.response.body", "body": b"ok"})

    @asynccontextmanager
    async def running(self) -> AsyncIterator[None]:
        self.running_now = True
        self.entered.set()
        try:
            yield
        finally:
            self.running_now = False


@pytest.fixture
def fake_surface(monkeypatch: pytest.MonkeyPatch) -> type[FakeSurface]:
    FakeSurface.built = []
    monkeypatch.setattr(server, "McpSurface", FakeSurface)
    return FakeSurface


async def call(
    mount: McpMount, method: str = "POST", headers: list[tuple[bytes, bytes]] | None = None
) -> tuple[int, bytes]:
    sent: list[dict[str, Any]] = []

    async def receive() -> dict[str, Any]:
        return {"type": "http.request", "body": b"", "more_body": False}

    async def send(message: dict[str, Any]) -> None:
        sent.append(message)

    scope = {"type": "http", "path": "/mcp", "method": method, "headers": headers or []}
    await asyncio.wait_for(mount(scope, receive, send), 5)  # a start that hangs fails
    body = b"".join(m.get("body", b"") for m in sent if m["type"] == "http.response.body")
    return sent[0]["status"], body


def mount() -> McpMount:
    return McpMount(cast(Gateway, object()), "1.2.3")


async def test_nothing_is_built_before_the_first_request(fake_surface: type[FakeSurface]) -> None:
    served = mount()

    assert not served.started
    assert fake_surface.built == []
    await served.aclose()  # nothing to stop


async def test_the_first_request_starts_the_surface_and_is_served_by_it(
    fake_surface: type[FakeSurface],
) -> None:
    served = mount()

    assert await call(served) == (200, b"ok")

    [surface] = fake_surface.built
    assert served.started
    assert surface.running_now
    assert surface.version == "1.2.3"
    assert await call(served) == (200, b"ok")
    assert surface.requests == ["/mcp", "/mcp"]
    await served.aclose()
    assert not surface.running_now


async def test_the_surface_is_built_with_the_mounts_limits_and_origins(
    fake_surface: type[FakeSurface],
) -> None:
    """``[server] cors_origins``' pages may call ``/mcp`` too (else their every request
    would be refused as another site's)."""
    limits = McpLimits(max_body_bytes=10)
    origins = frozenset({"https://app.example"})
    served = McpMount(cast(Gateway, object()), "1.2.3", limits, origins=origins)
    await call(served)

    [surface] = fake_surface.built
    assert (surface.limits, surface.origins) == (limits, origins)
    await served.aclose()


async def test_a_body_is_read_within_its_bounds_before_the_surface_starts(
    fake_surface: type[FakeSurface],
) -> None:
    """The first request's body is bounded from its first byte: read before the surface's
    start (the SDK's import, which holds the loop), not after it."""
    served = McpMount(cast(Gateway, object()), "1.2.3", McpLimits(body_timeout=0.05))
    never = asyncio.Event()
    sent: list[dict[str, Any]] = []

    async def receive() -> dict[str, Any]:
        await never.wait()
        raise AssertionError("unreachable")

    async def send(message: dict[str, Any]) -> None:
        sent.append(message)

    scope = {"type": "http", "path": "/mcp", "method": "POST", "headers": []}
    await served(scope, receive, send)

    assert sent[0]["status"] == 408
    error = orjson.loads(b"".join(m.get("body", b"") for m in sent[1:]))["error"]
    assert error["code"] == "request_timeout"
    assert fake_surface.built == []  # nothing started for a request that never came
    await served.aclose()


@pytest.mark.parametrize("method", ["GET", "DELETE"])
async def test_a_bodiless_request_is_served_whatever_coding_it_names(
    fake_surface: type[FakeSurface], method: str
) -> None:
    """``GET`` (the stream) and ``DELETE`` (the session's end) carry no body, and none is
    read: the ``Content-Encoding`` they name is ignored, as every other route's bodiless
    requests ignore it. A ``POST``'s body is decoded: a coding not undone is a 415."""
    served = mount()
    coded = [(b"content-encoding", b"br")]

    assert await call(served, method, coded) == (200, b"ok")
    status, body = await call(served, "POST", coded)
    assert status == 415
    assert orjson.loads(body)["error"]["code"] == "unsupported_content_encoding"
    await served.aclose()


async def test_concurrent_first_requests_start_one_surface(fake_surface: type[FakeSurface]) -> None:
    served = mount()

    answers = await asyncio.gather(*(call(served) for _ in range(5)))

    assert answers == [(200, b"ok")] * 5
    assert len(fake_surface.built) == 1
    assert len(fake_surface.built[0].requests) == 5
    await served.aclose()


async def test_a_first_caller_that_leaves_does_not_stop_the_start(
    fake_surface: type[FakeSurface],
) -> None:
    served = mount()
    first = asyncio.create_task(call(served))
    await asyncio.sleep(0)
    first.cancel()
    with pytest.raises(asyncio.CancelledError):
        await first

    assert await call(served) == (200, b"ok")
    assert len(fake_surface.built) == 1
    await served.aclose()


async def test_after_shutdown_requests_are_refused_in_the_openai_shape(
    fake_surface: type[FakeSurface],
) -> None:
    served = mount()
    await call(served)
    await served.aclose()

    status, body = await call(served)

    assert status == 503
    assert orjson.loads(body)["error"]["code"] == "server_shutting_down"
    assert len(fake_surface.built) == 1


async def test_a_surface_that_cannot_start_fails_its_requests(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    class Broken(FakeSurface):
        @asynccontextmanager
        async def running(self) -> AsyncIterator[None]:
            raise RuntimeError("no task group")
            yield

    monkeypatch.setattr(server, "McpSurface", Broken)
    served = mount()

    with pytest.raises(RuntimeError, match="no task group"):
        await call(served)
    with pytest.raises(RuntimeError, match="no task group"):
        await served.aclose()


_RESTING_IMPORTS = """
import asyncio, sys
from stateway.app import build_app, compile_generation, open_gateway
from stateway.config import Overrides
from stateway.storage.sql import migrate

async def main() -> None:
    flags = Overrides(database=sys.argv[1], upstream="http://127.0.0.1:9/v1")
    await migrate(sys.argv[1])
    parts = await open_gateway(compile_generation(flags), flags)
    app = build_app(parts)
    async with app.router.lifespan_context(app):
        pass

asyncio.run(main())
loaded = ("mcp", "alembic", "redis", "jwt", "regex")
print(" ".join(sorted(m for m in loaded if m in sys.modules)) or "-")
"""


async def test_a_gateway_that_serves_no_mcp_and_uses_no_redis_loads_neither(
    tmp_path: Any,
) -> None:
    """Their SDKs (and Alembic, on a database already at the head, and PyJWT without
    OIDC) are ~46 MiB of a process at rest (docs/benchmarks.md); the ``regex`` package
    waits for a tool search with a pattern."""
    database = f"sqlite:///{tmp_path / 'db.sqlite'}"
    await migrate(database)
    run = [sys.executable, "-c", _RESTING_IMPORTS, database]
    answer = await asyncio.to_thread(subprocess.run, run, capture_output=True, text=True)

    assert answer.returncode == 0, answer.stderr
    assert answer.stdout.strip() == "-"
