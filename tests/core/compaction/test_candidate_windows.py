"""Context windows over a route's candidates of different windows, through
``Gateway.execute``: ``truncation: "auto"`` fits the context to the window of the
candidate each attempt tries (failover included), a window too small without it skips
only its candidate, and a token count sees what the first candidate would be sent."""

from __future__ import annotations

from collections.abc import AsyncGenerator
from typing import Any

from stateway.core.commands import CountTokens, CreateResponse
from stateway.core.errors import UpstreamError
from stateway.core.generation_settings import GenerationSettings
from stateway.core.inference import Delta, Finish, InferenceRequest, TextDelta
from stateway.core.principal import Principal
from stateway.core.routing import Candidate
from stateway.core.runs import Run
from tests.core.compaction.test_service import assistant, user
from tests.core.routing_fakes import Named, candidate, gateway, route, router

HISTORY = [user("x" * 90), assistant("y" * 90), user("last")]
"""About 105 estimated tokens: whole within 10 000, only its last turn within 60."""
WHOLE = ["x" * 90, "y" * 90, "last"]
AUTO = GenerationSettings(truncation="auto")


class Sending(Named):
    """A named backend that keeps the texts of the items each request sent it."""

    def __init__(self, name: str, script: list[Delta | UpstreamError]) -> None:
        super().__init__(name, list(script))
        self.sent: list[list[str]] = []

    async def infer(self, request: InferenceRequest) -> AsyncGenerator[Delta, None]:
        self.sent.append([item["content"][0]["text"] for item in request.items])
        async for delta in super().infer(request):
            yield delta


def answering(name: str) -> Sending:
    return Sending(name, [TextDelta("ok"), Finish("stop")])


def windows(*candidates: tuple[Sending, int]) -> list[Candidate]:
    """Candidates in that order (each its own priority tier), with those windows."""
    return [candidate(b, priority=i, context_window=w) for i, (b, w) in enumerate(candidates)]


async def create(candidates: list[Candidate], settings: GenerationSettings = AUTO) -> Run:
    assistants = route(*candidates)
    command = CreateResponse("assistant", list(HISTORY), settings=settings)
    run = await gateway(router(assistants)).execute(Principal(), command)
    await run.wait()
    return run


def outcomes(run: Run) -> list[tuple[Any, ...]]:
    return [(a["backend"], a["outcome"], a["detail"]) for a in run.state.attempts]


async def test_the_candidate_tried_gets_the_context_fitted_to_its_own_window() -> None:
    large, small = answering("large"), answering("small")
    run = await create(windows((large, 10_000), (small, 60)))
    assert run.state.status == "completed"
    assert large.sent == [WHOLE]  # not cut to the smaller window of a candidate not tried
    assert small.sent == []


async def test_a_failover_sends_the_next_candidate_the_fit_for_its_window() -> None:
    small = Sending("small", [UpstreamError("down")])
    large = answering("large")
    run = await create(windows((small, 60), (large, 10_000)))
    assert run.state.status == "completed"
    assert small.sent == [["last"]]
    assert large.sent == [WHOLE]
    assert outcomes(run) == [("small", "failed", "upstream_error"), ("large", "ok", None)]


async def test_candidates_of_one_window_share_its_fit() -> None:
    first = Sending("first", [UpstreamError("down")])
    second = answering("second")
    run = await create(windows((first, 60), (second, 60)))
    assert run.state.status == "completed"
    assert first.sent == second.sent == [["last"]]


async def test_a_context_too_long_for_one_window_skips_only_that_candidate() -> None:
    small, large = answering("small"), answering("large")
    run = await create(windows((small, 60), (large, 10_000)), GenerationSettings())
    assert run.state.status == "completed"
    assert (small.sent, large.sent) == ([], [WHOLE])
    assert outcomes(run) == [("small", "skipped", "context_window"), ("large", "ok", None)]


async def test_a_count_sees_what_the_first_candidate_would_be_sent() -> None:
    large, small = answering("large"), answering("small")
    large.token_count = 7
    assistants = route(*windows((large, 10_000), (small, 60)))
    command = CreateResponse("assistant", list(HISTORY), settings=AUTO)
    await gateway(router(assistants)).execute(Principal(), CountTokens(command))
    [counted] = large.counted
    assert [item["content"][0]["text"] for item in counted.items] == WHOLE
