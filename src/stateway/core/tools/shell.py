"""The ``shell`` and ``local_shell`` tools: client-owned, offered to a model as functions.

An upstream that speaks Responses natively gets both tools, and their items, as they are.
Any other upstream is offered a function of the same name whose parameters are the call's
``action``; the model's call of it becomes the public call item, which the client runs and
answers with its output item:

- ``local_shell``: ``local_shell_call`` (``action``: ``type: "exec"``, ``command`` as an
  argv list, ``env``, optional ``timeout_ms``, ``working_directory``, ``user``), answered
  by a ``local_shell_call_output`` whose ``id`` is the call's ``call_id`` (as the spec has
  it; a ``call_id`` is accepted too) and whose ``output`` is a string.
- ``shell``: ``shell_call`` (``action``: ``commands``, optional ``timeout_ms`` and
  ``max_output_length``), answered by a ``shell_call_output`` whose ``output`` is a list of
  ``{stdout, stderr, outcome}`` chunks (``outcome``: ``exit`` with ``exit_code``, or
  ``timeout``).

:func:`model_call` and :func:`model_output` render the pair as the model saw it.
"""

from __future__ import annotations

from typing import Any, Final

import orjson

from stateway.core.ids import new_id
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
ITEM_TYPES: Final = frozenset(ANSWERS) | frozenset(ANSWERS.values())
CALL_TYPES: Final = {SHELL: SHELL_CALL, LOCAL_SHELL: LOCAL_SHELL_CALL}
"""The call item type of each tool type (the tool's model-visible name is its type)."""
_ID_PREFIX: Final = {SHELL_CALL: "sh", LOCAL_SHELL_CALL: "lsh"}
_STRINGS: Final[Item] = {"type": "array", "items": {"type": "string"}}
_FUNCTIONS: Final[dict[str, Item]] = {
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


def function(tool: Item) -> Item:
    """The function a ``shell`` or ``local_shell`` tool is offered as."""
    return dict(_FUNCTIONS[tool["type"]])


def open_call(tool_type: str, call_id: str) -> Item:
    """The public call item as it opens, before the model's arguments are complete."""
    kind = CALL_TYPES[tool_type]
    empty: Item = {"commands": []} if kind == SHELL_CALL else {"type": "exec", "command": []}
    empty_env: Item = {} if kind == SHELL_CALL else {"env": {}}
    return {
        "id": new_id(_ID_PREFIX[kind]),
        "type": kind,
        "status": "in_progress",
        "call_id": call_id,
        "action": {**empty, **empty_env},
    }


def close_call(item: Item, arguments: str) -> None:
    """Fill in the call's ``action`` from the model's function arguments (in place). A
    model that ignored the schema and wrote the command as plain text gets it as one."""
    try:
        parsed = orjson.loads(arguments) if arguments else {}
    except orjson.JSONDecodeError:
        parsed = None
    args: dict[str, Any] = parsed if isinstance(parsed, dict) else {}
    key = "commands" if item["type"] == SHELL_CALL else "command"
    commands = args.get(key)
    if isinstance(commands, str):
        commands = [commands]
    if not isinstance(commands, list):
        commands = [arguments] if parsed is None and arguments else []
    action: Item = {key: [str(c) for c in commands]}
    if item["type"] == SHELL_CALL:
        optional: tuple[str, ...] = ("timeout_ms", "max_output_length")
    else:
        env = args.get("env")
        action = {"type": "exec", **action, "env": env if isinstance(env, dict) else {}}
        optional = ("timeout_ms", "working_directory", "user")
    action.update((k, args[k]) for k in optional if args.get(k) is not None)
    item["action"] = action


def output_call_id(item: Item) -> str:
    """The call an output item answers: a ``local_shell_call_output`` names it by ``id``."""
    call_id = item.get("call_id")
    if item.get("type") == LOCAL_SHELL_CALL_OUTPUT and not call_id:
        call_id = item.get("id")
    return str(call_id or "")


def model_call(item: Item) -> Item:
    """A shell call as the function call the model made."""
    raw = item.get("action")
    action: Item = dict(raw) if isinstance(raw, dict) else {}
    action.pop("type", None)
    name = SHELL if item["type"] == SHELL_CALL else LOCAL_SHELL
    return {
        "type": "function_call",
        "call_id": item["call_id"],
        "name": name,
        "arguments": orjson.dumps(action).decode(),
    }


def model_output(item: Item) -> Item:
    """A shell call's output as the function call output the model is given."""
    output = item.get("output")
    if item["type"] == SHELL_CALL_OUTPUT:
        text = _chunks_text(output if isinstance(output, list) else [])
    else:
        text = output if isinstance(output, str) else orjson.dumps(output).decode()
    return {"type": "function_call_output", "call_id": output_call_id(item), "output": text}


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
