"""A half-open circuit's one probe, across runs whose rounds were planned together: a
candidate planned while its circuit let a probe through is passed over when, by the
time the round reaches it, another run is probing it (or its probe failed)."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncGenerator, Callable

from stateway.core.commands import CreateResponse
from stateway.core.errors import UpstreamError
from stateway.core.inference import Delta, Finish, InferenceRequest, TextDelta
from stateway.core.principal import Principal
from stateway.core.routing.health import HealthPolicy
from tests.core.routing_fakes import Named, candidate, gateway, route, router

USER = {"type": "message", "role": "user", "content": [{"type": "input_text", "text": "hi"}]}


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


class Held(Named):
    """A backend that answers (its script) only once ``hold`` is set; ``asked`` counts
    the calls made to it, answered or waiting."""

    def __init__(self, name: str, script: list[object]) -> None:
        super().__init__(name, script)
        self.hold = asyncio.Event()
        self.asked = 0

    async def infer(self, request: InferenceRequest) -> AsyncGenerator[Delta, None]:
        self.asked += 1
        await self.hold.wait()
        async for delta in super().infer(request):
            yield delta


async def until(condition: Callable[[], bool]) -> None:
    for _ in range(1000):
        if condition():
            return
        await asyncio.sleep(0)
    raise AssertionError("never happened")


async def settle() -> None:
    """Every task runs until it waits on something."""
    for _ in range(100):
        await asyncio.sleep(0)


async def test_a_half_open_candidate_another_run_is_probing_is_passed_over() -> None:
    first = Held("b", [UpstreamError("b down")])
    recovering = Held("a", [TextDelta("back"), Finish("stop")])
    assistant = route(candidate(first), candidate(recovering, priority=1))
    clock = Clock()
    routing = router(assistant, health=HealthPolicy(1, 5.0, 0.0), clock=clock)
    routing.state.health.failed("a/a-model")
    clock.now += 5.0  # a's cool-down is over: one probe may go through
    gateway_ = gateway(routing)
    command = CreateResponse("assistant", [USER], stream=True)
    runs = [await gateway_.execute(Principal(), command) for _ in range(2)]
    await until(lambda: first.asked == 2)  # both rounds planned: b, then a
    first.hold.set()  # b fails for both: each moves on to a, the first as its probe
    await settle()
    assert recovering.asked == 1  # one probe at a time
    recovering.hold.set()
    for run in runs:
        await run.wait()
    statuses = sorted(run.state.status for run in runs)
    assert statuses == ["completed", "failed"]
    [passed] = [run for run in runs if run.state.status == "failed"]
    outcomes = [(x["backend"], x["outcome"], x["detail"]) for x in passed.state.attempts]
    assert outcomes == [("b", "failed", "upstream_error"), ("a", "skipped", "circuit_open")]
