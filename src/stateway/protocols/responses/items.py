"""Input items of the Responses wire, checked and normalized into canonical items.

The shapes the gateway models (messages, function, custom, shell and apply_patch tool
calls and their outputs, tool searches and their outputs, reasoning, compaction items and
the ``compaction_trigger``, which must come last, and ``configuration_update``) are checked
field by field so a bad one is a 400 naming the exact path; sealed ``encrypted_content``
is verified later, in the core. The ``mcp`` tools of a ``tool_search_output`` or an
``additional_tools`` item are kept without their credentials (used, never stored).
The gateway's own tool items sent back are checked by :mod:`.gateway_items`. Other item
types pass through untouched, but for the ``id`` every item is given when it has none
(ids are the cursors of item pages) and the ``status`` of a type listed with one.
"""

from __future__ import annotations

from typing import Any

from stateway.core.errors import DuplicateItem, InvalidRequest
from stateway.core.ids import new_id
from stateway.core.items import ID_PREFIXES, Item, new_item_id
from stateway.core.tools.apply_patch import DELETE, OPERATIONS, OUTPUT_STATUSES
from stateway.protocols.responses.configuration_update import check_configuration_update
from stateway.protocols.responses.gateway_items import check_gateway_item
from stateway.protocols.responses.nesting import check_nesting
from stateway.protocols.responses.tools.decode import check_loaded
from stateway.protocols.responses.tools.gateway import without_credentials
from stateway.protocols.validation import missing_or_wrong_type, not_one_of, unsupported_value

_ROLES = ("assistant", "system", "developer", "user")
"""In the order hosted lists them refusing another."""
_PART_TEXT = frozenset({"input_text", "output_text", "refusal", "text", "summary_text"})
_PART_KNOWN = _PART_TEXT | {"input_image", "input_file", "input_audio"}
_FILE_SOURCES = ("file_data", "file_url")
_EXECUTIONS = ("client", "server")
"""Who ran a tool search."""
_FINISHED = "completed"
"""The ``status`` of a modelled input item given without one (as ``input_items`` shows it)."""
_LISTED_WITH_STATUS = frozenset({"computer_call_output", "program_output"})
"""Types the gateway does not model whose items are listed with a ``status`` (the SDK's
item types require one; hosted fills it in), which their input may leave out."""


def decode_items(raw: str | list[dict[str, Any]], field: str = "input") -> list[Item]:
    """``field`` names the list in error params (``input[2].content``, ``items[0].role``)."""
    if isinstance(raw, str):
        return [_message("user", [{"type": "input_text", "text": raw}], None)]
    items = [_item(item, f"{field}[{index}]") for index, item in enumerate(raw)]
    _check_unique_ids(raw, field)
    _check_trigger_last(items, field)
    return items


def _check_trigger_last(items: list[Item], field: str) -> None:
    """A ``compaction_trigger`` compacts everything before it: it must come last."""
    for index, item in enumerate(items[:-1]):
        if item.get("type") == "compaction_trigger":
            raise InvalidRequest(
                "A 'compaction_trigger' item must be the last input item.",
                param=f"{field}[{index}].type",
                code="invalid_value",
            )


def _check_unique_ids(raw: list[dict[str, Any]], field: str) -> None:
    """Client ids are labels, but within one request they must be unique (as hosted):
    they are the cursors of ``input_items`` pages."""
    seen: set[str] = set()
    for index, item in enumerate(raw):
        label = item.get("id")
        if not isinstance(label, str) or not label:
            continue
        if label in seen:
            raise DuplicateItem(label, param=f"{field}[{index}].id")
        seen.add(label)


def _item(raw: dict[str, Any], path: str) -> Item:
    for key, value in raw.items():
        check_nesting(value, f"{path}.{key}")
    kind = raw.get("type")
    if kind is None and "role" in raw:
        kind = "message"
    elif kind is None and "id" in raw:  # an item reference's type is optional
        kind = "item_reference"
    if not isinstance(kind, str):
        raise InvalidRequest(
            "Every input item needs a string 'type'.",
            param=f"{path}.type",
            code="missing_required_parameter" if kind is None else "invalid_type",
        )
    match kind:
        case "message":
            return _decode_message(raw, path)
        case "function_call":
            _require_str(raw, path, "call_id", "name", "arguments")
            return _with_id(dict(raw), kind)
        case "custom_tool_call":
            _require_str(raw, path, "call_id", "name", "input")
            return _with_id(dict(raw), kind)
        case "function_call_output" | "custom_tool_call_output":
            _require_str(raw, path, "call_id")
            output = raw.get("output")
            if not isinstance(output, str | list):
                raise InvalidRequest(
                    "'output' must be a string or a list of content parts.",
                    param=f"{path}.output",
                    code="invalid_type",
                )
            item = dict(raw)
            if isinstance(output, list):
                item["output"] = _output_parts(output, f"{path}.output")
            return _with_id(item, kind)
        case "reasoning":
            summary = raw.get("summary", [])
            if not isinstance(summary, list):
                raise InvalidRequest(
                    "'summary' must be a list.", param=f"{path}.summary", code="invalid_type"
                )
            encrypted = raw.get("encrypted_content")
            if encrypted is not None and not isinstance(encrypted, str):
                raise InvalidRequest(
                    f"Invalid type for '{path}.encrypted_content': expected a string.",
                    param=f"{path}.encrypted_content",
                    code="invalid_type",
                )
            _check_texts(summary, f"{path}.summary")
            content = raw.get("content")
            if content is not None:
                if not isinstance(content, list):
                    raise missing_or_wrong_type(raw, path, "content", "a list")
                _check_texts(content, f"{path}.content")
            item = dict(raw)
            item.setdefault("summary", [])
            return _with_id(item, kind)
        case "compaction":
            _require_str(raw, path, "encrypted_content")  # verified once routed (core)
            item = dict(raw)
            if not isinstance(item.get("id"), str) or not item["id"]:
                item["id"] = new_id("cmp")
            return item
        case "compaction_trigger":
            return _labelled(dict(raw))
        case "mcp_approval_response":
            _require_str(raw, path, "approval_request_id")
            if not isinstance(raw.get("approve"), bool):
                raise missing_or_wrong_type(raw, path, "approve", "a boolean")
            if raw.get("reason") is not None:  # told to the model with a denial
                _require_str(raw, path, "reason")
            item = dict(raw)
            if not isinstance(item.get("id"), str) or not item["id"]:
                item["id"] = new_id(ID_PREFIXES[kind])
            return item
        case "tool_search_call" | "tool_search_output":
            _check_tool_search(raw, path, kind)
            item = dict(raw)
            if kind == "tool_search_output":
                item["tools"] = without_credentials(raw["tools"])
            return _with_id(item, kind)
        case "configuration_update":
            return _labelled(check_configuration_update(raw, path))
        case "additional_tools":
            _check_additional_tools(raw, path)
            # kept as sent but for credentials; its tools join the request's
            return _labelled({**raw, "tools": without_credentials(raw["tools"])})
        case "shell_call" | "local_shell_call":
            _require_str(raw, path, "call_id")
            _check_action(raw, path, "commands" if kind == "shell_call" else "command")
            return _with_id(dict(raw), kind)
        case "shell_call_output":
            _require_str(raw, path, "call_id")
            if not isinstance(raw.get("output"), list):
                raise missing_or_wrong_type(raw, path, "output", "a list")
            return _with_id(dict(raw), kind)
        case "local_shell_call_output":
            # Its ``id`` is the call's ``call_id`` (as the spec has it): never replaced.
            _require_str(raw, path, "output")
            if not isinstance(raw.get("call_id") or raw.get("id"), str):
                raise missing_or_wrong_type(raw, path, "id")
            return dict(raw)
        case "apply_patch_call":
            _require_str(raw, path, "call_id")
            _check_operation(raw, path)
            return _with_id(dict(raw), kind)
        case "apply_patch_call_output":
            _require_str(raw, path, "call_id")
            status = raw.get("status")
            if status is not None and status not in OUTPUT_STATUSES:
                raise unsupported_value(f"{path}.status", str(status), OUTPUT_STATUSES)
            if raw.get("output") is not None:
                _require_str(raw, path, "output")
            return _with_id(dict(raw), kind)
        case "mcp_call" | "mcp_approval_request" | "web_search_call":
            check_gateway_item(raw, path, kind)
            return dict(raw)
        case "item_reference":
            # Resolved against the tenant's stored items once the request is admitted
            # (:mod:`stateway.core.references`).
            _require_str(raw, path, "id")
            return {"type": "item_reference", "id": raw["id"]}
        case _:
            return _labelled(dict(raw))


def _decode_message(raw: dict[str, Any], path: str) -> Item:
    role = raw.get("role")
    if role is None:
        raise missing_or_wrong_type(raw, path, "role")
    if not isinstance(role, str) or role not in _ROLES:
        raise not_one_of(f"{path}.role", role, _ROLES)
    content = raw.get("content")
    text_kind = "output_text" if role == "assistant" else "input_text"
    if isinstance(content, str):
        parts: list[Item] = [{"type": text_kind, "text": content}]
    elif isinstance(content, list):
        parts = [_part(part, f"{path}.content[{i}]") for i, part in enumerate(content)]
    else:
        raise InvalidRequest(
            "'content' must be a string or a list of content parts.",
            param=f"{path}.content",
            code="invalid_type",
        )
    if role == "assistant":
        for part in parts:
            if part["type"] == "output_text":
                part.setdefault("annotations", [])
    return _message(role, parts, raw)


def _part(raw: Any, path: str) -> Item:
    if not isinstance(raw, dict):
        raise InvalidRequest(
            "Each content part must be an object.", param=path, code="invalid_type"
        )
    kind = raw.get("type")
    if not isinstance(kind, str) or kind not in _PART_KNOWN:
        raise InvalidRequest(
            f"Invalid content part type: {kind!r}.", param=f"{path}.type", code="invalid_value"
        )
    if kind in _PART_TEXT:
        key = "refusal" if kind == "refusal" else "text"
        if not isinstance(raw.get(key), str):
            raise missing_or_wrong_type(raw, path, key)
    if kind == "input_image":
        url = raw.get("image_url")
        if not isinstance(url, str) or not url.startswith(("http://", "https://", "data:")):
            raise InvalidRequest(
                "'image_url' must be an http(s) URL or a data URL; file ids are not supported.",
                param=f"{path}.image_url",
                code="invalid_value",
            )
        detail = raw.get("detail")
        if detail is None:  # the API's default, which every image read back states
            return {**raw, "detail": "auto"}
        if not isinstance(detail, str) or detail not in _IMAGE_DETAILS:
            raise not_one_of(f"{path}.detail", detail, _IMAGE_DETAILS)
    if kind == "input_file" and not any(isinstance(raw.get(k), str) for k in _FILE_SOURCES):
        raise InvalidRequest(
            "An 'input_file' part needs 'file_data' or 'file_url'; file ids are not supported.",
            param=f"{path}.file_data",
            code="missing_required_parameter",
        )
    return dict(raw)


_IMAGE_DETAILS = ("low", "high", "auto", "original")


def _output_parts(parts: list[Any], path: str) -> list[Any]:
    """A tool output's parts, checked and normalized as a message's are (an image states
    its ``detail``); a part of a type the gateway does not model is kept as sent, left to
    the backend to judge (``core.context``)."""
    return [_output_part(part, f"{path}[{index}]") for index, part in enumerate(parts)]


def _output_part(part: Any, path: str) -> Any:
    kind = part.get("type") if isinstance(part, dict) else None
    if not isinstance(kind, str) or kind in _PART_KNOWN:
        return _part(part, path)
    return part


def _check_texts(parts: list[Any], path: str) -> None:
    """A reasoning item's summary or content: parts each with a string ``text``."""
    for index, part in enumerate(parts):
        if not isinstance(part, dict):
            raise InvalidRequest(
                "Each part must be an object.", param=f"{path}[{index}]", code="invalid_type"
            )
        if not isinstance(part.get("text"), str):
            raise missing_or_wrong_type(part, f"{path}[{index}]", "text")


def _message(role: str, parts: list[Item], raw: dict[str, Any] | None) -> Item:
    item: Item = {"type": "message", "role": role, "content": parts}
    if raw is not None:
        for key, value in raw.items():
            if key not in ("type", "role", "content"):
                item[key] = value
    return _with_id(item, "message")


def _with_id(item: Item, kind: str) -> Item:
    """Give a modelled item its gateway id and its ``status`` when the client sent none."""
    if not isinstance(item.get("id"), str) or not item["id"]:
        item["id"] = new_id(ID_PREFIXES[kind])
    if item.get("status") is None:
        item["status"] = _FINISHED
    return item


def _labelled(item: Item) -> Item:
    """An item of a type the gateway does not model (or only reads), given an ``item_`` id
    when it has none, as the Conversations API gives one, so that a page of items can end
    on it; and ``completed`` when listed with a ``status`` it was given without."""
    if not isinstance(item.get("id"), str) or not item["id"]:
        item["id"] = new_item_id(item.get("type"))
    if item.get("type") in _LISTED_WITH_STATUS and item.get("status") is None:
        item["status"] = _FINISHED
    return item


def _require_str(raw: dict[str, Any], path: str, *keys: str) -> None:
    for key in keys:
        if not isinstance(raw.get(key), str):
            raise missing_or_wrong_type(raw, path, key)


def _check_action(raw: dict[str, Any], path: str, key: str) -> None:
    action = raw.get("action")
    if not isinstance(action, dict):
        raise missing_or_wrong_type(raw, path, "action", "an object")
    commands = action.get(key)
    if not isinstance(commands, list) or not all(isinstance(c, str) for c in commands):
        raise missing_or_wrong_type(action, f"{path}.action", key, "a list of strings")


def _check_operation(raw: dict[str, Any], path: str) -> None:
    """An ``apply_patch_call``'s ``operation``: its ``type``, its ``path``, and the
    ``diff`` of a file created or updated."""
    operation = raw.get("operation")
    if not isinstance(operation, dict):
        raise missing_or_wrong_type(raw, path, "operation", "an object")
    where = f"{path}.operation"
    _require_str(operation, where, "type")
    if operation["type"] not in OPERATIONS:
        raise unsupported_value(f"{where}.type", operation["type"], OPERATIONS)
    _require_str(operation, where, "path")
    if operation["type"] != DELETE:
        _require_str(operation, where, "diff")


def _check_tool_search(raw: dict[str, Any], path: str, kind: str) -> None:
    """A search the client ran (``execution`` ``client``, the default for input) needs its
    ``call_id``; the gateway's own (``server``) may have none, as hosted ones do."""
    execution = raw.get("execution", "client")
    if execution not in _EXECUTIONS:
        raise not_one_of(f"{path}.execution", execution, _EXECUTIONS)
    call_id = raw.get("call_id")
    if execution == "client" or call_id is not None:
        if call_id == "":
            raise InvalidRequest(
                f"'{path}.call_id' must not be empty.",
                param=f"{path}.call_id",
                code="invalid_value",
            )
        if not isinstance(call_id, str):
            raise missing_or_wrong_type(raw, path, "call_id")
    if kind == "tool_search_call":
        if "arguments" not in raw:
            raise missing_or_wrong_type(raw, path, "arguments")
    elif not isinstance(raw.get("tools"), list):
        raise InvalidRequest(
            "A 'tool_search_output' item needs a list of 'tools' (the tools to load).",
            param=f"{path}.tools",
            code="missing_required_parameter" if raw.get("tools") is None else "invalid_type",
        )
    else:  # offered while the item is in a context: a conversation's, or a chain's
        check_loaded(raw["tools"], path)


def _check_additional_tools(raw: dict[str, Any], path: str) -> None:
    if raw.get("role") != "developer":
        raise InvalidRequest(
            "An 'additional_tools' item needs the role 'developer'.",
            param=f"{path}.role",
            code="invalid_value",
        )
    if not isinstance(raw.get("tools"), list):
        raise InvalidRequest(
            "An 'additional_tools' item needs a list of 'tools'.",
            param=f"{path}.tools",
            code="missing_required_parameter" if raw.get("tools") is None else "invalid_type",
        )
