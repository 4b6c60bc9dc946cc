"""Messages wire -> canonical commands.

``decode_messages`` validates a ``POST /v1/messages`` body into a ``CreateResponse`` that
is not stored (``store=False``: every request carries the whole conversation), unless it
is a turn of a thread (``thread``: server-held state, :mod:`.threads`);
``decode_count_tokens`` does the same for ``/count_tokens``.

Settings: ``max_tokens`` -> ``max_output_tokens``; ``stop_sequences``, ``temperature``,
``top_p``, ``top_k`` as they are; ``metadata.user_id`` -> ``user``; ``service_tier``
``auto`` / ``standard_only`` -> ``auto`` / ``default``; tools (``input_schema``
as ``parameters``; ``defer_loading`` and ``cache_control`` kept) as function tools,
Anthropic-defined client tools (``bash``, the text editor, ``memory``) as function tools
with the input their type takes (:mod:`.client_tools`), either's ``input_examples`` shown
after its description (an ``allowed_callers`` without ``direct``, a tool only code
execution may call, is a 400), the ``web_search_YYYYMMDD``
server tool as the gateway's ``web_search`` (``allowed_domains`` and ``blocked_domains`` as
its ``filters``, ``max_uses`` kept), ``mcp_servers`` (and their ``mcp_toolset`` tools) as
its ``mcp`` tools (:mod:`.server_tools`; any other tool type is a 400); ``tool_choice``
``auto``/``any``/``tool``/``none`` -> ``auto``/``required``/the named function (or
``web_search``)/``none``, ``disable_parallel_tool_use`` -> ``parallel_tool_calls: false``;
``thinking`` as :mod:`.thinking` says. ``max_tokens: 0`` is a prewarm, as hosted
Anthropic takes it ("populate the prompt cache without generating a response"): the
context is checked and no model is asked (the gateway has no cache of its own to fill);
the message has no content and stops at its limit (:mod:`.encode`). Every thinking
block the model's reasoning becomes is signed: unless the upstream signed it
(Anthropic), its ``signature`` is the text sealed with the gateway's key, which the
gateway opens when the block comes back, so the model gets its reasoning again even when
the client was shown none of it.
``output_config.format`` (``json_schema``) -> the text format.
``context_management`` is accepted, its ``compact_20260112`` edit the gateway's
compaction, its other edits without effect; ``compaction`` (a compaction request) and
``compaction`` blocks sent back are :mod:`.compaction`'s too. Fields of features only
Anthropic's servers have are ignored or refused as :mod:`.hosted_only` says. The backend's
``gateway_tools`` run in hidden rounds (:mod:`stateway.core.hidden`).
"""

from __future__ import annotations

from typing import Any, TypeVar

import orjson
import pydantic

from stateway.core.commands import CountTokens, CreateResponse, GenerationSettings, ThreadTurn
from stateway.core.compaction.reasoning_output import INCLUDE_ENCRYPTED
from stateway.core.errors import InvalidRequest
from stateway.core.items import Item
from stateway.protocols.messages import compaction
from stateway.protocols.messages.client_tools import CLIENT_TOOLS, function_of
from stateway.protocols.messages.content import decode_conversation, decode_system
from stateway.protocols.messages.errors import field_error
from stateway.protocols.messages.hosted_only import check_hosted_only
from stateway.protocols.messages.request import (
    BLOCK_TYPES,
    WEB_SEARCH_TOOL,
    ClientToolParam,
    CountTokensBody,
    McpServerParam,
    McpToolsetParam,
    MessagesBody,
    OutputConfig,
    ToolChoice,
    ToolParam,
    WebSearchToolParam,
)
from stateway.protocols.messages.server_tools import WEB_SEARCH, mcp_tools
from stateway.protocols.messages.thinking import apply_thinking, check_budget
from stateway.protocols.messages.threads import decode_thread
from stateway.protocols.responses.nesting import check_nesting

Body = TypeVar("Body", bound=CountTokensBody)
_SERVICE_TIERS = {"auto": "auto", "standard_only": "default"}
"""Anthropic's service tiers as the canonical (OpenAI's) words for them."""


def decode_messages(
    raw: bytes, *, max_input_items: int | None = None, betas: list[str] | None = None
) -> CreateResponse:
    """``betas``: the features the client's ``anthropic-beta`` headers name."""
    body = _validated(raw, MessagesBody, max_input_items)
    check_hosted_only(body)
    thread = None
    if body.thread is not None:
        declared = body.tools is not None or body.mcp_servers is not None
        thread = decode_thread(body.thread, tools_given=declared)
    command = _command(body, max_input_items, thread, compacting=body.compaction is not None)
    settings = command.settings
    settings.max_output_tokens = body.max_tokens
    settings.temperature, settings.top_p, settings.top_k = body.temperature, body.top_p, body.top_k
    settings.stop_sequences = list(body.stop_sequences or [])
    settings.user = body.metadata.user_id if body.metadata else None
    settings.service_tier = _SERVICE_TIERS.get(body.service_tier or "")
    settings.cache_control = body.cache_control
    last = command.input[-1]
    settings.continue_final_message = last.get("type") == "message" and last["role"] == "assistant"
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
        compaction.autocompact(command, body.context_management)
    return command


def decode_count_tokens(raw: bytes, *, max_input_items: int | None = None) -> CountTokens:
    return CountTokens(_command(_validated(raw, CountTokensBody, max_input_items), max_input_items))


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
    if not body.messages:
        raise field_error(
            "messages",
            "at least one message is required.",
            code="missing_required_parameter",
        )
    if compacting:
        compaction.check_finished(body.messages)
    messages, summary = compaction.split_block(body.messages)
    continued = thread is not None and thread.previous_response_id is not None
    if thread is None:
        items = decode_conversation(body.system, messages)
    else:
        items = decode_conversation(None, messages, continued=continued)
        thread.system = None if body.system is None else decode_system(body.system)
    items = compaction.placed(items, summary)
    if all(item.get("role") == "system" for item in items):  # every turn's content empty
        if compacting:
            raise compaction.nothing_to_summarize()
        raise field_error(
            "messages",
            "all messages must have non-empty content except for the optional final "
            "assistant message.",
        )
    if max_input_items is not None and len(items) > max_input_items:
        raise _too_many(len(items), max_input_items)
    tools = _tools(body.tools or [], body.mcp_servers or [])
    inherited = continued and thread is not None and not thread.tools_given
    settings = GenerationSettings(
        tools=tools,
        tool_choice=_tool_choice(body.tool_choice, tools, inherited=inherited),
        parallel_tool_calls=not (body.tool_choice and body.tool_choice.disable_parallel_tool_use),
        text_format=_text_format(body.output_config),
        include=[INCLUDE_ENCRYPTED],  # every thinking block signed: see the module's doc
    )
    apply_thinking(settings, body.thinking, body.output_config)
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
    if limit is not None and isinstance(messages, list) and len(messages) > limit:
        raise _too_many(len(messages), limit)
    for key, value in data.items():
        check_nesting(value, key)
    system = data.get("system")
    if isinstance(system, list):  # blocks, among which a misplaced compaction block
        compaction.check_system(system)
    try:
        return model.model_validate(data, strict=True)
    except pydantic.ValidationError as exc:
        raise _invalid(exc) from None


def _too_many(count: int, limit: int) -> InvalidRequest:
    return field_error(
        "messages",
        f"{count} messages and blocks are more than the {limit} this gateway takes.",
        "array_above_max_length",
    )


def _tools(tools: list[dict[str, Any]], servers: list[McpServerParam]) -> list[Item]:
    decoded: list[Item] = []
    seen: set[str] = set()
    toolsets: dict[str, McpToolsetParam] = {}
    for index, raw in enumerate(tools):
        tool = _tool(raw, index)
        if isinstance(tool, McpToolsetParam):
            if tool.mcp_server_name in toolsets:
                raise field_error(
                    f"tools.{index}.mcp_server_name",
                    f"the MCP server '{tool.mcp_server_name}' has two mcp_toolsets.",
                )
            toolsets[tool.mcp_server_name] = tool
            continue
        if tool.name in seen:
            raise field_error(
                f"tools.{index}.name",
                f"tool names must be unique; '{tool.name}' is declared twice.",
            )
        seen.add(tool.name)
        if isinstance(tool, WebSearchToolParam):
            decoded.append(_web_search(tool, index))
            continue
        function = _client_tool(tool, index) if isinstance(tool, ClientToolParam) else _custom(tool)
        if tool.allowed_callers is not None and "direct" not in tool.allowed_callers:
            raise field_error(
                f"tools.{index}.allowed_callers",
                "tools called only from code execution are not supported; include 'direct'.",
            )
        if tool.input_examples:
            _add_examples(function, tool.input_examples)
        decoded.append(function)
    return decoded + mcp_tools(servers, toolsets)


def _custom(tool: ToolParam) -> Item:
    function: Item = {"type": "function", "name": tool.name, "parameters": tool.input_schema}
    if tool.description:
        function["description"] = tool.description
    if tool.strict is not None:
        function["strict"] = tool.strict
    if tool.defer_loading:
        function["defer_loading"] = True
    if tool.cache_control is not None:  # for an Anthropic upstream (the others cache
        function["cache_control"] = tool.cache_control  # prefixes on their own)
    return function


def _add_examples(function: Item, examples: list[dict[str, Any]]) -> None:
    """A tool's ``input_examples`` shown to the model after its description, one JSON
    input a line (every upstream gets them, Anthropic's as any other's)."""
    shown = "\n".join(orjson.dumps(example).decode() for example in examples)
    described = function.get("description")
    lead = f"{described}\n\n" if described else ""
    function["description"] = f"{lead}Example inputs:\n{shown}"


Declared = ToolParam | WebSearchToolParam | ClientToolParam | McpToolsetParam


def _tool(raw: dict[str, Any], index: int) -> Declared:
    """A declared tool as the kind its ``type`` names: a custom tool (no type, or
    ``custom``), the web search server tool, an Anthropic-defined client tool, or an MCP
    connector server's toolset; any other type is refused by name."""
    kind = raw.get("type")
    model: type[Declared]
    if kind is None or kind == "custom":
        model = ToolParam
    elif isinstance(kind, str) and WEB_SEARCH_TOOL.fullmatch(kind):
        model = WebSearchToolParam
    elif isinstance(kind, str) and kind in CLIENT_TOOLS:
        model = ClientToolParam
    elif kind == "mcp_toolset":
        model = McpToolsetParam
    else:
        known = ", ".join(CLIENT_TOOLS)
        raise field_error(
            f"tools.{index}.type",
            f"tool type {kind!r} is not supported; declare custom tools (with "
            f"input_schema), the client tools {known}, the web_search server tool "
            "(web_search_20250305) and mcp_toolset tools of mcp_servers.",
        )
    try:
        return model.model_validate(raw, strict=True)
    except pydantic.ValidationError as exc:
        raise _invalid(exc, ("tools", index)) from None


def _client_tool(tool: ClientToolParam, index: int) -> Item:
    """An Anthropic-defined client tool as the function tool the model is offered."""
    wanted = CLIENT_TOOLS[tool.type].name
    if tool.name != wanted:
        raise field_error(
            f"tools.{index}.name",
            f"a '{tool.type}' tool must be named '{wanted}'.",
        )
    function = function_of(tool.type, tool.name)
    if tool.defer_loading:
        function["defer_loading"] = True
    return function


def _web_search(tool: WebSearchToolParam, index: int) -> Item:
    """The web search server tool as the gateway's ``web_search`` tool (run by its search
    provider); ``user_location`` is carried and has no effect on the providers."""
    if tool.allowed_domains and tool.blocked_domains:
        raise field_error(
            f"tools.{index}.blocked_domains",
            "allowed_domains and blocked_domains cannot both be set.",
        )
    filters = {"allowed_domains": tool.allowed_domains, "blocked_domains": tool.blocked_domains}
    declared: Item = {"type": "web_search"}
    if any(filters.values()):
        declared["filters"] = {key: value for key, value in filters.items() if value}
    if tool.max_uses is not None:
        declared["max_uses"] = tool.max_uses
    if tool.user_location is not None:
        declared["user_location"] = tool.user_location
    return declared


def _tool_choice(
    choice: ToolChoice | None, tools: list[Item], *, inherited: bool = False
) -> str | dict[str, Any]:
    """``inherited``: the tools are a thread's, not known yet: the core judges a named
    one against them."""
    if choice is None or choice.type == "auto":
        return "auto"
    if choice.type == "any":
        return "required"
    if choice.type == "none":
        return "none"
    if choice.name is None:
        raise field_error("tool_choice.name", "Field required", "missing_required_parameter")
    if choice.name == WEB_SEARCH and any(tool["type"] == WEB_SEARCH for tool in tools):
        return {"type": WEB_SEARCH}
    if not inherited and choice.name not in {tool.get("name") for tool in tools}:
        raise field_error(
            "tool_choice.name",
            f"the tool {choice.name!r} to use is not among the tools.",
        )
    return {"type": "function", "name": choice.name}


def _text_format(output: OutputConfig | None) -> dict[str, Any]:
    fmt = output.format if output is not None else None
    if fmt is None:
        return {"type": "text"}
    schema = fmt.get("schema")
    if fmt.get("type") != "json_schema" or not isinstance(schema, dict):
        raise field_error(
            "output_config.format",
            'expected {"type": "json_schema", "schema": {...}}.',
        )
    return {"type": "json_schema", "name": "output", "schema": schema, "strict": True}


def _invalid(exc: pydantic.ValidationError, at: tuple[int | str, ...] = ()) -> InvalidRequest:
    """The error that got furthest into the body, as ``path: message`` (Anthropic's way);
    ``at``: where in the body the validated value is."""
    errors = exc.errors(include_url=False)
    error = max(errors, key=lambda e: sum(isinstance(part, int) for part in e["loc"]))
    param = _param((*at, *error["loc"]))
    if error["type"] == "missing":
        return field_error(param, "Field required", "missing_required_parameter")
    if error["type"] in ("model_type", "model_attributes_type") and not error["loc"]:
        return InvalidRequest("The request body must be a JSON object.", code="invalid_type")
    if error["type"] == "union_tag_not_found":
        return field_error(f"{param}.type", "Field required", "missing_required_parameter")
    if error["type"] == "union_tag_invalid":
        ctx = error.get("ctx") or {}
        if error["loc"][-1] == "source":  # the Files API's file sources among them
            expected = ctx.get("expected_tags")
            problem = f"source type '{ctx.get('tag')}' is not supported; expected {expected}."
            return field_error(f"{param}.type", problem)
        return field_error(f"{param}.type", f"unknown content block type '{ctx.get('tag')}'.")
    code = "invalid_type" if error["type"].endswith("_type") else "invalid_value"
    return field_error(param, error["msg"], code)


def _param(loc: tuple[int | str, ...]) -> str:
    """``messages.0.content.1.tool_use_id`` from pydantic's location, whose union
    alternatives (``list[...]``, ``str``) and type tags (after an index or ``source``) are
    not fields."""
    parts: list[str] = []
    previous: int | str | None = None
    for part in loc:
        tags = (
            BLOCK_TYPES if isinstance(previous, int) else _SOURCES if previous == "source" else ()
        )
        previous = part
        if isinstance(part, int):
            parts.append(str(part))
        elif not ("[" in part or part in _UNION_ALTERNATIVES or part in tags):
            parts.append(part)
    return ".".join(parts)


_UNION_ALTERNATIVES = frozenset({"str", "int", "float", "bool"})
_SOURCES = frozenset({"base64", "url", "text", "content"})
