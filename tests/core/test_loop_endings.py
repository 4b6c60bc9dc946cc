"""How a run ends: the reasons that make it incomplete, and when it is completed."""

from __future__ import annotations

import asyncio

import pytest

from stateway.core import events as ev
from stateway.core.commands import CreateResponse
from stateway.core.errors import UpstreamError, UpstreamRejected
from stateway.core.generation_settings import GenerationSettings
from stateway.core.inference import Delta, Finish, TextDelta, ToolCallDelta, UsageReport
from stateway.core.limits import charged_tokens
from stateway.core.principal import Principal
from stateway.core.runs import Run
from stateway.core.token_estimate import item_tokens
from stateway.core.usage import Usage
from stateway.protocols.responses.encode import encode_response
from tests.core.fakes import MemoryStore, ScriptedBackend
from tests.core.test_loop import gateway_for, user


async def finish_with(
    script: list[Delta | UpstreamError], settings: GenerationSettings | None = None
) -> tuple[Run, MemoryStore, ScriptedBackend]:
    store = MemoryStore()
    backend = ScriptedBackend(script)
    command = CreateResponse(
        model="m", input=[user("hi")], settings=settings or GenerationSettings()
    )
    run = await gateway_for(backend, store).execute(Principal(), command)
    await run.wait()
    return run, store, backend


@pytest.mark.parametrize(
    ("finish", "reason"), [("content_filter", "content_filter"), ("length", "max_output_tokens")]
)
async def test_filtered_or_cut_generations_end_incomplete_with_their_reason(
    finish: str, reason: str
) -> None:
    run, store, _ = await finish_with([TextDelta("partial"), Finish(finish)])

    assert (run.state.status, run.state.incomplete_reason) == ("incomplete", reason)
    assert run.state.output[0]["status"] == "incomplete"
    assert run.state.completed_at is None
    [record] = store.records.values()
    assert record.status == "incomplete"
    assert record.body["incomplete_reason"] == reason


@pytest.mark.parametrize("finish", ["stop", "tool_calls", "something_new"])
async def test_other_finish_reasons_complete(finish: str) -> None:
    run, _, _ = await finish_with([TextDelta("a"), Finish(finish)])

    assert run.state.status == "completed"
    assert run.state.incomplete_reason is None


async def test_a_completed_response_records_when_it_completed() -> None:
    run, store, _ = await finish_with([TextDelta("a"), Finish("stop")])

    state = run.state
    assert state.completed_at is not None
    assert state.created_at <= state.completed_at
    [record] = store.records.values()
    assert record.body["completed_at"] == state.completed_at


async def test_a_failed_response_has_no_completion_time() -> None:
    run, store, _ = await finish_with([UpstreamError("boom")])

    assert run.state.status == "failed"
    assert run.state.completed_at is None
    [record] = store.records.values()
    assert record.body["completed_at"] is None


@pytest.mark.parametrize("parallel", [True, False])
async def test_the_parallel_tool_calls_setting_reaches_the_backend(parallel: bool) -> None:
    settings = GenerationSettings(
        tools=[{"type": "function", "name": "f"}], parallel_tool_calls=parallel
    )
    _, _, backend = await finish_with([Finish("stop")], settings)

    [request] = backend.requests
    assert request.settings.parallel_tool_calls is parallel


def test_parallel_tool_calls_are_allowed_unless_turned_off() -> None:
    assert GenerationSettings().parallel_tool_calls is True


async def test_the_backend_gets_the_model_instructions_and_stream_flag() -> None:
    store = MemoryStore()
    backend = ScriptedBackend([Finish("stop")])
    command = CreateResponse(model="m", input=[user("hi")], instructions="rules", stream=True)
    run = await gateway_for(backend, store).execute(Principal(), command)
    await run.wait()

    [request] = backend.requests
    assert (request.model, request.instructions, request.stream) == ("m", "rules", True)
    assert request.items[0]["content"] == [{"type": "input_text", "text": "hi"}]


@pytest.mark.parametrize(
    ("error", "stored"),
    [
        (
            UpstreamRejected("slow down", status=429, code="rate_limit_exceeded"),
            {"code": "rate_limit_exceeded", "message": "slow down", "status": 429},
        ),
        (UpstreamError("cut"), {"code": "upstream_error", "message": "cut", "status": 502}),
    ],
)
async def test_a_failed_run_records_the_errors_code_and_status(
    error: UpstreamError, stored: dict[str, object]
) -> None:
    run, store, _ = await finish_with([TextDelta("partial"), Finish("stop"), error])

    assert run.state.error == stored
    [record] = store.records.values()
    assert record.body["error"] == stored


@pytest.mark.parametrize("stream", [False, True])
async def test_a_run_failed_before_any_count_has_no_usage_rather_than_zeros(stream: bool) -> None:
    """A Chat or Responses upstream counts at its answer's end: one cut after output
    counted nothing, and its usage is unknown (null, as a response a dead process left is
    marked failed with), not zero tokens; what it is charged is estimated
    (:func:`~stateway.core.limits.charged_tokens`)."""
    store = MemoryStore()
    backend = ScriptedBackend([TextDelta("three words here"), UpstreamError("cut")])
    command = CreateResponse(model="m", input=[user("hi")], stream=stream)
    run = await gateway_for(backend, store).execute(Principal(), command)
    await run.wait()

    assert run.state.status == "failed"
    assert run.state.usage is None
    assert encode_response(run.state)["usage"] is None
    [record] = store.records.values()
    assert record.body["usage"] is None
    assert charged_tokens(run.state) > 0


PROMPT_COUNTED = Usage(input_tokens=900, output_tokens=1, cached_tokens=600, cache_write_tokens=200)
"""An upstream's count sent ahead of the answer (an Anthropic ``message_start``), or a
running count (vLLM's ``continuous_usage_stats``): its output tokens a part of the
answer's."""


@pytest.mark.parametrize("stream", [False, True])
@pytest.mark.parametrize("ahead", [True, False], ids=["ahead", "running"])
async def test_a_run_failed_after_its_upstream_counted_the_prompt_reports_that_count(
    stream: bool, ahead: bool
) -> None:
    """The upstream read the prompt and counted it: the response's usage has its input
    tokens (with the cache's reads and writes), though the answer's count never came; its
    output tokens, which that count had only begun, are left out (charged estimated)."""
    store = MemoryStore()
    text = TextDelta("three words here")
    counted = [UsageReport(PROMPT_COUNTED), text] if ahead else [text, UsageReport(PROMPT_COUNTED)]
    backend = ScriptedBackend([*counted, UpstreamError("cut")])
    command = CreateResponse(model="m", input=[user("hi")], stream=stream)
    run = await gateway_for(backend, store).execute(Principal(), command)
    await run.wait()

    assert run.state.status == "failed"
    reported = Usage(input_tokens=900, cached_tokens=600, cache_write_tokens=200)
    assert run.state.usage == reported
    [record] = store.records.values()
    assert record.body["usage"]["input_tokens"] == 900
    assert encode_response(run.state)["usage"]["input_tokens"] == 900
    assert run.state.uncounted_input == 0  # counted in the usage: not charged twice
    assert charged_tokens(run.state) == 900 + sum(item_tokens(i) for i in run.state.output)


async def left_after_text(deltas: list[Delta], store: MemoryStore) -> Run:
    """A streamed run of ``deltas`` (the backend then waits) whose client left once its
    first text came, ended."""
    backend = ScriptedBackend(deltas, gate=asyncio.Event())
    run = await gateway_for(backend, store).execute(
        Principal(), CreateResponse(model="m", input=[user("hi")], stream=True)
    )
    async for _, event in run.subscribe():
        if isinstance(event, ev.TextDelta):
            break
    run.cancel()
    await run.wait()
    return run


async def test_a_run_whose_client_left_keeps_its_partial_output_marked_incomplete() -> None:
    store = MemoryStore()
    run = await left_after_text([TextDelta("partial")], store)

    assert run.state.incomplete_reason == "client_disconnected"
    assert run.state.output[0]["status"] == "incomplete"
    assert run.state.usage is None  # its upstream counted nothing before it left: unknown
    [record] = store.records.values()
    assert record.output_items[0]["status"] == "incomplete"
    assert record.body["usage"] is None


async def test_a_run_whose_client_left_after_a_count_reports_that_count() -> None:
    store = MemoryStore()
    run = await left_after_text([UsageReport(PROMPT_COUNTED), TextDelta("partial")], store)

    assert run.state.incomplete_reason == "client_disconnected"
    assert run.state.usage == Usage(input_tokens=900, cached_tokens=600, cache_write_tokens=200)
    [record] = store.records.values()
    assert record.body["usage"]["input_tokens"] == 900


@pytest.mark.parametrize(
    "cut",
    [
        [TextDelta("Hello! You")],
        [ToolCallDelta(0, "call_1", "f", '{"cmd": "rm -rf bu')],
        [ToolCallDelta(0, "call_1", "f", '{"a": 1}'), ToolCallDelta(1, "call_2", "f", '{"b"')],
    ],
    ids=["message", "call", "parallel-calls"],
)
async def test_an_item_cut_off_by_a_failure_is_stored_incomplete_but_never_announced_done(
    cut: list[Delta | UpstreamError],
) -> None:
    """A client takes an item done as final (Codex runs a call done, and resends a message
    done as the model's); an upstream failing mid-item leaves it open on the stream, whose
    last word is the failure, as the upstream APIs end a failed stream."""
    settings = GenerationSettings(tools=[{"type": "function", "name": "f"}])
    backend = ScriptedBackend([*cut, UpstreamError("cut")])
    run = await gateway_for(backend, MemoryStore()).execute(
        Principal(), CreateResponse(model="m", input=[user("hi")], settings=settings, stream=True)
    )
    events = [event async for _, event in run.subscribe()]

    assert run.state.status == "failed"
    assert run.state.output
    assert {item["status"] for item in run.state.output} == {"incomplete"}
    assert any(isinstance(event, ev.ItemAdded) for event in events)
    done = (ev.ItemDone, ev.TextDone, ev.PartDone, ev.ArgumentsDone)
    assert not [event for event in events if isinstance(event, done)]
    assert isinstance(events[-1], ev.ResponseFinished)
