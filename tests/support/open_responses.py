"""The fields the Open Responses spec requires of what a Responses client reads, and a
check that a JSON object holds them.

The spec asks every field of its objects to be present, ``null`` where it does not apply,
and each stream event to carry its own; the ``openai`` SDK's types leave most of them
optional, so reading an object strictly as the SDK's type cannot tell that one is
missing. These tables say what must be there, kind by kind (``output_text``'s
``logprobs`` too: the spec's compliance runner requires it on the part and on its text
events, as hosted sends it). Reasoning text events are named as hosted names them
(``response.reasoning_text.*``), as the spec's compliance runner has them.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Final

RESPONSE: Final = frozenset(
    {
        "id",
        "object",
        "created_at",
        "completed_at",
        "status",
        "incomplete_details",
        "model",
        "previous_response_id",
        "instructions",
        "output",
        "error",
        "tools",
        "tool_choice",
        "truncation",
        "parallel_tool_calls",
        "text",
        "top_p",
        "presence_penalty",
        "frequency_penalty",
        "top_logprobs",
        "temperature",
        "reasoning",
        "usage",
        "max_output_tokens",
        "max_tool_calls",
        "store",
        "background",
        "service_tier",
        "metadata",
        "safety_identifier",
        "prompt_cache_key",
    }
)
"""The Response object's fields (``ResponseResource``)."""

_NESTED: Final[Mapping[str, frozenset[str]]] = {
    "usage": frozenset(
        {
            "input_tokens",
            "output_tokens",
            "total_tokens",
            "input_tokens_details",
            "output_tokens_details",
        }
    ),
    "reasoning": frozenset({"effort", "summary"}),
    "error": frozenset({"code", "message"}),
    "incomplete_details": frozenset({"reason"}),
    "text": frozenset({"format"}),
}
"""A Response's fields that are objects (when not ``null``), with their own fields."""

ITEMS: Final[Mapping[str, frozenset[str]]] = {
    "message": frozenset({"type", "id", "status", "role", "content"}),
    "function_call": frozenset({"type", "id", "call_id", "name", "arguments", "status"}),
    "function_call_output": frozenset({"type", "id", "call_id", "output", "status"}),
    "reasoning": frozenset({"type", "id", "summary"}),
}
"""Output items by type (the kinds the spec models)."""

PARTS: Final[Mapping[str, frozenset[str]]] = {
    "output_text": frozenset({"type", "text", "annotations", "logprobs"}),
    "refusal": frozenset({"type", "refusal"}),
    "reasoning_text": frozenset({"type", "text"}),
    "summary_text": frozenset({"type", "text"}),
}
"""Content parts by type."""

FUNCTION_TOOL: Final = frozenset({"type", "name", "description", "parameters", "strict"})

LOGPROB: Final = frozenset({"token", "logprob", "bytes", "top_logprobs"})
"""A token's entry in ``logprobs`` (of an ``output_text`` part and its text events)."""
TOP_LOGPROB: Final = frozenset({"token", "logprob", "bytes"})

_LIFECYCLE: Final = frozenset({"type", "sequence_number", "response"})
_OF_ITEM: Final = frozenset({"type", "sequence_number", "output_index", "item"})
_OF_PART: Final = frozenset({"type", "sequence_number", "item_id", "output_index", "content_index"})
_OF_SUMMARY: Final = frozenset(
    {"type", "sequence_number", "item_id", "output_index", "summary_index"}
)
_OF_CALL: Final = frozenset({"type", "sequence_number", "item_id", "output_index"})

EVENTS: Final[Mapping[str, frozenset[str]]] = {
    "response.created": _LIFECYCLE,
    "response.queued": _LIFECYCLE,
    "response.in_progress": _LIFECYCLE,
    "response.completed": _LIFECYCLE,
    "response.failed": _LIFECYCLE,
    "response.incomplete": _LIFECYCLE,
    "response.output_item.added": _OF_ITEM,
    "response.output_item.done": _OF_ITEM,
    "response.content_part.added": _OF_PART | {"part"},
    "response.content_part.done": _OF_PART | {"part"},
    "response.output_text.delta": _OF_PART | {"delta", "logprobs"},
    "response.output_text.done": _OF_PART | {"text", "logprobs"},
    "response.output_text.annotation.added": _OF_PART | {"annotation_index", "annotation"},
    "response.refusal.delta": _OF_PART | {"delta"},
    "response.refusal.done": _OF_PART | {"refusal"},
    "response.reasoning_text.delta": _OF_PART | {"delta"},
    "response.reasoning_text.done": _OF_PART | {"text"},
    "response.reasoning_summary_part.added": _OF_SUMMARY | {"part"},
    "response.reasoning_summary_part.done": _OF_SUMMARY | {"part"},
    "response.reasoning_summary_text.delta": _OF_SUMMARY | {"delta"},
    "response.reasoning_summary_text.done": _OF_SUMMARY | {"text"},
    "response.function_call_arguments.delta": _OF_CALL | {"delta"},
    "response.function_call_arguments.done": _OF_CALL | {"arguments"},
    "error": frozenset({"type", "sequence_number", "error"}),
}
"""Stream events by type: the spec's stream union."""

ERROR: Final = frozenset({"type", "code", "message", "param"})
"""The ``error`` event's ``error`` object."""


def missing_in_event(event: Mapping[str, Any]) -> list[str]:
    """The spec's fields ``event`` (a stream event's JSON) lacks, as paths; its response,
    item or part checked too. An event of a type the spec's union has not is one such."""
    kind = event.get("type")
    required = EVENTS.get(str(kind))
    if required is None:
        return [f"{kind}: not a type of the spec's stream"]
    found = _absent(str(kind), event, required)
    if "response" in required and isinstance(event.get("response"), Mapping):
        found += missing_in_response(event["response"], f"{kind}.response")
    if isinstance(event.get("item"), Mapping):
        found += missing_in_item(event["item"], f"{kind}.item")
    if isinstance(event.get("part"), Mapping):
        found += _missing_in_part(event["part"], f"{kind}.part")
    if kind == "error" and isinstance(event.get("error"), Mapping):
        found += _absent("error.error", event["error"], ERROR)
    return found + _missing_in_logprobs(event, str(kind))


def missing_in_response(response: Mapping[str, Any], path: str = "response") -> list[str]:
    """The spec's fields a Response object lacks, its items', parts' and tools' too."""
    found = _absent(path, response, RESPONSE)
    for name, required in _NESTED.items():
        value = response.get(name)
        if isinstance(value, Mapping):
            found += _absent(f"{path}.{name}", value, required)
    for index, item in enumerate(response.get("output") or []):
        found += missing_in_item(item, f"{path}.output[{index}]")
    for index, tool in enumerate(response.get("tools") or []):
        if tool.get("type") == "function":
            found += _absent(f"{path}.tools[{index}]", tool, FUNCTION_TOOL)
    return found


def missing_in_item(item: Mapping[str, Any], path: str) -> list[str]:
    """The spec's fields an output item of a kind it models lacks, its parts' too."""
    required = ITEMS.get(str(item.get("type")))
    if required is None:
        return []
    found = _absent(path, item, required)
    for field in ("content", "summary"):
        for index, part in enumerate(item.get(field) or []):
            found += _missing_in_part(part, f"{path}.{field}[{index}]")
    return found


def _missing_in_part(part: Mapping[str, Any], path: str) -> list[str]:
    required = PARTS.get(str(part.get("type")))
    if required is None:
        return []
    return _absent(path, part, required) + _missing_in_logprobs(part, path)


def _missing_in_logprobs(holder: Mapping[str, Any], path: str) -> list[str]:
    """The fields the token entries of ``holder``'s ``logprobs`` (if any) lack."""
    found: list[str] = []
    for index, entry in enumerate(holder.get("logprobs") or []):
        at = f"{path}.logprobs[{index}]"
        found += _absent(at, entry, LOGPROB)
        for rank, top in enumerate(entry.get("top_logprobs") or []):
            found += _absent(f"{at}.top_logprobs[{rank}]", top, TOP_LOGPROB)
    return found


def _absent(path: str, found: Mapping[str, Any], required: frozenset[str]) -> list[str]:
    return [f"{path}.{name}" for name in sorted(required - found.keys())]
