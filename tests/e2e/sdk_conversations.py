"""Conversations through each frontend, driven by its official SDK and parsed with the
SDK's own types: ``responses.create`` / ``responses.stream`` (chained by
``previous_response_id``), ``chat.completions.create`` (a stream folded by the SDK's
``ChatCompletionStreamState``), ``messages.create`` / ``messages.stream(...)
.get_final_message()`` (the history sent whole each time).

Each answer comes back as a :class:`Turn`, the same for every frontend, so one test can
hold all three to the same expectations. A streamed answer's events are checked for the
shape their SDK relies on before the SDK's own accumulation is trusted.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any, Protocol

from anthropic import Anthropic
from openai import OpenAI
from openai.lib.streaming.chat import ChatCompletionStreamState
from openai.types.chat import ChatCompletionChunk


@dataclass(frozen=True)
class Call:
    id: str
    name: str
    arguments: dict[str, Any]


@dataclass(frozen=True)
class Turn:
    """One answer as the client's SDK parsed it."""

    text: str
    calls: list[Call]
    stop: str
    """``status`` (Responses), ``finish_reason`` (Chat) or ``stop_reason`` (Messages)."""
    usage: tuple[int, int]
    """(input tokens, output tokens)."""
    reasoning: list[str]
    """The reasoning shown: per reasoning item (Responses), thinking block (Messages), or
    the one ``reasoning_content`` (Chat)."""
    kinds: list[str]
    """What the answer holds: output item types (Responses), ``text`` and ``tool_call``
    (Chat), content block types (Messages)."""
    model: str
    shown: str
    """Everything the client received (a stream's events and the final object) as JSON;
    empty for Responses."""


class Conversation(Protocol):
    def ask(self, prompt: str) -> Turn: ...
    def answer(self, call: Call, output: str) -> Turn: ...


class ResponsesConversation:
    def __init__(self, sdk: OpenAI, model: str, stream: bool, tools: list[Any]) -> None:
        self._sdk, self._model, self._stream, self._tools = sdk, model, stream, tools
        self._previous: str | None = None

    def ask(self, prompt: str) -> Turn:
        return self._send(prompt)

    def answer(self, call: Call, output: str) -> Turn:
        return self._send([{"type": "function_call_output", "call_id": call.id, "output": output}])

    def _send(self, input: Any) -> Turn:
        request: dict[str, Any] = {"model": self._model, "input": input, "tools": self._tools}
        if self._previous is not None:
            request["previous_response_id"] = self._previous
        if self._stream:
            with self._sdk.responses.stream(**request) as stream:
                events: list[tuple[str, int]] = [(e.type, e.sequence_number) for e in stream]
                response = stream.get_final_response()
            check_response_events(events)
        else:
            response = self._sdk.responses.create(**request)
        self._previous = response.id
        calls = [
            Call(item.call_id, item.name, json.loads(item.arguments))
            for item in response.output
            if item.type == "function_call"
        ]
        assert response.usage is not None
        usage = (response.usage.input_tokens, response.usage.output_tokens)
        reasoning = [
            "".join(part.text for part in item.content or [])
            for item in response.output
            if item.type == "reasoning"
        ]
        kinds: list[str] = [item.type for item in response.output]
        status = response.status or ""
        text = response.output_text
        return Turn(text, calls, status, usage, reasoning, kinds, response.model, "")


def check_response_events(events: list[tuple[str, int]]) -> None:
    types = [kind for kind, _ in events]
    assert types[:2] == ["response.created", "response.in_progress"]
    assert types[-1] == "response.completed"
    assert [number for _, number in events] == list(range(len(events)))


class ChatConversation:
    def __init__(self, sdk: OpenAI, model: str, stream: bool, tools: list[Any]) -> None:
        self._sdk, self._model, self._stream, self._tools = sdk, model, stream, tools
        self._messages: list[Any] = []

    def ask(self, prompt: str) -> Turn:
        self._messages.append({"role": "user", "content": prompt})
        return self._send()

    def answer(self, call: Call, output: str) -> Turn:
        self._messages.append({"role": "tool", "tool_call_id": call.id, "content": output})
        return self._send()

    def _send(self) -> Turn:
        request: dict[str, Any] = {"model": self._model, "messages": self._messages}
        if self._tools:
            request["tools"] = self._tools
        shown = ""
        if self._stream:
            stream: Any = self._sdk.chat.completions.create(
                **request, stream=True, stream_options={"include_usage": True}
            )
            chunks: list[ChatCompletionChunk] = list(stream)
            check_chat_chunks(chunks)
            state: ChatCompletionStreamState[None] = ChatCompletionStreamState()
            for chunk in chunks:
                state.handle_chunk(chunk)
            completion: Any = state.get_final_completion()
            shown = "".join(chunk.model_dump_json() for chunk in chunks)
        else:
            completion = self._sdk.chat.completions.create(**request)
        shown += completion.model_dump_json()
        [choice] = completion.choices
        message = choice.message
        tool_calls = message.tool_calls or []
        calls = [Call(c.id, c.function.name, json.loads(c.function.arguments)) for c in tool_calls]
        said: dict[str, Any] = {"role": "assistant", "content": message.content}
        if tool_calls:
            said["tool_calls"] = [
                c.model_dump(include={"id", "type", "function"}) for c in tool_calls
            ]
        self._messages.append(said)
        assert completion.usage is not None
        usage = (completion.usage.prompt_tokens, completion.usage.completion_tokens)
        thought = (message.model_extra or {}).get("reasoning_content")
        reasoning = [thought] if thought else []
        kinds = (["text"] if message.content else []) + ["tool_call"] * len(tool_calls)
        text = message.content or ""
        stop = choice.finish_reason
        return Turn(text, calls, stop, usage, reasoning, kinds, completion.model, shown)


def check_chat_chunks(chunks: list[ChatCompletionChunk]) -> None:
    """One id throughout, the role once (first), the finish reason once, and the usage in a
    last chunk without choices (``include_usage``)."""
    assert len({chunk.id for chunk in chunks}) == 1
    *answer, last = chunks
    assert last.choices == []
    assert last.usage is not None
    assert all(chunk.usage is None and len(chunk.choices) == 1 for chunk in answer)
    roles = [chunk.choices[0].delta.role for chunk in answer]
    assert roles[0] == "assistant"
    assert roles[1:] == [None] * (len(answer) - 1)
    finishes = [chunk.choices[0].finish_reason for chunk in answer]
    assert finishes[-1] is not None
    assert finishes[:-1] == [None] * (len(answer) - 1)


class MessagesConversation:
    def __init__(self, sdk: Anthropic, model: str, stream: bool, tools: list[Any]) -> None:
        self._sdk, self._model, self._stream, self._tools = sdk, model, stream, tools
        self._messages: list[Any] = []

    def ask(self, prompt: str) -> Turn:
        self._messages.append({"role": "user", "content": prompt})
        return self._send()

    def answer(self, call: Call, output: str) -> Turn:
        result = {"type": "tool_result", "tool_use_id": call.id, "content": output}
        self._messages.append({"role": "user", "content": [result]})
        return self._send()

    def _send(self) -> Turn:
        request: dict[str, Any] = {"model": self._model, "max_tokens": 1024}
        request["thinking"] = {"type": "adaptive"}  # as Claude Code asks: thinking is shown
        request["messages"] = self._messages
        if self._tools:
            request["tools"] = self._tools
        shown = ""
        if self._stream:
            with self._sdk.messages.stream(**request) as stream:
                events = [event for event in stream if event.type in WIRE_EVENTS]
                message = stream.get_final_message()
            check_message_events([(event.type, getattr(event, "index", -1)) for event in events])
            shown = "".join(event.model_dump_json() for event in events)
        else:
            message = self._sdk.messages.create(**request)
        shown += message.model_dump_json()
        content = [block.model_dump(exclude_none=True) for block in message.content]
        self._messages.append({"role": "assistant", "content": content})
        text = "".join(block.text for block in message.content if block.type == "text")
        calls = [
            Call(block.id, block.name, dict(block.input))
            for block in message.content
            if block.type == "tool_use"
        ]
        usage = (message.usage.input_tokens, message.usage.output_tokens)
        reasoning = [block.thinking for block in message.content if block.type == "thinking"]
        kinds: list[str] = [block.type for block in message.content]
        stop = message.stop_reason or ""
        return Turn(text, calls, stop, usage, reasoning, kinds, message.model, shown)


WIRE_EVENTS = frozenset(
    {
        "message_start",
        "content_block_start",
        "content_block_delta",
        "content_block_stop",
        "message_delta",
        "message_stop",
    }
)
"""The events on the wire (``ping`` aside); the SDK's stream adds its own (``text``, ...)."""


def check_message_events(events: list[tuple[str, int]]) -> None:
    """``message_start``; blocks opened in index order, each delta inside its open block,
    each closed before the next opens; ``message_delta``; ``message_stop``."""
    types = [kind for kind, _ in events]
    assert types[0] == "message_start"
    assert types[-2:] == ["message_delta", "message_stop"]
    open_block: int | None = None
    opened = 0
    for kind, index in events[1:-2]:
        match kind:
            case "content_block_start":
                assert open_block is None
                assert index == opened
                open_block, opened = index, opened + 1
            case "content_block_delta":
                assert index == open_block
            case "content_block_stop":
                assert index == open_block
                open_block = None
            case _:
                raise AssertionError(f"{kind} inside the message")
    assert open_block is None
