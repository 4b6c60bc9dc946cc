"""The hosted tool types a client runs: ``shell`` and ``local_shell`` (:mod:`.shell`), and
``apply_patch`` (:mod:`.apply_patch`). The gateway never runs them itself.

An upstream that speaks Responses natively gets these tools, and their items, as they are.
Any other is offered a function named for the tool's type (:func:`function`), whose
arguments are the call's payload: a shell call's ``action``, an apply_patch call's
``operation``. The model's call of it becomes the public call item (:func:`open_call`, its
payload empty, announced at once; :func:`close_call`, its payload read from the arguments
once they are whole: no delta events stream it), which goes back to the client, who runs it
and answers with the call's output item. An apply_patch call whose patch changes several
files is one call per file (:func:`further_call`: each under a call id of its own), as if
the model had made several: a client's call changes one file. Later turns show the model
each pair as it saw it (:func:`model_item`): its function call, and the output as text.
"""

from __future__ import annotations

from typing import Any, Final

import orjson

from stateway.core.ids import new_id
from stateway.core.items import FUNCTION_CALL, FUNCTION_CALL_OUTPUT, ID_PREFIXES, Item
from stateway.core.tools import apply_patch, shell
from stateway.core.tools.apply_patch import APPLY_PATCH, APPLY_PATCH_CALL, APPLY_PATCH_CALL_OUTPUT

TOOL_TYPES: Final = shell.TOOL_TYPES | {APPLY_PATCH}
CALL_TYPES: Final = {**shell.CALL_TYPES, APPLY_PATCH: APPLY_PATCH_CALL}
"""The call item type of each tool type (the tool's model-visible name is its type)."""
ANSWERS: Final = {**shell.ANSWERS, APPLY_PATCH_CALL: APPLY_PATCH_CALL_OUTPUT}
"""Each call type, and the output type that answers it."""
ITEM_TYPES: Final = frozenset(ANSWERS) | frozenset(ANSWERS.values())
_TOOLS: Final = {call: tool for tool, call in CALL_TYPES.items()}
"""The tool type (its function's name) of each call type."""


def function(tool: Item) -> Item:
    """The function a tool of these types is offered as."""
    kind = tool["type"]
    return dict(apply_patch.FUNCTION if kind == APPLY_PATCH else shell.FUNCTIONS[kind])


def open_call(tool_type: str, call_id: str) -> Item:
    """The public call item as it opens, before the model's arguments are whole."""
    kind = CALL_TYPES[tool_type]
    item: Item = {
        "id": new_id(ID_PREFIXES[kind]),
        "type": kind,
        "status": "in_progress",
        "call_id": call_id,
    }
    if kind == APPLY_PATCH_CALL:
        item["operation"] = dict(apply_patch.OPENED)
    else:
        item["action"] = shell.empty_action(kind)
    return item


def close_call(item: Item, arguments: str) -> list[Item]:
    """Fill in the call's payload from the model's function ``arguments`` (in place),
    however far they are from the function's schema: a call is never refused for them.
    The payloads of the further calls the arguments hold, each for :func:`further_call`:
    an apply_patch call's V4A envelope of several files is one call per file."""
    text: str | None = None
    try:
        parsed = orjson.loads(arguments) if arguments else {}
    except orjson.JSONDecodeError:
        parsed, text = {}, arguments
    args: dict[str, Any] = parsed if isinstance(parsed, dict) else {}
    if item["type"] == APPLY_PATCH_CALL:
        item["operation"], *further = apply_patch.operations(args, text)
        return further
    item["action"] = shell.action(item["type"], args, text)
    return []


def further_call(item: Item, operation: Item, call_id: str) -> Item:
    """A further apply_patch call the model's call ``item`` held (closed), under a
    ``call_id`` of its own: ``operation``, one of the files of its patch."""
    call = open_call(APPLY_PATCH, call_id)
    call.update(status=item["status"], operation=operation)
    return call


def output_call_id(item: Item) -> str:
    """The call an output item answers: a ``local_shell_call_output`` names it by ``id``."""
    call_id = item.get("call_id")
    if item.get("type") == shell.LOCAL_SHELL_CALL_OUTPUT and not call_id:
        call_id = item.get("id")
    return str(call_id or "")


def model_item(item: Item) -> Item:
    """A call as the function call the model made, or an output as the function call
    output the model was given."""
    kind = item["type"]
    if kind not in ANSWERS:
        return {
            "type": FUNCTION_CALL_OUTPUT,
            "call_id": output_call_id(item),
            "output": (
                apply_patch.output_text(item)
                if kind == APPLY_PATCH_CALL_OUTPUT
                else shell.output_text(item)
            ),
        }
    arguments = (
        apply_patch.call_arguments(item) if kind == APPLY_PATCH_CALL else shell.call_arguments(item)
    )
    return {
        "type": FUNCTION_CALL,
        "call_id": item["call_id"],
        "name": _TOOLS[kind],
        "arguments": orjson.dumps(arguments).decode(),
    }
