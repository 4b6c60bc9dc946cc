"""The ``shell`` and ``local_shell`` tools: the client runs the commands the model asks for.

A model that is not offered them natively is offered a function of the same name whose
parameters are the call's ``action`` (:data:`FUNCTIONS`). The call items, and the output
items that answer them:

- ``local_shell``: ``local_shell_call`` (``action``: ``type: "exec"``, ``command`` as an
  argv list, ``env``, optional ``timeout_ms``, ``working_directory``, ``user``), answered
  by a ``local_shell_call_output`` whose ``id`` is the call's ``call_id`` (as the spec has
  it; a ``call_id`` is accepted too) and whose ``output`` is a string.
- ``shell``: ``shell_call`` (``action``: ``commands``, optional ``timeout_ms`` and
  ``max_output_length``), answered by a ``shell_call_output`` whose ``output`` is a list of
  ``{stdout, stderr, outcome}`` chunks (``outcome``: ``exit`` with ``exit_code``, or
  ``timeout``).

The wrapping both share with the ``apply_patch`` tool: :mod:`.client_hosted`.
"""

from __future__ import annotations

from typing import Any, Final

import orjson

from stateway.core.items import Item

SHELL: Final = "shell"
LOCAL_SHELL: Final = "local_shell"
TOOL_TYPES: Final = frozenset({SHELL, LOCAL_SHELL})
SHELL_CALL: Final = "shell_call"
SHELL_CALL_OUTPUT: Final = "shell_call_output"
LOCAL_SHELL_CALL: Final = "local_shell_call"
LOCAL_SHELL_CALL_OUTPUT: Final = "local_shell_call_output"
ANSWERS: Final = {SHELL_CALL: SHELL_CALL_OUTPUT, LOCAL_SHELL_CALL: LOCAL_SHELL_CALL_OUTPUT}
"""Each shell call type, and the output type that answers it."""
CALL_TYPES: Final = {SHELL: SHELL_CALL, LOCAL_SHELL: LOCAL_SHELL_CALL}
"""The call item type of each tool type (the tool's model-visible name is its type)."""
_STRINGS: Final[Item] = {"type": "array", "items": {"type": "string"}}
FUNCTIONS: Final[dict[str, Item]] = {
    SHELL: {
        "type": "function",
        "name": SHELL,
        "description": "Run shell commands in the user's environment, in order; their output "
        "(stdout, stderr, exit code) is returned.",
        "parameters": {
            "type": "object",
            "properties": {
                "commands": {**_STRINGS, "description": "The shell commands to run, in order."},
                "timeout_ms": {"type": "integer", "description": "A time limit, in ms."},
                "max_output_length": {
                    "type": "integer",
                    "description": "The most characters of output to capture.",
                },
            },
            "required": ["commands"],
        },
    },
    LOCAL_SHELL: {
        "type": "function",
        "name": LOCAL_SHELL,
        "description": "Run one command on the user's machine; its output is returned.",
        "parameters": {
            "type": "object",
            "properties": {
                "command": {**_STRINGS, "description": "The command and its arguments (argv)."},
                "working_directory": {"type": "string"},
                "timeout_ms": {"type": "integer"},
                "env": {"type": "object", "additionalProperties": {"type": "string"}},
                "user": {"type": "string"},
            },
            "required": ["command"],
        },
    },
}
"""The function each tool is offered as."""


def empty_action(kind: str) -> Item:
    """The ``action`` of a call of ``kind`` as it opens, before the model's arguments are
    whole."""
    return {"commands": []} if kind == SHELL_CALL else {"type": "exec", "command": [], "env": {}}


def action(kind: str, args: dict[str, Any], text: str | None) -> Item:
    """The ``action`` of a call of ``kind`` from the model's arguments: ``args``, the JSON
    object they are (empty when they are none), or ``text``, when they are not JSON at
    all. A model that ignored the schema and wrote the command as plain text gets it as
    one."""
    key = "commands" if kind == SHELL_CALL else "command"
    commands = args.get(key)
    if isinstance(commands, str):
        commands = [commands]
    if not isinstance(commands, list):
        commands = [text] if text else []
    found: Item = {key: [str(c) for c in commands]}
    if kind == SHELL_CALL:
        optional: tuple[str, ...] = ("timeout_ms", "max_output_length")
    else:
        env = args.get("env")
        found = {"type": "exec", **found, "env": env if isinstance(env, dict) else {}}
        optional = ("timeout_ms", "working_directory", "user")
    found.update((k, args[k]) for k in optional if args.get(k) is not None)
    return found


def call_arguments(item: Item) -> Item:
    """A shell call's ``action`` as the function arguments the model wrote."""
    raw = item.get("action")
    arguments: Item = dict(raw) if isinstance(raw, dict) else {}
    arguments.pop("type", None)
    return arguments


def output_text(item: Item) -> str:
    """A shell call's output as the model is told it."""
    output = item.get("output")
    if item["type"] == SHELL_CALL_OUTPUT:
        return _chunks_text(output if isinstance(output, list) else [])
    return output if isinstance(output, str) else orjson.dumps(output).decode()


def _chunks_text(chunks: list[Any]) -> str:
    """``shell_call_output`` chunks as text: each command's outcome, stdout and stderr."""
    lines: list[str] = []
    for chunk in chunks:
        if not isinstance(chunk, dict):
            continue
        raw = chunk.get("outcome")
        outcome: Item = raw if isinstance(raw, dict) else {}
        if outcome.get("type") == "timeout":
            lines.append("timed out")
        elif isinstance(code := outcome.get("exit_code"), int):  # null: the SDK's unknown
            lines.append(f"exit code: {code}")
        for stream in ("stdout", "stderr"):
            if chunk.get(stream):
                lines.append(f"{stream}:\n{chunk[stream]}")
    return "\n".join(lines)
