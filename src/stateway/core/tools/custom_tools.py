"""``custom`` tools: a tool whose input is free-form text (a grammar's, when its ``format``
has one), offered to a model that has no such tools as a function with one ``input``
string argument (:func:`function`); the model's call comes back as a
``custom_tool_call`` whose ``input`` is that string (:func:`custom_input`).

The input streams as the arguments do, their ``input`` string decoded piece by piece
(:mod:`stateway.core.tools.streamed_input`). The whole arguments are read the same way,
so the input a call closes with goes on from what was said of it, however its pieces were
cut.
"""

from __future__ import annotations

from typing import Final

import orjson

from stateway.core.items import Item
from stateway.core.tools.streamed_input import StreamedInput

INPUT_SCHEMA: Final[Item] = {
    "type": "object",
    "properties": {"input": {"type": "string", "description": "The tool's raw input."}},
    "required": ["input"],
    "additionalProperties": False,
}
"""The parameters of the function a ``custom`` tool is offered as."""


def function(tool: Item, name: str) -> Item:
    """The function a ``custom`` tool is offered as, under ``name``: its description says
    what the input is (the grammar it must match, when the tool's ``format`` has one)."""
    return {
        "type": "function",
        "name": name,
        "description": _description(tool),
        "parameters": INPUT_SCHEMA,
    }


def _description(tool: Item) -> str:
    text = tool.get("description") or ""
    fmt = tool.get("format") or {}
    if fmt.get("type") == "grammar":
        text += (
            f"\n\nThe 'input' argument is raw text (not JSON) that must match this "
            f"{fmt.get('syntax', '')} grammar:\n{fmt.get('definition', '')}"
        )
    else:
        text += "\n\nThe 'input' argument is free-form raw text."
    return text.strip()


def custom_input(arguments: str) -> str:
    """A custom tool call's raw input from the model's function arguments: the ``input``
    string (as far as it goes: :class:`StreamedInput`), or (a model that ignored the
    schema) the arguments as they are."""
    reader = StreamedInput()
    said = reader.feed(arguments)
    if reader.opened:
        return said
    try:
        parsed = orjson.loads(arguments)
    except orjson.JSONDecodeError:
        return arguments
    value = parsed.get("input") if isinstance(parsed, dict) else None
    return value if isinstance(value, str) else arguments
