"""A ``max_output_tokens`` the model's window has no room for beside the prompt, refused so
by the upstream: lowered to the room there is and asked again of the same candidate when
the request allows it (Messages), the answer that fills it stopping with
``model_context_window_exceeded``."""

from __future__ import annotations

from collections.abc import AsyncGenerator
from typing import Any

import pytest

from stateway.core.commands import CreateResponse, GenerationSettings
from stateway.core.errors import UpstreamContextTooLong, UpstreamError, UpstreamOutputOverWindow
from stateway.core.inference import (
    WINDOW_FILLED,
    Delta,
    Finish,
    InferenceRequest,
    TextDelta,
    UsageReport,
)
from stateway.core.principal import Principal
from stateway.core.usage import Usage
from tests.core.routing_fakes import Named, candidate, gateway, route, router

USER = {"type": "message", "role": "user", "content": [{"type": "input_text", "text": "hi"}]}
WINDOW, PROMPT = 100, 40


class Windowed(Named):
    """Refuses, as vLLM does, output tokens that do not fit beside its prompt of
    :data:`PROMPT` tokens (``requested`` None: as a server that says only the prompt's);
    answers its script otherwise."""

    def __init__(
        self,
        name: str,
        script: list[Any],
        *,
        says_requested: bool = True,
        room: int = 0,
        at_least: bool = False,
    ) -> None:
        super().__init__(name, script)
        self.says_requested = says_requested
        self.room = room or WINDOW - PROMPT
        """The room it takes as enough (less than it says: a server counting otherwise)."""
        self.at_least = at_least
        """Whether it counts the prompt, as vLLM's renderer, only one token past the room
        the output tokens asked for leave."""

    async def infer(self, request: InferenceRequest) -> AsyncGenerator[Delta, None]:
        asked = request.settings.max_output_tokens
        if asked is not None and asked > self.room:
            self.requests.append(request)
            requested = asked if self.says_requested else None
            tokens = PROMPT + len(self.requests) - 1  # a count of its own the second time
            if self.at_least:
                tokens = WINDOW - asked + 1
            raise UpstreamContextTooLong(
                "no room",
                tokens=tokens,
                window=WINDOW,
                requested=requested,
                at_least=self.at_least,
            )
        async for delta in super().infer(request):
            yield delta


async def run_over(*backends: Named, fits: bool = True, asked: int = 32000) -> Any:
    settings = GenerationSettings(max_output_tokens=asked, max_output_tokens_fit_window=fits)
    tiers = [candidate(b, priority=i) for i, b in enumerate(backends)]
    command = CreateResponse("assistant", [USER], stream=True, settings=settings)
    run = await gateway(router(route(*tiers))).execute(Principal(), command)
    await run.wait()
    return run


def outcomes(run: Any) -> list[tuple[str, str, str | None]]:
    return [(x["backend"], x["outcome"], x["detail"]) for x in run.state.attempts]


def asked(backend: Named) -> list[int | None]:
    return [request.settings.max_output_tokens for request in backend.requests]


async def test_the_same_candidate_is_asked_again_for_the_room_there_is() -> None:
    a = Windowed("a", [TextDelta("cut"), Finish("length")])
    b = Named("b", [TextDelta("fine"), Finish("stop")])
    run = await run_over(a, b)

    assert run.state.status == "incomplete"
    assert run.state.stop_reason == WINDOW_FILLED
    assert asked(a) == [32000, WINDOW - PROMPT]
    assert b.requests == []
    assert outcomes(run) == [("a", "failed", "context_length_exceeded"), ("a", "ok", None)]


async def test_an_answer_ending_within_the_room_ends_as_it_did() -> None:
    a = Windowed("a", [TextDelta("fine"), Finish("stop")])
    run = await run_over(a)

    assert (run.state.status, run.state.stop_reason) == ("completed", None)
    assert asked(a) == [32000, WINDOW - PROMPT]


async def test_a_request_that_does_not_fit_its_output_moves_on_as_before() -> None:
    a = Windowed("a", [TextDelta("cut"), Finish("length")])
    b = Named("b", [TextDelta("fine"), Finish("stop")])
    run = await run_over(a, b, fits=False)

    assert run.state.status == "completed"
    assert asked(a) == [32000]
    assert asked(b) == [32000]
    assert run.state.stop_reason is None


async def test_a_refusal_not_saying_the_output_asked_is_not_lowered() -> None:
    """A prompt too long by itself (no output tokens said): no room to give."""
    a = Windowed("a", [TextDelta("x"), Finish("stop")], says_requested=False)
    run = await run_over(a)

    assert run.state.status == "failed"
    assert run.state.error["code"] == "context_length_exceeded"
    assert asked(a) == [32000]


async def test_the_lowered_request_refused_again_is_not_lowered_twice() -> None:
    a = Windowed("a", [TextDelta("x"), Finish("stop")], room=10)
    b = Named("b", [TextDelta("fine"), Finish("stop")])
    run = await run_over(a, b)

    assert asked(a) == [32000, WINDOW - PROMPT]  # not a third time, for the room it says now
    assert asked(b) == [32000]
    assert run.state.status == "completed"
    assert outcomes(run) == [
        ("a", "failed", "context_length_exceeded"),
        ("a", "failed", "context_length_exceeded"),
        ("b", "ok", None),
    ]


@pytest.mark.parametrize("asked_for", [WINDOW - PROMPT, WINDOW - PROMPT - 10])
async def test_a_refusal_saying_room_for_what_was_asked_is_not_asked_again(
    asked_for: int,
) -> None:
    """A server counting otherwise than its refusal says (it takes less than the room it
    states): lowering to that room would ask as much again, or more than the client
    allowed."""
    a = Windowed("a", [TextDelta("x"), Finish("stop")], room=10)
    run = await run_over(a, asked=asked_for)

    assert run.state.status == "failed"
    assert asked(a) == [asked_for]


async def test_a_count_that_stopped_at_the_room_asked_is_counted_again_by_the_server() -> None:
    """vLLM's renderer counts a prompt only one token past the room ``max_tokens`` leaves:
    its refusal says nothing of the prompt, and the room it seems to leave (one token less
    than asked) would be refused alike. The server's tokenizer counts the prompt."""
    a = Windowed("a", [TextDelta("cut"), Finish("length")], at_least=True)
    a.token_count = PROMPT
    run = await run_over(a)

    assert (run.state.status, run.state.stop_reason) == ("incomplete", WINDOW_FILLED)
    assert asked(a) == [32000, WINDOW - PROMPT]
    assert a.counted == a.requests[:1]  # the refused request's prompt, counted


@pytest.mark.parametrize("count", [None, UpstreamError("no tokenizer answered")])
async def test_a_count_that_stopped_at_the_room_asked_without_a_tokenizer_is_not_lowered(
    count: UpstreamError | None,
) -> None:
    """No count of the prompt (no tokenizer, or it failed): no room known, nothing asked
    again; the client gets the refusal."""
    a = Windowed("a", [TextDelta("x"), Finish("stop")], at_least=True)
    a.token_count = count
    run = await run_over(a)

    assert run.state.status == "failed"
    assert run.state.error["code"] == "context_length_exceeded"
    assert asked(a) == [32000]


async def test_no_room_for_the_upstreams_least_is_no_room() -> None:
    a = Windowed("a", [TextDelta("x"), Finish("stop")])
    a.min_output_tokens = WINDOW - PROMPT + 1  # type: ignore[misc]
    run = await run_over(a)

    assert run.state.status == "failed"
    assert asked(a) == [32000]


async def test_room_for_just_the_upstreams_least_is_room() -> None:
    a = Windowed("a", [TextDelta("x"), Finish("stop")])
    a.min_output_tokens = WINDOW - PROMPT  # type: ignore[misc]
    run = await run_over(a)

    assert run.state.status == "completed"
    assert asked(a) == [32000, WINDOW - PROMPT]


async def test_a_client_asking_within_the_room_is_asked_once() -> None:
    a = Windowed("a", [TextDelta("cut"), Finish("length")])
    run = await run_over(a, asked=WINDOW - PROMPT)

    assert asked(a) == [WINDOW - PROMPT]
    assert (run.state.status, run.state.stop_reason) == ("incomplete", None)


def filling(window: int | None, used: int, *, fits: bool = True) -> Any:
    """A run over a candidate of ``window`` whose answer stops at a limit after ``used``
    prompt and output tokens together."""
    a = Named("a", [TextDelta("cut"), UsageReport(Usage(40, used - 40)), Finish("length")])
    settings = GenerationSettings(max_output_tokens=32000, max_output_tokens_fit_window=fits)
    command = CreateResponse("assistant", [USER], stream=True, settings=settings)
    served = route(candidate(a, context_window=window))
    return gateway(router(served)).execute(Principal(), command)


async def test_an_answer_stopped_where_its_window_is_full_filled_it() -> None:
    """As llama-server stops whatever ``max_tokens`` asked: prompt and output together
    reach the window, a ``length`` finish."""
    run = await filling(WINDOW, WINDOW)
    await run.wait()
    assert (run.state.status, run.state.stop_reason) == ("incomplete", WINDOW_FILLED)


@pytest.mark.parametrize(
    ("window", "used", "fits"),
    [(WINDOW, WINDOW - 1, True), (None, WINDOW, True), (WINDOW, WINDOW, False)],
)
async def test_an_answer_stopped_short_of_its_window_stopped_at_its_limit(
    window: int | None, used: int, fits: bool
) -> None:
    run = await filling(window, used, fits=fits)
    await run.wait()
    assert (run.state.status, run.state.stop_reason) == ("incomplete", None)


class OverWindow(Named):
    """Refuses, as vLLM (0.16 on) does before it counts the prompt, output tokens beyond
    its whole window; answers its script otherwise. Its tokenizer counts :data:`PROMPT`
    (None: it has none)."""

    def __init__(self, script: list[Any], counts: int | None) -> None:
        super().__init__("a", script)
        self.token_count = counts

    async def infer(self, request: InferenceRequest) -> AsyncGenerator[Delta, None]:
        asked = request.settings.max_output_tokens
        if asked is not None and asked > WINDOW:
            self.requests.append(request)
            raise UpstreamOutputOverWindow("too many", requested=asked, window=WINDOW)
        async for delta in super().infer(request):
            yield delta


async def test_output_over_the_whole_window_is_asked_again_for_the_counted_room() -> None:
    a = OverWindow([TextDelta("cut"), Finish("length")], counts=PROMPT)
    run = await run_over(a)

    assert asked(a) == [32000, WINDOW - PROMPT]
    assert a.counted == a.requests[:1]  # the refused request's prompt, counted
    assert (run.state.status, run.state.stop_reason) == ("incomplete", WINDOW_FILLED)
    assert outcomes(run) == [("a", "failed", "upstream_rejected"), ("a", "ok", None)]


@pytest.mark.parametrize("fits", [True, False])
async def test_output_over_the_whole_window_uncounted_is_the_client_s(fits: bool) -> None:
    """No tokenizer to count the prompt (or a request whose output is not fitted): the
    refusal is the client's, and no other candidate is asked (it is the request's)."""
    a = OverWindow([TextDelta("x"), Finish("stop")], counts=None if fits else PROMPT)
    b = Named("b", [TextDelta("fine"), Finish("stop")])
    run = await run_over(a, b, fits=fits)

    assert asked(a) == [32000]
    assert b.requests == []
    assert (run.state.status, run.state.error["code"]) == ("failed", "upstream_rejected")
