"""``tool_choice`` of the Responses wire: ``auto``, ``none``, ``required``, a tool by its
``name`` (``function``, ``custom``), an ``mcp`` server by ``server_label``, a tool by its
``type`` alone (hosted types among them: those reach an upstream that speaks Responses as
sent), or ``allowed_tools``. Whether it names declared tools is judged by
:mod:`stateway.core.tools.choice`: here for a request without earlier turns, by the core
once it has read them for one that continues them (their items may offer tools too).
"""

from __future__ import annotations

from typing import Any

from stateway.core.errors import InvalidRequest
from stateway.core.items import Item
from stateway.core.tools.choice import (
    check_tool_choice,
    context_tools,
    names_tools,
    naming_field,
)
from stateway.core.tools.tool_types import WEB_SEARCH_TYPES
from stateway.protocols.responses.tools.decode import decode_tools
from stateway.protocols.validation import missing_or_wrong_type, not_one_of

_TOOL_CHOICES = frozenset({"auto", "none", "required"})
_TYPE_CHOICES = WEB_SEARCH_TYPES | frozenset(
    {"shell", "local_shell", "apply_patch", "file_search", "computer", "computer_use"}
    | {"computer_use_preview", "image_generation", "code_interpreter", "programmatic_tool_calling"}
)
"""``tool_choice`` types that name a tool by its type alone (hosted tool types among them:
those reach an upstream that speaks Responses as sent)."""
_MODES = ("auto", "required")
"""An ``allowed_tools`` choice's modes."""


def decode_tools_and_choice(
    tools: list[dict[str, Any]] | None,
    choice: str | dict[str, Any] | None,
    raw_input: object,
    continued: bool,
) -> tuple[list[Item], str | dict[str, Any]]:
    """The declared tools and the tool choice, checked against the tools they and the
    input's items offer (:mod:`stateway.core.tools.choice`); in a request continuing
    earlier turns, whose items may offer tools too, by the core once it has read them."""
    decoded = decode_tools(tools or [], raw_input)
    kept = _tool_choice(choice)
    if not continued and names_tools(kept):
        offered = decoded + context_tools(raw_input) if isinstance(raw_input, list) else decoded
        check_tool_choice(kept, offered)
    return decoded, kept


def _tool_choice(choice: str | dict[str, Any] | None) -> str | dict[str, Any]:
    if choice is None:
        return "auto"
    if isinstance(choice, str):
        if choice not in _TOOL_CHOICES:
            raise InvalidRequest(
                f"Invalid value: '{choice}'. Supported values are: 'none', 'auto', and 'required'.",
                param="tool_choice",
                code="invalid_value",
            )
        return choice
    kind = choice.get("type")
    if kind is None:
        raise InvalidRequest(
            "Missing required parameter: 'tool_choice.type'.",
            param="tool_choice.type",
            code="missing_required_parameter",
        )
    if kind in ("function", "custom") and isinstance(choice.get("name"), str):
        named = {"type": kind, "name": choice["name"]}
        namespace = choice.get("namespace")
        if namespace is None:
            return named
        if not isinstance(namespace, str):
            raise missing_or_wrong_type(choice, "tool_choice", "namespace")
        return {**named, "namespace": namespace}  # a member of it, by its own name
    if kind == "mcp" and isinstance(choice.get("server_label"), str):
        return {k: choice[k] for k in ("type", "server_label", "name") if k in choice}
    if isinstance(kind, str) and kind in _TYPE_CHOICES:
        return {"type": kind}
    if kind == "allowed_tools":
        mode = choice.get("mode")
        if mode is None:
            raise missing_or_wrong_type(choice, "tool_choice", "mode")
        if mode not in _MODES:
            raise not_one_of("tool_choice.mode", mode, _MODES)
        _check_allowed(choice.get("tools"))
        return dict(choice)
    if kind in ("function", "custom", "mcp"):
        raise _unnamed(choice, naming_field(kind))
    raise InvalidRequest(
        f"Tool choice type '{kind}' is not supported (or misses its 'name').",
        param="tool_choice",
        code="unsupported_value",
    )


def _unnamed(choice: dict[str, Any], field: str) -> InvalidRequest:
    """A choice of a tool by name whose naming field is missing or no string, named as
    hosted names it (``Missing required parameter: 'tool_choice.name'.``)."""
    param = f"tool_choice.{field}"
    if choice.get(field) is None:
        return InvalidRequest(
            f"Missing required parameter: '{param}'.",
            param=param,
            code="missing_required_parameter",
        )
    return InvalidRequest(
        f"Invalid type for '{param}': expected a string.", param=param, code="invalid_type"
    )


def _check_allowed(tools: object) -> None:
    """An ``allowed_tools`` choice's ``tools``: a list of objects, each with a string
    ``type`` and the field that names its tool."""
    if not isinstance(tools, list):
        raise InvalidRequest(
            "Invalid 'tool_choice.tools': expected an array of tools.",
            param="tool_choice.tools",
            code="missing_required_parameter" if tools is None else "invalid_type",
        )
    for index, entry in enumerate(tools):
        param = f"tool_choice.tools[{index}]"
        if not isinstance(entry, dict) or not isinstance(entry.get("type"), str):
            raise InvalidRequest(
                f"Invalid '{param}': expected a tool with a string 'type'.",
                param=param,
                code="invalid_type",
            )
        field = naming_field(entry["type"])
        if not isinstance(entry.get(field), str):
            raise InvalidRequest(
                f"Missing required parameter: '{param}.{field}'.",
                param=f"{param}.{field}",
                code="missing_required_parameter",
            )
