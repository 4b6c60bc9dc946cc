import asyncio
import re
from typing import Any

import pytest

from stateway.core import events as ev
from stateway.core.commands import CreateResponse, GetResponse, ListInputItems
from stateway.core.errors import NotFound, PreviousResponseNotFound, UpstreamError, UpstreamRejected
from stateway.core.gateway import Gateway
from stateway.core.generation_settings import GenerationSettings
from stateway.core.inference import (
    Citation,
    Delta,
    Finish,
    MessageStart,
    ReasoningDelta,
    RefusalDelta,
    TextDelta,
    ToolCallDelta,
    UsageReport,
)
from stateway.core.loop import Loop
from stateway.core.principal import Principal
from stateway.core.routing import BackendEntry, Capabilities, Router
from stateway.core.run_registry import RunRegistry
from stateway.core.usage import Usage
from tests.core.fakes import MemoryStore, ScriptedBackend


def user(text: str) -> dict[str, object]:
    return {
        "type": "message",
        "role": "user",
        "content": [{"type": "input_text", "text": text}],
        "id": "msg_in",
    }


def gateway_for(backend: ScriptedBackend, store: MemoryStore) -> Gateway:
    router = Router([BackendEntry(backend, {}, catch_all=True)])
    return Gateway(store, router, Loop(store), RunRegistry())


async def run_once(
    script: list[Delta | UpstreamError], **fields: object
) -> tuple[object, MemoryStore, list[ev.Event]]:
    store = MemoryStore()
    gateway = gateway_for(ScriptedBackend(script), store)
    run = await gateway.execute(
        Principal(), CreateResponse(model="m", input=[user("hi")], **fields)
    )  # type: ignore[arg-type]
    await run.wait()
    return run, store, run.events


async def test_text_round_emits_the_full_event_sequence_and_persists() -> None:
    run, store, events = await run_once(
        [TextDelta("Hel"), TextDelta("lo"), Finish("stop"), UsageReport(Usage(3, 2))]
    )
    kinds = [type(e).__name__ for e in events]
    assert kinds == [
        "ResponseCreated",
        "ResponseInProgress",
        "ItemAdded",
        "PartAdded",
        "TextDelta",
        "TextDelta",
        "TextDone",
        "PartDone",
        "ItemDone",
        "ResponseFinished",
    ]
    state = run.state  # type: ignore[attr-defined]
    assert state.status == "completed"
    assert re.fullmatch("resp_[0-9a-f]{48}", state.id)  # the Responses API's id shape
    assert state.output[0]["content"][0]["text"] == "Hello"
    assert state.usage == Usage(3, 2)
    [record] = store.records.values()
    assert record.status == "completed"
    assert record.input_items[0]["id"] == "msg_in"
    assert record.output_items == state.output


async def test_reasoning_then_parallel_tool_calls() -> None:
    run, _, _ = await run_once(
        [
            ReasoningDelta("think"),
            ToolCallDelta(0, "call_a", "f", '{"a"'),
            ToolCallDelta(0, None, None, ":1}"),
            ToolCallDelta(1, "call_a", "g", "{}"),
            Finish("tool_calls"),
        ]
    )
    output = run.state.output  # type: ignore[attr-defined]
    assert [i["type"] for i in output] == ["reasoning", "function_call", "function_call"]
    assert output[1]["arguments"] == '{"a":1}'
    assert output[1]["call_id"] == "call_a"
    assert output[2]["call_id"] != "call_a", "duplicate upstream call ids are replaced"
    assert all(i["status"] == "completed" for i in output[1:])


async def test_length_finish_is_incomplete() -> None:
    run, store, _ = await run_once([TextDelta("a"), Finish("length")])
    state = run.state  # type: ignore[attr-defined]
    assert state.status == "incomplete"
    assert state.incomplete_reason == "max_output_tokens"
    assert state.output[0]["status"] == "incomplete"
    assert next(iter(store.records.values())).status == "incomplete"


async def test_error_before_output_fails_and_is_reported_to_the_caller() -> None:
    run, store, events = await run_once([UpstreamRejected("nope", status=429)])
    assert len(events) == 3
    assert run.error is not None  # type: ignore[attr-defined]
    assert run.state.status == "failed"  # type: ignore[attr-defined]
    assert isinstance(events[-1], ev.ResponseFinished)
    assert next(iter(store.records.values())).status == "failed"


async def test_error_after_output_fails_without_a_caller_error() -> None:
    run, store, _ = await run_once([TextDelta("partial"), UpstreamError("cut")])
    assert run.error is None  # type: ignore[attr-defined]
    state = run.state  # type: ignore[attr-defined]
    assert state.status == "failed"
    assert state.output[0]["status"] == "incomplete"
    assert state.error["message"] == "cut"
    assert next(iter(store.records.values())).status == "failed"


async def test_store_false_persists_nothing() -> None:
    _, store, _ = await run_once([TextDelta("x"), Finish("stop")], store=False)
    assert store.records == {}


async def test_response_is_persisted_before_created_and_before_the_terminal_event() -> None:
    logs: list[list[ev.Event]] = []
    seen: list[tuple[str, int, int]] = []
    backend = ScriptedBackend([TextDelta("x"), Finish("stop")])
    store = MemoryStore(
        on_save=lambda r: seen.append((r.status, len(r.input_items), len(logs[0]) if logs else 0))
    )
    gateway = gateway_for(backend, store)
    run = await gateway.execute(
        Principal(), CreateResponse(model="m", input=[user("hi")], stream=True)
    )
    logs.append(run.events)
    await run.wait()
    # the in-progress row, with its input, before response.created; the end before the last
    assert seen == [("in_progress", 1, 0), ("completed", 0, len(run.events) - 1)]
    assert isinstance(run.events[-1], ev.ResponseFinished)


async def test_a_non_stream_response_is_written_once_at_the_end() -> None:
    seen: list[tuple[str, int, int]] = []
    store = MemoryStore(
        on_save=lambda r: seen.append((r.status, len(r.input_items), len(r.output_items)))
    )
    gateway = gateway_for(ScriptedBackend([TextDelta("x"), Finish("stop")]), store)
    run = await gateway.execute(Principal(), CreateResponse(model="m", input=[user("hi")]))
    await run.wait()
    assert seen == [("completed", 1, 1)]  # its id was not given out before the end


async def test_cancelled_run_closes_upstream_and_is_stored_incomplete() -> None:
    gate = asyncio.Event()
    backend = ScriptedBackend([TextDelta("partial")], gate=gate)
    store = MemoryStore()
    gateway = gateway_for(backend, store)
    run = await gateway.execute(
        Principal(), CreateResponse(model="m", input=[user("hi")], stream=True)
    )
    task = run.task
    async for _, event in run.subscribe():
        if isinstance(event, ev.TextDelta):
            break
    run.cancel()
    await run.wait()
    await backend.closed.wait()
    assert run.state.status == "incomplete"
    assert isinstance(run.events[-1], ev.ResponseFinished)
    record = next(iter(store.records.values()))
    assert record.status == "incomplete"
    assert record.output_items[0]["content"][0]["text"] == "partial"
    await asyncio.gather(task, return_exceptions=True)  # type: ignore[arg-type]
    assert len(gateway.runs) == 0
    assert run.task is None  # an ended run holds no task (its CancelledError would hold the run)


async def test_previous_response_rebuilds_context_without_instructions() -> None:
    store = MemoryStore()
    backend = ScriptedBackend([TextDelta("one"), Finish("stop")])
    gateway = gateway_for(backend, store)
    first = await gateway.execute(
        Principal(), CreateResponse(model="m", input=[user("a")], instructions="first rules")
    )
    await first.wait()
    second = await gateway.execute(
        Principal(), CreateResponse(model="m", input=[user("b")], previous_response_id=first.id)
    )
    await second.wait()
    sent = backend.requests[-1]
    assert sent.instructions is None
    assert [i["type"] for i in sent.items] == ["message", "message", "message"]
    assert sent.items[1]["role"] == "assistant"


async def test_unknown_previous_response_is_not_found() -> None:
    gateway = gateway_for(ScriptedBackend([]), MemoryStore())
    with pytest.raises(PreviousResponseNotFound) as caught:
        await gateway.execute(
            Principal(), CreateResponse(model="m", input=[], previous_response_id="resp_x")
        )
    assert caught.value.message == "Previous response with id 'resp_x' not found."


async def test_subscribers_resume_from_any_sequence_number() -> None:
    run, _, events = await run_once([TextDelta("a"), TextDelta("b"), Finish("stop")])
    tail = [seq async for seq, _ in run.subscribe(after=3)]  # type: ignore[attr-defined]
    assert tail == list(range(4, len(events)))


async def test_subscribers_are_independent_and_a_cancelled_one_harms_none() -> None:
    gate = asyncio.Event()
    backend = ScriptedBackend([TextDelta("a")], gate=gate)
    gateway = gateway_for(backend, MemoryStore())
    run = await gateway.execute(
        Principal(), CreateResponse(model="m", input=[user("hi")], stream=True)
    )

    async def collect() -> list[int]:
        return [seq async for seq, _ in run.subscribe()]

    first, second, doomed = (asyncio.create_task(collect()) for _ in range(3))
    async for _, event in run.subscribe():  # wait until output is flowing
        if isinstance(event, ev.TextDelta):
            break
    doomed.cancel()
    gate.set()
    assert await first == await second == list(range(len(run.events)))
    assert doomed.cancelled()


async def test_calls_without_indexes_are_told_apart_by_upstream_id() -> None:
    run, _, _ = await run_once(
        [
            ToolCallDelta(0, "up_1", "f", '{"a":'),
            ToolCallDelta(0, None, None, "1}"),
            ToolCallDelta(0, "up_2", "g", '{"b":2}'),
            Finish("tool_calls"),
        ]
    )
    calls = run.state.output  # type: ignore[attr-defined]
    assert [(c["name"], c["arguments"]) for c in calls] == [("f", '{"a":1}'), ("g", '{"b":2}')]


async def test_without_parallel_tool_calls_only_the_first_call_is_kept() -> None:
    script: list[Delta | UpstreamError] = [
        ToolCallDelta(0, "up_1", "f", '{"a":'),
        ToolCallDelta(0, None, None, "1}"),
        ToolCallDelta(1, "up_2", "g", "{}"),
        ToolCallDelta(0, "up_3", "h", "{}"),
        Finish("tool_calls"),
    ]
    settings = GenerationSettings(parallel_tool_calls=False)
    run, _, _ = await run_once(script, settings=settings)
    calls = run.state.output  # type: ignore[attr-defined]
    assert [(c["name"], c["arguments"]) for c in calls] == [("f", '{"a":1}')]


async def test_interleaved_fragments_are_assembled_by_index_one_call_after_the_other() -> None:
    """A server interleaving its parallel calls' fragments: each call's arguments by its
    index; the second call is written once the first is done, its events its own."""
    run, _, events = await run_once(
        [
            ToolCallDelta(0, "a", "f", ""),
            ToolCallDelta(1, "b", "g", ""),
            ToolCallDelta(0, None, None, '{"x":'),
            ToolCallDelta(1, None, None, '{"y":'),
            ToolCallDelta(0, None, None, "1}"),
            ToolCallDelta(1, None, None, "2}"),
            Finish("tool_calls"),
        ]
    )
    calls = run.state.output  # type: ignore[attr-defined]
    assert [(c["call_id"], c["name"], c["arguments"]) for c in calls] == [
        ("a", "f", '{"x":1}'),
        ("b", "g", '{"y":2}'),
    ]
    ids = [c["id"] for c in calls]
    shown = [
        (type(e).__name__, e.item["id"] if isinstance(e, ev.ItemAdded | ev.ItemDone) else e.item_id)
        for e in events
        if isinstance(e, ev.ItemAdded | ev.ArgumentsDelta | ev.ItemDone)
    ]
    assert shown == [
        ("ItemAdded", ids[0]),
        ("ArgumentsDelta", ids[0]),
        ("ArgumentsDelta", ids[0]),
        ("ItemDone", ids[0]),
        ("ItemAdded", ids[1]),
        ("ArgumentsDelta", ids[1]),
        ("ArgumentsDelta", ids[1]),
        ("ItemDone", ids[1]),
    ]


async def test_held_calls_are_written_before_output_that_follows_them() -> None:
    run, _, _ = await run_once(
        [
            ToolCallDelta(0, "a", "f", "{}"),
            ToolCallDelta(1, "b", "g", "{"),
            ToolCallDelta(1, None, None, "}"),
            TextDelta("done"),
            Finish("stop"),
        ]
    )
    output = run.state.output  # type: ignore[attr-defined]
    assert [(o["type"], o.get("arguments")) for o in output] == [
        ("function_call", "{}"),
        ("function_call", "{}"),
        ("message", None),
    ]


async def test_a_bare_fragment_for_a_closed_call_fails_the_run() -> None:
    run, _, _ = await run_once(
        [
            ToolCallDelta(0, "a", "f", "{}"),
            TextDelta("and"),
            ToolCallDelta(0, None, None, "x"),
        ]
    )
    assert run.state.status == "failed"  # type: ignore[attr-defined]


async def test_unexpected_errors_still_end_the_run_stored_as_failed() -> None:
    class Broken(ScriptedBackend):
        async def infer(self, request):  # type: ignore[no-untyped-def, override]
            raise RuntimeError("a bug")
            yield

    store = MemoryStore()
    gateway = gateway_for(Broken([]), store)
    run = await gateway.execute(Principal(), CreateResponse(model="m", input=[user("hi")]))
    await run.wait()
    assert run.state.status == "failed"
    assert run.error is not None
    assert run.error.status == 500
    assert next(iter(store.records.values())).status == "failed"


async def test_repeated_running_usage_totals_count_once_per_round() -> None:
    run, _, _ = await run_once(
        [TextDelta("a"), UsageReport(Usage(3, 1)), UsageReport(Usage(3, 2)), Finish("stop")]
    )
    assert run.state.usage == Usage(3, 2)  # type: ignore[attr-defined]


async def test_a_stored_response_can_be_retrieved_while_it_runs() -> None:
    gate = asyncio.Event()
    backend = ScriptedBackend([TextDelta("a")], gate=gate)
    gateway = gateway_for(backend, MemoryStore())
    run = await gateway.execute(Principal(), CreateResponse(model="m", input=[user("hi")]))
    await backend.started.wait()
    live = await gateway.execute(Principal(), GetResponse(run.id))
    assert live.status == "in_progress"
    with pytest.raises(NotFound):
        await gateway.execute(Principal(tenant_id="other"), GetResponse(run.id))
    gate.set()
    await run.wait()
    assert (await gateway.execute(Principal(), GetResponse(run.id))).status == "completed"


async def test_the_stop_sequence_upstream_names_is_kept_on_the_state() -> None:
    run, _, _ = await run_once([TextDelta("a"), Finish("stop", stop_sequence="END")])
    assert run.state.stop_sequence == "END"  # type: ignore[attr-defined]


async def test_input_items_are_paged_after_a_cursor_and_a_missing_response_is_named() -> None:
    store = MemoryStore()
    gateway = gateway_for(ScriptedBackend([TextDelta("ok"), Finish("stop")]), store)
    said = [{**user(text), "id": f"msg_{text}"} for text in ("a", "b", "c")]
    run = await gateway.execute(Principal(), CreateResponse(model="m", input=said))
    await run.wait()

    async def page(**fields: Any) -> list[str]:
        listed = await gateway.execute(Principal(), ListInputItems(run.id, **fields))
        return [item["id"] for item in listed.items]

    assert await page(order="asc", after="msg_a") == ["msg_b", "msg_c"]
    assert await page(after="msg_c", limit=1) == ["msg_b"]  # newest first by default
    with pytest.raises(NotFound) as caught:
        await gateway.execute(Principal(), ListInputItems("resp_gone"))
    assert (caught.value.status, caught.value.param) == (404, "response_id")
    assert "'resp_gone'" in caught.value.message


async def test_every_kind_of_delta_reaches_the_output_in_order() -> None:
    """A round's deltas after its first output: a token's log probabilities kept on its
    text, a message begun again (its phase) starting a second message, a citation on that
    message's text, a refusal as its own part, and the finish's stop sequence, reason and
    details kept on the response."""
    logprobs = [{"token": "a", "logprob": -0.1, "bytes": [97], "top_logprobs": []}]
    citation = {"type": "char_location", "cited_text": "x"}
    run, _, _ = await run_once(
        [
            TextDelta("a", logprobs),
            MessageStart("final_answer"),
            TextDelta("b"),
            Citation(citation),
            RefusalDelta("no"),
            UsageReport(Usage(3, 4)),
            Finish("stop", stop_sequence="END", stop_reason="end_turn", stop_details={"k": 1}),
        ],
        stream=True,
    )
    state = run.state  # type: ignore[attr-defined]
    first, second = state.output
    [text] = first["content"]
    assert (text["text"], text["logprobs"]) == ("a", logprobs)
    assert second["phase"] == "final_answer"
    cited, refused = second["content"]
    assert (cited["text"], cited["citations"]) == ("b", [citation])
    assert refused == {"type": "refusal", "refusal": "no"}
    assert (state.stop_sequence, state.stop_reason, state.stop_details) == (
        "END",
        "end_turn",
        {"k": 1},
    )
    assert state.usage == Usage(3, 4)


@pytest.mark.parametrize("top", [0, 1, 3])
async def test_each_token_keeps_only_the_alternatives_asked_for(top: int) -> None:
    """An upstream listing more alternatives of a token than ``top_logprobs`` asked for
    (llama-server lists 20 when none is named): the first ``top`` are kept, on the stored
    text and on the streamed delta alike."""
    alternatives = [
        {"token": t, "logprob": -n, "bytes": [ord(t)], "top_logprobs": []}
        for n, t in enumerate("abc", 1)
    ]
    token = {"token": "a", "logprob": -0.1, "bytes": [97], "top_logprobs": alternatives[:2]}
    settings = GenerationSettings(top_logprobs=top)
    run, _, events = await run_once([TextDelta("a", [token]), Finish("stop")], settings=settings)
    [text] = run.state.output[0]["content"]  # type: ignore[attr-defined]
    [kept] = text["logprobs"]
    assert kept == {**token, "top_logprobs": alternatives[:2][:top]}
    [delta] = [e for e in events if isinstance(e, ev.TextDelta)]
    assert delta.logprobs == [kept]


async def test_a_candidate_without_parallel_calls_is_asked_and_kept_to_one_per_round() -> None:
    """A request allowing parallel calls (the default) on a route whose candidate makes
    one call per round: the upstream is told ``parallel_tool_calls: false`` and a second
    call it makes anyway is dropped; the response still says what the client asked."""
    script: list[Delta | UpstreamError] = [
        ToolCallDelta(0, "up_1", "f", "{}"),
        ToolCallDelta(1, "up_2", "g", "{}"),
        Finish("tool_calls"),
    ]
    backend = ScriptedBackend(script)
    store = MemoryStore()
    serial = Capabilities(parallel_tool_calls=False)
    router = Router([BackendEntry(backend, {}, catch_all=True, capabilities=serial)])
    gateway = Gateway(store, router, Loop(store), RunRegistry())
    tools = [{"type": "function", "name": n, "parameters": {}} for n in ("f", "g")]
    command = CreateResponse("m", [user("hi")], settings=GenerationSettings(tools=tools))
    run = await gateway.execute(Principal(), command)
    await run.wait()
    assert [c["name"] for c in run.state.output] == ["f"]
    [sent] = backend.requests
    assert sent.settings.parallel_tool_calls is False
    assert run.state.settings.parallel_tool_calls is True


async def test_an_upstream_call_id_the_context_holds_already_is_replaced() -> None:
    """An upstream that numbers its calls per turn (``call_0`` each time) repeats an id of
    the context: the new call gets its own, so no two calls of a conversation share one."""
    earlier = [
        {"type": "function_call", "call_id": "call_0", "name": "f", "arguments": "{}"},
        {"type": "function_call_output", "call_id": "call_0", "output": "1"},
    ]
    backend = ScriptedBackend([ToolCallDelta(0, "call_0", "f", "{}"), Finish("tool_calls")])
    run = await gateway_for(backend, MemoryStore()).execute(
        Principal(), CreateResponse(model="m", input=[user("hi"), *earlier])
    )
    await run.wait()
    [made] = run.state.output
    assert made["call_id"] not in ("call_0", "")


async def test_an_upstream_call_id_of_a_call_cut_short_is_replaced() -> None:
    """A call cut short (``incomplete``) is left out of what the model is shown, but its
    id stays taken: a new call the upstream numbers the same gets its own."""
    cut = {
        "type": "function_call",
        "call_id": "call_0",
        "name": "f",
        "arguments": "{",
        "status": "incomplete",
    }
    backend = ScriptedBackend([ToolCallDelta(0, "call_0", "f", "{}"), Finish("tool_calls")])
    run = await gateway_for(backend, MemoryStore()).execute(
        Principal(), CreateResponse(model="m", input=[user("hi"), cut, user("go on")])
    )
    await run.wait()
    [sent] = backend.requests
    assert [i["type"] for i in sent.items] == ["message", "message"]
    [made] = run.state.output
    assert made["call_id"] not in ("call_0", "")


async def test_a_forced_custom_tool_sends_its_grammar_with_the_round() -> None:
    """A backend with guided decoding constrains the forced call's input to it."""
    grammar = {"type": "grammar", "syntax": "lark", "definition": 'start: "a"+'}
    tool = {"type": "custom", "name": "say", "format": grammar}
    backend = ScriptedBackend([TextDelta("x"), Finish("stop")])
    settings = GenerationSettings(tools=[tool], tool_choice={"type": "custom", "name": "say"})
    run = await gateway_for(backend, MemoryStore()).execute(
        Principal(), CreateResponse(model="m", input=[user("hi")], settings=settings)
    )
    await run.wait()
    [request] = backend.requests
    assert request.grammar == grammar
