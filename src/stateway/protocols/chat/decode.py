"""Chat Completions wire -> canonical.

:func:`peek_chat` reads only what the stateless fast path needs: the body is a JSON
object, names a ``model`` and holds no more ``messages`` than the gateway takes.
:func:`decode_chat` validates the whole request and decodes it into a ``CreateResponse``
that is never stored (``store=False``: every request carries the whole conversation) and
runs gateway tools in hidden rounds (``hidden_rounds``).

Settings: ``max_completion_tokens`` (else ``max_tokens``) -> ``max_output_tokens``;
``stop`` -> ``stop_sequences``; ``temperature``, ``top_p``,
``top_k``, ``seed``, ``presence_penalty``, ``frequency_penalty``, ``reasoning_effort``,
``verbosity``, ``user``, ``safety_identifier``, ``prompt_cache_key``,
``prompt_cache_retention``, ``prompt_cache_options``, ``service_tier`` (one of the API's,
as hosted checks it), ``metadata`` (as hosted limits it) as they are; ``logprobs`` as the
``message.output_text.logprobs`` include, with its ``top_logprobs``; ``response_format``
-> the text format (a ``json_schema`` name checked as hosted checks it); ``tools`` and
``tool_choice`` as their Responses forms (:mod:`.tools`), ``parallel_tool_calls`` as it
is; ``web_search_options`` as the gateway's ``web_search`` tool (such a request is always
translated, never forwarded). What hosted refuses but vLLM and llama.cpp take, with a
meaning plain (more than 4 ``stop`` strings, ``tools: []`` or more than 128 tools, a
function or message name of other characters, ``parallel_tool_calls`` without tools),
is taken as they take it: the same request goes to them untouched on the fast path, and a
route that translates it (gateway tools, another upstream API) must not refuse it.
What the gateway cannot carry once translated is a 400 naming it: ``n`` other than 1,
audio, the legacy ``functions``/``function_call``, ``logit_bias``, ``prediction``, a
``moderation`` policy that blocks (scores alone are ignored); ``stream_options`` without
``stream: true`` is a 400, as hosted (the fast path leaves that to its upstream).
``store`` is taken and ignored: no chat completion is stored (clients send ``store:
true`` because hosted refuses ``metadata`` without it).
Other fields (vendor fields such as vLLM's ``chat_template_kwargs``) are carried as they
came to a Chat upstream, as the fast path carries them, and dropped for other upstream
APIs.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Final

import orjson
import pydantic

from stateway.core import logprobs
from stateway.core.commands import CreateResponse
from stateway.core.errors import InvalidRequest
from stateway.core.generation_settings import GenerationSettings
from stateway.core.immutable import immutable
from stateway.core.items import Item
from stateway.protocols.chat.messages import decode_messages
from stateway.protocols.chat.request import (
    PART_TYPES,
    ROLES,
    TOOL_TYPES,
    ChatBody,
    ResponseFormat,
    WebSearchOptions,
)
from stateway.protocols.chat.tools import (
    decode_tool_choice,
    decode_tools,
)
from stateway.protocols.input_parts import countable, part_limit, parts_in
from stateway.protocols.moderation import check_moderation
from stateway.protocols.responses.metadata import decode_metadata
from stateway.protocols.responses.nesting import check_nesting
from stateway.protocols.schema_name import check_schema_name
from stateway.protocols.service_tier import CHAT_TIERS, check_service_tier
from stateway.protocols.validation import (
    empty_string,
    invalid_request,
    wrong_type,
)

REFUSED: Final = ("audio", "functions", "function_call", "logit_bias", "prediction")
_MODELED: Final = frozenset(ChatBody.model_fields) | frozenset(REFUSED)
"""The fields the gateway reads; the others are a server's own (:func:`vendor_fields`)."""
WEB_SEARCH_OPTIONS: Final = "web_search_options"
"""The field asking for a web search: the gateway's, so such a request is never forwarded."""


@immutable
class ChatCall:
    """A request as the fast path sees it."""

    model: str
    fields: dict[str, Any]
    """The body, parsed."""
    stream: bool
    needs_gateway: bool = False
    """It asks for the gateway's web search (``web_search_options``): never forwarded."""


@dataclass(slots=True, frozen=True)
class ChatRequest:
    """A translated request: its command, and how its answer is encoded."""

    command: CreateResponse
    include_usage: bool
    """``stream_options.include_usage``: a streamed answer ends with a usage chunk."""
    fields: dict[str, Any]
    """The body as sent: the fields its errors may name (:mod:`.errors`)."""


def peek_chat(raw: bytes, *, max_input_items: int | None = None) -> ChatCall:
    """The request as the fast path sees it: its model, whether it streams and whether it
    needs the gateway, and ``messages`` no longer than ``max_input_items`` (a forwarded
    body is held to the gateway's limits as a translated one is)."""
    try:
        fields = orjson.loads(raw)
    except orjson.JSONDecodeError:
        raise InvalidRequest(
            "The request body is not valid JSON; expected a JSON object.", code="invalid_json"
        ) from None
    if not isinstance(fields, dict):
        raise InvalidRequest("The request body must be a JSON object.", code="invalid_type")
    model = fields.get("model")
    if model is None:
        raise InvalidRequest(
            "Missing required parameter: 'model'.",
            param="model",
            code="missing_required_parameter",
        )
    if not isinstance(model, str):
        raise wrong_type("model", "a string", model)
    if not model:
        raise empty_string("model")
    messages = fields.get("messages")
    if max_input_items is not None and isinstance(messages, list):
        _check_count(len(messages), max_input_items)
        if countable(len(raw), max_input_items):
            _check_parts(parts_in(messages, ("content",)), part_limit(max_input_items))
    searching = fields.get(WEB_SEARCH_OPTIONS) is not None
    return ChatCall(model, fields, fields.get("stream") is True, searching)


def decode_chat(fields: dict[str, Any], *, max_input_items: int | None = None) -> ChatRequest:
    _refuse_uncarried(fields)
    for key, value in fields.items():
        check_nesting(value, key)
    try:
        body = ChatBody.model_validate(fields, strict=True)
    except pydantic.ValidationError as exc:
        raise _invalid(exc) from None
    _check_values(body)
    items = decode_messages(body.messages)
    if max_input_items is not None:
        _check_count(len(items), max_input_items)
    tools = decode_tools(body.tools or [])
    if body.web_search_options is not None:
        tools.append(_web_search(body.web_search_options))
    tool_choice = decode_tool_choice(body.tool_choice, tools, sent=body.tools is not None)
    settings = GenerationSettings(
        temperature=body.temperature,
        top_p=body.top_p,
        top_k=body.top_k,
        seed=body.seed,
        max_output_tokens=body.max_completion_tokens or body.max_tokens,
        tools=tools,
        tool_choice=tool_choice,
        parallel_tool_calls=body.parallel_tool_calls is not False,
        text_format=_text_format(body.response_format),
        verbosity=body.verbosity,
        reasoning_effort=body.reasoning_effort,
        metadata=decode_metadata(body.metadata) if body.metadata else {},
        user=body.user,
        safety_identifier=body.safety_identifier,
        prompt_cache_key=body.prompt_cache_key,
        prompt_cache_retention=body.prompt_cache_retention,
        prompt_cache_options=body.prompt_cache_options,
        service_tier=body.service_tier,
        presence_penalty=body.presence_penalty,
        frequency_penalty=body.frequency_penalty,
        stop_sequences=[body.stop] if isinstance(body.stop, str) else list(body.stop or []),
        include=[logprobs.INCLUDE] if body.logprobs else [],
        top_logprobs=body.top_logprobs,
        vendor_fields=vendor_fields(fields),
    )
    command = CreateResponse(
        model=body.model,
        input=items,
        store=False,
        stream=bool(body.stream),
        settings=settings,
        hidden_rounds=True,
    )
    options = body.stream_options
    return ChatRequest(command, bool(options and options.include_usage), fields)


def vendor_fields(fields: dict[str, Any]) -> dict[str, Any]:
    """The fields of a request the gateway does not model, carried to Chat upstreams."""
    return {key: value for key, value in fields.items() if key not in _MODELED}


def _web_search(options: WebSearchOptions) -> Item:
    """``web_search_options`` as the gateway's ``web_search`` tool, run in a hidden round:
    the answer shows its citations as the message's ``annotations``."""
    tool: Item = {"type": "web_search"}
    if options.search_context_size is not None:
        tool["search_context_size"] = options.search_context_size
    if options.user_location is not None:
        tool["user_location"] = options.user_location
    return tool


def _refuse_uncarried(fields: dict[str, Any]) -> None:
    for name in REFUSED:
        if fields.get(name) not in (None, {}, []):  # empty: asks for nothing
            raise InvalidRequest(
                f"Unsupported parameter: '{name}' is not supported by this gateway when the "
                "request is translated for its upstream.",
                param=name,
                code="unsupported_parameter",
            )


def _check_values(body: ChatBody) -> None:
    """The fields refused by their value, each checked only when sent."""
    if body.n is not None and body.n != 1:
        raise InvalidRequest(
            f"Invalid value for 'n': {body.n}. This gateway generates one choice (n = 1).",
            param="n",
            code="unsupported_value",
        )
    if body.stream_options is not None and not body.stream:  # hosted's words, code null
        raise InvalidRequest(
            "The 'stream_options' parameter is only allowed when 'stream' is enabled.",
            param="stream_options",
        )
    if body.top_logprobs is not None and not body.logprobs:
        raise InvalidRequest(
            "Invalid value for 'top_logprobs': 'logprobs' must be true when 'top_logprobs' is set.",
            param="top_logprobs",
            code="invalid_value",
        )
    if body.modalities is not None and any(m != "text" for m in body.modalities):
        raise InvalidRequest(
            "Invalid value for 'modalities': only 'text' output is supported.",
            param="modalities",
            code="unsupported_value",
        )
    if body.moderation is not None:
        check_moderation(body.moderation)
    if body.service_tier is not None:
        check_service_tier(body.service_tier, CHAT_TIERS)


def _check_count(count: int, limit: int) -> None:
    if count > limit:
        raise InvalidRequest(
            f"'messages' holds {count} messages and items, more than the {limit} this "
            "gateway takes.",
            param="messages",
            code="array_above_max_length",
        )


def _check_parts(count: int, limit: int) -> None:
    if count > limit:
        raise InvalidRequest(
            f"'messages' holds {count} content parts, more than the {limit} this gateway "
            "takes (ten for each message).",
            param="messages",
            code="array_above_max_length",
        )


def _text_format(response_format: ResponseFormat | None) -> dict[str, Any]:
    if response_format is None or response_format.type == "text":
        return {"type": "text"}
    if response_format.type == "json_object":
        return {"type": "json_object"}
    schema = response_format.json_schema
    if schema is None:
        raise InvalidRequest(
            "Missing required parameter: 'response_format.json_schema'.",
            param="response_format.json_schema",
            code="missing_required_parameter",
        )
    check_schema_name(schema.name, "response_format.json_schema.name")
    out: dict[str, Any] = {"type": "json_schema", "name": schema.name}
    if schema.schema_ is not None:
        out["schema"] = schema.schema_
    if schema.description is not None:
        out["description"] = schema.description
    if schema.strict is not None:
        out["strict"] = schema.strict
    return out


def _invalid(exc: pydantic.ValidationError) -> InvalidRequest:
    """A body's validation error in the OpenAI shape, its field named as Chat does; a
    message of the legacy ``functions`` API (``role: "function"``, which hosted still
    takes) said to be one, with what to send instead."""
    for error in exc.errors(include_url=False):
        tag = (error.get("ctx") or {}).get("tag")
        if (
            error["type"] == "union_tag_invalid"
            and _in_messages(error["loc"])
            and tag == "function"
        ):
            param = f"messages[{error['loc'][1]}].role"
            return InvalidRequest(
                f"Unsupported value: '{param}' is 'function', a message of the legacy "
                "functions API, which this gateway does not carry when the request is "
                "translated for its upstream; send tool calls and 'tool' messages instead.",
                param=param,
                code="unsupported_value",
            )
    return invalid_request(exc, _param, _tag, _UNIONS)


_UNIONS: Final = {
    "messages[].content": "one of a string or array of objects",
    "stop": "one of a string or array of strings",
}
"""What a union field is said to expect, by hosted, when a value is of none of its types."""


def _tag(loc: tuple[int | str, ...]) -> str:
    """The discriminator a message (``role``) or a content part (``type``) misses."""
    return "role" if _in_messages(loc) else "type"


def _in_messages(loc: tuple[int | str, ...]) -> bool:
    return len(loc) == 2 and loc[0] == "messages"


_TAGS = ROLES | PART_TYPES | TOOL_TYPES
_ALTERNATIVES = frozenset({"str", "int", "float", "bool", "none"})


def _param(loc: tuple[int | str, ...]) -> str:
    """``messages[0].content[1].image_url.url`` from pydantic's location, whose union
    alternatives (``str``, ``list[...]``, ``NamedToolChoice``) and discriminator tags (a
    role, part type or tool type after an index) are not fields."""
    text = ""
    previous: int | str | None = None
    for part in loc:
        if isinstance(part, int):
            text += f"[{part}]"
        elif not (
            "[" in part
            or part in _ALTERNATIVES
            or part[:1].isupper()
            or (isinstance(previous, int) and part in _TAGS)
        ):
            text += f".{part}" if text else part
        previous = part
    return text
