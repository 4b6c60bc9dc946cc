"""Unit tests of the directive parser and of the answer plan."""

from __future__ import annotations

import json

import pytest

from stateway.fake_upstream.conversation import Conversation
from stateway.fake_upstream.plan import argument_chunks, build_plan, word_chunks
from stateway.fake_upstream.script import Script, ToolDirective, parse_script


def test_plain_text_has_no_directives() -> None:
    assert parse_script("  hello world  ") == Script(text="hello world")


def test_every_directive_combined() -> None:
    script = parse_script(
        'before [[echo]][[length]] [[tool:get_weather:{"city": "Paris"}]] [[interleave]] [[think]] '
        "[[reason:think first]] [[error:503]] [[cut:3]] [[slow:25]] [[words:7]] [[newids]] "
        "[[sglang]] after"
    )
    assert script.echo
    assert script.newids
    assert script.sglang
    assert script.length
    assert script.interleave
    assert script.think
    assert script.tools == [ToolDirective("get_weather", '{"city": "Paris"}')]
    assert script.reasoning == "think first"
    assert (script.error, script.cut, script.slow_ms, script.words) == (503, 3, 25, 7)
    assert script.text.split() == ["before", "after"]


def test_tools_repeat_in_order_and_keep_raw_arguments() -> None:
    script = parse_script("[[tool:a:{}]] [[tool:b.c-d:not json]] [[tool:e:]]")
    assert script.tools == [
        ToolDirective("a", "{}"),
        ToolDirective("b.c-d", "not json"),
        ToolDirective("e", ""),
    ]


def test_tool_arguments_may_contain_closing_brackets() -> None:
    script = parse_script('[[tool:grid:{"rows": [[1, 2], [3]]}]] tail')
    assert script.tools == [ToolDirective("grid", '{"rows": [[1, 2], [3]]}')]
    assert json.loads(script.tools[0].arguments) == {"rows": [[1, 2], [3]]}
    assert script.text == "tail"


def test_reasons_join_and_last_scalar_wins() -> None:
    script = parse_script("[[reason:one]] [[reason:two]] [[words:1]] [[words:2]]")
    assert script.reasoning == "one two"
    assert script.words == 2


@pytest.mark.parametrize(
    "text",
    [
        "[[unknown]]",
        "[[echo:arg]]",
        "[[words:many]]",
        "[[error:200]]",
        "[[error:600]]",
        "[[cut:-1]]",
        "[[slow]]",
        "[[tool:no args]]",
        "[[ echo ]]",
        "[[reason:never closed",
        "[[ECHO]]",
    ],
)
def test_malformed_directives_stay_text(text: str) -> None:
    assert parse_script(text) == Script(text=text)


def test_directive_found_after_stray_brackets() -> None:
    script = parse_script("[[[echo]] x [[nope]]")
    assert script.echo
    assert script.text == "[ x [[nope]]"


def test_word_chunks_concatenate_back() -> None:
    text = "system: be  brief\nuser: hi  "
    chunks = word_chunks(text)
    assert chunks == ["system: ", "be  ", "brief\n", "user: ", "hi  "]
    assert "".join(chunks) == text
    assert word_chunks("") == []


def test_argument_chunks() -> None:
    assert argument_chunks('{"a": "bcdefghij"}') == ['{"a": "b', "cdefghij", '"}']
    assert argument_chunks("") == []


def _conversation(tool_outputs: list[str] | None = None) -> Conversation:
    return Conversation(["user: hi"], "hi", tool_outputs or [], prompt_tokens=1)


def test_plan_defaults_and_usage() -> None:
    plan = build_plan(_conversation(), parse_script("hi [[reason:a b]]"), None)
    assert plan.content == "Hello! You said: hi"
    assert plan.reasoning_text == "a b"
    assert plan.finish_reason == "stop"
    assert (plan.prompt_tokens, plan.completion_tokens, plan.reasoning_tokens) == (1, 6, 2)


def test_plan_tool_calls_only_before_tool_results() -> None:
    script = parse_script("[[tool:f:{}]] [[tool:g:{}]]")
    first = build_plan(_conversation(), script, None)
    assert [call.name for call in first.tool_calls] == ["f", "g"]
    assert len({call.call_id for call in first.tool_calls}) == 2
    assert first.text == []
    assert first.finish_reason == "tool_calls"
    after = build_plan(_conversation(["sunny", "rainy"]), script, None)
    assert after.tool_calls == []
    assert after.content == "Tool said: sunny\nTool said: rainy"


def test_plan_rounds_repeat_the_tool_calls_until_n_rounds_are_done() -> None:
    script = parse_script("[[tool:f:{}]] [[tool:g:{}]] [[rounds:3]]")
    assert script.rounds == 3
    for calls in (0, 2, 4):
        conversation = Conversation(["user: hi"], "hi", ["out"] if calls else [], 1, calls)
        assert [c.name for c in build_plan(conversation, script, None).tool_calls] == ["f", "g"]
    finished = Conversation(["user: hi"], "hi", ["5", "6"], 1, 6)
    done = build_plan(finished, script, None)
    assert done.tool_calls == []
    assert done.finish_reason == "stop"


def test_plan_then_calls_follow_the_first_rounds_results_once() -> None:
    script = parse_script('[[tool:search:{"q":1}]] [[then:found:{"a":[1]}]] [[then:g:{}]]')
    assert [(t.name, t.arguments) for t in script.then] == [("found", '{"a":[1]}'), ("g", "{}")]
    first = build_plan(Conversation(["user: hi"], "hi", [], 1, 0), script, None)
    assert [c.name for c in first.tool_calls] == ["search"]
    second = build_plan(Conversation(["user: hi"], "hi", ["out"], 1, 1), script, None)
    assert [c.name for c in second.tool_calls] == ["found", "g"]
    assert second.finish_reason == "tool_calls"
    third = build_plan(Conversation(["user: hi"], "hi", ["a", "b"], 1, 3), script, None)
    assert (third.tool_calls, third.content) == ([], "Tool said: a\nTool said: b")


def test_plan_max_tokens_truncates_reasoning_then_text() -> None:
    script = parse_script("[[reason:r1 r2]] [[words:5]]")
    plan = build_plan(_conversation(), script, 4)
    assert (plan.reasoning_text, plan.content, plan.finish_reason) == ("r1 r2", "w1 w2", "length")
    plan = build_plan(_conversation(), script, 1)
    assert (plan.reasoning_text, plan.content, plan.completion_tokens) == ("r1", "", 1)
    plan = build_plan(_conversation(), script, 7)
    assert plan.finish_reason == "stop"


def test_items_are_json_objects_up_to_the_closing_brackets_that_parse() -> None:
    script = parse_script('a [[item:{"type": "x", "v": [[1]]}]] b [[item:[1]]] c')
    assert script.items == [{"type": "x", "v": [[1]]}]
    assert script.text == "a  b [[item:[1]]] c"
    conversation = Conversation(["user: x"], "x", [], 1)
    plan = build_plan(conversation, script, None)
    assert plan.text == []
    assert plan.items[0]["type"] == "x"
    assert str(plan.items[0]["id"]).startswith("item_")


def test_say_answers_its_text_as_it_is() -> None:
    """``[[say:TEXT]]``: the answer is TEXT exactly (a JSON object for structured outputs),
    the last one winning."""
    script = parse_script('fill it [[say:{"a": "x"}]] [[reason:r]]')
    assert script.say == '{"a": "x"}'
    plan = build_plan(_conversation(), script, None)
    assert (plan.content, plan.reasoning_text) == ('{"a": "x"}', "r")
    assert parse_script("[[say:a]] [[say:b]]").say == "b"
