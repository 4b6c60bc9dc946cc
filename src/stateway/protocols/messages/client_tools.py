"""Anthropic-defined client tools: ``bash``, the text editor and ``memory``, declared by
type (``{"type": "bash_20250124", "name": "bash"}``) with no schema, because Claude knows
them. The client runs them, as any tool of its own; the gateway offers them to the model
as function tools with the input each type takes (the commands and fields of Anthropic's
tool reference and of the ``anthropic`` SDK's memory tool types), so a model that was
never trained on them can call them, and calls come back as ``tool_use`` blocks the SDK's
tool runners execute. ``computer_*`` tools (screen coordinates and a display) are not
offered: a 400 names them.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Final

_STRING: Final = {"type": "string"}
_PATH: Final = {"type": "string", "description": "Absolute path to the file or directory."}
_VIEW_RANGE: Final = {
    "type": "array",
    "items": {"type": "integer"},
    "minItems": 2,
    "maxItems": 2,
    "description": "view only: the [first, last] line to show (1-based; last -1: to the end).",
}


@dataclass(frozen=True, slots=True)
class ClientTool:
    name: str
    """The name the type requires (Anthropic refuses another)."""
    description: str
    parameters: dict[str, Any]


def _editor(name: str, commands: list[str], insert_field: str) -> ClientTool:
    fields: dict[str, Any] = {
        "command": {"type": "string", "enum": commands},
        "path": _PATH,
        "file_text": {**_STRING, "description": "create: the new file's content."},
        "old_str": {**_STRING, "description": "str_replace: the exact text to replace once."},
        "new_str": {**_STRING, "description": "str_replace: the text to put in its place."},
        "insert_line": {"type": "integer", "description": "insert: the line to insert after."},
        "view_range": _VIEW_RANGE,
    }
    if insert_field != "new_str":
        fields[insert_field] = {**_STRING, "description": "insert: the text to insert."}
    return ClientTool(
        name,
        "View, create and edit text files. Commands: "
        + ", ".join(commands)
        + ". `view` shows a file with line numbers (or a directory's entries); `create` "
        "writes a new file; `str_replace` replaces `old_str`, which must occur exactly once, "
        f"with `new_str`; `insert` adds `{insert_field}` after line `insert_line`"
        + ("; `undo_edit` reverts the last edit of `path`." if "undo_edit" in commands else ".")
        + " Paths are absolute.",
        {
            "type": "object",
            "properties": fields,
            "required": ["command", "path"],
        },
    )


_BASH: Final = ClientTool(
    "bash",
    "Run a command in a persistent bash shell and get its output. State (the working "
    "directory, environment variables, files) persists between calls; `restart: true` "
    "starts a fresh shell.",
    {
        "type": "object",
        "properties": {
            "command": {**_STRING, "description": "The bash command to run."},
            "restart": {"type": "boolean", "description": "Restart the shell instead."},
        },
    },
)
_OLD_EDITOR: Final = ["view", "create", "str_replace", "insert", "undo_edit"]
_MEMORY: Final = ClientTool(
    "memory",
    "Your memory directory, /memories: files that persist between conversations. Check it "
    "before you start, and record what you learn as you go. Commands: view (a file, with "
    "line numbers, or a directory), create (path, file_text), str_replace (path, old_str, "
    "new_str), insert (path, insert_line, insert_text), delete (path), rename (old_path, "
    "new_path).",
    {
        "type": "object",
        "properties": {
            "command": {
                "type": "string",
                "enum": ["view", "create", "str_replace", "insert", "delete", "rename"],
            },
            "path": {**_STRING, "description": "A path under /memories."},
            "view_range": _VIEW_RANGE,
            "file_text": _STRING,
            "old_str": _STRING,
            "new_str": _STRING,
            "insert_line": {"type": "integer"},
            "insert_text": _STRING,
            "old_path": _STRING,
            "new_path": _STRING,
        },
        "required": ["command"],
    },
)

CLIENT_TOOLS: Final[dict[str, ClientTool]] = {
    "bash_20241022": _BASH,
    "bash_20250124": _BASH,
    "text_editor_20241022": _editor("str_replace_editor", _OLD_EDITOR, "new_str"),
    "text_editor_20250124": _editor("str_replace_editor", _OLD_EDITOR, "new_str"),
    "text_editor_20250429": _editor(
        "str_replace_based_edit_tool", ["view", "create", "str_replace", "insert"], "new_str"
    ),
    "text_editor_20250728": _editor(
        "str_replace_based_edit_tool", ["view", "create", "str_replace", "insert"], "insert_text"
    ),
    "memory_20250818": _MEMORY,
}
"""The Anthropic-defined client tools by type."""


def function_of(kind: str, name: str) -> dict[str, Any]:
    """The function tool the model is offered for a declared client tool of ``kind``."""
    tool = CLIENT_TOOLS[kind]
    return {
        "type": "function",
        "name": name,
        "description": tool.description,
        "parameters": tool.parameters,
        "strict": False,
    }
