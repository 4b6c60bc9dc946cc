"""Messages wire -> canonical commands.

``decode_messages`` validates a ``POST /v1/messages`` body into a ``CreateResponse`` that
is not stored (``store=False``: every request carries the whole conversation), unless it
is a turn of a thread (``thread``: server-held state, :mod:`.threads`);
``decode_count_tokens`` does the same for ``/count_tokens``.

Settings: ``max_tokens`` -> ``max_output_tokens``, per call to the model (Anthropic's rule:
a request whose server tools call the model again gives each call the whole of it);
``stop_sequences``, ``temperature``, ``top_p``, ``top_k`` as they are (an empty or
whitespace-only stop sequence refused in Anthropic's words; sampling taken with thinking,
where Anthropic refuses it: open reasoning models are tuned by it); ``metadata.user_id`` (at
most 512 characters, Anthropic's bound) -> ``user``; ``service_tier`` ``auto`` /
``standard_only`` -> ``auto`` / ``default``; ``tools`` and ``tool_choice`` as
:mod:`.tool_declarations` says (the tools offered: those in effect after the
mid-conversation tool changes of ``messages``, :mod:`.tool_changes`),
``disable_parallel_tool_use`` -> ``parallel_tool_calls: false``; ``thinking`` as
:mod:`.thinking` says. ``max_tokens: 0`` is a prewarm, as hosted
Anthropic takes it ("populate the prompt cache without generating a response"): the context
is checked and no model is asked (the gateway has no cache of its own to fill); the message
has no content and stops at its limit (:mod:`.encode`). A final assistant message is a
prefill the model continues, refused as hosted refuses it when its text ends in
whitespace; an empty final user message is refused naming it (left out, the turn before
it would be answered again). Every thinking block the model's reasoning becomes is
signed: unless the upstream signed it (Anthropic), its ``signature`` is the text sealed
with the gateway's key, which the gateway opens when the block comes back, so the model
gets its reasoning again even when the client was shown none of it.
``output_config.format`` (``json_schema``) -> the text format. ``safeguards`` go along for
an Anthropic upstream that runs them (their results come back: :mod:`.encode`).
``context_management``: its
clearing edits and its ``compact_20260112`` edit as :mod:`.context_edits` says (the
gateway's context editing and compaction); ``compaction`` (a compaction request) and
``compaction`` blocks sent back are :mod:`.compaction`'s. Fields of features only
Anthropic's servers have are ignored or refused as :mod:`.hosted_only` says; Claude Code's
billing header, leading ``system``, is left out (:mod:`.billing_header`). The backend's
``gateway_tools`` run in hidden rounds (:mod:`stateway.core.hidden`)."""

from __future__ import annotations

from typing import Any, TypeVar

import orjson
import pydantic

from stateway.core.commands import CountTokens, CreateResponse, ThreadTurn
from stateway.core.compaction.reasoning_output import INCLUDE_ENCRYPTED
from stateway.core.errors import InvalidRequest
from stateway.core.generation_settings import GenerationSettings
from stateway.core.nesting import MAX_NESTING, nests_too_deep
from stateway.core.tools.changes import tools_in_effect
from stateway.protocols.input_parts import countable, part_limit, parts_in
from stateway.protocols.messages import compaction, tool_search
from stateway.protocols.messages.billing_header import without_billing_header
from stateway.protocols.messages.blocks import TextBlock
from stateway.protocols.messages.content import decode_conversation, decode_system
from stateway.protocols.messages.context_edits import decode_context_management
from stateway.protocols.messages.errors import field_error
from stateway.protocols.messages.hosted_only import check_hosted_only
from stateway.protocols.messages.request import (
    CountTokensBody,
    MessageParam,
    MessagesBody,
    OutputConfig,
)
from stateway.protocols.messages.thinking import (
    apply_thinking,
    check_budget,
    check_thinking_tool_choice,
    effort_asked,
)
from stateway.protocols.messages.threads import decode_thread
from stateway.protocols.messages.tool_changes import decode_tool_changes
from stateway.protocols.messages.tool_declarations import decode_tool_choice, decode_tools
from stateway.protocols.messages.validation import invalid_body

Body = TypeVar("Body", bound=CountTokensBody)
_SERVICE_TIERS = {"auto": "auto", "standard_only": "default"}
"""Anthropic's service tiers as the canonical (OpenAI's) words for them."""
EMPTY_CONTENT = (
    "all messages must have non-empty content except for the optional final assistant message"
)
"""Hosted Anthropic's refusal of a message without content, after the path naming it."""


def decode_messages(
    raw: bytes, *, max_input_items: int | None = None, betas: list[str] | None = None
) -> CreateResponse:
    """``betas``: the features the client's ``anthropic-beta`` headers name."""
    body = _validated(raw, MessagesBody, max_input_items)
    check_hosted_only(body)
    check_thinking_tool_choice(body.thinking, body.tool_choice)
    thread = _thread(body)
    command = _command(body, max_input_items, thread, compacting=body.compaction is not None)
    settings = command.settings
    settings.max_output_tokens = body.max_tokens
    settings.max_output_tokens_per_call = True  # as Anthropic's: each call's, server tools'
    settings.max_output_tokens_fit_window = True  # and lowered to the window's room
    settings.temperature, settings.top_p, settings.top_k = body.temperature, body.top_p, body.top_k
    settings.stop_sequences = _stop_sequences(body.stop_sequences)
    settings.user = body.metadata.user_id if body.metadata else None
    settings.service_tier = _SERVICE_TIERS.get(body.service_tier or "")
    settings.cache_control = body.cache_control
    settings.safeguards = body.safeguards
    if command.input:
        last = command.input[-1]
        prefilled = last.get("type") == "message" and last["role"] == "assistant"
    else:  # a paused thread turn resumed: its answer, last in the context, goes on
        prefilled = True
    settings.continue_final_message = prefilled
    if betas is not None:
        settings.anthropic_beta = betas
    if body.max_tokens == 0:  # a prewarm: the context checked, no model asked
        command.generate = False
    else:
        check_budget(settings, body.max_tokens)
    command.stream = bool(body.stream)
    settings.summary_shown = True  # a compaction block shows its summary
    if body.compaction is not None:
        compaction.request_compaction(command, body)
    elif body.context_management is not None:
        decode_context_management(command, body)
    return command


def decode_count_tokens(raw: bytes, *, max_input_items: int | None = None) -> CountTokens:
    """A count of a thread's turn counts what the turn would send, the thread's items
    included (the core reads them); nothing is stored."""
    body = _validated(raw, CountTokensBody, max_input_items)
    command = _command(body, max_input_items, _thread(body))
    command.store = False
    if body.context_management is not None:
        decode_context_management(command, body, compacts=False)
    return CountTokens(command)


def _thread(body: CountTokensBody) -> ThreadTurn | None:
    if body.thread is None:
        return None
    declared = body.tools is not None or body.mcp_servers is not None
    return decode_thread(body.thread, tools_given=declared)


def _command(
    body: CountTokensBody,
    max_input_items: int | None,
    thread: ThreadTurn | None = None,
    *,
    compacting: bool = False,
) -> CreateResponse:
    """``thread``: a thread's turn, whose system leads the context apart from its items
    (:mod:`.threads`), and which is stored. ``compacting``: a compaction request
    (:mod:`.compaction`)."""
    continued = thread is not None and thread.previous_response_id is not None
    if not body.messages:
        if not continued or compacting:
            raise no_messages()
        assert thread is not None
        thread.resumes = True  # a paused turn goes on (the core checks it paused)
    else:
        _check_prefill(body.messages[-1])
    if compacting:
        compaction.check_finished(body.messages)
    messages, summary = compaction.split_block(body.messages)
    system = without_billing_header(body.system)
    if thread is None:
        items = decode_conversation(system, messages)
    else:
        items = decode_conversation(None, messages, continued=continued)
        thread.system = None if system is None else decode_system(system)
    items = compaction.placed(items, summary)
    if body.messages and all(item.get("role") == "system" for item in items):
        if compacting:  # every turn's content empty
            raise compaction.nothing_to_summarize()
        raise field_error("messages", EMPTY_CONTENT)
    if body.messages:
        _check_last_turn(body.messages)
    if max_input_items is not None and len(items) > max_input_items:
        raise _too_many(len(items), max_input_items)
    tools = decode_tools(body.tools or [], body.mcp_servers or [])
    changes = decode_tool_changes(body.messages)
    inherited = continued and thread is not None and not thread.tools_given
    defined = {str(tool.get("name")) for tool in tools} | {
        change.name for change in changes if change.definition is not None
    }
    if inherited and thread is not None:
        thread.tool_changes = changes  # applied to the thread's tools (core)
    else:
        tools = tools_in_effect(tools, changes)
    tool_search.resolve(items, tools, inherited=inherited, defined=defined)
    settings = GenerationSettings(
        tools=tools,
        tool_choice=decode_tool_choice(body.tool_choice, tools, inherited=inherited),
        parallel_tool_calls=not (body.tool_choice and body.tool_choice.disable_parallel_tool_use),
        text_format=_text_format(body.output_config, body.output_format),
        include=[INCLUDE_ENCRYPTED],  # every thinking block signed: see the module's doc
        client_cache_marks=True,  # Anthropic's way: only what the client marks is cached
    )
    apply_thinking(settings, body.thinking, effort_asked(body.output_config, body.messages))
    return CreateResponse(
        model=body.model,
        input=items,
        store=thread is not None,
        settings=settings,
        hidden_rounds=True,
        thread=thread,
    )


def _validated(raw: bytes, model: type[Body], max_input_items: int | None) -> Body:
    try:
        data = orjson.loads(raw)
    except orjson.JSONDecodeError:
        raise InvalidRequest(
            "The request body is not valid JSON; expected a JSON object.", code="invalid_json"
        ) from None
    if not isinstance(data, dict):
        raise InvalidRequest("The request body must be a JSON object.", code="invalid_type")
    messages = data.get("messages")
    limit = max_input_items
    if limit is not None and isinstance(messages, list):
        if len(messages) > limit:
            raise _too_many(len(messages), limit)
        if countable(len(raw), limit):
            _check_blocks(data, messages, limit)
    for key, value in data.items():
        if isinstance(value, dict | list) and nests_too_deep(value):
            raise field_error(
                key, f"JSON nested deeper than {MAX_NESTING} levels.", "nesting_too_deep"
            )
    system = data.get("system")
    if isinstance(system, list):  # blocks, among which a misplaced compaction block
        compaction.check_system(system)
    try:
        return model.model_validate(data, strict=True)
    except pydantic.ValidationError as exc:
        raise invalid_body(exc) from None


def _check_blocks(data: dict[str, Any], messages: list[Any], limit: int) -> None:
    """Refuse more content blocks than :mod:`~stateway.protocols.input_parts` allows: the
    messages' (a tool result's own among them) and the system prompt's."""
    blocks = parts_in(messages, ("content",), "content") + parts_in([data], ("system",))
    if blocks > (most := part_limit(limit)):
        raise field_error(
            "messages",
            f"{blocks} content blocks are more than the {most} this gateway takes (ten for "
            "each message).",
            "array_above_max_length",
        )


def no_messages() -> InvalidRequest:
    """A request without messages (but a continue of a paused thread turn's)."""
    return field_error(
        "messages", "at least one message is required.", code="missing_required_parameter"
    )


def _check_prefill(last: MessageParam) -> None:
    """Refuse a final assistant message (a prefill, which the model continues) whose text
    ends in whitespace, in hosted Anthropic's words: a token the model would not have
    written, which an Anthropic upstream refuses too. An empty one is no prefill."""
    if last.role != "assistant":
        return
    content = last.content
    if isinstance(content, list):
        final = content[-1] if content else None
        content = final.text if isinstance(final, TextBlock) else ""
    if content != content.rstrip():
        raise field_error("messages", "final assistant content cannot end with trailing whitespace")


def _check_last_turn(messages: list[MessageParam]) -> None:
    """Refuse an empty last user message (``""``, ``[]``, only empty text blocks; system
    messages after it aside), naming it, as Anthropic does: left out, the turn before it
    would be answered in its place (an assistant's message continued as a prefill)."""
    index = len(messages) - 1
    while index > 0 and messages[index].role == "system":
        index -= 1
    content = messages[index].content
    if messages[index].role != "user":
        return
    if isinstance(content, str):
        empty = not content
    else:
        empty = all(isinstance(block, TextBlock) and not block.text for block in content)
    if empty:
        raise field_error(f"messages.{index}", EMPTY_CONTENT)


def _stop_sequences(sequences: list[str] | None) -> list[str]:
    """The stop sequences, each holding more than whitespace (Anthropic's two refusals)."""
    for sequence in sequences or ():
        if not sequence:
            raise field_error("stop_sequences", "each stop sequence must be non-empty")
        if sequence.isspace():
            raise field_error("stop_sequences", "each stop sequence must contain non-whitespace")
    return list(sequences or [])


def _too_many(count: int, limit: int) -> InvalidRequest:
    return field_error(
        "messages",
        f"{count} messages and blocks are more than the {limit} this gateway takes.",
        "array_above_max_length",
    )


def _text_format(output: OutputConfig | None, former: dict[str, Any] | None) -> dict[str, Any]:
    """``output_config.format``, or the deprecated top-level ``output_format`` (not both)."""
    fmt = output.format if output is not None else None
    field = "output_config.format"
    if former is not None:
        if fmt is not None:
            raise field_error(
                "output_format",
                "both output_format and output_config.format were provided; use only "
                "output_config.format (output_format is deprecated).",
            )
        fmt, field = former, "output_format"
    if fmt is None:
        return {"type": "text"}
    schema = fmt.get("schema")
    if fmt.get("type") != "json_schema" or not isinstance(schema, dict):
        raise field_error(
            field,
            'expected {"type": "json_schema", "schema": {...}}.',
        )
    return {"type": "json_schema", "name": "output", "schema": schema, "strict": True}
