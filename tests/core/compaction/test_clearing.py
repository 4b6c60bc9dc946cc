"""The clearing edits' rules (Anthropic's ``clear_thinking_20251015`` and
``clear_tool_uses_20250919``) on a model view, without a gateway."""

from __future__ import annotations

from typing import Any

from stateway.core.commands import CountTokens, CreateResponse
from stateway.core.compaction.clearing import (
    CLEAR_THINKING,
    CLEAR_TOOL_USES,
    PLACEHOLDER,
    clear,
)
from stateway.core.generation_settings import GenerationSettings
from stateway.core.principal import Principal
from stateway.core.token_estimate import estimate_context, item_tokens
from tests.core.compaction.test_service import ANSWER, SUMMARY, assistant, build, user
from tests.core.fakes import RoundsBackend, ScriptedBackend
from tests.core.routing_fakes import Named, candidate, gateway, route, router


def thinking(text: str) -> dict[str, Any]:
    return {
        "type": "reasoning",
        "summary": [],
        "content": [{"type": "reasoning_text", "text": text}],
    }


def call(call_id: str, name: str = "read", arguments: str = '{"path": "a.txt"}') -> dict[str, Any]:
    return {"type": "function_call", "call_id": call_id, "name": name, "arguments": arguments}


def output(call_id: str, text: str = "x" * 400) -> dict[str, Any]:
    return {"type": "function_call_output", "call_id": call_id, "output": text}


def keep_thinking(keep: int | None) -> dict[str, Any]:
    return {"type": CLEAR_THINKING, "keep": keep}


def tool_edit(**fields: Any) -> dict[str, Any]:
    """A ``clear_tool_uses_20250919`` edit as the surface normalizes it: every field there,
    Anthropic's defaults for those not given, but a trigger any context is past."""
    defaults: dict[str, Any] = {
        "trigger": {"type": "input_tokens", "value": 1},
        "keep": 3,
        "clear_at_least": 0,
        "exclude_tools": [],
        "clear_tool_inputs": False,
    }
    return {"type": CLEAR_TOOL_USES, **defaults, **fields}


def texts(items: list[dict[str, Any]]) -> list[str]:
    """Each item as a word: its role or type, and a tool output's text when cleared."""
    return [
        "cleared" if item.get("output") == PLACEHOLDER else item.get("role") or item["type"]
        for item in items
    ]


THREE_TURNS = [
    user("one"),
    thinking("a"),
    assistant("1"),
    user("two"),
    thinking("b"),
    call("c1"),
    output("c1"),
    thinking("c"),  # the same turn: tool results do not end it
    assistant("2"),
    user("three"),
    thinking("d"),
    assistant("3"),
]


def test_thinking_of_all_but_the_last_turns_is_left_out() -> None:
    cleared = clear(None, THREE_TURNS, [], [keep_thinking(1)])
    kinds = [item["type"] for item in cleared.items]
    assert kinds.count("reasoning") == 1
    assert cleared.items[-2] == thinking("d")
    freed = sum(item_tokens(thinking(t)) for t in "abc")
    assert cleared.applied == [
        {"type": CLEAR_THINKING, "cleared_thinking_turns": 2, "cleared_input_tokens": freed}
    ]
    two = clear(None, THREE_TURNS, [], [keep_thinking(2)])
    assert [i["content"][0]["text"] for i in two.items if i["type"] == "reasoning"] == [
        "b",
        "c",
        "d",
    ]
    assert two.applied[0]["cleared_thinking_turns"] == 1


def test_keeping_all_or_more_turns_than_there_are_clears_nothing() -> None:
    for keep in (None, 3, 10):
        cleared = clear(None, THREE_TURNS, [], [keep_thinking(keep)])
        assert cleared.items is THREE_TURNS
        assert cleared.applied == []
        assert cleared.tokens == 0


def test_text_between_a_turns_thinking_does_not_end_it() -> None:
    """An assistant's text before its tool call is the same turn as the thinking after the
    call's result: only a ``user`` message starts another."""
    items = [
        user("one"),
        thinking("a"),
        assistant("let me look"),
        call("c1"),
        output("c1"),
        thinking("b"),
        assistant("1"),
        user("two"),
        thinking("c"),
        assistant("2"),
    ]
    cleared = clear(None, items, [], [keep_thinking(1)])
    assert [i["content"][0]["text"] for i in cleared.items if i["type"] == "reasoning"] == ["c"]
    assert cleared.applied[0]["cleared_thinking_turns"] == 1
    assert clear(None, items, [], [keep_thinking(2)]).items is items


def test_turns_without_thinking_do_not_count() -> None:
    items = [user("one"), thinking("a"), assistant("1"), user("two"), assistant("2"), user("3")]
    assert clear(None, items, [], [keep_thinking(1)]).items is items


LOOP = [
    user("read them"),
    call("c1"),
    output("c1"),
    call("c2", "search"),
    output("c2"),
    call("c3"),
    output("c3"),
    call("c4"),
    output("c4"),
    assistant("done"),
]


def test_all_but_the_last_tool_results_are_replaced() -> None:
    cleared = clear(None, LOOP, [], [tool_edit(keep=2)])
    assert texts(cleared.items) == [
        "user",
        "function_call",
        "cleared",
        "function_call",
        "cleared",
        "function_call",
        "function_call_output",
        "function_call",
        "function_call_output",
        "assistant",
    ]
    assert cleared.items[1] == LOOP[1]  # the calls are kept as they were
    freed = 2 * (item_tokens(output("c1")) - item_tokens(output("c1", PLACEHOLDER)))
    assert cleared.applied == [
        {"type": CLEAR_TOOL_USES, "cleared_tool_uses": 2, "cleared_input_tokens": freed}
    ]
    assert LOOP[2]["output"] == "x" * 400  # the context itself is left as it was


def test_keeping_as_many_tool_uses_as_there_are_or_more_clears_nothing() -> None:
    for keep in (4, 10):
        cleared = clear(None, LOOP, [], [tool_edit(keep=keep)])
        assert cleared.items is LOOP
        assert cleared.applied == []


def test_excluded_tools_and_short_results_are_kept() -> None:
    items = [*LOOP[:2], output("c1", "ok"), *LOOP[3:]]
    cleared = clear(None, items, [], [tool_edit(keep=0, exclude_tools=["search"])])
    assert texts(cleared.items)[1:9] == [
        "function_call",
        "function_call_output",  # "ok" is shorter than the placeholder
        "function_call",
        "function_call_output",  # excluded
        "function_call",
        "cleared",
        "function_call",
        "cleared",
    ]
    assert cleared.applied[0]["cleared_tool_uses"] == 2


def test_tool_inputs_are_cleared_with_their_results_when_asked() -> None:
    everything = clear(None, LOOP, [], [tool_edit(keep=2, clear_tool_inputs=True)])
    assert [everything.items[i]["arguments"] for i in (1, 3, 5)] == [
        "{}",
        "{}",
        LOOP[5]["arguments"],
    ]
    named = clear(None, LOOP, [], [tool_edit(keep=2, clear_tool_inputs=["search"])])
    assert [named.items[i]["arguments"] for i in (1, 3)] == [LOOP[1]["arguments"], "{}"]
    assert (
        named.applied[0]["cleared_input_tokens"]
        > clear(None, LOOP, [], [tool_edit(keep=2)]).applied[0]["cleared_input_tokens"]
    )


def test_an_mcp_call_holds_its_own_result() -> None:
    mcp = {"type": "mcp_call", "name": "fetch", "arguments": '{"u": 1}', "output": "y" * 300}
    items = [user("go"), mcp, call("c1"), output("c1")]
    cleared = clear(None, items, [], [tool_edit(keep=1, clear_tool_inputs=True)])
    assert cleared.items[1] == {**mcp, "output": PLACEHOLDER, "arguments": "{}"}
    assert cleared.items[2:] == items[2:]


def test_an_mcp_call_is_excluded_and_its_input_cleared_by_its_tools_name() -> None:
    mcp = {"type": "mcp_call", "name": "fetch", "arguments": '{"u": 1}', "output": "y" * 300}
    items = [user("go"), mcp, call("c1"), output("c1")]
    excluded = clear(None, items, [], [tool_edit(keep=0, exclude_tools=["fetch"])])
    assert texts(excluded.items) == ["user", "mcp_call", "function_call", "cleared"]
    assert excluded.items[1] == mcp
    named = clear(None, items, [], [tool_edit(keep=0, clear_tool_inputs=["fetch"])])
    assert named.items[1] == {**mcp, "output": PLACEHOLDER, "arguments": "{}"}
    assert named.items[2] == call("c1")


def test_a_result_is_cleared_when_that_frees_a_token_and_kept_when_it_frees_none() -> None:
    """The estimate rounds a result up to whole tokens of four bytes: one of the
    placeholder's length frees nothing, one four bytes longer frees exactly one token."""
    items = [
        user("go"),
        call("c1"),
        output("c1", "z" * len(PLACEHOLDER)),
        call("c2"),
        output("c2", "z" * (len(PLACEHOLDER) + 4)),
    ]
    cleared = clear(None, items, [], [tool_edit(keep=0)])
    assert texts(cleared.items) == [
        "user",
        "function_call",
        "function_call_output",
        "function_call",
        "cleared",
    ]
    assert cleared.items[2] == items[2]
    assert cleared.applied == [
        {"type": CLEAR_TOOL_USES, "cleared_tool_uses": 1, "cleared_input_tokens": 1}
    ]


def test_nothing_is_cleared_below_the_trigger() -> None:
    size = estimate_context("system", LOOP, [])
    at = tool_edit(keep=0, trigger={"type": "input_tokens", "value": size})
    assert clear("system", LOOP, [], [at]).items is LOOP  # reached, not exceeded
    past = tool_edit(keep=0, trigger={"type": "input_tokens", "value": size - 1})
    assert clear("system", LOOP, [], [past]).applied[0]["cleared_tool_uses"] == 4
    uses = tool_edit(keep=0, trigger={"type": "tool_uses", "value": 4})
    assert clear(None, LOOP, [], [uses]).applied == []
    fewer = tool_edit(keep=0, trigger={"type": "tool_uses", "value": 3})
    assert clear(None, LOOP, [], [fewer]).applied[0]["cleared_tool_uses"] == 4


def test_a_clearing_that_frees_too_little_is_not_made() -> None:
    freed = clear(None, LOOP, [], [tool_edit(keep=2)]).tokens
    assert clear(None, LOOP, [], [tool_edit(keep=2, clear_at_least=freed)]).tokens == freed
    assert clear(None, LOOP, [], [tool_edit(keep=2, clear_at_least=freed + 1)]).items is LOOP


def test_a_call_still_waiting_for_its_result_is_no_use() -> None:
    items = [user("go"), call("c1"), output("c1"), call("c2")]
    cleared = clear(None, items, [], [tool_edit(keep=0)])
    assert texts(cleared.items) == ["user", "function_call", "cleared", "function_call"]


def test_edits_apply_in_order_each_reported() -> None:
    items = [user("go"), thinking("t" * 200), *LOOP[1:5], user("more"), thinking("u"), *LOOP[5:]]
    cleared = clear(None, items, [], [keep_thinking(1), tool_edit(keep=2)])
    assert [entry["type"] for entry in cleared.applied] == [CLEAR_THINKING, CLEAR_TOOL_USES]
    assert cleared.tokens == sum(entry["cleared_input_tokens"] for entry in cleared.applied)
    assert texts(cleared.items).count("reasoning") == 1


# Through ``Gateway.execute``: what a round is sent, what the response reports


async def test_a_response_sends_the_cleared_context_and_reports_the_edits() -> None:
    backend = ScriptedBackend(ANSWER)
    edits = [keep_thinking(1), tool_edit(keep=2)]
    settings = GenerationSettings(context_edits=edits)
    items = [thinking("old"), assistant("hi"), *LOOP[:5], user("more"), thinking("new"), *LOOP[5:]]
    command = CreateResponse("m", [user("first"), *items], settings=settings)
    run = await build(backend).execute(Principal(), command)
    await run.wait()
    [sent] = backend.requests
    assert texts(sent.items).count("cleared") == 2
    assert [item for item in sent.items if item["type"] == "reasoning"] == [thinking("new")]
    assert [entry["type"] for entry in run.state.applied_edits] == [CLEAR_THINKING, CLEAR_TOOL_USES]
    assert command.input[5]["output"] == "x" * 400  # what the run stores is as it came


async def test_a_compaction_threshold_judges_the_cleared_context() -> None:
    backend = ScriptedBackend(ANSWER)
    cleared = clear(None, LOOP, [], [tool_edit(keep=0)]).items
    threshold = estimate_context(None, cleared, []) + 1  # past it only uncleared
    settings = GenerationSettings(
        context_edits=[tool_edit(keep=0)],
        context_management=[{"type": "compaction", "compact_threshold": threshold}],
    )
    run = await build(backend).execute(Principal(), CreateResponse("m", LOOP, settings=settings))
    await run.wait()
    assert [item["type"] for item in run.state.output] == ["message"]  # no compaction
    assert texts(backend.requests[0].items).count("cleared") == 4


async def test_a_response_compacting_first_reports_the_edits_and_summarizes_their_view() -> None:
    backend = RoundsBackend([SUMMARY, ANSWER])
    settings = GenerationSettings(
        context_edits=[tool_edit(keep=0)],
        context_management=[{"type": "compaction", "compact_threshold": 1}],
    )
    run = await build(backend).execute(Principal(), CreateResponse("m", LOOP, settings=settings))
    await run.wait()
    assert [item["type"] for item in run.state.output] == ["compaction", "message"]
    assert [entry["cleared_tool_uses"] for entry in run.state.applied_edits] == [4]
    assert texts(backend.requests[0].items).count("cleared") == 4  # the summary's view


async def test_a_truncated_response_reports_the_edits() -> None:
    """``truncation: "auto"`` fits what the edits left, to one window or to each
    candidate's of several."""
    settings = GenerationSettings(context_edits=[tool_edit(keep=0)], truncation="auto")
    one = await build(ScriptedBackend(ANSWER), window=10_000).execute(
        Principal(), CreateResponse("m", LOOP, settings=settings)
    )
    small, large = Named("small", ANSWER), Named("large", ANSWER)
    candidates = [
        candidate(small, priority=0, context_window=10_000),
        candidate(large, priority=1, context_window=20_000),
    ]
    several = await gateway(router(route(*candidates))).execute(
        Principal(), CreateResponse("assistant", LOOP, settings=settings)
    )
    for run in (one, several):
        await run.wait()
        assert run.state.status == "completed"
        assert [entry["cleared_tool_uses"] for entry in run.state.applied_edits] == [4]
    assert texts(small.requests[0].items).count("cleared") == 4


async def test_the_instructions_and_tools_count_toward_an_input_tokens_trigger() -> None:
    trigger = {"type": "input_tokens", "value": estimate_context(None, LOOP, []) + 500}
    tool = {"type": "function", "name": "f", "description": "d" * 4000, "parameters": {}}
    cases = [("i" * 4000, [], 4), (None, [tool], 4), (None, [], 0)]
    for instructions, tools, cleared in cases:
        backend = ScriptedBackend(ANSWER)
        edits = [tool_edit(keep=0, trigger=trigger)]
        settings = GenerationSettings(context_edits=edits, tools=tools)
        command = CreateResponse("m", LOOP, instructions=instructions, settings=settings)
        run = await build(backend).execute(Principal(), command)
        await run.wait()
        assert texts(backend.requests[0].items).count("cleared") == cleared


async def test_a_count_is_of_the_cleared_context_and_says_what_was_cleared() -> None:
    backend = ScriptedBackend(ANSWER)
    backend.token_count = 7
    settings = GenerationSettings(context_edits=[tool_edit(keep=1)])
    command = CountTokens(CreateResponse("m", LOOP, settings=settings))
    counted = await build(backend).execute(Principal(), command)
    assert texts(backend.counted[0].items).count("cleared") == 3
    assert (counted.input_tokens, counted.estimated) == (7, False)
    assert counted.cleared == clear(None, LOOP, [], [tool_edit(keep=1)]).tokens > 0
    plain = await build(backend).execute(Principal(), CountTokens(CreateResponse("m", LOOP)))
    assert plain.cleared == 0
    auto = GenerationSettings(context_edits=[tool_edit(keep=1)], truncation="auto")
    fitted = await build(backend, window=10_000).execute(
        Principal(), CountTokens(CreateResponse("m", LOOP, settings=auto))
    )
    assert fitted.cleared == counted.cleared
    assert texts(backend.counted[-1].items).count("cleared") == 3
