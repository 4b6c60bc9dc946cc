"""A ``max_output_tokens`` the model's window has no room for beside the prompt, refused so
by the upstream: lowered to the room there is and asked again of the same candidate when
the request allows it (Messages), the answer that fills it stopping with
``model_context_window_exceeded``; the run's later rounds (a gateway tool's) counted first
and asked for their own room, not refused again."""

from __future__ import annotations

from collections.abc import AsyncGenerator, Mapping
from typing import Any

import orjson
import pytest

from stateway.core.commands import CreateResponse
from stateway.core.errors import UpstreamContextTooLong, UpstreamError, UpstreamOutputOverWindow
from stateway.core.gateway import Gateway
from stateway.core.generation_settings import GenerationSettings
from stateway.core.inference import (
    WINDOW_FILLED,
    Delta,
    Finish,
    InferenceRequest,
    TextDelta,
    ToolCallDelta,
    UsageReport,
)
from stateway.core.loop import Loop
from stateway.core.principal import Principal
from stateway.core.run_registry import RunRegistry
from stateway.core.tools.ports import McpServer, McpTool
from stateway.core.tools.toolset import ConfiguredServer, GatewayTools
from stateway.core.usage import Usage
from tests.core.fakes import FakeMcp, MemoryStore
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


async def run_over(
    *backends: Named, fits: bool = True, asked: int = 32000, max_attempts: int = 3
) -> Any:
    settings = GenerationSettings(max_output_tokens=asked, max_output_tokens_fit_window=fits)
    tiers = [candidate(b, priority=i) for i, b in enumerate(backends)]
    command = CreateResponse("assistant", [USER], stream=True, settings=settings)
    served = route(*tiers, max_attempts=max_attempts)
    run = await gateway(router(served)).execute(Principal(), command)
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


async def test_the_retry_is_the_same_candidate_s_try_within_max_attempts() -> None:
    """``max_attempts`` bounds the candidates a round tries: asking one again for the room
    its refusal told is still its try (recorded as an attempt of its own), and leaves the
    next candidate its place."""
    a = Windowed("a", [TextDelta("x"), Finish("stop")], room=10)  # refuses the room too
    b = Named("b", [TextDelta("fine"), Finish("stop")])
    alone = await run_over(Windowed("a", [TextDelta("x"), Finish("stop")]), max_attempts=1)
    run = await run_over(a, b, max_attempts=2)

    assert outcomes(alone) == [("a", "failed", "context_length_exceeded"), ("a", "ok", None)]
    assert outcomes(run) == [
        ("a", "failed", "context_length_exceeded"),
        ("a", "failed", "context_length_exceeded"),
        ("b", "ok", None),
    ]


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


GROWTH = 10
"""Tokens each item after the first adds to the prompt (the tools listed, a call)."""
ADD = McpTool("add", {"type": "object", "properties": {"a": {}, "b": {}}}, "Add")
MCP_TOOL: dict[str, Any] = {"type": "mcp", "server_label": "calc", "require_approval": "never"}


async def add(arguments: Mapping[str, Any]) -> str:
    return str(arguments["a"] + arguments["b"])


class Growing(Named):
    """Refuses, as vLLM does, output tokens beyond the room its window leaves beside a
    prompt growing by :data:`GROWTH` tokens with each item after the first; answers one
    script per answered request; its tokenizer counts as it does (None: it has none; a
    ``short`` count, one that many tokens under its own)."""

    def __init__(self, rounds: list[list[Any]], *, counts: bool = True, short: int = 0) -> None:
        super().__init__("a", rounds[0])
        self.rounds = rounds
        self.counts = counts
        self.short = short
        self.answered = 0
        self.refused: list[InferenceRequest] = []

    def prompt(self, request: InferenceRequest) -> int:
        return PROMPT + GROWTH * (len(request.items) - 1)

    async def count_tokens(self, request: InferenceRequest) -> int | None:
        self.counted.append(request)
        return self.prompt(request) - self.short if self.counts else None

    async def infer(self, request: InferenceRequest) -> AsyncGenerator[Delta, None]:
        asked, tokens = request.settings.max_output_tokens, self.prompt(request)
        if asked is not None and tokens + asked > WINDOW:
            self.requests.append(request)
            self.refused.append(request)
            raise UpstreamContextTooLong("no room", tokens=tokens, window=WINDOW, requested=asked)
        self.script = self.rounds[self.answered]
        self.answered += 1
        async for delta in super().infer(request):
            yield delta


def calling() -> list[Any]:
    arguments = orjson.dumps({"a": 2, "b": 3}).decode()
    return [ToolCallDelta(0, "up_0", "calc__add", arguments), Finish("tool_calls")]


async def hidden_rounds(backend: Growing) -> Any:
    """A Messages-like run (``max_tokens`` per call, fitted to the window) of Claude Code's
    32,000 over ``backend``, with the gateway's MCP tool."""
    settings = GenerationSettings(
        max_output_tokens=32000,
        max_output_tokens_per_call=True,
        max_output_tokens_fit_window=True,
        tools=[MCP_TOOL],
    )
    tools = GatewayTools(
        mcp=FakeMcp({"calc": [ADD]}, {"add": add}),
        servers={"calc": ConfiguredServer(McpServer("calc", "http://calc.test/mcp"))},
    )
    store = MemoryStore()
    loop = Loop(store, tools=tools)
    served = Gateway(store, router(route(candidate(backend))), loop, RunRegistry())
    command = CreateResponse("assistant", [USER], stream=True, settings=settings)
    run = await served.execute(Principal(), command)
    await run.wait()
    return run


def answered(backend: Growing) -> list[int]:
    """The prompt of each request ``backend`` answered."""
    refused = backend.refused
    return [backend.prompt(r) for r in backend.requests if all(r is not x for x in refused)]


async def test_a_later_round_is_counted_and_asked_for_its_own_room() -> None:
    """The candidate refused the first round's output tokens: the next round's prompt,
    longer by the call and its output, is counted first and asked for the room it leaves,
    not refused again."""
    a = Growing([calling(), [TextDelta("cut"), Finish("length")]])
    run = await hidden_rounds(a)

    first, second = answered(a)
    assert second > first
    assert asked(a) == [32000, WINDOW - first, WINDOW - second]
    assert len(a.refused) == 1
    assert [r.items for r in a.counted] == [a.requests[2].items]  # the later round's, once
    assert (run.state.status, run.state.stop_reason) == ("incomplete", WINDOW_FILLED)
    assert outcomes(run) == [
        ("a", "failed", "context_length_exceeded"),
        ("a", "ok", None),
        ("a", "ok", None),
    ]


async def test_a_later_round_without_a_count_is_refused_and_asked_again_as_the_first() -> None:
    a = Growing([calling(), [TextDelta("done"), Finish("stop")]], counts=False)
    run = await hidden_rounds(a)

    first, second = answered(a)
    assert asked(a) == [32000, WINDOW - first, 32000, WINDOW - second]
    assert (run.state.status, run.state.output[-1]["content"][0]["text"]) == ("completed", "done")


async def test_a_later_round_counted_short_is_asked_again_for_the_room_its_refusal_says() -> None:
    """A tokenizer counting fewer tokens than the server's generation does (a template
    rendered otherwise): the room asked is refused, and asked again as a first round's."""
    a = Growing([calling(), [TextDelta("cut"), Finish("length")]], short=5)
    run = await hidden_rounds(a)

    first, second = answered(a)
    assert asked(a) == [32000, WINDOW - first, WINDOW - second + 5, WINDOW - second]
    assert (run.state.status, run.state.stop_reason) == ("incomplete", WINDOW_FILLED)
