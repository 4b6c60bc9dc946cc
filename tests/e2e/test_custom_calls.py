"""A Chat upstream answering a ``custom`` tool's call (``type: "custom"``, its raw
``input``), as OpenAI's Chat Completions answers one, through the real gateway and each
SDK: a Responses client gets the ``custom_tool_call`` it declared, a Messages client the
``tool_use`` of the function it declared, streamed or not, never a nameless call. (On the
Responses wire the fake ignores ``[[custom]]``: the same answers must come from its
function calls.)"""

from __future__ import annotations

import json
from typing import Any

import orjson
import pytest
from anthropic import Anthropic
from openai import AsyncOpenAI, OpenAI

from tests.core.tools.wire import EVENTS
from tests.e2e.test_passthrough_tools import RESPONSES_UPSTREAMS

MODEL = "fake-model"
APPLY_PATCH: dict[str, Any] = {
    "type": "custom",
    "name": "apply_patch",
    "description": "Apply a patch",
    "format": {"type": "grammar", "syntax": "lark", "definition": "start: /.+/"},
}
PATCH = '*** Begin Patch\n*** Add File: a.json\n+{"input": "x"}\n*** End Patch'
"""A raw input with quotes, line breaks and JSON in it, longer than one streamed piece."""
DIRECTIVE = "[[custom]][[tool:apply_patch:" + orjson.dumps({"input": PATCH}).decode() + "]]"


def test_a_custom_call_is_the_declared_custom_tool_call(client: OpenAI) -> None:
    first = client.responses.create(model=MODEL, input=DIRECTIVE, tools=[APPLY_PATCH])  # type: ignore[list-item]
    [call] = first.output
    assert call.type == "custom_tool_call"
    assert (call.name, call.input) == ("apply_patch", PATCH)
    second = client.responses.create(
        model=MODEL,
        previous_response_id=first.id,
        input=[{"type": "custom_tool_call_output", "call_id": call.call_id, "output": "done"}],
        tools=[APPLY_PATCH],  # type: ignore[list-item]
    )
    assert second.status == "completed"


def stream_reads_the_call(client: OpenAI, prompt: str) -> None:
    """The SDK's ``responses.stream()`` reads the apply_patch call ``prompt`` makes: its
    input's done event and the final response's one item."""
    with client.responses.stream(
        model=MODEL,
        input=prompt,
        tools=[APPLY_PATCH],  # type: ignore[list-item]
    ) as stream:
        events = list(stream)
        final = stream.get_final_response()
    done = next(e for e in events if e.type == "response.custom_tool_call_input.done")
    assert done.input == PATCH  # type: ignore[union-attr]
    [call] = final.output
    assert call.type == "custom_tool_call"
    assert (call.name, call.input) == ("apply_patch", PATCH)


def test_a_streamed_custom_call_is_the_declared_custom_tool_call(client: OpenAI) -> None:
    stream_reads_the_call(client, DIRECTIVE)


INPUT_TOOL: dict[str, Any] = {
    "name": "apply_patch",
    "description": "Apply a patch",
    "input_schema": {
        "type": "object",
        "properties": {"input": {"type": "string"}},
        "required": ["input"],
    },
}


@pytest.mark.parametrize("stream", [False, True])
def test_a_custom_call_is_a_tool_use_for_messages(claude: Anthropic, stream: bool) -> None:
    content = [{"role": "user", "content": DIRECTIVE}]
    if stream:
        with claude.messages.stream(
            model=MODEL,
            max_tokens=256,
            messages=content,  # type: ignore[arg-type]
            tools=[INPUT_TOOL],  # type: ignore[list-item]
        ) as events:
            message = events.get_final_message()
    else:
        message = claude.messages.create(
            model=MODEL,
            max_tokens=256,
            messages=content,  # type: ignore[arg-type]
            tools=[INPUT_TOOL],  # type: ignore[list-item]
        )
    [use] = [block for block in message.content if block.type == "tool_use"]
    assert (use.name, use.input) == ("apply_patch", {"input": PATCH})
    assert message.stop_reason == "tool_use"


CHAT_APPLY_PATCH: dict[str, Any] = {
    "type": "custom",
    "custom": {
        "name": "apply_patch",
        "description": "Apply a patch",
        "format": {"type": "grammar", "grammar": {"syntax": "lark", "definition": "start: /.+/"}},
    },
}


def test_a_chat_client_declaring_a_custom_tool_gets_its_custom_call(client: OpenAI) -> None:
    """Forwarded to a Chat upstream as sent, translated for a Responses one: either way
    the client's custom tool is called as one, and its call and output are taken back."""
    messages: list[Any] = [{"role": "user", "content": DIRECTIVE}]
    completion = client.chat.completions.create(
        model=MODEL,
        messages=messages,
        tools=[CHAT_APPLY_PATCH],  # type: ignore[list-item]
    )
    assert completion.choices[0].finish_reason == "tool_calls"
    [call] = completion.choices[0].message.tool_calls or []
    assert call.type == "custom"
    assert (call.custom.name, call.custom.input) == ("apply_patch", PATCH)
    messages += [
        {"role": "assistant", "tool_calls": [call.model_dump(exclude_none=True)]},
        {"role": "tool", "tool_call_id": call.id, "content": "patched"},
        {"role": "user", "content": "[[echo]]"},
    ]
    answer = client.chat.completions.create(
        model=MODEL,
        messages=messages,
        tools=[CHAT_APPLY_PATCH],  # type: ignore[list-item]
        tool_choice={"type": "custom", "custom": {"name": "apply_patch"}},
    )
    assert answer.choices[0].finish_reason == "stop"
    assert "patched" in (answer.choices[0].message.content or "")


def streamed_calls(client: OpenAI, content: str) -> tuple[list[dict[str, Any]], str | None]:
    """The tool call fragments a Chat client streaming ``content`` is given, and its
    finish reason."""
    chunks = list(
        client.chat.completions.create(
            model=MODEL,
            messages=[{"role": "user", "content": content}],
            tools=[CHAT_APPLY_PATCH],  # type: ignore[list-item]
            stream=True,
        )
    )
    fragments = [
        fragment.model_dump()
        for chunk in chunks
        if chunk.choices
        for fragment in chunk.choices[0].delta.tool_calls or ()
    ]
    return fragments, chunks[-1].choices[0].finish_reason


def test_a_chat_client_streaming_gets_the_custom_call(client: OpenAI) -> None:
    fragments, finish_reason = streamed_calls(client, DIRECTIVE)
    assert fragments[0]["type"] == "custom"
    assert fragments[0]["custom"]["name"] == "apply_patch"
    assert {f["index"] for f in fragments} == {0}
    assert not any(f.get("function") for f in fragments)
    assert "".join(f["custom"]["input"] or "" for f in fragments) == PATCH
    assert finish_reason == "tool_calls"


WHOLE_CALL: dict[str, Any] = {
    "type": "custom_tool_call",
    "call_id": "call_whole",
    "name": "apply_patch",
    "input": PATCH,
    "status": "completed",
}
"""A custom tool's call as a Responses upstream may give it: whole, in its
``response.output_item.done`` alone, no input events before it."""
WHOLE = "[[item:" + orjson.dumps(WHOLE_CALL).decode() + "]]"


@RESPONSES_UPSTREAMS
def test_a_custom_call_given_whole_streams_its_input(client: OpenAI) -> None:
    """Streamed as hosted streams a custom call (and as the gateway streams the calls it
    writes): added with no input yet, the input's delta and done events, then done; each
    event read strictly as the SDK's type."""
    mine = _call_events(client, WHOLE)
    kinds = [e["type"] for e in mine]
    assert kinds[0] == "response.output_item.added"
    assert kinds[-1] == "response.output_item.done"
    assert set(kinds[1:-2]) == {"response.custom_tool_call_input.delta"}
    assert kinds[-2] == "response.custom_tool_call_input.done"
    added, done = mine[0]["item"], mine[-1]["item"]
    assert (added["type"], added["input"]) == ("custom_tool_call", "")
    item_id = done["id"]
    assert added["id"] == item_id
    assert all(e["item_id"] == item_id for e in mine[1:-1])
    assert "".join(e["delta"] for e in mine[1:-2]) == PATCH
    assert mine[-2]["input"] == PATCH
    assert (done["name"], done["input"], done["call_id"]) == ("apply_patch", PATCH, "call_whole")


@RESPONSES_UPSTREAMS
def test_the_sdks_stream_reads_a_custom_call_given_whole(client: OpenAI) -> None:
    stream_reads_the_call(client, WHOLE)


@RESPONSES_UPSTREAMS
def test_a_chat_client_streaming_gets_a_custom_call_given_whole(client: OpenAI) -> None:
    fragments, finish_reason = streamed_calls(client, WHOLE)
    assert fragments[0]["custom"]["name"] == "apply_patch"
    assert "".join(f["custom"]["input"] or "" for f in fragments) == PATCH
    assert finish_reason == "tool_calls"


def test_a_custom_calls_input_streams_as_its_arguments_come(client: OpenAI) -> None:
    """The model's arguments come in pieces: the input streams in pieces too (decoded
    from the ``input`` string as it comes), as hosted streams a custom call, not whole
    once the call is done."""
    with client.responses.stream(
        model=MODEL,
        input=DIRECTIVE,
        tools=[APPLY_PATCH],  # type: ignore[list-item]
    ) as stream:
        events = list(stream)
    deltas = [e.delta for e in events if e.type == "response.custom_tool_call_input.delta"]
    assert len(deltas) > 2
    assert "".join(deltas) == PATCH
    [done] = [e for e in events if e.type == "response.custom_tool_call_input.done"]
    assert done.input == PATCH


def test_a_chat_client_streaming_gets_the_custom_input_in_pieces(client: OpenAI) -> None:
    fragments, _ = streamed_calls(client, DIRECTIVE)
    pieces = [f["custom"]["input"] for f in fragments if f["custom"]["input"]]
    assert len(pieces) > 2
    assert "".join(pieces) == PATCH


STREAMED = "[[pieces]]" + WHOLE
"""The custom call as hosted streams it: added with no input, its input in pieces."""


@RESPONSES_UPSTREAMS
def test_a_responses_upstreams_custom_input_streams_in_its_pieces(client: OpenAI) -> None:
    """Each piece as the upstream sent it, as hosted streams one; each event read strictly
    as the SDK's type, and by the SDK's ``responses.stream()``."""
    mine = _call_events(client, STREAMED)
    kinds = [e["type"] for e in mine]
    assert kinds[0] == "response.output_item.added"
    assert kinds[-2:] == ["response.custom_tool_call_input.done", "response.output_item.done"]
    deltas = [e["delta"] for e in mine[1:-2]]
    assert set(kinds[1:-2]) == {"response.custom_tool_call_input.delta"}
    assert deltas == [PATCH[at : at + 8] for at in range(0, len(PATCH), 8)]  # the fake's
    added, done = mine[0]["item"], mine[-1]["item"]
    assert (added["type"], added["input"], added["id"]) == ("custom_tool_call", "", done["id"])
    assert all(e["item_id"] == done["id"] for e in mine[1:-1])
    assert (done["name"], done["input"], done["call_id"]) == ("apply_patch", PATCH, "call_whole")
    assert done["status"] == "completed"
    stream_reads_the_call(client, STREAMED)


@RESPONSES_UPSTREAMS
def test_a_chat_client_streaming_gets_a_responses_upstreams_custom_input_in_pieces(
    client: OpenAI,
) -> None:
    fragments, finish_reason = streamed_calls(client, STREAMED)
    assert fragments[0]["custom"]["name"] == "apply_patch"
    pieces = [f["custom"]["input"] for f in fragments if f["custom"]["input"]]
    assert len(pieces) > 2
    assert "".join(pieces) == PATCH
    assert finish_reason == "tool_calls"


@RESPONSES_UPSTREAMS
@pytest.mark.parametrize("prompt", [DIRECTIVE, STREAMED], ids=["arguments", "pieces"])
async def test_a_websocket_client_gets_the_custom_input_in_pieces(
    async_client: AsyncOpenAI, prompt: str
) -> None:
    """From the model's arguments (decoded) or the upstream's own pieces, as over SSE."""
    async with async_client.responses.connect() as connection:
        await connection.response.create(
            model=MODEL,
            input=prompt,
            tools=[APPLY_PATCH],  # type: ignore[list-item]
        )
        events: list[Any] = []
        while not events or events[-1].type not in ("response.completed", "error"):
            events.append(await connection.recv())
    deltas = [e.delta for e in events if e.type == "response.custom_tool_call_input.delta"]
    assert len(deltas) > 2
    assert "".join(deltas) == PATCH
    [call] = events[-1].response.output
    assert (call.type, call.input) == ("custom_tool_call", PATCH)


def _call_events(client: OpenAI, prompt: str) -> list[dict[str, Any]]:
    """The events of output 0 of a stream of ``prompt`` offered the custom tool, each read
    strictly as the SDK's type."""
    with client.responses.with_streaming_response.create(
        model=MODEL,
        input=prompt,
        tools=[APPLY_PATCH],  # type: ignore[list-item]
        stream=True,
    ) as raw:
        events = [json.loads(line[6:]) for line in raw.iter_lines() if line.startswith("data: ")]
    for event in events:
        EVENTS.validate_python(event, strict=True)
    return [e for e in events if e.get("output_index") == 0]
