"""WebSocket steering's wire (``response.steer``, the ``openai`` SDK's
``connection.response.steer``): a steer's input decoded, its notices made, and the stubs of
what a response waits for from its client.

A steer's input is the ``input`` of a ``response.create`` restricted to ``user`` messages,
each with only ``type`` (``message``), ``role`` and ``content`` (a string, or
``input_text``, ``input_image`` and ``input_file`` parts). Its notices are
``response.steer.accepted``, ``.pending`` and ``.failed``: each a
:class:`~stateway.core.events.Notice`, numbered like the response's own events
(:func:`~stateway.protocols.responses.stream.encode_event_json` writes them).
"""

from __future__ import annotations

from typing import Any, Final

from stateway.core import events as ev
from stateway.core.errors import InvalidRequest
from stateway.core.items import (
    CUSTOM_TOOL_CALL,
    FUNCTION_CALL,
    MCP_APPROVAL_REQUEST,
    TOOL_SEARCH_CALL,
    Item,
)
from stateway.protocols.responses.items import decode_items

ACCEPTED: Final = "response.steer.accepted"
PENDING: Final = "response.steer.pending"
FAILED: Final = "response.steer.failed"
WAITING_FOR_REQUIRED_INPUT: Final = "waiting_for_required_input"

_MESSAGE_KEYS: Final = frozenset({"type", "role", "content"})
_PARTS: Final = frozenset({"input_text", "input_image", "input_file"})
_ANSWERED_BY_CALL_ID: Final = {
    FUNCTION_CALL: "function_call_output",
    CUSTOM_TOOL_CALL: "custom_tool_call_output",
    "computer_call": "computer_call_output",
    "shell_call": "shell_call_output",
    "local_shell_call": "local_shell_call_output",
    "apply_patch_call": "apply_patch_call_output",
}
"""Client-owned call item types, and the input item type that answers each."""


def decode_steer_input(raw: Any) -> list[Item]:
    """The items of a steer's ``input``; anything but user messages of text, image and
    file parts raises :class:`InvalidRequest` (its ``invalid_input`` failure)."""
    if isinstance(raw, str):
        if not raw:
            raise _invalid("'input' must not be empty.", "input")
        return decode_items(raw)
    if not isinstance(raw, list) or not raw:
        raise _invalid("'input' must be a string or a non-empty list of messages.", "input")
    for index, item in enumerate(raw):
        path = f"input[{index}]"
        if not isinstance(item, dict):
            raise _invalid(f"'{path}' must be a message object.", path)
        extra = sorted(set(item) - _MESSAGE_KEYS)
        if extra:
            raise _invalid(
                f"'{path}' may hold only 'type', 'role' and 'content', not {extra[0]!r}.", path
            )
        if item.get("type", "message") != "message":
            raise _invalid("Only messages can steer a response.", f"{path}.type")
        if item.get("role") != "user":
            raise _invalid("Only 'user' messages can steer a response.", f"{path}.role")
        content = item.get("content")
        if isinstance(content, list):
            for number, part in enumerate(content):
                kind = part.get("type") if isinstance(part, dict) else None
                if not isinstance(kind, str) or kind not in _PARTS:
                    raise _invalid(
                        "A steering message holds only 'input_text', 'input_image' and "
                        "'input_file' parts.",
                        f"{path}.content[{number}]",
                    )
        elif not isinstance(content, str):
            raise _invalid("'content' must be a string or a list of parts.", f"{path}.content")
    return decode_items(raw)


def _invalid(message: str, param: str) -> InvalidRequest:
    return InvalidRequest(message, param=param, code="invalid_input")


def required_inputs(output: list[Item]) -> list[dict[str, Any]]:
    """The stubs of the input a response's ``output`` waits for from its client: an
    output per client-owned call, an answer per approval request (empty: none)."""
    stubs: list[dict[str, Any]] = []
    for item in output:
        kind = item.get("type")
        if kind in _ANSWERED_BY_CALL_ID:
            stub = {"type": _ANSWERED_BY_CALL_ID[kind], "call_id": item.get("call_id", "")}
            if kind == FUNCTION_CALL:
                stub["name"] = item.get("name", "")
            stubs.append(stub)
        elif kind == TOOL_SEARCH_CALL and item.get("execution") == "client":
            stubs.append(
                {
                    "type": "tool_search_output",
                    "call_id": item.get("call_id", ""),
                    "execution": "client",
                }
            )
        elif kind == MCP_APPROVAL_REQUEST:
            stubs.append(
                {"type": "mcp_approval_response", "approval_request_id": item.get("id", "")}
            )
    return stubs


def steer_accepted(steer_id: str, response_id: str) -> ev.Notice:
    return ev.Notice(ACCEPTED, {"steer": {"id": steer_id, "previous_response_id": response_id}})


def steer_pending(steer_id: str, response_id: str, required: list[dict[str, Any]]) -> ev.Notice:
    return ev.Notice(
        PENDING,
        {
            "reason": WAITING_FOR_REQUIRED_INPUT,
            "required_input": required,
            "steer": {"id": steer_id, "previous_response_id": response_id},
        },
    )


def steer_failed(
    code: str, message: str, response_id: str, raw_input: Any, steer_id: str | None = None
) -> ev.Notice:
    """``raw_input`` is the steer's input as it was sent, returned to the client."""
    steer: dict[str, Any] = {"input": raw_input, "previous_response_id": response_id}
    if steer_id is not None:
        steer["id"] = steer_id
    error = {"code": code, "message": message, "type": "invalid_request_error"}
    return ev.Notice(FAILED, {"error": error, "steer": steer})
