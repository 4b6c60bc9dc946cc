"""Config generations: a run keeps the generation it was admitted with to its end (its
tool loop rounds too), new admissions get the new one, and a superseded generation's
pools close exactly when its last run ends."""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from typing import Any

import orjson
import pytest

from stateway.core.commands import (
    CheckReadiness,
    CountTokens,
    CreateResponse,
    GetConfigStatus,
    ListModels,
    ReloadConfig,
)
from stateway.core.errors import ModelNotFound, NotFound
from stateway.core.gateway import Gateway
from stateway.core.generation_settings import GenerationSettings
from stateway.core.generations import Generation
from stateway.core.inference import Delta, Finish, TextDelta, ToolCallDelta, UsageReport
from stateway.core.loop import Loop
from stateway.core.principal import Principal
from stateway.core.routing import BackendEntry, Router
from stateway.core.run_registry import RunRegistry
from stateway.core.runs import Run
from stateway.core.tools.ports import McpServer, McpTool
from stateway.core.tools.toolset import ConfiguredServer, GatewayTools
from stateway.core.usage import Usage
from tests.core.fakes import FakeMcp, MemoryStore, RoundsBackend

HOLD = McpTool("hold", {"type": "object"}, "Waits until the test lets it answer")
DOCS = McpServer("docs", "http://docs.test/mcp")
MCP_TOOL: dict[str, Any] = {"type": "mcp", "server_label": "docs", "require_approval": "never"}


class PooledBackend(RoundsBackend):
    """A backend whose upstream pool the test watches being closed."""

    def __init__(self, name: str, rounds: list[list[Delta]]) -> None:
        super().__init__(rounds)  # type: ignore[arg-type]
        self.name = name
        self.pool_closed = asyncio.Event()

    async def aclose(self) -> None:
        self.pool_closed.set()


class PooledMcp(FakeMcp):
    def __init__(self, answers: Mapping[str, Any]) -> None:
        super().__init__({"docs": [HOLD]}, dict(answers))
        self.pool_closed = asyncio.Event()

    async def aclose(self) -> None:
        self.pool_closed.set()


def answer(text: str) -> list[Delta]:
    return [TextDelta(text), Finish("stop"), UsageReport(Usage(3, 1))]


def hold_call() -> list[Delta]:
    call = ToolCallDelta(0, "up_0", "docs__hold", orjson.dumps({}).decode())
    return [call, Finish("tool_calls"), UsageReport(Usage(3, 2))]


class World:
    """A gateway on generation 1 (backend ``old``, whose MCP tool ``hold`` answers once
    ``released`` is set), and generation 2's parts (backend ``new``) ready to publish."""

    def __init__(self) -> None:
        self.store = MemoryStore()
        self.released = asyncio.Event()
        self.old = PooledBackend("old", [hold_call(), answer("old answer")])
        self.old_mcp = PooledMcp({"hold": self._hold})
        self.new = PooledBackend("new", [answer("new answer")])
        self.new_mcp = PooledMcp({})
        router, loop = self.parts(self.old, self.old_mcp)
        self.gateway = Gateway(self.store, router, loop, RunRegistry())

    async def _hold(self, arguments: Mapping[str, Any]) -> str:
        await self.released.wait()
        return "held"

    def parts(self, backend: PooledBackend, mcp: PooledMcp) -> tuple[Router, Loop]:
        tools = GatewayTools(mcp=mcp, servers={"docs": ConfiguredServer(DOCS)})
        router = Router([BackendEntry(backend, {}, catch_all=True)])
        return router, Loop(self.store, tools=tools)

    def publish(self) -> Generation:
        return self.gateway.generations.publish(*self.parts(self.new, self.new_mcp))

    async def create(self, text: str, tools: list[dict[str, Any]] | None = None) -> Run:
        settings = GenerationSettings(tools=tools or [])
        content = [{"type": "input_text", "text": text}]
        user = {"type": "message", "role": "user", "content": content}
        command = CreateResponse(model="m", input=[user], settings=settings)
        return await self.gateway.execute(Principal(), command)


async def retired(generation: Generation) -> None:
    async with asyncio.timeout(10):  # a bound on a hang, not a timing assertion
        await generation.retired.wait()


async def test_a_run_keeps_its_generation_through_its_rounds_and_retires_it_at_its_end() -> None:
    world = World()
    first = world.gateway.generations.current
    running = await world.create("slow", [MCP_TOOL])
    await world.old_mcp.called.wait()  # round 1 is over; its tool call holds the run
    second = world.publish()
    assert (first.number, second.number) == (1, 2)
    assert world.gateway.generations.current is second
    assert world.gateway.generations.retiring == [1]

    fresh = await world.create("new")
    await fresh.wait()
    assert fresh.state.output[-1]["content"][0]["text"] == "new answer"
    assert not world.old.pool_closed.is_set()  # the running run still needs its pools
    assert not world.old_mcp.pool_closed.is_set()

    world.released.set()
    await running.wait()
    assert running.state.status == "completed"
    assert running.state.output[-1]["content"][0]["text"] == "old answer"
    assert len(world.old.requests) == 2  # both rounds on the generation it started on
    assert len(world.new.requests) == 1  # only the new run
    await retired(first)
    assert world.old.pool_closed.is_set()
    assert world.old_mcp.pool_closed.is_set()
    assert not world.new.pool_closed.is_set()
    assert not world.new_mcp.pool_closed.is_set()
    assert world.gateway.generations.retiring == []
    assert second.leases == 0


async def test_a_generation_nothing_uses_retires_when_superseded() -> None:
    world = World()
    first = world.gateway.generations.current
    world.publish()
    await retired(first)
    assert world.old.pool_closed.is_set()
    assert world.old_mcp.pool_closed.is_set()


async def test_the_new_generation_keeps_the_affinity_table() -> None:
    world = World()
    table = world.gateway.generations.current.router.state.affinity
    assert world.publish().router.state.affinity is table


async def test_a_refused_admission_gives_its_lease_back() -> None:
    store = MemoryStore()
    router = Router([BackendEntry(PooledBackend("a", [answer("a")]), {"known": "known"})])
    gateway = Gateway(store, router, Loop(store), RunRegistry())  # no catch-all backend
    first = gateway.generations.current
    with pytest.raises(ModelNotFound):
        await gateway.execute(Principal(), CreateResponse(model="unknown", input=[]))
    assert first.leases == 0
    gateway.generations.publish(Router([]), Loop(store))
    await retired(first)


async def test_short_commands_hold_their_generation_while_they_run() -> None:
    world = World()
    first = world.gateway.generations.current
    await world.gateway.execute(Principal(), ListModels())
    await world.gateway.execute(Principal(), CheckReadiness())
    await world.gateway.execute(Principal(), CountTokens(CreateResponse(model="m", input=[])))
    assert first.leases == 0


async def test_closing_closes_every_generation_still_in_use() -> None:
    world = World()
    running = await world.create("slow", [MCP_TOOL])
    await world.old_mcp.called.wait()
    world.publish()
    await world.gateway.generations.aclose()
    assert world.old.pool_closed.is_set()
    assert world.new.pool_closed.is_set()
    assert world.gateway.generations.retiring == []
    world.released.set()
    await running.wait()


async def test_admin_commands_without_reloads_are_not_found() -> None:
    world = World()
    for command in (ReloadConfig(), GetConfigStatus()):
        with pytest.raises(NotFound):
            await world.gateway.execute(Principal(), command)  # type: ignore[call-overload]
