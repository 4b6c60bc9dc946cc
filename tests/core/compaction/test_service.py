"""Compaction, truncation and token counting through ``Gateway.execute``, with a scripted
backend and the in-memory store."""

from __future__ import annotations

import dataclasses
from typing import Any

import pytest

from stateway.core import events as ev
from stateway.core.commands import CompactResponse, CountTokens, CreateResponse
from stateway.core.compaction import sealed
from stateway.core.compaction.prompt import SUMMARY_PREFIX, SUMMARY_PROMPT
from stateway.core.compaction.service import compact_threshold, prefill
from stateway.core.compaction.view import SHOWN
from stateway.core.conversations.commands import AddConversationItems
from stateway.core.errors import InternalError, InvalidRequest, UpstreamError, UpstreamRejected
from stateway.core.gateway import Gateway
from stateway.core.generation_settings import GenerationSettings
from stateway.core.inference import (
    Delta,
    Finish,
    OutputItem,
    ReasoningDelta,
    ReasoningSignature,
    TextDelta,
    ToolCallDelta,
    UsageReport,
)
from stateway.core.loop import Loop
from stateway.core.principal import Principal
from stateway.core.reasoning import redacted_item, unwrapped
from stateway.core.routing import BackendEntry, Capabilities, Router
from stateway.core.run_registry import RunRegistry
from stateway.core.token_estimate import estimate_context, estimate_tokens, item_tokens
from stateway.core.usage import Iteration, Usage
from stateway.sealing import AesGcmSealer
from tests.core.fakes import MemoryStore, RoundsBackend, ScriptedBackend
from tests.core.test_conversations import World

SEALER = AesGcmSealer(bytes(range(32)))
SUMMARY: list[Delta] = [
    ReasoningDelta("thinking about it"),
    TextDelta("the "),
    TextDelta("summary "),
    UsageReport(Usage(10, 3)),
    Finish("stop"),
]
ANSWER: list[Delta] = [TextDelta("answered"), UsageReport(Usage(5, 1)), Finish("stop")]


def user(text: str) -> dict[str, Any]:
    return {"type": "message", "role": "user", "content": [{"type": "input_text", "text": text}]}


def assistant(text: str) -> dict[str, Any]:
    part = {"type": "output_text", "text": text}
    return {"type": "message", "role": "assistant", "content": [part]}


def build(
    backend: ScriptedBackend,
    store: MemoryStore | None = None,
    *,
    window: int | None = None,
    sealer: AesGcmSealer | None = SEALER,
) -> Gateway:
    store = store or MemoryStore()
    capabilities = Capabilities(context_window=window)
    router = Router([BackendEntry(backend, {}, catch_all=True, capabilities=capabilities)])
    return Gateway(store, router, Loop(store, sealer=sealer), RunRegistry(), sealer=sealer)


def opened(item: dict[str, Any]) -> str:
    return sealed.unseal(SEALER, "compaction", "default", item["encrypted_content"], "p")


async def test_compact_returns_the_user_messages_and_one_sealed_summary() -> None:
    backend = ScriptedBackend(SUMMARY)
    compacted = await build(backend).execute(
        Principal(),
        CompactResponse("m", [user("one"), assistant("reply"), user("two")], instructions="I"),
    )
    assert [item.get("role", item["type"]) for item in compacted.output] == [
        "user",
        "user",
        "compaction",
    ]
    assert opened(compacted.output[-1]) == "the summary"
    assert compacted.usage == Usage(10, 3)
    assert compacted.id.startswith("resp_")
    assert compacted.output[-1]["id"].startswith("cmp_")
    [request] = backend.requests
    assert request.model == "m"
    assert request.stream is False
    assert request.tools == []
    assert request.instructions == "I"
    assert request.items[-1]["content"][0]["text"] == SUMMARY_PROMPT
    assert len(request.items) == 4


async def test_compact_does_not_show_a_chat_model_an_item_of_an_unmodelled_type() -> None:
    """As a response's rounds do not: its upstream API has no place for one."""
    backend = ScriptedBackend(SUMMARY)
    odd = {"type": "image_generation_call", "id": "ig_1", "result": "aGk="}
    compacted = await build(backend).execute(Principal(), CompactResponse("m", [user("x"), odd]))
    assert compacted.output[-1]["type"] == "compaction"
    [request] = backend.requests
    assert [item["type"] for item in request.items] == ["message", "message"]


CACHED = GenerationSettings(
    temperature=0.5,
    tools=[{"type": "function", "name": "f"}],
    user="u",
    safety_identifier="s",
    client_cache_marks=True,
    prompt_cache_key="k",
    prompt_cache_retention="24h",
    prompt_cache_options={"mode": "explicit"},
    service_tier="flex",
)


def assert_cached_only(sent: GenerationSettings) -> None:
    """A summary call is cached and served as asked; the rest is the gateway's own ask."""
    assert (sent.prompt_cache_key, sent.prompt_cache_retention) == ("k", "24h")
    assert (sent.prompt_cache_options, sent.service_tier, sent.user) == (
        {"mode": "explicit"},
        "flex",
        "u",
    )
    assert (sent.safety_identifier, sent.client_cache_marks) == ("s", True)
    assert (sent.temperature, sent.tools) == (None, [])


async def test_compact_sends_the_summary_call_its_cache_and_tier() -> None:
    backend = ScriptedBackend(SUMMARY)
    await build(backend).execute(Principal(), CompactResponse("m", [user("x")], settings=CACHED))
    assert_cached_only(backend.requests[0].settings)


async def test_compact_echoes_the_tier_identifier_and_image_policy_asked() -> None:
    image = {"context_compression": "disabled"}
    settings = GenerationSettings(service_tier="flex", safety_identifier="u-1", image=image)
    compacted = await build(ScriptedBackend(SUMMARY)).execute(
        Principal(), CompactResponse("m", [user("x")], settings=settings)
    )
    assert (compacted.service_tier, compacted.safety_identifier) == ("flex", "u-1")
    assert compacted.image == image


async def test_compact_of_a_previous_response_summarizes_its_chain_too() -> None:
    store = MemoryStore()
    backend = RoundsBackend([ANSWER, SUMMARY])
    gateway = build(backend, store)
    run = await gateway.execute(Principal(), CreateResponse("m", [user("one")]))
    await run.wait()
    compacted = await gateway.execute(
        Principal(), CompactResponse("m", [user("two")], previous_response_id=run.state.id)
    )
    texts = [item["content"][0]["text"] for item in compacted.output[:-1]]
    assert texts == ["one", "two"]
    summarized = backend.requests[1].items
    assert [item["content"][0]["text"] for item in summarized[:3]] == ["one", "answered", "two"]


async def test_compact_names_an_input_seal_that_does_not_open_by_its_place() -> None:
    forged = {"type": "compaction", "encrypted_content": "sw1.forged"}
    with pytest.raises(InvalidRequest) as refused:
        await build(ScriptedBackend(SUMMARY)).execute(
            Principal(), CompactResponse("m", [forged, user("x")])
        )
    assert refused.value.param == "input[0].encrypted_content"


async def test_a_compaction_within_a_response_is_cached_as_its_rounds_are() -> None:
    backend = ScriptedBackend(SUMMARY)
    trigger = [user("one"), {"type": "compaction_trigger"}]
    run = await build(backend).execute(Principal(), CreateResponse("m", trigger, settings=CACHED))
    await run.wait()
    assert_cached_only(backend.requests[0].settings)


async def test_compact_of_a_compacted_context_summarizes_its_summary() -> None:
    first = await build(ScriptedBackend(SUMMARY)).execute(
        Principal(), CompactResponse("m", [user("one")])
    )
    backend = ScriptedBackend([TextDelta("newer"), Finish("stop")])
    second = await build(backend).execute(
        Principal(), CompactResponse("m", [*first.output, user("two")])
    )
    assert [item["type"] for item in second.output] == ["message", "message", "compaction"]
    assert opened(second.output[-1]) == "newer"
    summarized = backend.requests[0].items
    assert summarized[1]["content"][0]["text"] == SUMMARY_PREFIX + "the summary"


@pytest.mark.parametrize(
    ("script", "error"),
    [
        ([ReasoningDelta("only thoughts"), TextDelta("  "), Finish("stop")], "empty_summary"),
        ([UpstreamRejected("too long", code="context_length_exceeded")], "context_length_exceeded"),
    ],
)
async def test_compact_failures(script: list[Any], error: str) -> None:
    with pytest.raises(UpstreamError) as failed:
        await build(ScriptedBackend(script)).execute(Principal(), CompactResponse("m", [user("x")]))
    assert failed.value.code == error


async def test_compact_needs_something_and_a_sealer() -> None:
    with pytest.raises(InvalidRequest) as empty:
        await build(ScriptedBackend(SUMMARY)).execute(Principal(), CompactResponse("m", []))
    assert (empty.value.code, empty.value.param) == ("missing_required_parameter", "input")
    with pytest.raises(InternalError):
        await build(ScriptedBackend(SUMMARY), sealer=None).execute(
            Principal(), CompactResponse("m", [user("x")])
        )


async def test_a_stored_seal_that_no_longer_opens_is_named_by_what_holds_it() -> None:
    """The gateway's key changed since a compaction was stored: a response, a count and a
    prewarm continuing it are refused naming the stored items' parameter, the previous
    response or the conversation."""
    world = World(sealer=SEALER)
    conversation = await world.conversation("first")
    item = {
        "type": "compaction",
        "encrypted_content": sealed.seal(SEALER, "compaction", "default", "s"),
    }
    await world.gateway.execute(Principal(), AddConversationItems(conversation.id, [item]))
    compacting = GenerationSettings(
        context_management=[{"type": "compaction", "compact_threshold": 1}]
    )
    store = world.store
    first = await build(RoundsBackend([SUMMARY, ANSWER]), store).execute(
        Principal(), CreateResponse("m", [user("one")], settings=compacting)
    )
    await first.wait()
    rotated = Gateway(
        store,
        Router([BackendEntry(ScriptedBackend(ANSWER), {}, catch_all=True)]),
        Loop(store),
        RunRegistry(),
        conversations=world.conversations,
        sealer=AesGcmSealer(bytes(range(1, 33))),
    )
    for prior, continued in (
        ("previous_response_id", {"previous_response_id": first.state.id}),
        ("conversation", {"conversation_id": conversation.id}),
    ):
        response = CreateResponse("m", [user("next")], **continued)
        prewarm = dataclasses.replace(response, generate=False)
        for command in (response, CountTokens(response), prewarm):
            with pytest.raises(InvalidRequest) as refused:
                await rotated.execute(Principal(), command)
            assert refused.value.code == "invalid_encrypted_content", command
            assert refused.value.param == prior, command


async def test_trigger_emits_one_compaction_item_and_no_round() -> None:
    backend = ScriptedBackend(SUMMARY)
    store = MemoryStore()
    run = await build(backend, store).execute(
        Principal(),
        CreateResponse("m", [user("one"), {"type": "compaction_trigger"}], stream=True),
    )
    await run.wait()
    assert [type(event).__name__ for event in run.events] == [
        "ResponseCreated",
        "ResponseInProgress",
        "ItemAdded",
        "Compacting",
        "ItemDone",
        "ResponseFinished",
    ]
    state = run.state
    [item] = state.output
    # as hosted: the item is announced whole, its seal already in it
    assert run.events[2] == ev.ItemAdded(0, item)
    assert state.status == "completed"
    assert opened(item) == "the summary"
    assert state.usage == Usage(10, 3)
    assert len(backend.requests) == 1
    [record] = store.records.values()
    assert record.output_items == [item]


async def test_a_failed_trigger_is_the_request_error() -> None:
    refusal = UpstreamRejected("too long", code="context_length_exceeded")
    run = await build(ScriptedBackend([refusal])).execute(
        Principal(), CreateResponse("m", [user("one"), {"type": "compaction_trigger"}])
    )
    await run.wait()
    assert run.error is not None
    assert run.error.code == "context_length_exceeded"
    assert run.state.status == "failed"
    assert run.state.output == []


async def test_threshold_compacts_before_the_rounds() -> None:
    backend = RoundsBackend([SUMMARY, ANSWER])
    settings = GenerationSettings(
        context_management=[{"type": "compaction", "compact_threshold": 5}]
    )
    history = [user("one"), assistant("first reply"), user("two")]
    run = await build(backend).execute(Principal(), CreateResponse("m", history, settings=settings))
    await run.wait()
    state = run.state
    assert [item["type"] for item in state.output] == ["compaction", "message"]
    assert state.usage == Usage(15, 4)
    answered = backend.requests[1].items
    texts = [item["content"][0]["text"] for item in answered if item["type"] == "message"]
    assert texts == ["one", "two", SUMMARY_PREFIX + "the summary"]
    assert answered[-1]["type"] == "compaction"  # left out by every backend's model view


async def test_the_summary_is_not_counted_against_the_answers_max_output_tokens() -> None:
    """``max_output_tokens`` bounds the answer: the round after a compaction is asked for
    the client's whole budget, whatever the summary wrote."""
    backend = RoundsBackend([SUMMARY, ANSWER])
    settings = GenerationSettings(
        context_management=[{"type": "compaction", "compact_threshold": 5}],
        max_output_tokens=100,
    )
    history = [user("one"), assistant("first reply"), user("two")]
    run = await build(backend).execute(Principal(), CreateResponse("m", history, settings=settings))
    await run.wait()
    assert [item["type"] for item in run.state.output] == ["compaction", "message"]
    assert backend.requests[1].settings.max_output_tokens == 100


async def test_a_streamed_compaction_is_announced_once_its_row_is_written() -> None:
    """The compaction comes first, the response announced before it (the client sees its
    item made): only once the in-progress row is in the store."""
    announced: list[tuple[str, int]] = []  # each save, and the events emitted before it
    store = MemoryStore(on_save=lambda r: announced.append((r.status, events_of(r.id))))
    gateway = build(RoundsBackend([SUMMARY, ANSWER]), store)

    def events_of(response_id: str) -> int:
        run = gateway.runs.get(response_id)
        return -1 if run is None else len(run.events)

    settings = GenerationSettings(
        context_management=[{"type": "compaction", "compact_threshold": 5}]
    )
    history = [user("one"), assistant("first reply"), user("two")]
    command = CreateResponse("m", history, stream=True, settings=settings)
    run = await gateway.execute(Principal(), command)
    await run.wait()
    assert [item["type"] for item in run.state.output] == ["compaction", "message"]
    assert announced[0] == ("in_progress", 0)


async def test_a_compaction_within_a_response_asks_its_model_and_emits_its_item() -> None:
    """The summary is asked of the candidate's upstream model, with the response's
    instructions, the model view, the request's own summary prompt and only the settings a
    summary keeps; its item is announced, compacted and done at its output index, by its
    id, and the added and done events both carry the item as stored."""
    backend = RoundsBackend([SUMMARY, ANSWER])
    store = MemoryStore()
    router = Router([BackendEntry(backend, {"m": "upstream-m"})])
    gateway = Gateway(store, router, Loop(store, sealer=SEALER), RunRegistry(), sealer=SEALER)
    settings = dataclasses.replace(
        CACHED,
        context_management=[{"type": "compaction", "compact_threshold": 5}],
        summary_prompt="Sum it up.",
        summary_shown=True,
        temperature=0.5,
    )
    history = [user("one"), assistant("first reply"), user("two")]
    command = CreateResponse("m", history, "Be kind.", stream=True, settings=settings)
    run = await gateway.execute(Principal(), command)
    await run.wait()
    summarized = backend.requests[0]
    assert (summarized.model, summarized.instructions) == ("upstream-m", "Be kind.")
    assert summarized.items[:-1] == history
    assert summarized.items[-1]["content"][0]["text"] == "Sum it up."
    assert_cached_only(summarized.settings)
    item, _ = run.state.output
    assert item[SHOWN] == "the summary"
    added, compacting, done = run.events[2:5]
    assert added == ev.ItemAdded(0, item)
    assert compacting == ev.Compacting(0, item["id"])
    assert done == ev.ItemDone(0, item)


async def test_a_prefill_is_still_continued_after_the_compaction() -> None:
    """The assistant message a Messages answer continues is the answer's beginning: the
    summary covers it with the rest, and it still ends what the answer is sampled from."""
    backend = RoundsBackend([SUMMARY, ANSWER])
    settings = GenerationSettings(
        context_management=[{"type": "compaction", "compact_threshold": 5}],
        summary_shown=True,
        continue_final_message=True,
    )
    prefill = assistant('{"answer": ')
    history = [user("one"), assistant("first reply"), user("two"), prefill]
    run = await build(backend).execute(Principal(), CreateResponse("m", history, settings=settings))
    await run.wait()
    assert [item["type"] for item in run.state.output] == ["compaction", "message"]
    summarized, answered = backend.requests
    assert summarized.items[-2] == prefill  # then the summary prompt
    messages = [item for item in answered.items if item["type"] == "message"]
    assert [m["role"] for m in messages] == ["user", "assistant"]
    assert messages[0]["content"][0]["text"] == SUMMARY_PREFIX + "the summary"
    assert messages[-1] == prefill
    assert answered.settings.continue_final_message


async def test_the_instructions_before_a_prefill_are_kept_after_the_compaction() -> None:
    """Only the prefill moves after the compaction item: what the model view keeps of the
    context before it (the user's and the developer's messages) stays as it was."""
    backend = RoundsBackend([SUMMARY, ANSWER])
    settings = GenerationSettings(
        context_management=[{"type": "compaction", "compact_threshold": 5}],
        continue_final_message=True,
    )
    developer = {
        "type": "message",
        "role": "developer",
        "content": [{"type": "input_text", "text": "Be brief."}],
    }
    prefill = assistant('{"answer": ')
    history = [user("one"), assistant("first reply"), user("two"), developer, prefill]
    run = await build(backend).execute(Principal(), CreateResponse("m", history, settings=settings))
    await run.wait()
    _, answered = backend.requests
    messages = [item for item in answered.items if item["type"] == "message"]
    roles = [m["role"] for m in messages]
    assert roles == ["user", "user", "developer", "user", "assistant"]  # then the summary
    assert messages[-1] == prefill


def test_only_a_continued_assistant_message_at_the_end_is_a_prefill() -> None:
    continued = GenerationSettings(continue_final_message=True)
    last = assistant('{"answer": ')
    assert prefill([user("one"), last], continued) == last
    assert prefill([user("one"), last], GenerationSettings()) is None
    assert prefill([last, user("one")], continued) is None
    assert prefill([{"type": "function_call", "role": "assistant"}], continued) is None
    assert prefill([], continued) is None


async def test_each_sampling_call_is_an_iteration() -> None:
    """The summary, then each round, with its own usage (Messages' ``usage.iterations``);
    a trigger's compaction is the only one."""
    backend = RoundsBackend([SUMMARY, ANSWER])
    settings = GenerationSettings(
        context_management=[{"type": "compaction", "compact_threshold": 5}]
    )
    history = [user("one"), assistant("first reply"), user("two")]
    run = await build(backend).execute(Principal(), CreateResponse("m", history, settings=settings))
    await run.wait()
    assert run.state.iterations == [
        Iteration("compaction", Usage(10, 3)),
        Iteration("message", Usage(5, 1)),
    ]
    trigger = await build(ScriptedBackend(SUMMARY)).execute(
        Principal(), CreateResponse("m", [user("one"), {"type": "compaction_trigger"}])
    )
    await trigger.wait()
    assert trigger.state.iterations == [Iteration("compaction", Usage(10, 3))]


async def test_below_the_threshold_or_without_one_nothing_is_compacted() -> None:
    for entries, window in (
        ([{"type": "compaction", "compact_threshold": 10_000}], None),
        ([{"type": "compaction", "compact_threshold": None}], None),
        ([], 10_000),
    ):
        backend = RoundsBackend([ANSWER])
        settings = GenerationSettings(context_management=entries)
        run = await build(backend, window=window).execute(
            Principal(), CreateResponse("m", [user("one " * 50)], settings=settings)
        )
        await run.wait()
        assert [item["type"] for item in run.state.output] == ["message"], entries


async def compacts(
    history: list[dict[str, Any]],
    entry: dict[str, Any],
    *,
    window: int | None = None,
    **fields: Any,
) -> list[str]:
    """The types of a response's output whose ``context_management`` is ``[entry]`` (its
    summary, if any, and its answer alike)."""
    backend = ScriptedBackend(ANSWER)
    settings = GenerationSettings(context_management=[entry], tools=fields.pop("tools", []))
    command = CreateResponse("m", history, settings=settings, **fields)
    run = await build(backend, window=window).execute(Principal(), command)
    await run.wait()
    return [item["type"] for item in run.state.output]


async def test_the_threshold_is_reached_by_the_whole_estimated_input() -> None:
    """At least N: the instructions and tools count as the items do."""
    history = [user("one " * 50)]
    size = estimate_context(None, history, [])
    at = {"type": "compaction", "compact_threshold": size}
    assert await compacts(history, at) == ["compaction", "message"]
    above = {"type": "compaction", "compact_threshold": size + 500}
    tool = {"type": "function", "name": "f", "description": "d" * 4000}
    assert await compacts(history, above) == ["message"]
    assert await compacts(history, above, instructions="i" * 4000) == ["compaction", "message"]
    assert await compacts(history, above, tools=[tool]) == ["compaction", "message"]


async def test_without_its_own_threshold_most_of_the_window_is_the_threshold() -> None:
    history = [user("x" * 3600)]  # about 910 estimated tokens: past 80% of 1000
    entry = {"type": "compaction", "compact_threshold": None}
    assert await compacts(history, entry, window=1000) == ["compaction", "message"]
    assert await compacts(history, entry, window=2000) == ["message"]


async def test_a_paused_compaction_is_the_whole_output() -> None:
    """Messages' ``pause_after_compaction``: the response stops after its compaction."""
    entry = {"type": "compaction", "compact_threshold": 1}
    history = [user("one")]
    paused = await compacts(history, {**entry, "pause_after_compaction": True})
    assert paused == ["compaction"]
    assert await compacts(history, {**entry, "pause_after_compaction": False}) == [
        "compaction",
        "message",
    ]


def test_threshold_defaults_to_most_of_the_window() -> None:
    entry = [{"type": "compaction", "compact_threshold": None}]
    assert compact_threshold(entry, 1000) == 800
    assert compact_threshold([{"type": "compaction", "compact_threshold": 7}], 1000) == 7
    assert compact_threshold(entry, None) is None
    assert compact_threshold([], 1000) is None


async def test_truncation_auto_fits_the_window_less_the_output_allowance() -> None:
    history = [user("x" * 90), assistant("y" * 90), user("last")]
    for truncation, max_output, expected in (
        ("auto", None, 3),  # 42 + 43 + 20 estimated tokens fit 110
        ("auto", 40, 1),
        ("disabled", 40, 3),
    ):
        backend = ScriptedBackend(ANSWER)
        settings = GenerationSettings(truncation=truncation, max_output_tokens=max_output)
        run = await build(backend, window=110).execute(
            Principal(), CreateResponse("m", history, settings=settings)
        )
        await run.wait()
        assert len(backend.requests[0].items) == expected, (truncation, max_output)


async def test_truncation_auto_reserves_the_instructions_tools_and_output_exactly() -> None:
    """A context that fills the window less that reserve is sent (and counted) whole; one
    token less of window drops its oldest turns."""
    history = [user("x" * 90), assistant("y" * 90), user("last")]
    tool = {"type": "function", "name": "f", "description": "d" * 40}
    for instructions, tools, max_output in (
        (None, [], None),
        ("i" * 40, [], None),
        (None, [tool], None),
        (None, [], 10),
    ):
        reserve = (max_output or 0) + estimate_context(instructions, [], tools)
        exact = sum(item_tokens(item) for item in history) + reserve
        for window, expected in ((exact, 3), (exact - 1, 1)):
            backend = ScriptedBackend(ANSWER)
            backend.token_count = 1
            settings = GenerationSettings(
                truncation="auto", tools=tools, max_output_tokens=max_output
            )
            command = CreateResponse("m", history, instructions=instructions, settings=settings)
            gateway = build(backend, window=window)
            run = await gateway.execute(Principal(), command)
            await run.wait()
            await gateway.execute(Principal(), CountTokens(command))
            sent = [len(backend.requests[0].items), len(backend.counted[0].items)]
            assert sent == [expected, expected], (instructions, tools, max_output, window)


async def test_count_asks_the_backend_and_falls_back_to_the_estimate() -> None:
    backend = ScriptedBackend(ANSWER)
    gateway = build(backend)
    tools = [{"type": "function", "name": "f", "parameters": {"type": "object"}}]
    command = CountTokens(
        CreateResponse(
            "m", [user("abc")], instructions="hi", settings=GenerationSettings(tools=tools)
        )
    )
    backend.token_count = 42
    counted = await gateway.execute(Principal(), command)
    assert (counted.input_tokens, counted.estimated) == (42, False)
    [request] = backend.counted
    assert request.instructions == "hi"
    assert [t["name"] for t in request.tools] == ["f"]
    backend.token_count = None  # no tokenizer after all
    estimated = await gateway.execute(Principal(), command)
    assert (estimated.input_tokens, estimated.estimated) == (estimate_tokens(request), True)
    backend.token_count = UpstreamError("down")
    with pytest.raises(UpstreamError):
        await gateway.execute(Principal(), command)


async def test_count_sees_what_a_round_would_send() -> None:
    backend = ScriptedBackend(ANSWER)
    backend.token_count = 1
    gateway = build(backend, window=100)
    compacted = await gateway.execute(Principal(), CompactResponse("m", [user("one")]))
    history = [user("x" * 90), assistant("y" * 90), *compacted.output, user("last")]
    settings = GenerationSettings(truncation="auto")
    await gateway.execute(Principal(), CountTokens(CreateResponse("m", history, settings=settings)))
    [request] = backend.counted
    texts = [item["content"][0]["text"] for item in request.items]
    # opened: the assistant's turn went with the compaction, the summary took its place;
    # then truncated: the oldest user turn no longer fits
    assert texts[-2:] == [SUMMARY_PREFIX + "answered", "last"]
    assert "x" * 90 not in texts
    # no truncation: it does not fit, and is counted whole all the same
    await gateway.execute(Principal(), CountTokens(CreateResponse("m", history)))
    assert "x" * 90 in [item["content"][0]["text"] for item in backend.counted[-1].items]
    with pytest.raises(InvalidRequest) as refused:  # what a response of it would get
        await gateway.execute(Principal(), CreateResponse("m", history))
    assert refused.value.code == "context_length_exceeded"


async def test_reasoning_is_summarized_and_sealed_when_asked() -> None:
    settings = GenerationSettings(reasoning_summary="auto", include=["reasoning.encrypted_content"])
    run = await build(ScriptedBackend([ReasoningDelta("deep "), *ANSWER])).execute(
        Principal(), CreateResponse("m", [user("x")], settings=settings, stream=True)
    )
    await run.wait()
    names = [type(event).__name__ for event in run.events]
    assert names[2:11] == [
        "ItemAdded",
        "PartAdded",
        "SummaryPartAdded",
        "ReasoningDelta",
        "SummaryTextDelta",
        "ReasoningDone",
        "PartDone",
        "SummaryTextDone",
        "SummaryPartDone",
    ]
    reasoning = run.state.output[0]
    assert reasoning["summary"] == [{"type": "summary_text", "text": "deep "}]
    text = sealed.unseal(SEALER, "reasoning", "default", reasoning["encrypted_content"], "p")
    assert text == "deep "
    done = next(e for e in run.events if isinstance(e, ev.ItemDone))
    assert done.item["encrypted_content"] == reasoning["encrypted_content"]


async def test_sealed_reasoning_needs_a_sealer() -> None:
    settings = GenerationSettings(include=["reasoning.encrypted_content"])
    run = await build(ScriptedBackend([ReasoningDelta("deep"), *ANSWER]), sealer=None).execute(
        Principal(), CreateResponse("m", [user("x")], settings=settings)
    )
    await run.wait()
    assert run.state.status == "failed"
    assert run.state.error is not None
    assert run.state.error["code"] == "internal_error"


async def test_an_upstreams_own_seal_is_kept() -> None:
    settings = GenerationSettings(reasoning_summary="auto", include=["reasoning.encrypted_content"])
    script: list[Delta] = [ReasoningDelta("signed"), ReasoningSignature("EqQBsig"), *ANSWER]
    run = await build(ScriptedBackend(script)).execute(
        Principal(), CreateResponse("m", [user("x")], settings=settings)
    )
    await run.wait()
    reasoning = run.state.output[0]
    assert unwrapped(SEALER, "default", reasoning["encrypted_content"]) == "EqQBsig"
    assert reasoning["summary"] == [{"type": "summary_text", "text": "signed"}]
    done = next(e for e in run.events if isinstance(e, ev.ItemDone))
    assert done.item["encrypted_content"] == reasoning["encrypted_content"]


async def test_an_upstreams_redacted_thinking_is_sealed_over_and_stays_redacted() -> None:
    script: list[Delta] = [OutputItem(redacted_item("rs_1", "RDdata")), *ANSWER]
    run = await build(ScriptedBackend(script)).execute(
        Principal(), CreateResponse("m", [user("x")])
    )
    await run.wait()
    blob = run.state.output[0]["encrypted_content"]
    assert blob.startswith("redacted_thinking:sw1.")
    assert unwrapped(SEALER, "default", blob) == "redacted_thinking:RDdata"
    assert unwrapped(SEALER, "other", blob) is None


async def test_a_window_too_small_is_fitted_with_truncation_and_refused_without() -> None:
    history = [user("x" * 90), assistant("y" * 90), user("last")]
    backend = ScriptedBackend(ANSWER)
    auto = GenerationSettings(truncation="auto")
    run = await build(backend, window=60).execute(
        Principal(), CreateResponse("m", history, settings=auto)
    )
    await run.wait()
    assert [item["content"][0]["text"] for item in backend.requests[0].items] == ["last"]
    with pytest.raises(InvalidRequest) as refused:
        await build(backend, window=60).execute(Principal(), CreateResponse("m", history))
    assert refused.value.code == "context_length_exceeded"
    assert refused.value.param == "input"


@pytest.mark.parametrize("raw", ["EqQBsig", "redacted_thinking:RDdata", "responses:gAAAA"])
async def test_an_upstreams_seal_as_it_came_in_the_input_is_never_sent_on_later_either(
    raw: str,
) -> None:
    """Left out of the request's input, it must not come back as a stored item of the
    chain the next request continues (where stored seals are taken as they are)."""
    store = MemoryStore()
    backend = ScriptedBackend(ANSWER)
    gateway = build(backend, store)
    given = {"type": "reasoning", "summary": [], "encrypted_content": raw}
    first = await gateway.execute(Principal(), CreateResponse("m", [user("x"), given]))
    await first.wait()
    later = CreateResponse("m", [user("y")], previous_response_id=first.id)
    second = await gateway.execute(Principal(), later)
    await second.wait()
    assert second.state.status == "completed"
    assert len(backend.requests) == 2
    for request in backend.requests:
        assert all(item.get("encrypted_content") != raw for item in request.items)
    (record, _) = sorted(store.records.values(), key=lambda r: r.created_at)
    assert all(item.get("encrypted_content") != raw for item in record.input_items)


def numbered_call(arguments: str = "{}") -> list[dict[str, Any]]:
    """A call an upstream numbering its calls per turn made (``call_0``), answered."""
    call = {"type": "function_call", "call_id": "call_0", "name": "f", "arguments": arguments}
    return [call, {"type": "function_call_output", "call_id": "call_0", "output": "done"}]


async def test_a_call_truncated_away_keeps_its_id_taken() -> None:
    """``truncation: "auto"`` leaves an old call out of what the model is shown; a new
    call the upstream numbers the same still gets its own id, or the chain would hold two
    calls under one (shown together once a larger window serves it)."""
    history = [user("x" * 90), *numbered_call("y" * 90), user("last")]
    backend = ScriptedBackend([ToolCallDelta(0, "call_0", "f", "{}"), Finish("tool_calls")])
    auto = GenerationSettings(truncation="auto")
    run = await build(backend, window=60).execute(
        Principal(), CreateResponse("m", history, settings=auto)
    )
    await run.wait()
    assert [i["type"] for i in backend.requests[0].items] == ["message"]  # "last" alone
    [made] = run.state.output
    assert made["call_id"] not in ("call_0", "")


async def test_a_call_before_a_compaction_keeps_its_id_taken() -> None:
    """A call a compaction summarized is not shown to the model again, but its id stays
    taken, as every call's in the chain."""
    store = MemoryStore()
    backend = RoundsBackend([SUMMARY, ANSWER])
    settings = GenerationSettings(
        context_management=[{"type": "compaction", "compact_threshold": 5}]
    )
    history = [user("one"), *numbered_call(), user("two")]
    gateway = build(backend, store)
    first = await gateway.execute(Principal(), CreateResponse("m", history, settings=settings))
    await first.wait()
    assert [item["type"] for item in first.state.output] == ["compaction", "message"]
    backend.rounds = [[ToolCallDelta(0, "call_0", "f", "{}"), Finish("tool_calls")]]
    command = CreateResponse("m", [user("three")], previous_response_id=first.id)
    second = await gateway.execute(Principal(), command)
    await second.wait()
    sent = backend.requests[-1].items
    assert "function_call" not in [i["type"] for i in sent]  # summarized, not shown
    [made] = second.state.output
    assert made["call_id"] not in ("call_0", "")
