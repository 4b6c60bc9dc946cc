"""Responses wire -> canonical, for stored event logs: a logged payload read back.

A journaled run's log holds the payloads :func:`~.stream.encode_event_json` wrote (ADR
0008). When the run's process dies, another one rebuilds the response's output from that
log (:mod:`stateway.core.logged_output`), through :func:`decode_event_json`: the events of
output items and their deltas come back as the canonical events they were made from; any
other payload, and one not shaped as this encoder writes it, is None (skipped: a log is
never a reason for a recovery to fail).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Final

import orjson

from stateway.core import events as ev
from stateway.core.items import Item


class _Unreadable(ValueError):
    """A field missing, or of another type than the encoder writes."""


def decode_event_json(payload: bytes) -> ev.Event | None:
    """The canonical event ``payload`` was encoded from, when it is one of an output item
    or its deltas (a :data:`stateway.core.journal.EventDecoder`); None otherwise."""
    try:
        data = orjson.loads(payload)
    except orjson.JSONDecodeError:
        return None
    kind = data.get("type") if isinstance(data, dict) else None
    read = _READERS.get(kind) if isinstance(kind, str) else None
    if read is None:
        return None
    try:
        return read(data)
    except _Unreadable:
        return None


def _int(data: dict[str, Any], key: str) -> int:
    value = data.get(key)
    if type(value) is not int:
        raise _Unreadable(key)
    return value


def _str(data: dict[str, Any], key: str) -> str:
    value = data.get(key)
    if not isinstance(value, str):
        raise _Unreadable(key)
    return value


def _object(data: dict[str, Any], key: str) -> Item:
    value = data.get(key)
    if not isinstance(value, dict):
        raise _Unreadable(key)
    return value


def _item(data: dict[str, Any]) -> Item:
    """An event's output item: an object with an ``id`` and a ``type``, as every item the
    gateway writes has them."""
    item = _object(data, "item")
    _str(item, "id")
    _str(item, "type")
    return item


def _item_added(data: dict[str, Any]) -> ev.Event:
    return ev.ItemAdded(_int(data, "output_index"), _item(data))


def _item_done(data: dict[str, Any]) -> ev.Event:
    return ev.ItemDone(_int(data, "output_index"), _item(data))


def _part_added(data: dict[str, Any]) -> ev.Event:
    index, content, item_id = _part_of(data)
    return ev.PartAdded(index, content, item_id, _object(data, "part"))


def _part_done(data: dict[str, Any]) -> ev.Event:
    index, content, item_id = _part_of(data)
    return ev.PartDone(index, content, item_id, _object(data, "part"))


def _text_delta(data: dict[str, Any]) -> ev.Event:
    index, content, item_id = _part_of(data)
    logprobs = data.get("logprobs")
    tokens = logprobs if isinstance(logprobs, list) and logprobs else None
    return ev.TextDelta(index, content, item_id, _str(data, "delta"), tokens)


def _refusal_delta(data: dict[str, Any]) -> ev.Event:
    return ev.RefusalDelta(*_part_of(data), _str(data, "delta"))


def _reasoning_delta(data: dict[str, Any]) -> ev.Event:
    return ev.ReasoningDelta(*_part_of(data), _str(data, "delta"))


def _summary_part_added(data: dict[str, Any]) -> ev.Event:
    index = _int(data, "output_index")
    return ev.SummaryPartAdded(index, _int(data, "summary_index"), _str(data, "item_id"))


def _arguments_delta(data: dict[str, Any]) -> ev.Event:
    return ev.ArgumentsDelta(*_item_of(data), _str(data, "delta"))


def _mcp_arguments_delta(data: dict[str, Any]) -> ev.Event:
    return ev.McpArgumentsDelta(*_item_of(data), _str(data, "delta"))


def _mcp_arguments_done(data: dict[str, Any]) -> ev.Event:
    return ev.McpArgumentsDone(*_item_of(data), _str(data, "arguments"))


def _custom_input_delta(data: dict[str, Any]) -> ev.Event:
    return ev.CustomInputDelta(*_item_of(data), _str(data, "delta"))


def _custom_input_done(data: dict[str, Any]) -> ev.Event:
    return ev.CustomInputDone(*_item_of(data), _str(data, "input"))


def _item_of(data: dict[str, Any]) -> tuple[int, str]:
    return _int(data, "output_index"), _str(data, "item_id")


def _part_of(data: dict[str, Any]) -> tuple[int, int, str]:
    return _int(data, "output_index"), _int(data, "content_index"), _str(data, "item_id")


_READERS: Final[dict[str, Callable[[dict[str, Any]], ev.Event]]] = {
    "response.output_item.added": _item_added,
    "response.output_item.done": _item_done,
    "response.content_part.added": _part_added,
    "response.content_part.done": _part_done,
    "response.output_text.delta": _text_delta,
    "response.refusal.delta": _refusal_delta,
    "response.reasoning_text.delta": _reasoning_delta,
    "response.reasoning_summary_part.added": _summary_part_added,
    "response.function_call_arguments.delta": _arguments_delta,
    "response.mcp_call_arguments.delta": _mcp_arguments_delta,
    "response.mcp_call_arguments.done": _mcp_arguments_done,
    "response.custom_tool_call_input.delta": _custom_input_delta,
    "response.custom_tool_call_input.done": _custom_input_done,
}
"""The events a run's output is rebuilt from, by wire ``type``."""
