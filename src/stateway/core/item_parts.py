"""The parts of a message and of a reasoning item, done as the assembler
(:mod:`stateway.core.assembler`) closes their item, each with its events.

A message's ``output_text`` part is done with the annotations its text cites of the
round's web searches, the tokens (``logprobs``) and the citations its upstream gave; a
refusal part after it. A message the upstream began and left empty still gets an empty
text part. A reasoning item's summary, when one is asked for, is its text; its seal, when
its upstream gave none, the gateway's own over that text.
"""

from __future__ import annotations

from stateway.core import events as ev
from stateway.core.call_items import Emit
from stateway.core.compaction.reasoning_output import ReasoningOutput
from stateway.core.items import Item
from stateway.core.open_item import OpenItem, text_part
from stateway.core.tools import web_search
from stateway.core.tools.session import ToolSession


def open_text(emit: Emit, message: OpenItem) -> None:
    """Open ``message``'s ``output_text`` part (its content index 0)."""
    message.text_part = True
    part = text_part("output_text", "")
    emit(ev.PartAdded(message.index, 0, message.item["id"], part))


def close_message(
    emit: Emit, current: OpenItem, text: str, tools: ToolSession | None
) -> list[Item]:
    """A message's parts, done: its text (an empty one when it has no refusal
    either: a message the upstream began and left empty), then its refusal."""
    item_id = current.item["id"]
    content: list[Item] = []
    if current.text_done is not None:
        content.append(current.text_done)
    elif current.text_part or current.refusal is None:
        if not current.text_part:
            open_text(emit, current)
        content.append(close_text(emit, current, text, tools))
    if current.refusal is not None:
        index = len(content)
        refusal = "".join(current.refusal)
        part = {"type": "refusal", "refusal": refusal}
        emit(ev.RefusalDone(current.index, index, item_id, refusal))
        emit(ev.PartDone(current.index, index, item_id, part))
        content.append(part)
    return content


def close_text(emit: Emit, current: OpenItem, text: str, tools: ToolSession | None) -> Item:
    """A message's ``output_text`` part, done (its annotations, citations and tokens on
    it): its annotations, its upstream's then the gateway's web search's, each announced
    before the text is done."""
    item_id = current.item["id"]
    part = text_part("output_text", text)
    annotations = list(current.annotations)
    if tools is not None and tools.sources:
        annotations += web_search.citations(text, tools.sources)
    if annotations:
        part["annotations"] = annotations
        for at, annotation in enumerate(annotations):
            emit(ev.AnnotationAdded(current.index, 0, item_id, at, annotation))
    if current.logprobs is not None:
        part["logprobs"] = current.logprobs
    if current.citations:
        part["citations"] = current.citations
    emit(ev.TextDone(current.index, 0, item_id, text, current.logprobs))
    emit(ev.PartDone(current.index, 0, item_id, part))
    return part


def finish_reasoning(
    emit: Emit, reasoning: ReasoningOutput, index: int, item: Item, text: str
) -> None:
    """A closed reasoning item's summary (when asked for) and seal (unless its upstream
    sealed it)."""
    if reasoning.summary:
        emit(ev.SummaryTextDone(index, 0, item["id"], text))
        emit(ev.SummaryPartDone(index, 0, item["id"], text))
        item["summary"] = [{"type": "summary_text", "text": text}]
    if reasoning.seal is not None and not item.get("encrypted_content"):
        item["encrypted_content"] = reasoning.seal(text)  # an upstream's own seal stays
