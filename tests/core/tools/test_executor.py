"""The executor on its own: a round's calls run at once unless they share an exclusive key
(that they then never overlap is tested through the loop, in ``test_tool_loop``). A call
that waited for the other would time out instead (5 s), never hang."""

from __future__ import annotations

import asyncio

from stateway.core.tools.executor import Call, Executor, Outcome


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
