from typing import Any

import orjson
import pytest
from openai.types.responses import Response, ResponseStreamEvent
from pydantic import TypeAdapter

from stateway.core.commands import CreateResponse
from stateway.core.errors import UpstreamError
from stateway.core.gateway import Gateway
from stateway.core.generation_settings import GenerationSettings
from stateway.core.inference import (
    Delta,
    Finish,
    ReasoningDelta,
    TextDelta,
    ToolCallDelta,
    UsageReport,
)
from stateway.core.loop import Loop
from stateway.core.principal import Principal
from stateway.core.response import ResponseState
from stateway.core.routing import BackendEntry, Router
from stateway.core.run_registry import RunRegistry
from stateway.core.runs import Run
from stateway.core.usage import Usage
from stateway.protocols.responses import stream
from stateway.protocols.responses.encode import encode_response
from stateway.protocols.responses.stream import encode_sse, encode_sse_batch
from tests.core.fakes import MemoryStore, ScriptedBackend
from tests.support.open_responses import missing_in_event

EVENTS: TypeAdapter[ResponseStreamEvent] = TypeAdapter(ResponseStreamEvent)


async def finished_run(
    script: list[Delta | UpstreamError], settings: GenerationSettings | None = None
) -> Run:
    store = MemoryStore()
    router = Router([BackendEntry(ScriptedBackend(script), {}, catch_all=True)])
    gateway = Gateway(store, router, Loop(store), RunRegistry())
    command = CreateResponse(
        model="m",
        input=[
            {"type": "message", "role": "user", "content": [{"type": "input_text", "text": "x"}]}
        ],
        stream=True,
        settings=settings or GenerationSettings(),
    )
    run = await gateway.execute(Principal(), command)
    await run.wait()
    return run


SCRIPT: list[Delta | UpstreamError] = [
    ReasoningDelta("why"),
    TextDelta("Hi"),
    ToolCallDelta(0, "call_1", "f", "{}"),
    Finish("tool_calls"),
    UsageReport(Usage(5, 7, 1, 2)),
]


async def test_every_frame_is_one_sdk_event_with_consecutive_sequence_numbers() -> None:
    run = await finished_run(SCRIPT)
    frames = [encode_sse(seq, event) for seq, event in enumerate(run.events)]
    types = []
    for seq, frame in enumerate(frames):
        assert frame.endswith(b"\n\n")
        assert b"\r" not in frame
        event_line, data_line, blank, end = frame.split(b"\n")
        assert (blank, end) == (b"", b"")
        assert event_line.startswith(b"event: ")
        payload = orjson.loads(data_line.removeprefix(b"data: "))
        assert payload["type"] == event_line.removeprefix(b"event: ").decode()
        assert payload["sequence_number"] == seq
        parsed = EVENTS.validate_python(payload)
        types.append(parsed.type)
    assert types[:2] == ["response.created", "response.in_progress"]
    assert types[-1] == "response.completed"
    assert "response.reasoning_text.delta" in types
    assert "response.function_call_arguments.done" in types


async def test_every_event_holds_the_fields_the_open_responses_spec_requires() -> None:
    run = await finished_run(SCRIPT)
    for seq, event in enumerate(run.events):
        assert missing_in_event(stream.encode_event(seq, event)) == []


def test_an_error_event_holds_the_fields_the_open_responses_spec_requires() -> None:
    frame = stream.encode_sse_error(UpstreamError("gone"), 7)
    payload = orjson.loads(frame.split(b"\n")[1].removeprefix(b"data: "))
    assert missing_in_event(payload) == []
    assert payload["error"]["type"] == UpstreamError.type


async def test_response_object_validates_against_the_sdk_type() -> None:
    run = await finished_run(SCRIPT, GenerationSettings(metadata={"a": "b"}, max_output_tokens=50))
    body = encode_response(run.state)
    response = Response.model_validate(body)
    assert response.status == "completed"
    assert response.usage is not None
    assert response.usage.total_tokens == 12
    assert response.usage.input_tokens_details.cached_tokens == 1
    assert response.usage.output_tokens_details.reasoning_tokens == 2
    assert response.temperature == 1.0
    assert response.top_p == 1.0
    assert response.metadata == {"a": "b"}
    assert response.max_output_tokens == 50
    assert [item.type for item in response.output] == ["reasoning", "message", "function_call"]


async def test_created_event_is_a_snapshot_even_when_encoded_late() -> None:
    run = await finished_run(SCRIPT)
    created = orjson.loads(encode_sse(0, run.events[0]).split(b"\n")[1].removeprefix(b"data: "))
    assert created["response"]["status"] == "in_progress"
    assert created["response"]["output"] == []


async def test_failed_run_ends_with_response_failed() -> None:
    run = await finished_run([UpstreamError("boom")])
    last = orjson.loads(encode_sse(9, run.events[-1]).split(b"\n")[1].removeprefix(b"data: "))
    assert last["type"] == "response.failed"
    assert last["response"]["error"]["message"] == "boom"
    EVENTS.validate_python(last)


@pytest.mark.parametrize(
    ("given", "strict", "description"),
    [({}, False, None), ({"strict": True, "description": "d"}, True, "d")],
)
async def test_json_schema_echo_has_a_boolean_strict_and_a_description(
    given: dict[str, object], strict: bool, description: str | None
) -> None:
    fmt = {"type": "json_schema", "name": "s", "schema": {"type": "object"}, **given}
    run = await finished_run([TextDelta("{}"), Finish("stop")], GenerationSettings(text_format=fmt))
    echoed = encode_response(run.state)["text"]["format"]
    assert echoed["strict"] is strict
    assert "description" in echoed
    assert echoed["description"] == description
    assert Response.model_validate(encode_response(run.state)).text is not None


@pytest.mark.parametrize(
    ("code", "status", "wire"),
    [
        ("server_restarted", 503, "server_restarted"),
        ("server_shutting_down", 503, "server_shutting_down"),
        ("upstream_timeout", 504, "upstream_timeout"),
        ("upstream_response_too_large", 502, "upstream_response_too_large"),
        ("overloaded", 503, "overloaded"),
        ("storage_unavailable", 503, "server_error"),
        ("upstream_rejected", 400, "invalid_prompt"),
    ],
)
async def test_the_gateways_own_codes_pass_and_others_fold_into_the_spec_set(
    code: str, status: int, wire: str
) -> None:
    run = await finished_run([UpstreamError("x")])
    state = run.state
    state.error = {"code": code, "message": "m", "status": status}
    assert encode_response(state)["error"] == {"code": wire, "message": "m"}


def test_an_event_json_kept_in_a_log_holds_about_its_own_size() -> None:
    """A journal keeps every payload of its run (every WebSocket response has one):
    ``orjson.dumps`` alone returns bytes holding ~4 KiB each, however short the JSON."""
    import tracemalloc

    from stateway.core import events as ev
    from stateway.protocols.responses.stream import encode_event_json

    delta = ev.TextDelta(0, 0, "msg_1", "w1 ")
    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        kept = [encode_event_json(seq, delta) for seq in range(2000)]
        held = tracemalloc.get_traced_memory()[0] - before
    finally:
        tracemalloc.stop()
    payload = sum(map(len, kept))
    assert held < 3 * payload + 64 * len(kept)  # ~4 KiB each before
    assert orjson.loads(kept[7])["sequence_number"] == 7


async def test_a_batchs_frames_are_each_events_byte_for_byte() -> None:
    run = await finished_run(SCRIPT)
    events = run.events
    expected = [encode_sse(seq, event) for seq, event in enumerate(events, 3)]
    assert encode_sse_batch(3, events) == b"".join(expected)
    assert encode_sse_batch(3, events[:1]) == expected[0]
    assert encode_sse_batch(4, events[1:2]) == expected[1]


async def test_an_announcement_renders_its_snapshot_once(monkeypatch: pytest.MonkeyPatch) -> None:
    run = await finished_run(SCRIPT)
    created, in_progress = run.events[:2]
    rendered: list[bool] = []

    def counted(state: ResponseState, *, snapshot: bool = False) -> dict[str, Any]:
        rendered.append(snapshot)
        return encode_response(state, snapshot=snapshot)

    monkeypatch.setattr(stream, "encode_response", counted)
    frames = encode_sse_batch(0, [created, in_progress]).split(b"\n\n")
    assert rendered == [True]
    assert frames[0].startswith(b"event: response.created\ndata: ")
    assert frames[1].startswith(b"event: response.in_progress\ndata: ")
    # Another state's announcement is its own.
    other = (await finished_run(SCRIPT)).events[1]
    encode_sse_batch(0, [created, other])
    assert rendered == [True, True, True]
