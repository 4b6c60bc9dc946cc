"""The Chat Completions request body for an inference request: canonical items to
``messages``, settings to the body's fields (:func:`to_upstream`), as the Chat backend
(:mod:`stateway.backends.openai_chat`) sends it and a tokenizer counts it.

Reasoning items ride on the next assistant message, by default as both
``reasoning_content`` and ``reasoning`` (:data:`REASONING_FIELDS`; a backend's
``reasoning_fields`` chooses; several before one assistant message share it, a blank line
between them); consecutive function calls join one assistant message's ``tool_calls``
(a call without arguments with ``{}``: Ollama refuses an empty string, which vLLM reads as
``{}`` itself), one of calls alone with ``content`` null, as the spec has it, or as a
backend's ``tool_call_content`` says (:data:`ToolCallContent`); a function call's output is a
``role: "tool"`` message (text only: images the output holds follow the round's tool
messages in one user message, each group labelled with its call id). A text file (a
Messages client's plain-text document, a Responses client's text file) is its text, as
:func:`~stateway.core.text_files.inlined_text` lays it out: a text part of a user message,
a line of any other message or tool output; Chat servers take no files. System messages
lead, joined into one; later ones become user reminders
(:mod:`stateway.backends.chat_system_messages`). An effort the server does not take is sent
at its nearest level (``efforts``: :mod:`stateway.backends.reasoning_efforts`). A prefill
(an assistant message to continue, Messages') is always asked for streamed: llama-server's
whole answer to one holds the message from its start, the prefill first, where its stream
(and vLLM's answers) hold only what follows.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, Final, Literal, NamedTuple

from stateway.backends.chat_system_messages import merge_user_turns, place_system_messages
from stateway.backends.reasoning_efforts import level_sent
from stateway.core import logprobs
from stateway.core.errors import InvalidRequest
from stateway.core.inference import InferenceRequest
from stateway.core.items import Item, item_text, joined_items
from stateway.core.text_files import inlined_text
from stateway.core.tools.history import model_items

TEXT_PARTS: Final = frozenset({"input_text", "output_text", "text", "refusal", "summary_text"})
"""The content parts a Chat message carries as text."""
ReasoningField = Literal["reasoning_content", "reasoning"]
REASONING_FIELDS: Final[tuple[ReasoningField, ...]] = ("reasoning_content", "reasoning")
"""Where an assistant message's reasoning goes back by default: llama.cpp and SGLang read
``reasoning_content``, vLLM only ``reasoning`` (since vllm-project/vllm#33402 dropped
``reasoning_content``), and each ignores the other; a server that refuses one of them
(Cerebras refuses ``reasoning_content``) is configured to get the other, or neither."""
ToolCallContent = Literal["null", ""]
"""The ``content`` an assistant message holding only tool calls is sent with: ``null``,
the spec's (strict proxies and shims before Anthropic or Gemini refuse ``""``: "text
content blocks must be non-empty"), or ``""``, for a server that refuses null (LM Studio:
"'content' field must be a string or an array of objects"). Text beside the calls is sent
as it is."""
_ROLES = {"system": "system", "developer": "system", "user": "user", "assistant": "assistant"}


class ChatBody(NamedTuple):
    """A Chat Completions body, and whether it sends null content (:func:`chat_body`)."""

    body: dict[str, Any]
    null_content: bool
    """An assistant message of tool calls alone goes with ``content`` null: told as its
    messages are built, so that a backend watching for a refusal of null (LM Studio's)
    never walks them again to find one."""


def to_upstream(
    request: InferenceRequest,
    max_tokens_field: str = "max_tokens",
    *,
    alternate_roles: bool = False,
    efforts: Mapping[str, str] | None = None,
    reasoning_fields: Sequence[str] = REASONING_FIELDS,
    tool_call_content: ToolCallContent = "null",
) -> dict[str, Any]:
    """The Chat Completions body of ``request`` (:func:`chat_body`'s, alone)."""
    return chat_body(
        request,
        max_tokens_field,
        alternate_roles=alternate_roles,
        efforts=efforts,
        reasoning_fields=reasoning_fields,
        tool_call_content=tool_call_content,
    ).body


def chat_body(
    request: InferenceRequest,
    max_tokens_field: str = "max_tokens",
    *,
    alternate_roles: bool = False,
    efforts: Mapping[str, str] | None = None,
    reasoning_fields: Sequence[str] = REASONING_FIELDS,
    tool_call_content: ToolCallContent = "null",
) -> ChatBody:
    """The Chat Completions body of ``request``, and whether it sends null content;
    ``efforts``: the level each effort the server does not take is sent at
    (:func:`effort_levels`); ``reasoning_fields``: the assistant message fields earlier
    reasoning goes back in (none: it is left out); ``tool_call_content``: the content of
    an assistant message of tool calls alone."""
    settings = request.settings
    calls_content = None if tool_call_content == "null" else tool_call_content
    messages, null_content = _messages(request, reasoning_fields, calls_content)
    if alternate_roles:
        messages = merge_user_turns(messages)
    body: dict[str, Any] = {"model": request.model, "messages": messages}
    continued = settings.continue_final_message and _prefilled(messages[-1])
    if request.stream or continued:  # llama-server's whole answer repeats the prefill
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
        "reasoning_effort": level_sent(efforts or {}, settings.reasoning_effort),
        "user": settings.user,
        "safety_identifier": settings.safety_identifier,
        "prompt_cache_key": settings.prompt_cache_key,
        "prompt_cache_retention": settings.prompt_cache_retention,
        "prompt_cache_options": settings.prompt_cache_options,
        "presence_penalty": settings.presence_penalty,
        "frequency_penalty": settings.frequency_penalty,
        "top_k": settings.top_k,
        "seed": settings.seed,
        "stop": settings.stop_sequences or None,
        "verbosity": settings.verbosity,
        "service_tier": settings.service_tier,
    }
    for key, value in optional.items():
        if value is not None:
            body[key] = value
    if logprobs.INCLUDE in settings.include:  # logprobs.wanted, inline: once per round
        body["logprobs"] = True
        if settings.top_logprobs:
            body["top_logprobs"] = settings.top_logprobs
    response_format = _response_format(settings.text_format)
    if response_format is not None:
        body["response_format"] = response_format
    for key, value in settings.vendor_fields.items():
        body.setdefault(key, value)
    if continued:
        body["continue_final_message"] = True  # vLLM's; llama.cpp continues unasked
        body["add_generation_prompt"] = False
    return ChatBody(body, null_content)


def _prefilled(message: dict[str, Any]) -> bool:
    """The conversation ends with an assistant's text to continue (not its tool calls)."""
    return message["role"] == "assistant" and "tool_calls" not in message


def _messages(
    request: InferenceRequest, fields: Sequence[str], calls_content: str | None
) -> tuple[list[dict[str, Any]], bool]:
    """The messages, and whether one of tool calls alone goes with ``content`` null (an
    assistant message is otherwise always sent with text: :func:`_message_content`)."""
    messages: list[dict[str, Any]] = []
    null_content = False
    if request.instructions:
        messages.append({"role": "system", "content": request.instructions})
    reasoning: list[str] = []
    images: list[dict[str, Any]] = []
    """Image parts of the tool outputs just sent, for the user message that follows them."""
    for item in model_items(request.items, names=request.names):
        kind = item.get("type")
        if kind != "function_call_output" and images:
            messages.append({"role": "user", "content": images})
            images = []
        if kind == "message":
            message = _message(item)
            if message["role"] == "assistant" and reasoning:
                _add_reasoning(message, reasoning, fields)
                reasoning = []
            messages.append(message)
        elif kind == "function_call":
            last = messages[-1] if messages else None
            if last is None or last["role"] != "assistant":
                last = {"role": "assistant", "content": calls_content}
                messages.append(last)
                null_content = null_content or calls_content is None
            if reasoning:
                _add_reasoning(last, reasoning, fields)
                reasoning = []
            arguments = item["arguments"]
            last.setdefault("tool_calls", []).append(
                {
                    "id": item["call_id"],
                    "type": "function",
                    "function": {
                        "name": item["name"],
                        "arguments": arguments if arguments.strip() else "{}",
                    },
                }
            )
        elif kind == "function_call_output":
            messages.append(_tool_message(item, images))
        elif kind == "reasoning":
            reasoning.append(item_text(item) or _summary_text(item))
    if images:
        messages.append({"role": "user", "content": images})
    return place_system_messages(messages), null_content


def with_call_content(messages: list[Any]) -> list[Any]:
    """``messages`` with ``""`` for the null (or absent) content of each assistant message
    of tool calls alone (what ``tool_call_content = ""`` would have sent); a client's own
    (the fast path's) as well, anything in them that is no message left as it came."""
    return [
        {**m, "content": ""}
        if type(m) is dict and m.get("role") == "assistant" and m.get("content") is None
        else m
        for m in messages
    ]


def _add_reasoning(message: dict[str, Any], reasoning: list[str], fields: Sequence[str]) -> None:
    """``reasoning``'s texts on the assistant ``message``, under each of ``fields``."""
    text = joined_items(reasoning)
    for field in fields:
        message[field] = text


def _tool_message(item: Item, images: list[dict[str, Any]]) -> dict[str, Any]:
    """A ``role: "tool"`` message, which carries text only: the output's text parts a line
    apart (as vLLM joins a message's parts); its images are added to ``images`` (labelled
    with the call's id), for a user message after the tool messages of the round, and the
    tool message says so."""
    output = item.get("output")
    if isinstance(output, str):
        return {"role": "tool", "tool_call_id": item["call_id"], "content": output}
    text = "\n".join(
        said
        for part in output or ()
        if isinstance(part, dict) and (said := _text(part)) is not None
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
        if kind == "input_image":
            parts.append(_image_part(part))
        elif (said := _text(part)) is not None:
            parts.append({"type": "text", "text": said})
        else:
            raise InvalidRequest(
                f"Content part type '{kind}' is not supported by a Chat Completions upstream.",
                param="input",
                code="unsupported_content_type",
            )
    return {"role": role, "content": parts}


def _joined_text(content: Any, item: Item) -> str:
    texts: list[str] = []
    for part in content or []:
        text = _text(part)
        if text is None:
            raise InvalidRequest(
                f"Content part type '{part.get('type')}' is not supported in a "
                f"'{item['role']}' message by a Chat Completions upstream.",
                param="input",
                code="unsupported_content_type",
            )
        texts.append(text)
    return "\n".join(texts)


def _text(part: Item) -> str | None:
    """What a part says as text: a text-like part's text (a refusal part keeps it under
    ``refusal``), a text file's (:func:`~stateway.core.text_files.inlined_text`); None for
    any other part."""
    if part.get("type") in TEXT_PARTS:
        return str(part.get("text") or part.get("refusal") or "")
    return inlined_text(part)


def _summary_text(item: Item) -> str:
    summary = item.get("summary") or []
    return "".join(part.get("text", "") for part in summary if isinstance(part, dict))


def _tool(tool: Item) -> dict[str, Any]:
    """A function tool; ``strict`` only when true (false is Chat's default, and servers
    that do not know the field need not see it)."""
    function: dict[str, Any] = {"name": tool["name"]}
    for key in ("description", "parameters"):
        if tool.get(key) is not None:
            function[key] = tool[key]
    if tool.get("strict") is True:
        function["strict"] = True
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
