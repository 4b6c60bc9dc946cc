"""Backend for upstreams speaking OpenAI Chat Completions (vLLM, SGLang, llama.cpp, Ollama,
OpenAI): canonical items to ``messages`` and back.

``to_upstream`` builds the request body; ``from_upstream_chunk`` and
``from_upstream_completion`` turn replies into deltas. Reasoning items ride on the next
assistant message as ``reasoning_content``; consecutive function calls join one assistant
message's ``tool_calls``; a function call's output is a ``role: "tool"`` message (text
only: images the output holds follow the round's tool messages in one user message, each
group labelled with its call id). System messages lead, joined into one; later ones become
user reminders (:mod:`stateway.backends.chat_system_messages`). Item and tool types the gateway
does not model cannot be carried (``carries_unknown_types`` is False). With
``guided_decoding``, a round forcing a custom tool with a grammar is constrained by it
(:mod:`stateway.backends.guided_decoding`). With ``reasoning_efforts``, an effort the
server does not take is sent at its nearest level, on the fast path too
(:mod:`stateway.backends.reasoning_efforts`).

Several reasoning items before one assistant message (a run's rounds) share its
``reasoning_content``, a blank line between them.
"""

from __future__ import annotations

from collections.abc import AsyncGenerator, Callable, Iterator, Mapping
from contextlib import aclosing
from typing import Any, Final

import orjson

from stateway.backends.chat_logprobs import chunk_tokens, text_tokens
from stateway.backends.chat_system_messages import merge_user_turns, place_system_messages
from stateway.backends.chat_usage import from_chat_usage
from stateway.backends.guided_decoding import GuidedDecoding, as_tool_input, guide
from stateway.backends.reasoning_efforts import effort_levels
from stateway.backends.tokenizer import UpstreamTokenizer
from stateway.backends.upstream_http import UpstreamClient, cut_short
from stateway.backends.upstream_relay import UpstreamRelay
from stateway.backends.upstream_values import count, obj, text
from stateway.core import logprobs
from stateway.core.errors import InvalidRequest, UpstreamError
from stateway.core.inference import (
    Delta,
    Finish,
    InferenceRequest,
    ReasoningDelta,
    RefusalDelta,
    TextDelta,
    ToolCallDelta,
    UsageReport,
)
from stateway.core.items import Item, item_text, joined_items
from stateway.core.ports import TOOL_OUTPUT
from stateway.core.tools.history import REWRITTEN_ITEM_TYPES, model_items

CARRIED = (
    frozenset({"message", "function_call", "function_call_output", "reasoning"})
    | REWRITTEN_ITEM_TYPES
)
"""Custom tool calls and their outputs reach the model as function calls (``model_items``)."""
_TEXT_PARTS = frozenset({"input_text", "output_text", "text", "refusal", "summary_text"})
_ROLES = {"system": "system", "developer": "system", "user": "user", "assistant": "assistant"}


class OpenAIChatBackend:
    carried_item_types = CARRIED
    carried_part_types: Mapping[str, frozenset[str]] = {
        "user": _TEXT_PARTS | {"input_image"},
        "system": _TEXT_PARTS,
        "developer": _TEXT_PARTS,
        "assistant": _TEXT_PARTS,
        TOOL_OUTPUT: _TEXT_PARTS | {"input_image"},
    }
    carries_unknown_types = False

    def __init__(
        self,
        client: UpstreamClient,
        max_tokens_field: str = "max_tokens",
        guided_decoding: GuidedDecoding | None = None,
        *,
        alternate_roles: bool = False,
        reasoning_efforts: tuple[str, ...] | None = None,
    ) -> None:
        self._client = client
        self._target = client.target
        self.name = client.target.name
        self._max_tokens_field = max_tokens_field
        """``max_tokens`` (vLLM, llama.cpp, Ollama, ...) or ``max_completion_tokens`` (what
        OpenAI's reasoning models require)."""
        self._alternate = alternate_roles
        """Consecutive user messages are sent as one (strict chat templates)."""
        self._efforts = effort_levels(reasoning_efforts)
        """The level each effort the server does not take is sent at (empty: all as asked)."""
        self._guided = guided_decoding
        self._tokenizer = UpstreamTokenizer(client)

    def infer(self, request: InferenceRequest) -> AsyncGenerator[Delta, None]:
        """The round's deltas; the body is built now (a request it cannot carry fails here).
        Unguided, the reply's own generator, with no layer around it."""
        body = to_upstream(
            request,
            self._max_tokens_field,
            alternate_roles=self._alternate,
            efforts=self._efforts,
        )
        forced = guide(body, request, self._guided) if self._guided else None
        deltas = self._deltas(request, body)
        return deltas if forced is None else _guided(deltas, forced)

    async def _deltas(
        self, request: InferenceRequest, body: dict[str, Any]
    ) -> AsyncGenerator[Delta, None]:
        tokens = logprobs.INCLUDE in request.settings.include  # read only when asked for
        async with self._client.post("/chat/completions", self._target.filled(body)) as reply:
            if not request.stream:
                for delta in self._decode_completion(await reply.read(), tokens):
                    yield delta
                return
            finished = False
            async for event in reply.events():
                if event.data.rstrip() == b"[DONE]":
                    finished = True
                    break
                for delta in self._decode_chunk(event.data, tokens):
                    finished = finished or isinstance(delta, Finish)
                    yield delta
            if not finished:
                raise cut_short(self.name)

    def _decode_chunk(self, data: bytes, tokens: bool) -> list[Delta]:
        try:
            chunk = orjson.loads(data)
            if "error" in chunk and "choices" not in chunk:
                message = _stream_error_message(self.name, chunk["error"])
                raise UpstreamError(self._client.scrub(message))
            return list(from_upstream_chunk(chunk, tokens))
        except (orjson.JSONDecodeError, KeyError, TypeError, AttributeError) as exc:
            raise UpstreamError(f"The model server '{self.name}' sent a malformed chunk.") from exc

    def _decode_completion(self, data: bytes, tokens: bool) -> list[Delta]:
        try:
            return list(from_upstream_completion(orjson.loads(data), tokens))
        except (orjson.JSONDecodeError, KeyError, TypeError, AttributeError) as exc:
            raise UpstreamError(f"The model server '{self.name}' sent a malformed reply.") from exc

    async def forward_chat(self, body: bytes) -> UpstreamRelay:
        """The stateless fast path: ``body`` as the client sent it (given the backend's
        ``extra_body`` fields it does not set, and its effort at a level the server
        takes), the answer as bytes."""
        if self._target.extra_body or self._efforts:
            body = self._forwarded(body)
        return await self._client.relay("/chat/completions", body)

    def _forwarded(self, body: bytes) -> bytes:
        """``body`` re-encoded with what the backend changes in it; the very bytes when
        that is nothing."""
        fields = orjson.loads(body)
        effort = fields.get("reasoning_effort")
        level = self._efforts.get(effort, effort) if isinstance(effort, str) else effort
        if level == effort and not self._target.extra_body:
            return body
        if level != effort:
            fields["reasoning_effort"] = level
        return orjson.dumps(self._target.filled(fields))

    async def list_models(self) -> list[str]:
        return await self._client.list_models()

    async def count_tokens(self, request: InferenceRequest) -> int | None:
        """The upstream tokenizer's count (:mod:`stateway.backends.tokenizer`)."""
        return await self._tokenizer.count(to_upstream(request, alternate_roles=self._alternate))

    async def aclose(self) -> None:
        await self._client.aclose()


async def _guided(deltas: AsyncGenerator[Delta, None], tool: str) -> AsyncGenerator[Delta, None]:
    """A guided round's deltas as the forced custom tool's call (:func:`as_tool_input`)."""
    async with aclosing(deltas) as inner:
        async for delta in as_tool_input(inner, tool):
            yield delta


def to_upstream(
    request: InferenceRequest,
    max_tokens_field: str = "max_tokens",
    *,
    alternate_roles: bool = False,
    efforts: Mapping[str, str] | None = None,
) -> dict[str, Any]:
    """The Chat Completions body of ``request``; ``efforts``: the level each effort the
    server does not take is sent at (:func:`effort_levels`)."""
    settings = request.settings
    messages = _messages(request)
    if alternate_roles:
        messages = merge_user_turns(messages)
    body: dict[str, Any] = {"model": request.model, "messages": messages}
    if request.stream:
        body["stream"] = True
        body["stream_options"] = {"include_usage": True}
    if request.tools:
        body["tools"] = [_tool(tool) for tool in request.tools]
        body["tool_choice"] = _tool_choice(request.tool_choice)
        body["parallel_tool_calls"] = settings.parallel_tool_calls
    optional = {
        "temperature": settings.temperature,
        "top_p": settings.top_p,
        max_tokens_field: settings.max_output_tokens,
        "reasoning_effort": _effort(settings.reasoning_effort, efforts),
        "user": settings.user,
        "safety_identifier": settings.safety_identifier,
        "prompt_cache_key": settings.prompt_cache_key,
        "presence_penalty": settings.presence_penalty,
        "frequency_penalty": settings.frequency_penalty,
        "top_k": settings.top_k,
        "seed": settings.seed,
        "stop": settings.stop_sequences or None,
        "verbosity": settings.verbosity,
        "service_tier": settings.service_tier,
    }
    body.update((k, v) for k, v in optional.items() if v is not None)
    if logprobs.INCLUDE in settings.include:  # logprobs.wanted, inline: once per round
        body["logprobs"] = True
        if settings.top_logprobs:
            body["top_logprobs"] = settings.top_logprobs
    response_format = _response_format(settings.text_format)
    if response_format is not None:
        body["response_format"] = response_format
    for key, value in settings.vendor_fields.items():
        body.setdefault(key, value)
    if settings.continue_final_message and _prefilled(messages[-1]):
        body["continue_final_message"] = True  # vLLM's; llama.cpp continues unasked
        body["add_generation_prompt"] = False
    return body


def _effort(effort: str | None, efforts: Mapping[str, str] | None) -> str | None:
    return efforts.get(effort, effort) if efforts and effort is not None else effort


def _prefilled(message: dict[str, Any]) -> bool:
    """The conversation ends with an assistant's text to continue (not its tool calls)."""
    return message["role"] == "assistant" and "tool_calls" not in message


def _messages(request: InferenceRequest) -> list[dict[str, Any]]:
    messages: list[dict[str, Any]] = []
    if request.instructions:
        messages.append({"role": "system", "content": request.instructions})
    reasoning: list[str] = []
    images: list[dict[str, Any]] = []
    """Image parts of the tool outputs just sent, for the user message that follows them."""
    for item in model_items(request.items):
        kind = item.get("type")
        if kind != "function_call_output" and images:
            messages.append({"role": "user", "content": images})
            images = []
        if kind == "message":
            message = _message(item)
            if message["role"] == "assistant" and reasoning:
                message["reasoning_content"] = joined_items(reasoning)
                reasoning = []
            messages.append(message)
        elif kind == "function_call":
            last = messages[-1] if messages else None
            if last is None or last["role"] != "assistant":
                last = {"role": "assistant", "content": None}
                messages.append(last)
            if reasoning:
                last["reasoning_content"] = joined_items(reasoning)
                reasoning = []
            last.setdefault("tool_calls", []).append(
                {
                    "id": item["call_id"],
                    "type": "function",
                    "function": {"name": item["name"], "arguments": item["arguments"]},
                }
            )
        elif kind == "function_call_output":
            messages.append(_tool_message(item, images))
        elif kind == "reasoning":
            reasoning.append(item_text(item) or _summary_text(item))
    if images:
        messages.append({"role": "user", "content": images})
    return place_system_messages(messages)


def _tool_message(item: Item, images: list[dict[str, Any]]) -> dict[str, Any]:
    """A ``role: "tool"`` message, which carries text only: the output's text parts a line
    apart (as vLLM joins a message's parts); its images are added to ``images`` (labelled
    with the call's id), for a user message after the tool messages of the round, and the
    tool message says so."""
    output = item.get("output")
    if isinstance(output, str):
        return {"role": "tool", "tool_call_id": item["call_id"], "content": output}
    text = "\n".join(
        _part_text(part)
        for part in output or ()
        if isinstance(part, dict) and part.get("type") in _TEXT_PARTS
    )
    pictures = [
        _image_part(part)
        for part in output or ()
        if isinstance(part, dict) and part.get("type") == "input_image"
    ]
    if pictures:
        count = "1 image" if len(pictures) == 1 else f"{len(pictures)} images"
        verb = "follows" if len(pictures) == 1 else "follow"
        note = f"[{count} of this output {verb} in the next user message.]"
        text = f"{text}\n{note}" if text else note
        label = f"Images of the output of tool call {item['call_id']}:"
        images.extend([{"type": "text", "text": label}, *pictures])
    return {"role": "tool", "tool_call_id": item["call_id"], "content": text}


_DETAILS: Final = {"auto": "auto", "low": "low", "high": "high", "original": "high"}
"""Image ``detail`` levels every Chat server knows, from the Responses API's: ``original``
(full resolution, which Codex's view_image asks for; newer than most Chat servers' request
schemas) is sent as ``high``; an unknown level is not sent."""


def _image_part(part: Item) -> dict[str, Any]:
    image: dict[str, Any] = {"url": part["image_url"]}
    detail = _DETAILS.get(str(part.get("detail")))
    if detail is not None:
        image["detail"] = detail
    return {"type": "image_url", "image_url": image}


def _message(item: Item) -> dict[str, Any]:
    message = _message_content(item)
    if isinstance(item.get("name"), str):  # a Chat client's participant name
        message["name"] = item["name"]
    return message


def _message_content(item: Item) -> dict[str, Any]:
    role = _ROLES[item["role"]]
    content = item.get("content")
    if isinstance(content, str) or role != "user":
        text = content if isinstance(content, str) else _joined_text(content, item)
        return {"role": role, "content": text}
    parts: list[dict[str, Any]] = []
    for part in content or []:
        kind = part.get("type")
        if kind in _TEXT_PARTS:
            parts.append({"type": "text", "text": _part_text(part)})
        elif kind == "input_image":
            parts.append(_image_part(part))
        else:
            raise InvalidRequest(
                f"Content part type '{kind}' is not supported by a Chat Completions upstream.",
                param="input",
                code="unsupported_content_type",
            )
    return {"role": role, "content": parts}


def _joined_text(content: Any, item: Item) -> str:
    for part in content or []:
        if part.get("type") not in _TEXT_PARTS:
            raise InvalidRequest(
                f"Content part type '{part.get('type')}' is not supported in a "
                f"'{item['role']}' message by a Chat Completions upstream.",
                param="input",
                code="unsupported_content_type",
            )
    return "\n".join(_part_text(part) for part in content or [])


def _part_text(part: Item) -> str:
    """A text-like part's text (a refusal part keeps it under ``refusal``)."""
    return str(part.get("text") or part.get("refusal") or "")


def _summary_text(item: Item) -> str:
    summary = item.get("summary") or []
    return "".join(part.get("text", "") for part in summary if isinstance(part, dict))


def _tool(tool: Item) -> dict[str, Any]:
    function: dict[str, Any] = {"name": tool["name"]}
    for key in ("description", "parameters", "strict"):
        if tool.get(key) is not None:
            function[key] = tool[key]
    return {"type": "function", "function": function}


def _tool_choice(choice: str | dict[str, Any]) -> str | dict[str, Any]:
    if isinstance(choice, str):
        return choice
    if choice.get("type") == "function":
        return {"type": "function", "function": {"name": choice["name"]}}
    return choice


def _response_format(text_format: dict[str, Any]) -> dict[str, Any] | None:
    kind = text_format.get("type")
    if kind == "json_schema":
        schema = {
            k: text_format[k]
            for k in ("name", "schema", "strict", "description")
            if k in text_format
        }
        return {"type": "json_schema", "json_schema": schema}
    if kind == "json_object":
        return {"type": "json_object"}
    return None


def from_upstream_chunk(chunk: dict[str, Any], tokens: bool = False) -> Iterator[Delta]:
    """Deltas of one ``chat.completion.chunk``; its text's ``tokens`` (``logprobs``) are
    read only when asked for."""
    for choice in chunk.get("choices") or ():
        if choice.get("index", 0) != 0:
            continue
        delta = obj(choice.get("delta"))
        given = choice.get("logprobs") if tokens else None  # inline: no call per chunk
        yield from _message_deltas(
            delta,
            lambda position, call: count(call.get("index", 0)),
            chunk_tokens(given) if given else None,
        )
        reason = text(choice.get("finish_reason"))
        if reason:
            yield Finish(reason, _stop_sequence(choice))
    usage = chunk.get("usage")
    if usage:
        yield UsageReport(from_chat_usage(obj(usage)))


def from_upstream_completion(payload: dict[str, Any], tokens: bool = False) -> Iterator[Delta]:
    """Deltas of a whole ``chat.completion``, in streaming order (its text's ``tokens``
    read only when asked for)."""
    choices = payload.get("choices") or []
    if not choices:
        raise UpstreamError("The model server answered without a choice.")
    choice = choices[0]
    message = obj(choice.get("message"))
    given = choice.get("logprobs") if tokens else None
    yield from _message_deltas(
        message, lambda position, call: position, text_tokens(given, message) if given else None
    )
    if payload.get("usage"):
        yield UsageReport(from_chat_usage(obj(payload["usage"])))
    yield Finish(text(choice.get("finish_reason")) or "stop", _stop_sequence(choice))


def _stop_sequence(choice: dict[str, Any]) -> str | None:
    """The stop string that ended the choice, as vLLM reports it (``stop_reason``; a
    token id or null when something else stopped it)."""
    matched = choice.get("stop_reason")
    return matched if isinstance(matched, str) and choice.get("finish_reason") == "stop" else None


def _message_deltas(
    message: dict[str, Any],
    call_index: Callable[[int, dict[str, Any]], int],
    tokens: list[Item] | None = None,
) -> Iterator[Delta]:
    """Reasoning, text (with its ``tokens``), a refusal and tool calls of a message or a
    streamed delta, in that order."""
    reasoning = text(message.get("reasoning_content")) or text(message.get("reasoning"))
    if reasoning:
        yield ReasoningDelta(reasoning)
    content = text(message.get("content"))
    if content:
        yield TextDelta(content, tokens)
    elif tokens and not reasoning and not message.get("tool_calls"):
        yield TextDelta("", tokens)  # a token with no text yet (part of a character)
    refusal = message.get("refusal")  # OpenAI's; null from open model servers
    if refusal:
        yield RefusalDelta(text(refusal) or "")
    for position, call in enumerate(message.get("tool_calls") or ()):
        function = obj(call.get("function"))
        yield ToolCallDelta(
            call_index(position, call),
            text(call.get("id")),
            text(function.get("name")),
            text(function.get("arguments")) or "",
        )


def _stream_error_message(backend: str, error: Any) -> str:
    message = error.get("message") if isinstance(error, dict) else str(error)
    return f"Model server '{backend}' failed mid-stream: {message}"[:500]
