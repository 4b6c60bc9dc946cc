"""A Messages request's ``tools`` and ``tool_choice`` as the canonical tool declarations.

Custom tools (no ``type``, or ``custom``: ``input_schema`` as ``parameters``;
``defer_loading`` and ``cache_control`` kept) become function tools, refused as Anthropic
refuses them when their ``name`` is not ``^[a-zA-Z0-9_-]{1,128}$`` or their
``input_schema`` is not of ``type: "object"`` (``tools.N.input_schema.type: Field
required``); Anthropic-defined
client tools (``bash``, the text editor, ``memory``) function tools with the input their
type takes (:mod:`.client_tools`), ``defer_loading`` and ``cache_control`` kept too;
either's ``input_examples`` is shown after its
description, and an ``allowed_callers`` without ``direct`` (a tool only code execution
may call) is a 400. The ``web_search_YYYYMMDD`` server tool becomes the gateway's
``web_search`` (``allowed_domains`` and ``blocked_domains`` as its ``filters``,
``max_uses`` kept; ``allowed_callers`` without ``direct`` a 400 too), ``mcp_servers``
and their ``mcp_toolset`` tools its ``mcp`` tools
(:mod:`.server_tools`). The tool search server tool (``tool_search_tool_regex_YYYYMMDD``,
``tool_search_tool_bm25_YYYYMMDD``, or undated; named for its variant) becomes the
gateway's ``tool_search`` (:mod:`.tool_search`): the tools declared with ``defer_loading``
are held back until a search loads them (its name counts among the unique ones); any
other type is a 400 naming it. A tool a ``tool_addition``
defines by value is checked and decoded the same way (:func:`decode_definition`), its
errors naming it where it is (``messages.N.content.M.tool.definition...``). ``tool_choice``
``auto``/``any``/``tool``/``none`` -> ``auto``/``required``/the named function (or
``web_search``)/``none``; ``any`` with no tools, or ``tool`` naming none declared, is a
400 in hosted Anthropic's words.
"""

from __future__ import annotations

from typing import Any

import orjson
import pydantic

from stateway.core.errors import InvalidRequest
from stateway.core.items import Item
from stateway.core.tools.web_search import domain_name
from stateway.protocols.messages import tool_search
from stateway.protocols.messages.client_tools import CLIENT_TOOLS, function_of
from stateway.protocols.messages.errors import field_error
from stateway.protocols.messages.server_tools import WEB_SEARCH, mcp_tools
from stateway.protocols.messages.tool_params import (
    TOOL_SEARCH_TOOL,
    WEB_SEARCH_TOOL,
    ClientToolParam,
    McpServerParam,
    McpToolsetParam,
    ToolChoice,
    ToolParam,
    ToolSearchToolParam,
    WebSearchToolParam,
)
from stateway.protocols.messages.validation import invalid_body


def decode_tools(tools: list[dict[str, Any]], servers: list[McpServerParam]) -> list[Item]:
    decoded: list[Item] = []
    seen: set[str] = set()
    toolsets: dict[str, McpToolsetParam] = {}
    for index, raw in enumerate(tools):
        tool = _tool(raw, ("tools", index))
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
        if isinstance(tool, ToolSearchToolParam):  # the gateway's own tool search
            _check_search_name(tool, f"tools.{index}")
            decoded.append(tool_search.declared(tool))
            continue
        decoded.append(_declared(tool, f"tools.{index}"))
    return decoded + mcp_tools(servers, toolsets)


def decode_definition(raw: dict[str, Any], at: tuple[int | str, ...]) -> Item:
    """A tool defined by value in a message (``at``: where its ``definition`` is), checked
    and decoded as it would be in ``tools``; an ``mcp_toolset`` is refused (the MCP
    connector's servers are declared in ``tools``), and so is a tool search tool (taken
    in ``tools`` only, where it changes nothing)."""
    where = ".".join(map(str, at))
    tool = _tool(raw, at)
    if isinstance(tool, McpToolsetParam | ToolSearchToolParam):
        raise field_error(
            f"{where}.type",
            f"'{tool.type}' cannot be defined in a message; declare it in tools.",
        )
    return _declared(tool, where)


def _check_search_name(tool: ToolSearchToolParam, where: str) -> None:
    """A tool search tool is named for its variant, as Anthropic requires (in pydantic's
    words, as Anthropic's)."""
    found = TOOL_SEARCH_TOOL.fullmatch(tool.type)
    wanted = found[1] if found is not None else tool.type
    if tool.name != wanted:
        raise field_error(f"{where}.name", f"Input should be '{wanted}'")


def _declared(tool: ToolParam | WebSearchToolParam | ClientToolParam, where: str) -> Item:
    """A declared tool (``where``: its place in the body) as the canonical tool offered."""
    if isinstance(tool, WebSearchToolParam):
        return _web_search(tool, where)
    if isinstance(tool, ClientToolParam):
        function = _client_tool(tool, where)
    else:
        function = _custom(tool, where)
    _check_direct(tool, where)
    if tool.input_examples:
        _add_examples(function, tool.input_examples)
    return function


def _check_direct(tool: ToolParam | WebSearchToolParam | ClientToolParam, where: str) -> None:
    """Refuse a tool only code execution may call (``allowed_callers`` without
    ``direct``): there is no code execution to call it."""
    if tool.allowed_callers is not None and "direct" not in tool.allowed_callers:
        raise field_error(
            f"{where}.allowed_callers",
            "tools called only from code execution are not supported; include 'direct'.",
        )


def _custom(tool: ToolParam, where: str) -> Item:
    """A custom tool as a function tool; its ``input_schema`` must be an object's, as
    Anthropic requires it (in Anthropic's words)."""
    param = f"{where}.input_schema.type"
    if "type" not in tool.input_schema:
        raise field_error(param, "Field required", "missing_required_parameter")
    if tool.input_schema["type"] != "object":
        raise field_error(param, "Input should be 'object'")
    function: Item = {"type": "function", "name": tool.name, "parameters": tool.input_schema}
    if tool.description:
        function["description"] = tool.description
    function["strict"] = bool(tool.strict)  # Anthropic's tools are not strict unless asked
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


Declared = ToolParam | WebSearchToolParam | ClientToolParam | McpToolsetParam | ToolSearchToolParam


def _tool(raw: dict[str, Any], at: tuple[int | str, ...]) -> Declared:
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
    elif isinstance(kind, str) and TOOL_SEARCH_TOOL.fullmatch(kind):
        model = ToolSearchToolParam
    else:
        known = ", ".join(CLIENT_TOOLS)
        raise field_error(
            ".".join(map(str, (*at, "type"))),
            f"tool type {kind!r} is not supported; declare custom tools (with "
            f"input_schema), the client tools {known}, the web_search server tool "
            "(web_search_20250305), the tool_search server tools "
            "(tool_search_tool_regex_20251119, tool_search_tool_bm25_20251119) and "
            "mcp_toolset tools of mcp_servers.",
        )
    try:
        return model.model_validate(raw, strict=True)
    except pydantic.ValidationError as exc:
        raise invalid_body(exc, at) from None


def _client_tool(tool: ClientToolParam, where: str) -> Item:
    """An Anthropic-defined client tool as the function tool the model is offered."""
    wanted = CLIENT_TOOLS[tool.type].name
    if tool.name != wanted:
        raise field_error(
            f"{where}.name",
            f"a '{tool.type}' tool must be named '{wanted}'.",
        )
    function = function_of(tool.type, tool.name)
    if tool.defer_loading:
        function["defer_loading"] = True
    if tool.cache_control is not None:  # as a custom tool's (for an Anthropic upstream)
        function["cache_control"] = tool.cache_control
    return function


def _web_search(tool: WebSearchToolParam, where: str) -> Item:
    """The web search server tool as the gateway's ``web_search`` tool (run by its search
    provider); ``user_location`` is carried and has no effect on the providers."""
    _check_direct(tool, where)
    if tool.allowed_domains and tool.blocked_domains:
        raise field_error(
            f"{where}.blocked_domains",
            "allowed_domains and blocked_domains cannot both be set.",
        )
    filters = {"allowed_domains": tool.allowed_domains, "blocked_domains": tool.blocked_domains}
    for key, domains in filters.items():
        for position, domain in enumerate(domains or ()):
            if not domain_name(domain):
                raise field_error(
                    f"{where}.{key}.{position}",
                    f"{domain!r} names no domain (for example 'example.com').",
                )
    declared: Item = {"type": "web_search"}
    if any(filters.values()):
        declared["filters"] = {key: value for key, value in filters.items() if value}
    if tool.max_uses is not None:
        declared["max_uses"] = tool.max_uses
    if tool.user_location is not None:
        declared["user_location"] = tool.user_location
    return declared


def decode_tool_choice(
    choice: ToolChoice | None, tools: list[Item], *, inherited: bool = False
) -> str | dict[str, Any]:
    """A choice that forces a tool the request does not declare is refused in hosted
    Anthropic's words: ``any`` with no tools (or ``tools: []``), ``tool`` naming none of
    them; ``auto`` and ``none`` need no tools. ``inherited``: the tools are a thread's,
    not known yet: the core judges the choice against them."""
    if choice is None or choice.type == "auto":
        return "auto"
    if choice.type == "none":
        return "none"
    if choice.type == "any":
        if not tools and not inherited:
            raise InvalidRequest(
                "tool_choice.any may only be specified while providing tools",
                param="tool_choice",
                code="invalid_value",
            )
        return "required"
    if choice.name is None:
        raise field_error("tool_choice.name", "Field required", "missing_required_parameter")
    if choice.name == WEB_SEARCH and any(tool["type"] == WEB_SEARCH for tool in tools):
        return {"type": WEB_SEARCH}
    if not inherited and choice.name not in {tool.get("name") for tool in tools}:
        raise InvalidRequest(
            f"Tool '{choice.name}' not found in provided tools",
            param="tool_choice.name",
            code="invalid_value",
        )
    return {"type": "function", "name": choice.name}
