"""Canonical stream events of a run.

They follow the Open Responses streaming model one to one, so a run's event log numbered
from 0 *is* its ``sequence_number`` order and any subscriber can resume from a number.
Other protocols (Chat Completions, Messages) encode the subset they need. Events are small
slotted objects: one is built per streamed delta.
"""

from __future__ import annotations

from typing import Any

from stateway.core.immutable import immutable
from stateway.core.items import Item
from stateway.core.response import ResponseState


@immutable
class ResponseCreated:
    response: ResponseState


@immutable
class ResponseQueued:
    """A background response announced waiting to start, right after its
    ``response.created``; ``response.in_progress`` follows once its run starts working
    (:mod:`stateway.core.run_row`)."""

    response: ResponseState


@immutable
class ResponseInProgress:
    response: ResponseState


@immutable
class ItemAdded:
    output_index: int
    item: Item


@immutable
class PartAdded:
    output_index: int
    content_index: int
    item_id: str
    part: Item


@immutable
class TextDelta:
    output_index: int
    content_index: int
    item_id: str
    delta: str
    logprobs: list[Item] | None = None
    """The delta's tokens (:mod:`stateway.core.logprobs`); None: none were asked for."""


@immutable
class TextDone:
    output_index: int
    content_index: int
    item_id: str
    text: str
    logprobs: list[Item] | None = None


@immutable
class AnnotationAdded:
    """An annotation of an ``output_text`` part (a Responses upstream's, a ``url_citation``
    of the gateway's web search), announced before the part's text is done;
    ``annotation_index`` is its place in the part's ``annotations``."""

    output_index: int
    content_index: int
    item_id: str
    annotation_index: int
    annotation: Item


@immutable
class RefusalDelta:
    output_index: int
    content_index: int
    item_id: str
    delta: str


@immutable
class RefusalDone:
    output_index: int
    content_index: int
    item_id: str
    refusal: str


@immutable
class ReasoningDelta:
    output_index: int
    content_index: int
    item_id: str
    delta: str


@immutable
class ReasoningDone:
    output_index: int
    content_index: int
    item_id: str
    text: str


@immutable
class SummaryPartAdded:
    """A reasoning item's summary part opens (its text then streams as summary deltas)."""

    output_index: int
    summary_index: int
    item_id: str


@immutable
class SummaryTextDelta:
    output_index: int
    summary_index: int
    item_id: str
    delta: str


@immutable
class SummaryTextDone:
    output_index: int
    summary_index: int
    item_id: str
    text: str


@immutable
class SummaryPartDone:
    output_index: int
    summary_index: int
    item_id: str
    text: str


@immutable
class Compacting:
    """The summary of a ``compaction`` item was sampled (it carries no summary text)."""

    output_index: int
    item_id: str


@immutable
class PartDone:
    output_index: int
    content_index: int
    item_id: str
    part: Item


@immutable
class ArgumentsDelta:
    output_index: int
    item_id: str
    delta: str


@immutable
class ArgumentsDone:
    output_index: int
    item_id: str
    name: str
    arguments: str


@immutable
class CustomInputDelta:
    output_index: int
    item_id: str
    delta: str


@immutable
class CustomInputDone:
    output_index: int
    item_id: str
    input: str


@immutable
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


@immutable
class McpArgumentsDelta:
    output_index: int
    item_id: str
    delta: str


@immutable
class McpArgumentsDone:
    output_index: int
    item_id: str
    arguments: str


@immutable
class ItemDone:
    output_index: int
    item: Item


@immutable
class Notice:
    """An event a surface adds to a running response's stream that is not its output
    (WebSocket steering's ``response.steer.accepted`` and ``.failed``): its wire ``type``
    and fields, all but ``sequence_number``, which is its place in the log
    (:meth:`~stateway.core.runs.Run.note`)."""

    type: str
    fields: dict[str, Any]


@immutable
class ResponseFinished:
    """The one terminal event: completed, incomplete or failed, with the whole response."""

    response: ResponseState


Event = (
    ResponseCreated
    | ResponseQueued
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
