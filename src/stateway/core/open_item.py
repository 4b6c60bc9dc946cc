"""An output item while the assembler (:mod:`stateway.core.assembler`) gathers its
deltas, and the parts it is built of."""

from __future__ import annotations

from stateway.core.ids import new_id
from stateway.core.inference import ToolCallDelta
from stateway.core.items import CUSTOM_TOOL_CALL, FUNCTION_CALL, MESSAGE, REASONING, Item
from stateway.core.tools.catalog import Entry
from stateway.core.tools.custom_tools import custom_input


class OpenItem:
    """An output item while its deltas arrive: what it has gathered, and what it is."""

    __slots__ = (
        "annotations",
        "begun",
        "breaks",
        "chunks",
        "citations",
        "entry",
        "index",
        "item",
        "logprobs",
        "refusal",
        "text_done",
        "text_part",
        "tool_index",
        "upstream_id",
        "withheld",
    )

    def __init__(
        self,
        index: int,
        item: Item,
        tool_index: int | None = None,
        upstream_id: str | None = None,
    ) -> None:
        self.index = index
        self.item = item
        self.chunks: list[str] = []
        self.tool_index = tool_index
        self.upstream_id = upstream_id
        """The call id upstream gave, which may differ from the ``call_id`` issued."""
        self.entry: Entry | None = None
        """A gateway-owned call's catalog entry."""
        self.logprobs: list[Item] | None = None
        """A message's tokens, when its deltas carried them."""
        self.citations: list[Item] = []
        """A message's citations, as its upstream gave them."""
        self.annotations: list[Item] = []
        """A message's annotations, as its upstream gave them (a Responses upstream's)."""
        self.text_part = False
        """A message's ``output_text`` part was opened (its content index is 0)."""
        self.refusal: list[str] | None = None
        """A message's refusal so far, once it has a ``refusal`` part."""
        self.text_done: Item | None = None
        """A message's ``output_text`` part, done when a refusal followed it."""
        self.breaks: list[int] | None = None
        """A reasoning item's, once its summary has more than one part: where each break
        between two parts is in ``chunks`` (a chunk of its own)."""
        self.withheld = False
        """A call of a tool the stages withheld: not in the output, never announced
        (:mod:`stateway.core.tools.withheld`); ``index`` is where it was made."""
        self.begun = False
        """A call an upstream began whole (:meth:`OutputAssembler.call_begun
        <stateway.core.assembler.OutputAssembler.call_begun>`): its chunks are its raw
        input, and its whole item ends it."""

    def so_far(self) -> Item:
        """The item with what it has gathered so far (its text or arguments, not yet in
        the item itself): what a reader of a running response sees of it."""
        item, text = self.item, "".join(self.chunks)
        if item["type"] == MESSAGE:
            content = []
            if self.text_part:
                part = text_part("output_text", text)
                if self.logprobs is not None:
                    part["logprobs"] = list(self.logprobs)
                if self.citations:
                    part["citations"] = list(self.citations)
                if self.annotations:
                    part["annotations"] = list(self.annotations)
                content.append(part)
            if self.refusal is not None:
                content.append({"type": "refusal", "refusal": "".join(self.refusal)})
            return {**item, "content": content}
        if item["type"] == REASONING:
            return {**item, "content": [text_part("reasoning_text", text)]}
        if item["type"] == FUNCTION_CALL:
            return {**item, "arguments": text}
        if item["type"] == CUSTOM_TOOL_CALL:  # its raw input, or its function's arguments
            return {**item, "input": text if self.begun else custom_input(text)}
        return item


def new_call(current: OpenItem, delta: ToolCallDelta) -> bool:
    """Whether ``delta`` starts another call than ``current``: another upstream id, with
    the function it calls (a call opens naming it: a fragment that names none continues
    the call under any id, as servers whose ids change between a call's fragments send
    them, Poolside's and mlx-openai-server's before 2026-03)."""
    return delta.call_id is not None and delta.call_id != current.upstream_id and bool(delta.name)


def new_reasoning() -> Item:
    """A reasoning item, opened empty."""
    return {
        "id": new_id("rs"),
        "type": REASONING,
        "summary": [],
        "content": [],
        "status": "in_progress",
    }


def text_part(kind: str, text: str) -> Item:
    """A text part of ``kind`` as output items hold it."""
    if kind == "output_text":
        return {"type": "output_text", "text": text, "annotations": [], "logprobs": []}
    return {"type": kind, "text": text}
