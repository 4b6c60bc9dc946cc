"""Client-owned tools of the Responses wire: ``function``, ``custom`` (freeform input,
optionally with a ``text`` or ``grammar`` format) and ``namespace`` (a group of function
and custom tools), each of them possibly marked ``defer_loading``, and ``tool_search``;
and the uniqueness of the names the model sees (a namespace member's is
``<namespace>__<name>``). A function's or a custom tool's name is of hosted's length
(:mod:`stateway.protocols.tool_name`: its characters are not judged).
"""

from __future__ import annotations

from typing import Any

from stateway.core.errors import InvalidRequest
from stateway.core.items import Item
from stateway.core.tools.model_names import model_name
from stateway.core.tools.tool_types import CUSTOM, DEFER, NAMESPACE, TOOL_SEARCH
from stateway.protocols.function_parameters import check_parameters
from stateway.protocols.responses.nesting import check_nesting
from stateway.protocols.responses.tools.fields import (
    copy_choice,
    copy_typed,
    invalid_type,
)
from stateway.protocols.tool_name import check_tool_name
from stateway.protocols.validation import (
    empty_string,
    missing_or_wrong_type,
    not_one_of,
    wrong_type,
)


def decode_function(tool: dict[str, Any], path: str) -> Item:
    name = _name(tool, path)
    check_tool_name(name, f"{path}.name")
    parameters = tool.get("parameters")
    if parameters is not None and not isinstance(parameters, dict):
        raise invalid_type("'parameters' must be a JSON Schema object.", f"{path}.parameters")
    check_nesting(parameters, f"{path}.parameters")
    if parameters is not None:
        check_parameters(parameters, f"{path}.parameters")
    description = tool.get("description")
    if description is not None and not isinstance(description, str):
        raise invalid_type("'description' must be a string.", f"{path}.description")
    strict = tool.get("strict")
    if strict is not None and not isinstance(strict, bool):
        raise invalid_type("'strict' must be a boolean.", f"{path}.strict")
    out: Item = {
        "type": "function",
        "name": name,
        "description": description,
        "parameters": parameters,
        "strict": strict,
    }
    _defer(tool, path, out)
    return out


def decode_custom(tool: dict[str, Any], path: str) -> Item:
    name = _name(tool, path)
    check_tool_name(name, f"{path}.name")
    out: Item = {"type": CUSTOM, "name": name}
    copy_typed(tool, out, "description", path, str, "a string")
    fmt = tool.get("format")
    if fmt is not None:
        out["format"] = _format(fmt, f"{path}.format")
    _defer(tool, path, out)
    return out


_FORMATS = ("text", "grammar")
_SYNTAXES = ("lark", "regex")
"""A grammar's syntaxes, as the SDK types them (and a Chat custom tool's)."""


def _format(fmt: Any, path: str) -> Item:
    if not isinstance(fmt, dict):
        raise wrong_type(path, "an object", fmt)
    kind = fmt.get("type")
    if kind is None:
        raise missing_or_wrong_type(fmt, path, "type")
    if kind not in _FORMATS:
        raise not_one_of(f"{path}.type", kind, _FORMATS)
    if kind == "text":
        return {"type": "text"}
    for key in ("syntax", "definition"):
        if not isinstance(fmt.get(key), str):
            raise InvalidRequest(
                f"A grammar format needs a string '{key}'.",
                param=f"{path}.{key}",
                code="missing_required_parameter",
            )
    if fmt["syntax"] not in _SYNTAXES:
        raise not_one_of(f"{path}.syntax", fmt["syntax"], _SYNTAXES)
    return {"type": "grammar", "syntax": fmt["syntax"], "definition": fmt["definition"]}


def decode_namespace(tool: dict[str, Any], path: str, seen: set[str]) -> Item:
    name = _name(tool, path)
    description = tool.get("description")
    if description is not None and not isinstance(description, str):
        raise invalid_type("'description' must be a string.", f"{path}.description")
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
            decode_function(member, member_path)
            if kind == "function"
            else decode_custom(member, member_path)
        )
        claim_name(seen, model_name(function["name"], name), f"{member_path}.name")
        decoded.append(function)
    out: Item = {"type": NAMESPACE, "name": name, "tools": decoded}
    if description is not None:
        out["description"] = description
    _defer(tool, path, out)
    return out


def _defer(tool: dict[str, Any], path: str, out: Item) -> None:
    """Keep ``defer_loading`` (a tool a search loads; see ``core.tools.tool_search``)."""
    copy_typed(tool, out, DEFER, path, bool, "a boolean")


_EXECUTIONS = ("client", "server")


def decode_tool_search(tool: dict[str, Any], path: str) -> Item:
    out: Item = {"type": TOOL_SEARCH}
    copy_choice(tool, out, "execution", path, _EXECUTIONS)
    copy_typed(tool, out, "description", path, str, "a string")
    parameters = tool.get("parameters")
    if parameters is not None:
        if not isinstance(parameters, dict):
            raise invalid_type("'parameters' must be a JSON Schema object.", f"{path}.parameters")
        check_nesting(parameters, f"{path}.parameters")
        out["parameters"] = parameters
    return out


def _name(tool: dict[str, Any], path: str) -> str:
    """The tool's ``name``; none (a Chat Completions ``{"function": {...}}`` tool, say), one
    of another type or an empty one is refused as hosted words it, by its whole path."""
    name = tool.get("name")
    if not isinstance(name, str):
        raise missing_or_wrong_type(tool, path, "name")
    if not name:
        raise empty_string(f"{path}.name")
    return name


def claim_name(seen: set[str], visible: str, param: str) -> None:
    """Model-visible names must be unique (a namespace member's is ``<ns>__<name>``)."""
    if visible in seen:
        raise InvalidRequest(
            f"Duplicate tool name '{visible}' (a namespace member is offered to the model "
            "as '<namespace>__<name>').",
            param=param,
            code="duplicate_tool_name",
        )
    seen.add(visible)
