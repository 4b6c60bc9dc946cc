"""The parts of a message and of a reasoning item, done as the assembler
(:mod:`stateway.core.assembler`) closes their item, each with its events.

A message's ``output_text`` part is done with the annotations its text cites of the
round's web searches, the tokens (``logprobs``) and the citations its upstream gave; a
refusal part after it. A message the upstream began and left empty still gets an empty
text part. A reasoning item's summary, when one is asked for, is its text, in the parts
its upstream summarized it in (a Responses upstream's ``summary_index``: each a part of
its own, a break between them in the text); its seal, when its upstream gave none, the
gateway's own over that text.
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


def close_reasoning(emit: Emit, current: OpenItem, text: str) -> list[Item]:
    """A reasoning item's part, done: its whole ``text``."""
    item_id = current.item["id"]
    part = {"type": "reasoning_text", "text": text}
    emit(ev.ReasoningDone(current.index, 0, item_id, text))
    emit(ev.PartDone(current.index, 0, item_id, part))
    return [part]


def break_summary(
    emit: Emit, reasoning: ReasoningOutput | None, current: OpenItem, text: str
) -> None:
    """The reasoning ``current``'s summary goes on in another part: its text gets ``text``
    between the two (a chunk of its own); with a summary asked for, the part so far is
    done and the next one added."""
    item_id = current.item["id"]
    breaks = current.breaks
    if breaks is None:
        breaks = current.breaks = []
    summary = reasoning is not None and reasoning.summary
    if summary:
        part, done = len(breaks), "".join(current.chunks[breaks[-1] + 1 if breaks else 0 :])
        emit(ev.SummaryTextDone(current.index, part, item_id, done))
        emit(ev.SummaryPartDone(current.index, part, item_id, done))
    breaks.append(len(current.chunks))
    current.chunks.append(text)
    emit(ev.ReasoningDelta(current.index, 0, item_id, text))
    if summary:
        emit(ev.SummaryPartAdded(current.index, len(breaks), item_id))


def finish_reasoning(emit: Emit, reasoning: ReasoningOutput, current: OpenItem, text: str) -> None:
    """A closed reasoning item's summary (when asked for: its last part done, each part
    as its own ``summary_text``) and seal over its whole ``text`` (unless its upstream
    sealed it)."""
    item = current.item
    if reasoning.summary:
        parts = summary_parts(current)
        emit(ev.SummaryTextDone(current.index, len(parts) - 1, item["id"], parts[-1]))
        emit(ev.SummaryPartDone(current.index, len(parts) - 1, item["id"], parts[-1]))
        item["summary"] = [{"type": "summary_text", "text": part} for part in parts]
    if reasoning.seal is not None and not item.get("encrypted_content"):
        item["encrypted_content"] = reasoning.seal(text)  # an upstream's own seal stays


def summary_parts(current: OpenItem) -> list[str]:
    """The texts of a reasoning item's summary parts: its text, split at its breaks."""
    chunks, start, parts = current.chunks, 0, []
    for at in current.breaks or ():
        parts.append("".join(chunks[start:at]))
        start = at + 1
    parts.append("".join(chunks[start:]))
    return parts
