"""An answer that filled the model's context window, told as each API can: Messages has a
stop reason for it (``tests/core/test_window_room.py``); Responses has none, and its hosted
models' windows hold the input and the whole output, so a request whose answer cannot fit
is refused (``context_length_exceeded``): the response fails so, its cut item not
announced; Chat keeps the ``length`` finish every OpenAI-compatible server gives."""

from __future__ import annotations

from typing import Any

import pytest

from stateway.core import events as ev
from stateway.core.commands import CreateResponse
from stateway.core.generation_settings import GenerationSettings
from stateway.core.inference import WINDOW_FILLED, Finish, TextDelta, UsageReport
from stateway.core.principal import Principal
from stateway.core.usage import Usage
from tests.core.routing_fakes import Named, candidate, gateway, route, router

USER = {"type": "message", "role": "user", "content": [{"type": "input_text", "text": "hi"}]}
WINDOW, PROMPT = 100, 40


async def answered(
    script: list[Any],
    *,
    window: int | None = WINDOW,
    asked: int | None = None,
    refused: bool = True,
    stream: bool = True,
) -> Any:
    """The ended run of an answer scripted by ``script`` from a candidate of ``window``;
    ``refused``: a window filled is refused (Responses' settings)."""
    settings = GenerationSettings(max_output_tokens=asked, window_filled_refused=refused)
    command = CreateResponse("assistant", [USER], stream=stream, settings=settings)
    served = route(candidate(Named("a", script), context_window=window))
    run = await gateway(router(served)).execute(Principal(), command)
    await run.wait()
    return run


def filling(used: int) -> list[Any]:
    """An answer stopped at a limit after ``used`` prompt and output tokens together, as
    llama-server stops one where its slot is full (whatever ``max_tokens`` asked)."""
    return [TextDelta("cut"), UsageReport(Usage(PROMPT, used - PROMPT)), Finish("length")]


def announced(run: Any) -> list[str]:
    return [event.item["type"] for event in run.events if isinstance(event, ev.ItemDone)]


@pytest.mark.parametrize("stream", [True, False])
async def test_an_answer_that_filled_the_window_fails_as_too_long(stream: bool) -> None:
    run = await answered(filling(WINDOW), stream=stream)

    state = run.state
    assert (state.status, state.incomplete_reason) == ("failed", None)
    assert state.error["code"] == "context_length_exceeded"
    assert state.error["status"] == 400
    assert f"context window of {WINDOW} tokens" in state.error["message"]
    assert f"room for {WINDOW - PROMPT} output tokens" in state.error["message"]
    assert announced(run) == []  # a client would keep the cut answer as the model's
    assert [item["status"] for item in state.output] == ["incomplete"]  # stored, as cut
    assert (state.usage.input_tokens, state.usage.output_tokens) == (PROMPT, WINDOW - PROMPT)
    assert isinstance(run.events[-1], ev.ResponseFinished)


async def test_an_upstream_saying_the_window_filled_fails_so_too() -> None:
    """Anthropic's ``model_context_window_exceeded``: no count of the window needed."""
    script = [TextDelta("cut"), Finish("length", stop_reason=WINDOW_FILLED)]
    run = await answered(script, window=None)

    assert run.state.status == "failed"
    assert run.state.error["code"] == "context_length_exceeded"
    assert announced(run) == []


@pytest.mark.parametrize(
    ("window", "used", "asked"),
    [
        (WINDOW, WINDOW - 1, None),  # short of the window: a limit of the server's own
        (None, WINDOW, None),  # no window known: nothing says it was full
        (WINDOW, WINDOW, WINDOW - PROMPT),  # the client's own limit, reached at the window
    ],
)
async def test_an_answer_stopped_at_a_limit_short_of_the_window_is_incomplete(
    window: int | None, used: int, asked: int | None
) -> None:
    run = await answered(filling(used), window=window, asked=asked)

    assert (run.state.status, run.state.incomplete_reason) == ("incomplete", "max_output_tokens")
    assert announced(run) == ["message"]


async def test_where_a_window_filled_is_not_refused_the_answer_stops_at_length() -> None:
    """Chat Completions: ``length``, as vLLM and llama-server finish it."""
    run = await answered(filling(WINDOW), refused=False)

    assert (run.state.status, run.state.incomplete_reason) == ("incomplete", "max_output_tokens")
    assert run.state.stop_reason is None
    assert announced(run) == ["message"]
