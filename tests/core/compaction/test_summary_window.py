"""A summary call fitted to the window of the model asked for it: without the context's
oldest items when the window is known, and again when the model server refuses it as too
long; a request that compacts first is not refused for the size it compacts away."""

from __future__ import annotations

import json
import re
from typing import Any

import pytest

from stateway.core.commands import CompactResponse, CreateResponse
from stateway.core.compaction.prompt import SUMMARY_PROMPT
from stateway.core.compaction.summary_window import ATTEMPTS, SHARE, SummaryWindow
from stateway.core.errors import (
    InvalidRequest,
    UpstreamContextTooLong,
    UpstreamError,
    UpstreamRejected,
)
from stateway.core.generation_settings import GenerationSettings
from stateway.core.inference import InferenceRequest
from stateway.core.principal import Principal
from stateway.core.token_estimate import estimate_context, item_tokens
from tests.core.compaction.test_service import ANSWER, SUMMARY, assistant, build, opened, user
from tests.core.fakes import RoundsBackend, ScriptedBackend

TRIGGER = {"type": "compaction_trigger"}
SYSTEM = {"type": "message", "role": "system", "content": [{"type": "input_text", "text": "S"}]}


def call(call_id: str, size: int, output: str = "") -> list[dict[str, Any]]:
    """A function call and its output of ``size`` characters (or ``output``)."""
    return [
        {"type": "function_call", "call_id": call_id, "name": "sh", "arguments": "{}"},
        {"type": "function_call_output", "call_id": call_id, "output": output or "o" * size},
    ]


def texts(request: InferenceRequest) -> list[str]:
    """What the summary call sent, its prompt left out: messages by text, calls by id."""
    shown = []
    for item in request.items[:-1]:
        if item["type"] == "message":
            shown.append(item["content"][0]["text"])
        else:
            shown.append(f"{item['type']}:{item['call_id']}")
    assert request.items[-1]["content"][0]["text"] == SUMMARY_PROMPT
    return shown


def sent(request: InferenceRequest) -> int:
    return estimate_context(request.instructions, request.items, request.tools)


HISTORY = [
    SYSTEM,
    user("first " + "a" * 800),
    assistant("reply " + "b" * 800),
    user("second " + "c" * 800),
    assistant("reply " + "d" * 800),
    user("third"),
]
WINDOW = 800
"""Estimated tokens: the last two turns fit in :data:`SHARE` of it, the first does not."""
MARKER = re.compile(r"\n\[\.\.\. ([0-9,]+) characters omitted \.\.\.\]\n")


def huge(size: int = 20_000) -> str:
    """A text of about ``size`` characters, far more than :data:`WINDOW` holds, its start
    and its end told apart from its middle."""
    return "HEAD " + "x" * size + " TAIL"


def assert_cut(shown: str, whole: str) -> None:
    """``shown`` is ``whole``'s head and tail, the marker between them saying how many
    characters were left out."""
    [omitted] = MARKER.findall(shown)
    head, tail = MARKER.split(shown)[::2]
    assert whole.startswith(head)
    assert head.startswith("HEAD ")
    assert whole.endswith(tail)
    assert tail.endswith(" TAIL")
    assert int(omitted.replace(",", "")) == len(whole) - len(head) - len(tail) > 0


def nearly_full(request: InferenceRequest) -> bool:
    """The summary call fills :data:`SHARE` of the window, less than a few tokens short
    (a cut is sized to what the budget leaves)."""
    return WINDOW * SHARE - 8 < sent(request) <= WINDOW * SHARE


async def test_a_trigger_over_a_configured_window_is_summarized_from_its_newest_turns() -> None:
    """Codex compacts when a context has outgrown the window: the summary call leaves out
    the oldest turns, as few as make it fit most of the window (the rest is the summary's
    room), never the system message; the request is not refused for its size first."""
    assert estimate_context(None, HISTORY, []) > WINDOW
    backend = ScriptedBackend(SUMMARY)
    run = await build(backend, window=WINDOW).execute(
        Principal(), CreateResponse("m", [*HISTORY, TRIGGER])
    )
    await run.wait()

    assert run.state.status == "completed", run.error
    assert opened(run.state.output[0]) == "the summary"
    [request] = backend.requests
    assert [text[:6] for text in texts(request)] == ["S", "second", "reply ", "third"]
    assert sent(request) <= WINDOW * SHARE


async def test_a_context_within_most_of_the_window_is_summarized_whole() -> None:
    backend = ScriptedBackend(SUMMARY)
    history = HISTORY[3:]
    run = await build(backend, window=WINDOW).execute(
        Principal(), CreateResponse("m", [*history, TRIGGER])
    )
    await run.wait()
    [request] = backend.requests
    assert request.items[:-1] == history


async def test_a_turn_too_long_loses_its_oldest_calls_but_not_its_opening() -> None:
    """One turn of many tool calls (a mid-turn compaction): its oldest calls go, each with
    its output, after the user message that opened it."""
    history = [user("task"), *call("c1", 1200), *call("c2", 1200), *call("c3", 800)]
    backend = ScriptedBackend(SUMMARY)
    run = await build(backend, window=WINDOW).execute(
        Principal(), CreateResponse("m", [*history, TRIGGER])
    )
    await run.wait()
    [request] = backend.requests
    assert texts(request) == ["task", "function_call:c3", "function_call_output:c3"]


class Counted(dict[str, Any]):
    """An item counting how often its ``call_id`` is looked up."""

    lookups = 0

    def get(self, key: str, default: Any = None) -> Any:
        if key == "call_id":
            Counted.lookups += 1
        return super().get(key, default)


def test_a_turn_of_many_calls_is_fitted_in_time_linear_in_its_items() -> None:
    """Codex's long turns: each call is paired with its output in one pass, not by a scan
    of the rest of the turn for each item (10,000 items took seconds, the event loop
    held)."""
    history = [user("task")]
    for index in range(2000):
        history += [Counted(item) for item in call(f"c{index}", 40)]
    Counted.lookups = 0
    fitted = SummaryWindow(None, history, SUMMARY_PROMPT, 2000)
    assert fitted.items[0] == user("task")
    ids = [item["call_id"] for item in fitted.items[1:]]
    kept = ids[::2]  # the newest calls, each with its output
    assert 0 < len(kept) < 2000
    assert kept == [f"c{index}" for index in range(2000 - len(kept), 2000)]
    assert ids[1::2] == kept
    assert Counted.lookups <= 4 * len(history)


async def test_a_call_left_out_takes_its_output_with_it() -> None:
    """A call whose arguments are what is large goes with its small output, which a model
    server refuses to see without it, however little it leaves to fit."""
    large = {"type": "function_call", "call_id": "c1", "name": "sh", "arguments": "a" * 2400}
    output = {"type": "function_call_output", "call_id": "c1", "output": "done"}
    history = [user("task"), large, output, *call("c2", 800)]
    backend = ScriptedBackend(SUMMARY)
    run = await build(backend, window=WINDOW).execute(
        Principal(), CreateResponse("m", [*history, TRIGGER])
    )
    await run.wait()
    [request] = backend.requests
    assert texts(request) == ["task", "function_call:c2", "function_call_output:c2"]


async def test_compact_fits_its_summary_call_to_the_routes_window() -> None:
    backend = ScriptedBackend(SUMMARY)
    compacted = await build(backend, window=WINDOW).execute(
        Principal(), CompactResponse("m", HISTORY)
    )
    [request] = backend.requests
    assert [text[:6] for text in texts(request)] == ["S", "second", "reply ", "third"]
    kept = [item["content"][0]["text"][:6] for item in compacted.output[:-1]]
    assert kept == ["first ", "second", "third"]  # the compaction stands for them all


async def test_a_refused_summary_is_asked_again_fitted_to_what_the_refusal_says() -> None:
    """No window known (or the server's tokenizer counts more than the estimate): the
    server's refusal says how much is too much, and the call is sent again that much
    smaller, and within most of it."""
    refusal = UpstreamContextTooLong("too long", tokens=2000, window=1000, requested=None)
    backend = RoundsBackend([[refusal], SUMMARY])
    run = await build(backend).execute(Principal(), CreateResponse("m", [*HISTORY, TRIGGER]))
    await run.wait()

    assert run.state.status == "completed", run.error
    first, second = backend.requests
    assert texts(first)[0] == "S"
    assert len(texts(first)) == len(HISTORY)
    assert sent(second) <= sent(first) * 1000 / 2000 * SHARE
    assert texts(second)[0] == "S"
    assert texts(second)[-1] == "third"


async def test_a_refusal_without_numbers_halves_the_call() -> None:
    refusal = UpstreamRejected("too long", code="context_length_exceeded")
    backend = RoundsBackend([[refusal], SUMMARY])
    compacted = await build(backend).execute(Principal(), CompactResponse("m", HISTORY))
    first, second = backend.requests
    assert sent(second) <= sent(first) // 2
    assert opened(compacted.output[-1]) == "the summary"


async def test_a_refusal_counting_the_prompt_only_in_part_halves_the_call() -> None:
    """vLLM's renderer stops counting one token past the window (``your prompt contains at
    least 1001 input tokens``): the prompt may be any length over it, so its count says no
    more than a refusal without numbers."""
    refusal = UpstreamContextTooLong(
        "too long", tokens=1001, window=1000, requested=0, at_least=True
    )
    backend = RoundsBackend([[refusal], SUMMARY])
    compacted = await build(backend).execute(Principal(), CompactResponse("m", HISTORY))
    first, second = backend.requests
    assert sent(second) <= sent(first) // 2
    assert opened(compacted.output[-1]) == "the summary"


async def test_a_refusal_of_the_output_asked_for_leaves_room_for_it() -> None:
    """A server refusing the input with the output it was asked for (vLLM's ``X in the
    messages, Y in the completion``) has the input fitted to its window less that
    output."""
    refusal = UpstreamContextTooLong("too long", tokens=900, window=1000, requested=400)
    backend = RoundsBackend([[refusal], SUMMARY])
    await build(backend).execute(Principal(), CompactResponse("m", HISTORY))
    first, second = backend.requests
    assert sent(second) <= sent(first) * (1000 - 400) / 900 * SHARE


async def test_refusals_end_when_nothing_more_can_be_left_out() -> None:
    refusal = UpstreamContextTooLong("too long", tokens=2000, window=1000, requested=None)
    backend = ScriptedBackend([refusal])
    with pytest.raises(UpstreamContextTooLong):
        await build(backend).execute(Principal(), CompactResponse("m", [SYSTEM, user("one")]))
    assert len(backend.requests) == 1


async def test_refusals_end_after_a_few_calls() -> None:
    """A server refusing whatever it is sent (its numbers barely over) is asked at most
    :data:`ATTEMPTS` times."""
    refusal = UpstreamContextTooLong("too long", tokens=1001, window=1000, requested=None)
    history = [user("task"), *[item for n in range(20) for item in call(f"c{n}", 40)]]
    backend = ScriptedBackend([refusal])
    with pytest.raises(UpstreamContextTooLong):
        await build(backend).execute(Principal(), CompactResponse("m", history))
    assert len(backend.requests) == ATTEMPTS


@pytest.mark.parametrize(
    "error",
    [UpstreamRejected("bad schema", code="invalid_value"), UpstreamError("down")],
    ids=["another-refusal", "a-failure"],
)
async def test_other_failures_are_not_asked_again(error: UpstreamError) -> None:
    backend = ScriptedBackend([error])
    with pytest.raises(UpstreamError):
        await build(backend).execute(Principal(), CompactResponse("m", HISTORY))
    assert len(backend.requests) == 1


async def test_a_threshold_compaction_over_a_configured_window_is_not_refused_first() -> None:
    """``context_management``'s compaction fits what follows it to the window: the request
    is not refused for the size it compacts away."""
    backend = RoundsBackend([SUMMARY, ANSWER])
    settings = GenerationSettings(context_management=[{"type": "compaction"}])
    run = await build(backend, window=WINDOW).execute(
        Principal(), CreateResponse("m", HISTORY, settings=settings)
    )
    await run.wait()
    assert [item["type"] for item in run.state.output] == ["compaction", "message"]


async def test_a_context_over_a_configured_window_is_still_refused_without_compaction() -> None:
    with pytest.raises(InvalidRequest) as refused:
        await build(ScriptedBackend(ANSWER), window=WINDOW).execute(
            Principal(), CreateResponse("m", HISTORY)
        )
    assert refused.value.code == "context_length_exceeded"


def test_without_a_window_the_view_is_sent_whole_until_refused() -> None:
    fitted = SummaryWindow(None, HISTORY, SUMMARY_PROMPT, None)
    assert fitted.items == HISTORY
    assert sum(item_tokens(item) for item in HISTORY) > WINDOW


async def test_a_tool_output_larger_than_the_window_is_cut_to_its_head_and_tail() -> None:
    """Codex compacts mid-turn with the output that overflowed its context: dropped whole,
    the summary would lose even its gist; it is shown cut, with the room the items after
    the oldest ones left out leave it, and the client's item stays whole."""
    output = huge()
    history = [user("task"), *call("c1", 1200), *call("c2", 0, output), *call("c3", 40)]
    backend = ScriptedBackend(SUMMARY)
    run = await build(backend, window=WINDOW).execute(
        Principal(), CreateResponse("m", [*history, TRIGGER])
    )
    await run.wait()

    assert run.state.status == "completed", run.error
    [request] = backend.requests
    assert texts(request) == [
        "task",
        "function_call:c2",
        "function_call_output:c2",
        "function_call:c3",
        "function_call_output:c3",
    ]
    assert_cut(request.items[2]["output"], output)
    assert nearly_full(request)
    assert history[4]["output"] == output  # the client's, whole


async def test_a_user_message_larger_than_the_window_alone_is_cut() -> None:
    text = huge()
    backend = ScriptedBackend(SUMMARY)
    compacted = await build(backend, window=WINDOW).execute(
        Principal(), CompactResponse("m", [user(text)])
    )
    [request] = backend.requests
    [shown] = texts(request)
    assert_cut(shown, text)
    assert nearly_full(request)
    assert compacted.output[0]["content"][0]["text"] == text  # the client's, whole


async def test_an_item_too_large_alone_is_cut_again_as_the_refusal_says() -> None:
    """No window known: the one message is sent whole, then cut to fit what the server's
    refusal says fits, rather than the compaction failing for want of an item to leave
    out."""
    text = huge()
    refusal = UpstreamContextTooLong("too long", tokens=8000, window=1000, requested=None)
    backend = RoundsBackend([[refusal], SUMMARY])
    compacted = await build(backend).execute(Principal(), CompactResponse("m", [user(text)]))
    first, second = backend.requests
    assert texts(first) == [text]
    assert_cut(texts(second)[0], text)
    assert sent(second) <= sent(first) * 1000 / 8000 * SHARE
    assert opened(compacted.output[-1]) == "the summary"


async def test_an_older_turns_item_too_large_alone_is_cut_to_what_newer_turns_leave() -> None:
    log = huge()
    history = [user(log), assistant("it fails on line 3"), user("fix it")]
    backend = ScriptedBackend(SUMMARY)
    await build(backend, window=WINDOW).execute(Principal(), CompactResponse("m", history))
    [request] = backend.requests
    cut, *rest = texts(request)
    assert_cut(cut, log)
    assert rest == ["it fails on line 3", "fix it"]
    assert nearly_full(request)


async def test_an_opening_too_large_alone_leaves_room_for_the_calls_after_it() -> None:
    """The user message that opens the last turn is never left out: too large, it is cut
    to what the turn's calls after it leave, the newest kept first."""
    log = huge()
    history = [user(log), *call("c1", 400), *call("c2", 400)]
    backend = ScriptedBackend(SUMMARY)
    await build(backend, window=WINDOW).execute(Principal(), CompactResponse("m", history))
    [request] = backend.requests
    cut, *rest = texts(request)
    assert_cut(cut, log)
    assert rest == [
        f"{kind}:{c}" for c in ("c1", "c2") for kind in ("function_call", "function_call_output")
    ]
    assert nearly_full(request)


async def test_a_system_message_too_large_alone_is_cut() -> None:
    rules = huge()
    system = {
        "type": "message",
        "role": "system",
        "content": [{"type": "input_text", "text": rules}],
    }
    backend = ScriptedBackend(SUMMARY)
    await build(backend, window=WINDOW).execute(
        Principal(), CompactResponse("m", [system, user("task")])
    )
    [request] = backend.requests
    cut, task = texts(request)
    assert_cut(cut, rules)
    assert task == "task"
    assert nearly_full(request)


async def test_a_calls_json_arguments_are_cut_within_their_strings() -> None:
    """A call's arguments too large alone (a file written whole) keep their JSON: its
    long strings are cut, and the arguments still parse."""
    content = huge()
    arguments = json.dumps({"path": "notes.txt", "content": content, "mode": 420})
    history = [
        user("task"),
        {"type": "function_call", "call_id": "c1", "name": "write", "arguments": arguments},
        {"type": "function_call_output", "call_id": "c1", "output": "written"},
    ]
    backend = ScriptedBackend(SUMMARY)
    await build(backend, window=WINDOW).execute(Principal(), CompactResponse("m", history))
    [request] = backend.requests
    assert texts(request) == ["task", "function_call:c1", "function_call_output:c1"]
    shown = json.loads(request.items[1]["arguments"])
    assert (shown["path"], shown["mode"]) == ("notes.txt", 420)
    assert_cut(shown["content"], content)
    assert nearly_full(request)


async def test_arguments_that_are_not_json_are_never_cut_into_other_text() -> None:
    """Cut, text that is not JSON could not be told apart from broken JSON upstream: the
    call goes whole or not at all (here, with its output, too large to keep)."""
    history = [
        user("task"),
        {"type": "function_call", "call_id": "c1", "name": "sh", "arguments": '{"a": ' + huge()},
        {"type": "function_call_output", "call_id": "c1", "output": "done"},
    ]
    backend = ScriptedBackend(SUMMARY)
    await build(backend, window=WINDOW).execute(Principal(), CompactResponse("m", history))
    [request] = backend.requests
    assert texts(request) == ["task"]


async def test_the_instructions_count_against_the_window_too() -> None:
    """What fits beside long instructions is less than what fits alone: the instructions
    are sent with every summary call."""
    backend = ScriptedBackend(SUMMARY)
    history = HISTORY[3:]  # fits whole alone (the test above)
    instructions = "i" * 1600
    await build(backend, window=WINDOW).execute(
        Principal(), CompactResponse("m", history, instructions=instructions)
    )
    [request] = backend.requests
    assert request.instructions == instructions
    assert request.items[:-1] != history
    assert sent(request) <= WINDOW * SHARE
