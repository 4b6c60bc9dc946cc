"""Guided decoding of a forced custom tool's grammar on a Chat Completions upstream."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import orjson
import pytest

from stateway.backends.chat_request import to_upstream
from stateway.backends.guided_decoding import as_tool_input, guide
from stateway.core.generation_settings import GenerationSettings
from stateway.core.inference import (
    Delta,
    Finish,
    InferenceRequest,
    ReasoningDelta,
    TextDelta,
    ToolCallDelta,
)
from stateway.core.tools.catalog import Catalog

LARK = {"type": "grammar", "syntax": "lark", "definition": "start: /a+/"}
REGEX = {"type": "grammar", "syntax": "regex", "definition": "a+"}


def request(
    fmt: dict[str, Any], choice: Any, instructions: str | None = "rules"
) -> InferenceRequest:
    tools = [{"type": "custom", "name": "patch", "description": "Patch", "format": fmt}]
    catalog = Catalog(tools)
    model_choice = catalog.model_choice(choice)
    user = {"type": "message", "role": "user", "content": [{"type": "input_text", "text": "hi"}]}
    return InferenceRequest(
        "m",
        instructions,
        [user],
        GenerationSettings(tools=tools, text_format={"type": "json_object"}),
        stream=True,
        tools=catalog.model_tools(),
        tool_choice=model_choice,
        grammar=catalog.forced_grammar(model_choice),
    )


FORCED = {"type": "custom", "name": "patch"}


@pytest.mark.parametrize(
    ("style", "fmt", "field", "value"),
    [
        ("vllm", LARK, "structured_outputs", {"grammar": "start: /a+/"}),
        ("vllm", REGEX, "structured_outputs", {"regex": "a+"}),
        ("vllm-legacy", LARK, "guided_grammar", "start: /a+/"),
        ("vllm-legacy", REGEX, "guided_regex", "a+"),
    ],
)
def test_a_forced_grammar_constrains_the_reply_instead_of_a_tool_call(
    style: Any, fmt: dict[str, Any], field: str, value: Any
) -> None:
    forced = request(fmt, FORCED)
    body = to_upstream(forced)
    assert guide(body, forced, style) == "patch"
    assert body[field] == value
    for gone in ("tools", "tool_choice", "parallel_tool_calls", "response_format"):
        assert gone not in body
    system = body["messages"][0]
    assert system["role"] == "system"
    assert system["content"].startswith("rules\n\nReply with only the raw input for the tool")
    assert "Patch" in system["content"]


def test_without_instructions_the_hint_is_a_system_message_of_its_own() -> None:
    forced = request(LARK, FORCED, instructions=None)
    body = to_upstream(forced)
    guide(body, forced, "vllm")
    assert [m["role"] for m in body["messages"]] == ["system", "user"]


@pytest.mark.parametrize(
    ("fmt", "choice"),
    [
        (LARK, "auto"),
        (LARK, "required"),
        ({"type": "text"}, FORCED),
        (LARK, {"type": "function", "name": "x"}),
    ],
)
def test_a_round_that_forces_no_grammar_tool_is_left_alone(
    fmt: dict[str, Any], choice: Any
) -> None:
    unforced = request(fmt, choice)
    body = to_upstream(unforced)
    before = orjson.dumps(body)
    assert guide(body, unforced, "vllm") is None
    assert orjson.dumps(body) == before


async def replay(deltas: list[Delta]) -> AsyncIterator[Delta]:
    for delta in deltas:
        yield delta


@pytest.mark.parametrize(("reason", "finish"), [("stop", "tool_calls"), ("length", "length")])
async def test_the_guided_reply_becomes_the_tools_input(reason: str, finish: str) -> None:
    upstream: list[Delta] = [
        ReasoningDelta("think"),
        TextDelta('a"'),
        TextDelta("a"),
        Finish(reason),
    ]
    out = [d async for d in as_tool_input(replay(upstream), "patch")]
    assert out == [  # the input streams as the reply does
        ReasoningDelta("think"),
        ToolCallDelta(0, None, "patch", '{"input":"a\\"'),
        ToolCallDelta(0, None, None, "a"),
        ToolCallDelta(0, None, None, '"}'),
        Finish(finish),
    ]
    arguments = "".join(d.arguments for d in out if isinstance(d, ToolCallDelta))
    assert arguments == orjson.dumps({"input": 'a"a'}).decode()


async def test_a_guided_reply_ended_without_a_finish_reason_is_still_the_call() -> None:
    """vLLM may end a stream with ``[DONE]`` and no ``finish_reason``
    (vllm-project/vllm#27572, #40986): the reply is the call all the same, not dropped."""
    upstream: list[Delta] = [TextDelta("a"), TextDelta("a")]
    out = [d async for d in as_tool_input(replay(upstream), "patch")]
    assert out == [
        ToolCallDelta(0, None, "patch", '{"input":"a'),
        ToolCallDelta(0, None, None, "a"),
        ToolCallDelta(0, None, None, '"}'),
        Finish("tool_calls"),
    ]


async def test_an_empty_guided_reply_is_the_call_with_an_empty_input() -> None:
    out = [d async for d in as_tool_input(replay([TextDelta(""), Finish("stop")]), "patch")]
    assert out == [ToolCallDelta(0, None, "patch", '{"input":""}'), Finish("tool_calls")]
