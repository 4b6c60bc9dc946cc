"""Responses request bodies -> canonical commands: ``POST /v1/responses`` and its
``/compact`` and ``/input_tokens``.

``decode_create`` validates a ``POST /v1/responses`` body and returns a ``CreateResponse``
with normalized input items: a string input becomes one user message, message content
becomes a list of parts, every item gets an id (client ids are kept as labels). Item types
the gateway does not model are passed through untouched; whether an upstream can carry
them is decided in the core, against the chosen backend. The reads' queries are
:mod:`.reads`'; ``include`` is :mod:`.include`'s, ``text.format`` :mod:`.text_format`'s.
"""

from __future__ import annotations

from typing import Any

import pydantic

from stateway.core.commands import CompactResponse, CountTokens, CreateResponse
from stateway.core.errors import InvalidRequest
from stateway.core.generation_settings import SUMMARIZED, GenerationSettings
from stateway.protocols.moderation import check_moderation
from stateway.protocols.responses.body import (
    check_item_count,
    invalid_request,
    parse_body,
)
from stateway.protocols.responses.include import check_include
from stateway.protocols.responses.items import decode_items
from stateway.protocols.responses.metadata import decode_metadata
from stateway.protocols.responses.request import (
    CompactBody,
    ContextManagement,
    CreateResponseBody,
    ImageOptions,
    InputTokensBody,
    PromptCacheOptions,
)
from stateway.protocols.responses.text_format import decode_text_format
from stateway.protocols.responses.tools.choice import decode_tools_and_choice
from stateway.protocols.service_tier import COMPACT_TIERS, RESPONSES_TIERS, check_service_tier


def decode_create(raw: bytes, *, max_input_items: int | None = None) -> CreateResponse:
    """``max_input_items`` (None: unbounded) is checked before any item is looked at."""
    return decode_create_fields(parse_body(raw, max_input_items))


_validate_create = CreateResponseBody.__pydantic_validator__.validate_python
"""``CreateResponseBody.model_validate`` without its Python wrapper (some 4,000
instructions a create, the hot path's)."""


def decode_create_fields(
    data: Any, *, max_input_items: int | None = None, generate: bool = True
) -> CreateResponse:
    """:func:`decode_create` of a body already parsed (a WebSocket ``response.create``
    frame's: its envelope fields are ignored here but ``generate``, false for a prewarm, as
    the body's ``prompt_cache_options.prewarm`` makes it whatever ``generate`` says)."""
    if max_input_items is not None:
        check_item_count(data, max_input_items)
    try:
        body: CreateResponseBody = _validate_create(data, strict=True)
    except pydantic.ValidationError as exc:
        raise invalid_request(exc) from None
    # Each field read once: a pydantic model's fields are read through its __getattr__ hook
    # (some 450 instructions a read on Python 3.11, a plain attribute's 30).
    given, previous = body.input, body.previous_response_id
    # With store: false a turn reads its conversation and adds nothing to it, holding no
    # lock (as hosted); a stored turn's items are written with its response.
    conversation_id = _conversation_id(body.conversation, previous)
    _check_values(body)
    cache_options, prewarm = None, not generate
    if body.prompt_cache_options is not None:
        cache_options, cache_prewarm = _cache_options(body.prompt_cache_options)
        prewarm = prewarm or cache_prewarm
    continued = conversation_id is not None or previous is not None
    tools, choice = decode_tools_and_choice(body.tools, body.tool_choice, given, continued)
    parallel_tool_calls, text, reasoning = body.parallel_tool_calls, body.text, body.reasoning
    summary = (reasoning.summary or reasoning.generate_summary) if reasoning else None
    settings = GenerationSettings(
        temperature=body.temperature,
        top_p=body.top_p,
        max_output_tokens=body.max_output_tokens,
        max_tool_calls=body.max_tool_calls,
        tools=tools,
        tool_choice=choice,
        parallel_tool_calls=True if parallel_tool_calls is None else parallel_tool_calls,
        text_format=decode_text_format(text.format if text else None),
        verbosity=text.verbosity if text else None,
        reasoning_effort=reasoning.effort if reasoning else None,
        reasoning_summary=summary,
        reasoning_display=SUMMARIZED if summary else None,  # Claude from Opus 4.7 shows
        # its thinking's text only when asked so
        metadata={} if body.metadata is None else decode_metadata(body.metadata),
        user=body.user,
        safety_identifier=body.safety_identifier,
        prompt_cache_key=body.prompt_cache_key,
        prompt_cache_retention=body.prompt_cache_retention,
        prompt_cache_options=cache_options,
        include=body.include or [],
        truncation=body.truncation or "disabled",
        service_tier=body.service_tier,
        image=_image_options(body.image),
        top_logprobs=body.top_logprobs,
        presence_penalty=body.presence_penalty,
        frequency_penalty=body.frequency_penalty,
        context_management=_context_management(body.context_management or []),
        window_filled_refused=True,  # no incomplete reason says it: hosted refuses it
    )
    instructions = body.instructions
    # A prewarm answers nothing: it needs nothing to respond to (Codex's, with its default
    # model, has no input, instructions or tools at all).
    context = given or instructions or previous or conversation_id
    if not (context or prewarm):
        raise _nothing("respond to")
    store = body.store
    return CreateResponse(
        model=body.model,
        input=decode_items([] if given is None else given),
        instructions=instructions,
        previous_response_id=previous,
        conversation_id=conversation_id,
        store=True if store is None else store,
        stream=bool(body.stream),
        settings=settings,
        background=bool(body.background),
        generate=not prewarm,
    )


def decode_compact(raw: bytes, *, max_input_items: int | None = None) -> CompactResponse:
    """``POST /v1/responses/compact``: ``model`` is required; ``input`` and/or
    ``previous_response_id`` name what to compact (a ``conversation`` does not: refused,
    as hosted refuses a field it does not know, where others are ignored)."""
    data = parse_body(raw, max_input_items)
    try:
        body = CompactBody.model_validate(data, strict=True)
    except pydantic.ValidationError as exc:
        raise invalid_request(exc) from None
    if body.conversation is not None:
        raise InvalidRequest(
            "Unknown parameter: 'conversation'. A conversation is not compacted by name: "
            "send its items as 'input'.",
            param="conversation",
            code="unknown_parameter",
        )
    if not body.input and body.previous_response_id is None:
        raise InvalidRequest(
            "Missing required parameter: 'input' (or 'previous_response_id'); there is "
            "nothing to compact.",
            param="input",
            code="missing_required_parameter",
        )
    return CompactResponse(
        model=body.model,
        input=decode_items(body.input or []),
        instructions=body.instructions,
        previous_response_id=body.previous_response_id,
        settings=_compact_settings(body),
    )


def _compact_settings(body: CompactBody) -> GenerationSettings:
    """What the summary call is sent of a ``/compact`` body: its caching, service tier and
    safety identifier, as a create's rounds are. Its cache options cannot prewarm (a
    compaction answers with a summary)."""
    if body.service_tier is not None:
        check_service_tier(body.service_tier, COMPACT_TIERS)
    if body.image is not None:
        _check_image(body.image)
    cache_options = None
    if body.prompt_cache_options is not None:
        cache_options, prewarm = _cache_options(body.prompt_cache_options)
        if prewarm:
            raise _unsupported(
                "Unsupported parameter: 'prompt_cache_options.prewarm': a compaction "
                "always asks the model for its summary.",
                "prompt_cache_options.prewarm",
            )
    return GenerationSettings(
        safety_identifier=body.safety_identifier,
        prompt_cache_key=body.prompt_cache_key,
        prompt_cache_retention=body.prompt_cache_retention,
        prompt_cache_options=cache_options,
        service_tier=body.service_tier,
        image=_image_options(body.image),
    )


def decode_input_tokens(raw: bytes, *, max_input_items: int | None = None) -> CountTokens:
    """``POST /v1/responses/input_tokens``: the request fields that shape the input, as a
    request to count (``model`` names the backend whose tokenizer counts)."""
    data = parse_body(raw, max_input_items)
    try:
        body = InputTokensBody.model_validate(data, strict=True)
    except pydantic.ValidationError as exc:
        raise invalid_request(exc) from None
    conversation_id = _conversation_id(body.conversation, body.previous_response_id)
    continued = conversation_id is not None or body.previous_response_id is not None
    tools, choice = decode_tools_and_choice(body.tools, body.tool_choice, body.input, continued)
    settings = GenerationSettings(
        tools=tools,
        tool_choice=choice,
        parallel_tool_calls=True if body.parallel_tool_calls is None else body.parallel_tool_calls,
        text_format=decode_text_format(body.text.format if body.text else None),
        reasoning_effort=body.reasoning.effort if body.reasoning else None,
        truncation=body.truncation or "disabled",
    )
    if not (body.input or body.instructions or body.previous_response_id or conversation_id):
        raise _nothing("count")
    request = CreateResponse(
        model=body.model,
        input=decode_items(body.input or []),
        instructions=body.instructions,
        previous_response_id=body.previous_response_id,
        conversation_id=conversation_id,
        store=False,
        settings=settings,
    )
    return CountTokens(request)


def _check_values(body: CreateResponseBody) -> None:
    """The fields refused by their value, each checked only when sent: a hosted prompt,
    an ``include`` the API has not, a moderation policy that blocks, a service tier the
    API has not."""
    if body.prompt is not None:
        raise _unsupported(
            "Unsupported parameter: 'prompt': reusable prompts are kept by the hosted "
            "platform, which this gateway does not reach; send the prompt's "
            "'instructions' and 'input' instead.",
            "prompt",
        )
    if body.include:
        check_include(body.include)
    if body.moderation is not None:
        check_moderation(body.moderation)
    if body.service_tier is not None:
        check_service_tier(body.service_tier, RESPONSES_TIERS)
    if body.image is not None:
        _check_image(body.image)
    if body.background_options is not None:
        _check_window(body, body.background_options.completion_window)
    if body.access_programs is not None and body.access_programs.cyber not in (None, "standard"):
        raise InvalidRequest(
            f"Unsupported value: 'access_programs.cyber' {body.access_programs.cyber!r}: "
            "this gateway serves the 'standard' program only.",
            param="access_programs.cyber",
            code="unsupported_value",
        )


def _check_image(image: ImageOptions) -> None:
    """The gateway optimizes no image context: ``enabled``, which requires it, is refused
    (``auto`` and ``disabled`` both come to ``disabled``)."""
    if image.context_compression == "enabled":
        raise InvalidRequest(
            "Unsupported value: 'image.context_compression' 'enabled': this gateway does not "
            "compress image context; use 'auto' or 'disabled'.",
            param="image.context_compression",
            code="unsupported_value",
        )


def _image_options(image: ImageOptions | None) -> dict[str, str] | None:
    """The image options in effect, to echo (and send a Responses upstream): compression
    ``disabled`` whatever was asked (the gateway compresses none; ``enabled`` was refused
    by :func:`_check_image`), only when ``image`` was sent."""
    return None if image is None else {"context_compression": "disabled"}


def _check_window(body: CreateResponseBody, window: str | None) -> None:
    """The discounted windows (``2h``, ``8h``) need a background response, not streamed,
    at standard processing, as hosted; the gateway runs it at once all the same."""
    if window in (None, "soonest"):
        return
    if not body.background or body.stream or body.service_tier not in (None, "auto", "default"):
        raise InvalidRequest(
            f"The '{window}' completion window requires 'background': true, standard "
            "processing ('service_tier' 'auto' or 'default') and 'stream' false or omitted.",
            param="background_options.completion_window",
            code="invalid_value",
        )


def _cache_options(options: PromptCacheOptions) -> tuple[dict[str, Any] | None, bool]:
    """The ``prompt_cache_options`` an upstream gets (``mode``, ``ttl``: a Chat or
    Responses upstream's field), and whether they ask for a prewarm. ``prewarm`` is the
    gateway's own (a response with no output, no model asked: as hosted answers one);
    ``comparison_response_id`` names a response of the gateway's, which no upstream knows,
    and is not sent (the response has no ``prompt_cache_diagnostics``)."""
    sent = options.model_dump(exclude_none=True, exclude={"prewarm", "comparison_response_id"})
    return sent or None, options.prewarm is True


def _context_management(entries: list[ContextManagement]) -> list[dict[str, Any]]:
    """Only ``compaction`` is known, once."""
    out: list[dict[str, Any]] = []
    for index, entry in enumerate(entries):
        if entry.type != "compaction":
            raise InvalidRequest(
                f"Invalid value for 'context_management[{index}].type': {entry.type!r}. "
                "Supported value: 'compaction'.",
                param=f"context_management[{index}].type",
                code="invalid_value",
            )
        if out:
            raise InvalidRequest(
                "Only one 'compaction' entry may be given in 'context_management'.",
                param=f"context_management[{index}]",
                code="invalid_value",
            )
        out.append({"type": "compaction", "compact_threshold": entry.compact_threshold})
    return out


def _conversation_id(value: str | dict[str, Any] | None, previous: str | None) -> str | None:
    """The id a ``conversation`` field names (an id, or an object with ``id``); it excludes
    ``previous_response_id``, and one not of a conversation's shape is refused as hosted
    refuses it."""
    if value is None:
        return None
    conversation_id = value.get("id") if isinstance(value, dict) else value
    if not isinstance(conversation_id, str) or not conversation_id:
        raise InvalidRequest(
            "Invalid 'conversation': expected a conversation id, or an object with its 'id'.",
            param="conversation",
            code="invalid_value",
        )
    if previous is not None:
        raise InvalidRequest(
            "Mutually exclusive parameters: Ensure you are only providing one of: "
            "'previous_response_id' or 'conversation'.",
            code="mutually_exclusive_parameters",
        )
    if not conversation_id.startswith("conv"):  # as hosted: before it is looked up
        raise InvalidRequest(
            f"Invalid 'conversation': '{conversation_id}'. Expected an ID that begins with 'conv'.",
            param="conversation",
            code="invalid_value",
        )
    return conversation_id


def _nothing(what: str) -> InvalidRequest:
    return InvalidRequest(
        "Missing required parameter: 'input' (or 'instructions', 'previous_response_id' "
        f"or 'conversation'); there is nothing to {what}.",
        param="input",
        code="missing_required_parameter",
    )


def _unsupported(message: str, param: str) -> InvalidRequest:
    return InvalidRequest(message, param=param, code="unsupported_parameter")
