"""A round ends each attempt's first-output wait (``first_token_timeout``) at its first
output (or a call's name), and only then: what starts no output (a usage report, a
message opened, empty text) leaves it running, so a candidate whose output is late fails
over."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncGenerator
from typing import Any

from stateway.core.commands import CreateResponse
from stateway.core.errors import UpstreamTimeout
from stateway.core.inference import (
    Delta,
    Finish,
    InferenceRequest,
    MessageStart,
    TextDelta,
    ToolCallDelta,
    UsageReport,
)
from stateway.core.principal import Principal
from stateway.core.usage import Usage
from tests.core.fakes import MemoryStore
from tests.core.routing_fakes import Named, candidate, gateway, route, router

USER = {"type": "message", "role": "user", "content": [{"type": "input_text", "text": "hi"}]}
WAIT = 0.1
"""The first candidate's ``first_token_timeout``."""
NO_OUTPUT = [UsageReport(Usage(input_tokens=3)), MessageStart(), TextDelta("")]


class Bounded(Named):
    """A backend bounding the wait as the upstream client does, from its "headers" (the
    call's start): its script's floats are pauses."""

    def __init__(self, name: str, script: list[Any]) -> None:
        super().__init__(name)
        self.steps = script

    async def infer(self, request: InferenceRequest) -> AsyncGenerator[Delta, None]:
        self.requests.append(request)
        assert request.first_output is not None
        waiting = request.first_output.within(WAIT)
        try:
            with waiting:
                for step in self.steps:
                    if isinstance(step, float):
                        await asyncio.sleep(step)
                    else:
                        yield step
        except TimeoutError as exc:
            if waiting.expired:
                raise UpstreamTimeout("no output (first_token_timeout)") from exc
            raise


async def run_over(*backends: Named) -> Any:
    tiers = [candidate(b, priority=i) for i, b in enumerate(backends)]
    command = CreateResponse("assistant", [USER], stream=True)
    run = await gateway(router(route(*tiers)), MemoryStore()).execute(Principal(), command)
    await run.wait()
    return run


async def test_late_output_fails_over_whatever_came_before_it() -> None:
    a = Bounded("a", [*NO_OUTPUT, 5.0, TextDelta("late"), Finish("stop")])
    b = Named("b", [TextDelta("fine"), Finish("stop")])
    run = await run_over(a, b)
    assert run.state.status == "completed"
    assert run.state.output[0]["content"][0]["text"] == "fine"
    outcomes = [(x["backend"], x["outcome"], x["detail"]) for x in run.state.attempts]
    assert outcomes == [("a", "failed", "upstream_timeout"), ("b", "ok", None)]


async def test_a_gap_after_the_first_output_is_not_its_to_judge() -> None:
    a = Bounded("a", [*NO_OUTPUT, TextDelta("soon"), 3 * WAIT, TextDelta(" then"), Finish("stop")])
    b = Named("b", [TextDelta("fine"), Finish("stop")])
    run = await run_over(a, b)
    assert run.state.status == "completed"
    assert run.state.output[0]["content"][0]["text"] == "soon then"
    assert [x["backend"] for x in run.state.attempts] == ["a"]
    assert b.requests == []


async def test_a_call_named_ends_the_wait_though_its_arguments_come_late() -> None:
    """A call's name is generated output (held back for failover all the same): a tool
    parser that sends the arguments only once the call is whole is not timed out."""
    named = ToolCallDelta(0, "call_1", "lookup", "")
    a = Bounded("a", [UsageReport(Usage(3)), named, 3 * WAIT, ToolCallDelta(0, None, None, "{}")])
    b = Named("b", [TextDelta("fine"), Finish("stop")])
    run = await run_over(a, b)
    assert run.state.status == "completed"
    [call] = run.state.output
    assert (call["name"], call["arguments"]) == ("lookup", "{}")
    assert [x["backend"] for x in run.state.attempts] == ["a"]
    assert b.requests == []
