"""A Chat Completions request's ``tools`` and ``tool_choice`` as their Responses forms.

Tools: ``function`` (``strict: false`` unless sent true, as Chat means it, where a
Responses tool without ``strict`` is strict; its ``parameters`` an object schema, as on
responses) and ``custom`` (its grammar
``format`` flattened as Responses has it); a name declared twice is a 400.
``tool_choice``: ``auto``, ``none``, ``required``, a named function or custom tool, or
``allowed_tools`` (its ``mode`` over the functions and custom tools it lists), each tool
it names one declared of its type (a 400 naming the field otherwise). Without a tool, a
``tool_choice`` but ``none`` is a 400 in hosted's words (vLLM refuses one too), but
``auto`` beside ``tools: []``, which vLLM and llama.cpp take.
"""

from __future__ import annotations

from typing import Any

from stateway.core.errors import InvalidRequest
from stateway.core.items import Item
from stateway.protocols.chat.request import (
    AllowedToolsChoice,
    CustomTool,
    FunctionTool,
    NamedCustomChoice,
    NamedToolChoice,
)
from stateway.protocols.function_parameters import check_parameters

Choice = str | NamedToolChoice | NamedCustomChoice | AllowedToolsChoice | None


def decode_tools(tools: list[FunctionTool | CustomTool]) -> list[Item]:
    decoded: list[Item] = []
    seen: set[str] = set()
    for index, tool in enumerate(tools):
        declared = tool.function if isinstance(tool, FunctionTool) else tool.custom
        if declared.name in seen:
            param = f"tools[{index}].{tool.type}.name"
            raise InvalidRequest(
                f"Invalid value for '{param}': the tool name '{declared.name}' is declared twice.",
                param=param,
                code="invalid_value",
            )
        seen.add(declared.name)
        if isinstance(tool, CustomTool):
            decoded.append(_custom_tool(tool))
            continue
        function = tool.function
        if function.parameters is not None:
            check_parameters(function.parameters, f"tools[{index}].function.parameters")
        item: Item = {"type": "function", "name": function.name}
        item["parameters"] = function.parameters or {"type": "object", "properties": {}}
        if function.description is not None:
            item["description"] = function.description
        # Chat's tools are non-strict unless asked; a Responses tool without ``strict`` is
        # made strict (its schema normalized: every property required), so say it.
        item["strict"] = bool(function.strict)
        decoded.append(item)
    return decoded


def _custom_tool(tool: CustomTool) -> Item:
    """A ``custom`` tool in its Responses form: its grammar's ``syntax`` and
    ``definition`` on the ``format`` itself."""
    custom = tool.custom
    item: Item = {"type": "custom", "name": custom.name}
    if custom.description is not None:
        item["description"] = custom.description
    fmt = custom.format
    if fmt is not None and fmt.type == "grammar" and fmt.grammar is not None:
        grammar = fmt.grammar
        item["format"] = {
            "type": "grammar",
            "syntax": grammar.syntax,
            "definition": grammar.definition,
        }
    elif fmt is not None:
        item["format"] = {"type": "text"}
    return item


def decode_tool_choice(choice: Choice, tools: list[Item], *, sent: bool) -> str | dict[str, Any]:
    """``sent``: whether the request had ``tools`` (``[]`` among them): ``auto`` beside
    ``tools: []`` is taken as no tools, as vLLM and llama.cpp take it."""
    if choice is None:
        return "auto"
    if choice != "none" and not tools and not (choice == "auto" and sent):
        raise _without_tools("tool_choice")  # nothing the model could call
    if isinstance(choice, str):
        return choice
    if isinstance(choice, AllowedToolsChoice):
        allowed = choice.allowed_tools
        listed = [
            _declared(entry, tools, f"tool_choice.allowed_tools.tools[{index}]")
            for index, entry in enumerate(allowed.tools)
        ]
        return {"type": "allowed_tools", "mode": allowed.mode, "tools": listed}
    return _declared(choice, tools, "tool_choice")


def _without_tools(param: str) -> InvalidRequest:
    """A field about the tools sent without any, in hosted's words."""
    return InvalidRequest(
        f"Invalid value for '{param}': '{param}' is only allowed when 'tools' are specified.",
        param=param,
        code="invalid_value",
    )


def _declared(
    choice: NamedToolChoice | NamedCustomChoice, tools: list[Item], where: str
) -> dict[str, Any]:
    """A choice of a tool by name (at ``where`` in the body) as its Responses form; the
    tool must be declared, of its type."""
    name = choice.function.name if isinstance(choice, NamedToolChoice) else choice.custom.name
    if name not in {tool["name"] for tool in tools if tool["type"] == choice.type}:
        param = f"{where}.{choice.type}.name"
        raise InvalidRequest(
            f"Invalid value for '{param}': the tool '{name}' is not among the declared tools.",
            param=param,
            code="invalid_value",
        )
    return {"type": choice.type, "name": name}
