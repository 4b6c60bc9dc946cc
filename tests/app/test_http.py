"""The HTTP app's lifespan: what its start-up starts and its shutdown ends."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from stateway.app import build_app, build_gateway, compile_generation, open_gateway
from stateway.config import Overrides
from stateway.core.commands import CreateResponse
from stateway.core.coordination import AskHandler
from stateway.core.response import ResponseState
from stateway.core.runs import Run
from stateway.storage.sql import migrate
from tests.core.fakes import HeldReads, MemoryStore
from tests.core.sharing_fakes import MemoryFanout, MemoryOwnerLeases
from tests.surfaces.http.asgi import call


async def test_shutdown_ends_the_deletion_checks_cancel_signals_started() -> None:
    """A check started by a cancel signal (was this foreground run's response deleted
    elsewhere?) that is still reading the store at shutdown is ended before the store
    closes: none is left running."""
    flags = Overrides(upstream="http://127.0.0.1:9/v1")
    store = HeldReads()
    parts = build_gateway(compile_generation(flags), flags, store)
    app = build_app(parts)
    async with app.router.lifespan_context(app):
        state = ResponseState.start("resp_1", "default", 1.0, CreateResponse("m", [], stream=True))
        run = Run(state, [])
        parts.runs.add(run)
        store.held.add(run.id)
        parts.gateway.cancel_signalled("default", run.id)
        await asyncio.wait_for(store.reading.wait(), 5)
        parts.runs.discard(run)  # its run ended; the check still reads
    assert store.abandoned


class HeldPurger:
    """A purge that is still deleting until it is cancelled."""

    def __init__(self) -> None:
        self.started = asyncio.Event()
        self.cancelled = False

    async def purge(self, before: float, limit: int) -> int:
        self.started.set()
        try:
            await asyncio.Event().wait()
        except asyncio.CancelledError:
            self.cancelled = True
            raise
        return 0


async def test_shutdown_ends_a_retention_sweep_still_deleting(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """``[storage] retention`` set: start-up sweeps, and a sweep still deleting at shutdown
    is ended before the store closes."""
    monkeypatch.setenv("STATEWAY_RETENTION", "30d")
    flags = Overrides(upstream="http://127.0.0.1:9/v1")
    purger = HeldPurger()
    parts = build_gateway(compile_generation(flags), flags, MemoryStore(), purger=purger)
    app = build_app(parts)
    async with app.router.lifespan_context(app):
        await asyncio.wait_for(purger.started.wait(), 5)
    assert purger.cancelled


async def test_deleted_conversations_are_erased_without_a_retention(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """No ``[storage] retention``: start-up still sweeps, to erase deleted conversations
    (no response is deleted), and shutdown ends the sweep."""
    monkeypatch.delenv("STATEWAY_RETENTION", raising=False)
    flags = Overrides(upstream="http://127.0.0.1:9/v1")
    responses, conversations = HeldPurger(), HeldPurger()
    parts = build_gateway(
        compile_generation(flags),
        flags,
        MemoryStore(),
        purger=responses,
        conversation_purger=conversations,
    )
    app = build_app(parts)
    async with app.router.lifespan_context(app):
        await asyncio.wait_for(conversations.started.wait(), 5)
    assert conversations.cancelled
    assert not responses.started.is_set()


async def test_deleted_responses_are_erased_without_a_retention(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """No ``[storage] retention``: start-up still sweeps, to erase the content of deleted
    responses, and shutdown ends the sweep."""
    monkeypatch.delenv("STATEWAY_RETENTION", raising=False)
    flags = Overrides(upstream="http://127.0.0.1:9/v1")
    eraser = HeldPurger()
    parts = build_gateway(compile_generation(flags), flags, MemoryStore(), response_eraser=eraser)
    app = build_app(parts)
    async with app.router.lifespan_context(app):
        await asyncio.wait_for(eraser.started.wait(), 5)
    assert eraser.cancelled


class ClosedStore(MemoryStore):
    """Records that it was closed."""

    def __init__(self) -> None:
        super().__init__()
        self.closed = False

    async def aclose(self) -> None:
        self.closed = True


class RefusingFanout(MemoryFanout):
    """A fan-out whose start fails (a Redis refusing in a way no retry covers)."""

    async def start(self, asked: AskHandler) -> None:
        raise RuntimeError("the fan-out would not start")


async def test_a_failed_start_up_closes_what_it_started(monkeypatch: pytest.MonkeyPatch) -> None:
    """A start-up step failing after others started (the lease's beat, the retention
    sweep, the reloader) fails the start-up, and leaves none of them running: the
    lease's row is removed and the store is closed."""
    monkeypatch.delenv("STATEWAY_RETENTION", raising=False)
    flags = Overrides(upstream="http://127.0.0.1:9/v1")
    store, leases, eraser = ClosedStore(), MemoryOwnerLeases(), HeldPurger()
    parts = build_gateway(
        compile_generation(flags), flags, store, leases=leases, response_eraser=eraser
    )
    parts.fanout = RefusingFanout()
    app = build_app(parts)
    with pytest.raises(RuntimeError, match="would not start"):
        async with app.router.lifespan_context(app):
            pass
    running = [t for t in asyncio.all_tasks() if t is not asyncio.current_task()]
    assert not [t for t in running if not t.done()]
    assert leases.counts == {}
    assert store.closed


@pytest.mark.parametrize(
    ("method", "path", "status"),
    [
        ("POST", "/v1/responses", 400),  # each create refuses a body naming no model
        ("POST", "/v1/messages", 400),
        ("POST", "/v1/messages/count_tokens", 400),
        ("POST", "/v1/chat/completions", 400),
        ("POST", "/mcp", 406),  # a client that does not accept the MCP answers
        ("GET", "/metrics", 200),
        ("GET", "/v1/usage", 200),
        ("GET", "/v1/nothing", 404),
    ],
)
async def test_every_surface_is_routed(tmp_path: Path, method: str, path: str, status: int) -> None:
    """The app over a gateway opened on a database serves each surface's routes."""
    database = f"sqlite:///{tmp_path}/x.db"
    await migrate(database)
    flags = Overrides(database=database, upstream="http://127.0.0.1:9/v1")
    parts = await open_gateway(compile_generation(flags), flags)
    app = build_app(parts)
    body = b"{}" if method == "POST" else b""
    async with app.router.lifespan_context(app):
        reply = await call(
            app,
            method,
            path,
            body,
            headers=[(b"host", b"127.0.0.1")],
            content_type="application/json" if body else None,
        )
    assert reply.status == status, reply.body
