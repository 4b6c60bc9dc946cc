"""Declared tools of the Responses wire, checked and normalized.

Client-owned kinds: ``function``, ``custom`` (freeform input, optionally with a ``text``
or ``grammar`` format), ``namespace`` (a group of function and custom tools), ``shell``
and ``local_shell``; functions, custom tools and namespaces may be marked
``defer_loading``. ``tool_search`` is the client's or the gateway's by its ``execution``;
the tools of a ``tool_search_output`` input item are checked like declared ones (but not
declared: they are loaded when the item is in the context). Gateway-owned kinds: ``mcp``
and ``web_search`` (``web_search_preview``); their shapes are checked here, and whether
the gateway can run them (a configured server or provider) in the core
(:mod:`stateway.core.tools.toolset`). Other kinds (``image_generation``,
``code_interpreter``, a future type) are kept as sent, once their nesting is checked:
whether the chosen upstream can carry them is decided in the core, after routing.
"""

from __future__ import annotations

from typing import Any

from stateway.core.errors import InvalidRequest
from stateway.core.items import TOOL_SEARCH_OUTPUT, Item
from stateway.core.tools import shell
from stateway.core.tools.catalog import (
    ADDITIONAL_TOOLS,
    CUSTOM,
    DEFER,
    NAMESPACE,
    SEPARATOR,
    TOOL_SEARCH,
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
            if isinstance(item, dict) and item.get("type") == TOOL_SEARCH_OUTPUT:
                _check_loaded(item.get("tools"), f"input[{item_index}]")
            if not isinstance(item, dict) or item.get("type") != ADDITIONAL_TOOLS:
                continue
            extra = item.get("tools")
            if isinstance(extra, list):  # a bad item is the items decoder's 400
                for index, tool in enumerate(extra):
                    _decode(tool, f"input[{item_index}].tools[{index}]", seen, decoded)
    return decoded


def _check_loaded(tools: Any, path: str) -> None:
    """The tools of a ``tool_search_output`` must be valid tools (a bad item is the items
    decoder's 400); the item itself is kept as sent."""
    if isinstance(tools, list):
        seen: set[str] = set()
        for index, tool in enumerate(tools):
            _decode(tool, f"{path}.tools[{index}]", seen, [])


def _decode(tool: Any, path: str, seen: set[str], decoded: list[Item]) -> None:
    if not isinstance(tool, dict):
        raise _invalid_type("Each tool must be an object.", path)
    kind = tool.get("type")
    if kind in WEB_SEARCH_TYPES:
        decoded.append(_web_search(tool, path))
    elif kind == "mcp":
        decoded.append(_mcp(tool, path))
    elif kind == "function":
        function = _function(tool, path)
        _claim(seen, model_name(function["name"]), f"{path}.name")
        decoded.append(function)
    elif kind == CUSTOM:
        custom = _custom(tool, path)
        _claim(seen, model_name(custom["name"]), f"{path}.name")
        decoded.append(custom)
    elif kind == NAMESPACE:
        decoded.append(_namespace(tool, path, seen))
    elif kind == TOOL_SEARCH:
        search = _tool_search(tool, path)
        if any(t.get("type") == TOOL_SEARCH for t in decoded):
            return  # declared again (say, in an additional_tools item): the first counts
        _claim(seen, TOOL_SEARCH, f"{path}.type")
        decoded.append(search)
    elif kind in shell.TOOL_TYPES:
        _claim(seen, kind, f"{path}.type")  # offered as the function of that name
        decoded.append(_passed_through(tool, path))
    elif isinstance(kind, str) and kind:
        decoded.append(_passed_through(tool, path))
    else:
        raise InvalidRequest(
            "Every tool needs a string 'type'.",
            param=f"{path}.type",
            code="missing_required_parameter" if kind is None else "invalid_type",
        )


def _passed_through(tool: dict[str, Any], path: str) -> Item:
    """A tool kept as sent (a ``shell`` tool's ``environment`` among its fields)."""
    for key, value in tool.items():
        check_nesting(value, f"{path}.{key}")
    return dict(tool)


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
    _defer(tool, path, out)
    return out


def _defer(tool: dict[str, Any], path: str, out: Item) -> None:
    """Keep ``defer_loading`` (a tool a search loads; see ``core.tools.tool_search``)."""
    value = tool.get(DEFER)
    if value is not None:
        if not isinstance(value, bool):
            raise _invalid_type(f"'{DEFER}' must be a boolean.", f"{path}.{DEFER}")
        out[DEFER] = value


_EXECUTIONS = ("client", "server")


def _tool_search(tool: dict[str, Any], path: str) -> Item:
    out: Item = {"type": TOOL_SEARCH}
    execution = tool.get("execution")
    if execution is not None:
        if execution not in _EXECUTIONS:
            raise InvalidRequest(
                f"Invalid value for '{path}.execution': {execution!r}; expected 'client' or "
                "'server'.",
                param=f"{path}.execution",
                code="invalid_value",
            )
        out["execution"] = execution
    description = tool.get("description")
    if description is not None:
        if not isinstance(description, str):
            raise _invalid_type("'description' must be a string.", f"{path}.description")
        out["description"] = description
    parameters = tool.get("parameters")
    if parameters is not None:
        if not isinstance(parameters, dict):
            raise _invalid_type("'parameters' must be a JSON Schema object.", f"{path}.parameters")
        check_nesting(parameters, f"{path}.parameters")
        out["parameters"] = parameters
    return out


def _function(tool: dict[str, Any], path: str) -> Item:
    name = _name(tool, path)
    parameters = tool.get("parameters")
    if parameters is not None and not isinstance(parameters, dict):
        raise _invalid_type("'parameters' must be a JSON Schema object.", f"{path}.parameters")
    check_nesting(parameters, f"{path}.parameters")
    if parameters is not None:
        _check_schema(parameters, f"{path}.parameters")
    description = tool.get("description")
    if description is not None and not isinstance(description, str):
        raise _invalid_type("'description' must be a string.", f"{path}.description")
    strict = tool.get("strict")
    if strict is not None and not isinstance(strict, bool):
        raise _invalid_type("'strict' must be a boolean.", f"{path}.strict")
    out: Item = {
        "type": "function",
        "name": name,
        "description": description,
        "parameters": parameters,
        "strict": strict,
    }
    _defer(tool, path, out)
    return out


def _check_schema(schema: dict[str, Any], path: str) -> None:
    """The mistakes an upstream would reject late (or a model would choke on): the top
    level of a function's parameters is an object schema with object ``properties`` and a
    ``required`` list of strings. (Full JSON Schema validation is the upstream's.)"""
    kind = schema.get("type")
    if kind is not None and kind != "object":
        raise InvalidRequest(
            f"Invalid schema for '{path}': the top-level 'type' must be 'object', got {kind!r}.",
            param=f"{path}.type",
            code="invalid_function_parameters",
        )
    properties = schema.get("properties")
    if properties is not None and not (
        isinstance(properties, dict) and all(isinstance(p, dict) for p in properties.values())
    ):
        raise InvalidRequest(
            f"Invalid schema for '{path}': 'properties' must map names to schemas.",
            param=f"{path}.properties",
            code="invalid_function_parameters",
        )
    required = schema.get("required")
    if required is not None and not _strings(required, optional=False):
        raise InvalidRequest(
            f"Invalid schema for '{path}': 'required' must be a list of property names.",
            param=f"{path}.required",
            code="invalid_function_parameters",
        )


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
    _defer(tool, path, out)
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


_CONTEXT_SIZES = frozenset({"low", "medium", "high"})


def _web_search(tool: dict[str, Any], path: str) -> Item:
    out: Item = {"type": tool["type"]}
    access = tool.get("external_web_access")
    if access is not None:
        if not isinstance(access, bool):
            raise _invalid_type(
                "'external_web_access' must be a boolean.", f"{path}.external_web_access"
            )
        out["external_web_access"] = access
    filters = tool.get("filters")
    if filters is not None:
        domains = filters.get("allowed_domains") if isinstance(filters, dict) else None
        if not isinstance(filters, dict) or not _strings(domains, optional=True):
            raise _invalid_type(
                "'filters.allowed_domains' must be a list of strings.",
                f"{path}.filters.allowed_domains",
            )
        out["filters"] = {"allowed_domains": domains}
    size = tool.get("search_context_size")
    if size is not None:
        if size not in _CONTEXT_SIZES:
            raise InvalidRequest(
                f"Invalid value for '{path}.search_context_size': {size!r}; expected 'low', "
                "'medium' or 'high'.",
                param=f"{path}.search_context_size",
                code="invalid_value",
            )
        out["search_context_size"] = size
    location = tool.get("user_location")
    if location is not None:
        if not isinstance(location, dict):
            raise _invalid_type("'user_location' must be an object.", f"{path}.user_location")
        out["user_location"] = location
    return out


_APPROVALS = frozenset({"always", "never"})


def _mcp(tool: dict[str, Any], path: str) -> Item:
    label = tool.get("server_label")
    if not isinstance(label, str) or not label or SEPARATOR in label:
        raise InvalidRequest(
            "An 'mcp' tool needs a non-empty 'server_label' (letters, digits, '-', single '_').",
            param=f"{path}.server_label",
            code="missing_required_parameter" if label is None else "invalid_value",
        )
    if tool.get("connector_id") is not None:
        raise InvalidRequest(
            "MCP connectors ('connector_id') are not supported; give 'server_url' or the "
            "label of a configured server.",
            param=f"{path}.connector_id",
            code="unsupported_parameter",
        )
    out: Item = {"type": "mcp", "server_label": label}
    for key in ("server_url", "server_description", "authorization"):
        value = tool.get(key)
        if value is not None:
            if not isinstance(value, str) or not value:
                raise _invalid_type(f"'{key}' must be a non-empty string.", f"{path}.{key}")
            out[key] = value
    headers = tool.get("headers")
    if headers is not None:
        if not isinstance(headers, dict) or not all(
            isinstance(k, str) and isinstance(v, str) for k, v in headers.items()
        ):
            raise _invalid_type("'headers' must be an object of strings.", f"{path}.headers")
        out["headers"] = headers
    allowed = tool.get("allowed_tools")
    if allowed is not None:
        names = allowed.get("tool_names") if isinstance(allowed, dict) else allowed
        read_only = allowed.get("read_only") if isinstance(allowed, dict) else None
        if not _strings(names, optional=isinstance(allowed, dict)) or not isinstance(
            read_only, bool | None
        ):
            raise _invalid_type(
                "'allowed_tools' must be a list of tool names or a filter object "
                "({'tool_names': [...], 'read_only': bool}).",
                f"{path}.allowed_tools",
            )
        out["allowed_tools"] = allowed
    approval = tool.get("require_approval")
    if approval is not None:
        out["require_approval"] = _approval(approval, f"{path}.require_approval")
    return out


def _approval(value: Any, path: str) -> Any:
    if isinstance(value, str) and value in _APPROVALS:
        return value
    if isinstance(value, dict) and set(value) <= _APPROVALS:
        for key, rule in value.items():
            names = rule.get("tool_names") if isinstance(rule, dict) else None
            if not _strings(names, optional=False):
                raise _invalid_type(
                    f"'{key}' must be an object with a list of 'tool_names'.", f"{path}.{key}"
                )
        return value
    raise InvalidRequest(
        f"Invalid value for '{path}': expected 'always', 'never' or an object with "
        "'always'/'never' tool name filters.",
        param=path,
        code="invalid_value",
    )


def _strings(value: Any, *, optional: bool) -> bool:
    if value is None:
        return optional
    return isinstance(value, list) and all(isinstance(v, str) for v in value)


def _invalid_type(message: str, param: str) -> InvalidRequest:
    return InvalidRequest(message, param=param, code="invalid_type")
