"""Declared tools of the Responses wire, checked and normalized.

Client-owned kinds are decoded here: ``function``, ``custom`` (freeform input, optionally
with a ``text`` or ``grammar`` format) and ``namespace`` (a group of function and custom
tools). A ``web_search`` tool sent as an optional hint (``external_web_access: false``) is
dropped: no provider is configured, so the model is not offered it and the ``tools`` echo
leaves it out. Other kinds are a 400 naming the type (and, for gateway-owned kinds, what
to configure).
"""

from __future__ import annotations

from typing import Any

from stateway.core.errors import InvalidRequest
from stateway.core.items import Item
from stateway.core.tools.catalog import (
    ADDITIONAL_TOOLS,
    CUSTOM,
    NAMESPACE,
    WEB_SEARCH_TYPES,
    model_name,
)
from stateway.protocols.responses.nesting import check_nesting


def decode_tools(tools: list[dict[str, Any]], raw_input: object = None) -> list[Item]:
    """The top-level ``tools``, then those of each ``additional_tools`` input item (added
    as if declared at the top level); model-visible names are unique across all."""
    decoded: list[Item] = []
    seen: set[str] = set()
    for index, tool in enumerate(tools):
        _decode(tool, f"tools[{index}]", seen, decoded)
    if isinstance(raw_input, list):
        for item_index, item in enumerate(raw_input):
            if not isinstance(item, dict) or item.get("type") != ADDITIONAL_TOOLS:
                continue
            extra = item.get("tools")
            if isinstance(extra, list):  # a bad item is the items decoder's 400
                for index, tool in enumerate(extra):
                    _decode(tool, f"input[{item_index}].tools[{index}]", seen, decoded)
    return decoded


def _decode(tool: Any, path: str, seen: set[str], decoded: list[Item]) -> None:
    if not isinstance(tool, dict):
        raise _invalid_type("Each tool must be an object.", path)
    kind = tool.get("type")
    if kind in WEB_SEARCH_TYPES and tool.get("external_web_access") is False:
        return  # an optional hint (as Codex sends it): not offered, not echoed
    if kind == "function":
        function = _function(tool, path)
        _claim(seen, model_name(function["name"]), f"{path}.name")
        decoded.append(function)
    elif kind == CUSTOM:
        custom = _custom(tool, path)
        _claim(seen, model_name(custom["name"]), f"{path}.name")
        decoded.append(custom)
    elif kind == NAMESPACE:
        decoded.append(_namespace(tool, path, seen))
    else:
        raise InvalidRequest(
            _unsupported_message(kind), param=f"{path}.type", code="unsupported_tool_type"
        )


def _namespace(tool: dict[str, Any], path: str, seen: set[str]) -> Item:
    name = _name(tool, path)
    description = tool.get("description")
    if description is not None and not isinstance(description, str):
        raise _invalid_type("'description' must be a string.", f"{path}.description")
    members = tool.get("tools")
    if not isinstance(members, list) or not members:
        raise InvalidRequest(
            "A 'namespace' tool needs a non-empty list of 'tools'.",
            param=f"{path}.tools",
            code="missing_required_parameter" if members is None else "invalid_value",
        )
    decoded: list[Item] = []
    for index, member in enumerate(members):
        member_path = f"{path}.tools[{index}]"
        kind = member.get("type") if isinstance(member, dict) else None
        if kind not in ("function", CUSTOM):
            raise InvalidRequest(
                f"Tool type '{kind}' is not supported inside a namespace; only 'function' "
                "and 'custom' are.",
                param=f"{member_path}.type",
                code="unsupported_tool_type",
            )
        function = (
            _function(member, member_path) if kind == "function" else _custom(member, member_path)
        )
        _claim(seen, model_name(function["name"], name), f"{member_path}.name")
        decoded.append(function)
    out: Item = {"type": NAMESPACE, "name": name, "tools": decoded}
    if description is not None:
        out["description"] = description
    return out


def _function(tool: dict[str, Any], path: str) -> Item:
    name = _name(tool, path)
    parameters = tool.get("parameters")
    if parameters is not None and not isinstance(parameters, dict):
        raise _invalid_type("'parameters' must be a JSON Schema object.", f"{path}.parameters")
    check_nesting(parameters, f"{path}.parameters")
    description = tool.get("description")
    if description is not None and not isinstance(description, str):
        raise _invalid_type("'description' must be a string.", f"{path}.description")
    strict = tool.get("strict")
    if strict is not None and not isinstance(strict, bool):
        raise _invalid_type("'strict' must be a boolean.", f"{path}.strict")
    return {
        "type": "function",
        "name": name,
        "description": description,
        "parameters": parameters,
        "strict": strict,
    }


def _custom(tool: dict[str, Any], path: str) -> Item:
    name = _name(tool, path)
    out: Item = {"type": CUSTOM, "name": name}
    description = tool.get("description")
    if description is not None:
        if not isinstance(description, str):
            raise _invalid_type("'description' must be a string.", f"{path}.description")
        out["description"] = description
    fmt = tool.get("format")
    if fmt is not None:
        out["format"] = _format(fmt, f"{path}.format")
    return out


def _format(fmt: Any, path: str) -> Item:
    kind = fmt.get("type") if isinstance(fmt, dict) else None
    if kind == "text":
        return {"type": "text"}
    if kind != "grammar":
        raise InvalidRequest(
            f"Invalid value for '{path}.type': {kind!r}; expected 'text' or 'grammar'.",
            param=f"{path}.type",
            code="invalid_value",
        )
    for key in ("syntax", "definition"):
        if not isinstance(fmt.get(key), str):
            raise InvalidRequest(
                f"A grammar format needs a string '{key}'.",
                param=f"{path}.{key}",
                code="missing_required_parameter",
            )
    return {"type": "grammar", "syntax": fmt["syntax"], "definition": fmt["definition"]}


def _name(tool: dict[str, Any], path: str) -> str:
    name = tool.get("name")
    if not isinstance(name, str) or not name:
        raise InvalidRequest(
            "Missing required parameter: 'name'.",
            param=f"{path}.name",
            code="missing_required_parameter",
        )
    return name


def _claim(seen: set[str], visible: str, param: str) -> None:
    """Model-visible names must be unique (a namespace member's is ``<ns>__<name>``)."""
    if visible in seen:
        raise InvalidRequest(
            f"Duplicate tool name '{visible}' (a namespace member is offered to the model "
            "as '<namespace>__<name>').",
            param=param,
            code="duplicate_tool_name",
        )
    seen.add(visible)


def _unsupported_message(kind: object) -> str:
    if kind in WEB_SEARCH_TYPES:
        return (
            f"Tool type '{kind}' needs a web search provider, and none is configured; "
            "send it with 'external_web_access': false to make it an optional hint."
        )
    if kind == "mcp":
        return "Tool type 'mcp' needs a configured MCP server, and none is configured."
    return f"Tool type '{kind}' is not supported yet."


def _invalid_type(message: str, param: str) -> InvalidRequest:
    return InvalidRequest(message, param=param, code="invalid_type")
