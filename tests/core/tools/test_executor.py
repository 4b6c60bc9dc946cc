"""The executor on its own: a round's calls run at once unless they share an exclusive key
(that they then never overlap is tested through the loop, in ``test_tool_loop``). A call
that waited for the other would time out instead (5 s), never hang. And how a call that
fails ends: its adapter's error as it is, a timeout or a bug as a protocol error; and how
a call cancelled while it runs is counted."""

from __future__ import annotations

import asyncio

import pytest

from stateway.core.tools.executor import Call, Executor, Outcome
from stateway.core.tools.ports import ToolError, ToolFailure
from tests.core.test_telemetry import Recording


class Overlap:
    """Calls that each wait until ``expected`` of them are running at once."""

    def __init__(self, expected: int) -> None:
        self.expected = expected
        self.running = 0
        self.all_in = asyncio.Event()

    def call(self, exclusive: str | None = None) -> Call:
        async def invoke() -> str:
            self.running += 1
            if self.running == self.expected:
                self.all_in.set()
            await self.all_in.wait()
            return "ok"

        return Call(invoke, exclusive=exclusive, label="overlap")


async def test_a_rounds_calls_run_at_once_by_default() -> None:
    overlap = Overlap(2)
    outcomes = await Executor(timeout=5, max_concurrent=5).run([overlap.call(), overlap.call()])
    assert outcomes == [Outcome(output="ok"), Outcome(output="ok")]


async def test_calls_of_different_exclusive_tools_may_overlap() -> None:
    overlap = Overlap(2)
    calls = [overlap.call("docs/write"), overlap.call("docs/erase")]
    outcomes = await Executor(timeout=5, max_concurrent=5).run(calls)
    assert outcomes == [Outcome(output="ok"), Outcome(output="ok")]


async def fails(failure: BaseException) -> str:
    raise failure


async def hangs() -> str:
    await asyncio.Event().wait()
    return "never"


async def test_a_failing_call_ends_with_its_error_a_timeout_or_a_bug_with_their_codes() -> None:
    refused = ToolError.http(401, "refused")
    calls = [
        Call(lambda: fails(ToolFailure(refused)), label="a"),
        Call(lambda: fails(RuntimeError("bug")), label="b"),
        Call(lambda: fails(ToolFailure("plain")), label="c"),
        Call(hangs, label="d"),
    ]
    outcomes = await Executor(timeout=0.05, max_concurrent=5).run(calls)
    assert outcomes == [
        Outcome(error=refused),
        Outcome(error=ToolError.protocol(-32603, "The call to b failed unexpectedly.")),
        Outcome(error=ToolError.protocol(-32603, "plain")),
        Outcome(error=ToolError.protocol(-32001, "The call to d timed out after 0.05 s.")),
    ]
    assert not any(outcome.ok for outcome in outcomes)


async def test_a_call_cancelled_while_it_runs_is_counted_cancelled() -> None:
    telemetry = Recording()
    started = asyncio.Event()

    async def runs_until_cancelled() -> str:
        started.set()
        return await hangs()

    executor = Executor(timeout=30, max_concurrent=1, telemetry=telemetry)
    calls = [Call(runs_until_cancelled, kind="mcp"), Call(hangs, kind="web_search")]
    round_ = asyncio.create_task(executor.run(calls))
    await started.wait()  # the second call waits for the one permit: it is never made
    round_.cancel()
    with pytest.raises(asyncio.CancelledError):
        await round_
    assert telemetry.tools == [("mcp", "cancelled")]
    [span] = telemetry.spans
    assert span.attributes["stateway.outcome"] == "cancelled"
