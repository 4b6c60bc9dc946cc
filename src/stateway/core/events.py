"""Canonical stream events of a run.

They follow the Open Responses streaming model one to one, so a run's event log numbered
from 0 *is* its ``sequence_number`` order and any subscriber can resume from a number.
Other protocols (Chat Completions, Messages) encode the subset they need. Events are small
slotted objects: one is built per streamed delta.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from stateway.core.items import Item
from stateway.core.response import ResponseState


@dataclass(slots=True, frozen=True)
class ResponseCreated:
    response: ResponseState


@dataclass(slots=True, frozen=True)
class ResponseInProgress:
    response: ResponseState


@dataclass(slots=True, frozen=True)
class ItemAdded:
    output_index: int
    item: Item


@dataclass(slots=True, frozen=True)
class PartAdded:
    output_index: int
    content_index: int
    item_id: str
    part: Item


@dataclass(slots=True, frozen=True)
class TextDelta:
    output_index: int
    content_index: int
    item_id: str
    delta: str
    logprobs: list[Item] | None = None
    """The delta's tokens (:mod:`stateway.core.logprobs`); None: none were asked for."""


@dataclass(slots=True, frozen=True)
class TextDone:
    output_index: int
    content_index: int
    item_id: str
    text: str
    logprobs: list[Item] | None = None


@dataclass(slots=True, frozen=True)
class AnnotationAdded:
    """An annotation of an ``output_text`` part (a ``url_citation`` of the gateway's web
    search), announced before the part's text is done; ``annotation_index`` is its place
    in the part's ``annotations``."""

    output_index: int
    content_index: int
    item_id: str
    annotation_index: int
    annotation: Item


@dataclass(slots=True, frozen=True)
class RefusalDelta:
    output_index: int
    content_index: int
    item_id: str
    delta: str


@dataclass(slots=True, frozen=True)
class RefusalDone:
    output_index: int
    content_index: int
    item_id: str
    refusal: str


@dataclass(slots=True, frozen=True)
class ReasoningDelta:
    output_index: int
    content_index: int
    item_id: str
    delta: str


@dataclass(slots=True, frozen=True)
class ReasoningDone:
    output_index: int
    content_index: int
    item_id: str
    text: str


@dataclass(slots=True, frozen=True)
class SummaryPartAdded:
    """A reasoning item's summary part opens (its text then streams as summary deltas)."""

    output_index: int
    summary_index: int
    item_id: str


@dataclass(slots=True, frozen=True)
class SummaryTextDelta:
    output_index: int
    summary_index: int
    item_id: str
    delta: str


@dataclass(slots=True, frozen=True)
class SummaryTextDone:
    output_index: int
    summary_index: int
    item_id: str
    text: str


@dataclass(slots=True, frozen=True)
class SummaryPartDone:
    output_index: int
    summary_index: int
    item_id: str
    text: str


@dataclass(slots=True, frozen=True)
class Compacting:
    """The summary of a ``compaction`` item was sampled (it carries no summary text)."""

    output_index: int
    item_id: str


@dataclass(slots=True, frozen=True)
class PartDone:
    output_index: int
    content_index: int
    item_id: str
    part: Item


@dataclass(slots=True, frozen=True)
class ArgumentsDelta:
    output_index: int
    item_id: str
    delta: str


@dataclass(slots=True, frozen=True)
class ArgumentsDone:
    output_index: int
    item_id: str
    name: str
    arguments: str


@dataclass(slots=True, frozen=True)
class CustomInputDelta:
    output_index: int
    item_id: str
    delta: str


@dataclass(slots=True, frozen=True)
class CustomInputDone:
    output_index: int
    item_id: str
    input: str


@dataclass(slots=True, frozen=True)
class ToolProgress:
    """A step of a gateway-owned tool item: ``kind`` is the wire event's type, one of
    ``TOOL_PROGRESS`` (``response.mcp_call.completed``, ...)."""

    kind: str
    output_index: int
    item_id: str


TOOL_PROGRESS = frozenset(
    {
        "response.mcp_list_tools.in_progress",
        "response.mcp_list_tools.completed",
        "response.mcp_list_tools.failed",
        "response.mcp_call.in_progress",
        "response.mcp_call.completed",
        "response.mcp_call.failed",
        "response.web_search_call.in_progress",
        "response.web_search_call.searching",
        "response.web_search_call.completed",
    }
)


@dataclass(slots=True, frozen=True)
class McpArgumentsDelta:
    output_index: int
    item_id: str
    delta: str


@dataclass(slots=True, frozen=True)
class McpArgumentsDone:
    output_index: int
    item_id: str
    arguments: str


@dataclass(slots=True, frozen=True)
class ItemDone:
    output_index: int
    item: Item


@dataclass(slots=True, frozen=True)
class Notice:
    """An event a surface adds to a running response's stream that is not its output
    (WebSocket steering's ``response.steer.accepted`` and ``.failed``): its wire ``type``
    and fields, all but ``sequence_number``, which is its place in the log
    (:meth:`~stateway.core.runs.Run.note`)."""

    type: str
    fields: dict[str, Any]


@dataclass(slots=True, frozen=True)
class ResponseFinished:
    """The one terminal event: completed, incomplete or failed, with the whole response."""

    response: ResponseState


Event = (
    ResponseCreated
    | ResponseInProgress
    | ItemAdded
    | PartAdded
    | TextDelta
    | TextDone
    | AnnotationAdded
    | RefusalDelta
    | RefusalDone
    | ReasoningDelta
    | ReasoningDone
    | SummaryPartAdded
    | SummaryTextDelta
    | SummaryTextDone
    | SummaryPartDone
    | Compacting
    | PartDone
    | ArgumentsDelta
    | ArgumentsDone
    | CustomInputDelta
    | CustomInputDone
    | ToolProgress
    | McpArgumentsDelta
    | McpArgumentsDone
    | ItemDone
    | Notice
    | ResponseFinished
)
