"""A Responses upstream's replies read into deltas: a stream's events
(:class:`StreamState`) and a whole response (:func:`from_upstream_response`) turn into the
same deltas, using the upstream ``output_index`` of a function call as its tool index:
each message begun (:class:`MessageStart`, with its ``phase``), its text (then its
annotations, their text indices moved to where their part stands in the message's one text:
:class:`Annotation`) and its refusal; a custom tool's call begun (:class:`CallBegun`),
its input's pieces (:class:`CallInput`), then its whole item (:class:`OutputItem`);
reasoning from its text, else from its summary (a :class:`SummaryBreak` before each part
after the first); an item that streamed no deltas from its
``response.output_item.done``. llama-server's own ``/v1/responses`` numbers nothing: there
an item's place is the order it was added in, and an event's item the one its ``item_id``
names; an event that neither numbers nor names an item it needs is malformed. An error
the reply reports is raised as :class:`Reported`, for the backend to classify
(:mod:`.openai_responses`)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from stateway.backends.upstream_status import reports_error
from stateway.backends.upstream_values import count, obj, text
from stateway.core import logprobs
from stateway.core.inference import (
    Annotation,
    Answered,
    CallBegun,
    CallInput,
    Delta,
    Finish,
    MessageStart,
    OutputItem,
    ReasoningDelta,
    ReasoningSignature,
    RefusalDelta,
    SummaryBreak,
    TextDelta,
    ToolCallDelta,
    UsageReport,
)
from stateway.core.items import Item
from stateway.core.reasoning import SEALED_BY_RESPONSES
from stateway.core.usage import Usage

_TERMINAL = frozenset({"response.completed", "response.incomplete"})
_MODELLED_OUTPUT = frozenset({"message", "reasoning", "function_call"})
"""Output item types turned into deltas; any other comes back whole."""
_SUMMARY_BREAK = SummaryBreak("\n\n")
"""Between a reasoning summary's parts: a paragraph apart in the reasoning's text."""


class Reported(Exception):
    """The error a reply reports (its ``error`` member), classified by the backend."""

    def __init__(self, error: object) -> None:
        super().__init__()
        self.error = error


class StreamState:
    """Follows one upstream event stream; knows which items got deltas, so that an item
    whose content came only whole (on ``response.output_item.done``) is not lost, and
    one that streamed is not repeated."""

    __slots__ = (
        "answered",
        "finished",
        "maker",
        "part",
        "places",
        "streamed",
        "summaries",
        "texts",
        "tokens",
    )

    def __init__(
        self,
        tokens: bool = False,
        answered: Answered | None = None,
        maker: str = SEALED_BY_RESPONSES,
    ) -> None:
        self.tokens = tokens
        """Whether the text's tokens (``logprobs``) were asked for: read only then."""
        self.maker = maker
        """In front of a blob sealing reasoning: its backend's (:func:`responses_maker`)."""
        self.answered = answered
        """A traced attempt's: the response's id and model noted as it ends."""
        self.finished = False
        self.streamed: set[int] = set()
        """Output indexes of the items that streamed their text, reasoning or arguments."""
        self.summaries: set[int] = set()
        """Output indexes of reasoning items read from their summary (no reasoning text)."""
        self.part = 0
        """The summary part being read."""
        self.texts: dict[tuple[int, int], int] = {}
        """The length of each text part done, by output and content index: where the
        annotations of a message's later parts point from in its one text."""
        self.places: dict[str, int] = {}
        """Where the upstream numbers no items (llama-server): each item's place by its
        id, in the order the items were added."""

    def feed(self, event: dict[str, Any]) -> Iterator[Delta]:
        kind = event.get("type")
        if kind == "response.output_text.delta":
            index = event.get("output_index")  # the hot path's, inline
            self.streamed.add(self._index(event, 0) if index is None else index)
            given = event.get("logprobs") if self.tokens else None
            yield TextDelta(text(event["delta"]) or "", logprobs.tokens(given) if given else None)
        elif kind == "response.refusal.delta":
            self.streamed.add(self._index(event, 0))
            yield RefusalDelta(text(event["delta"]) or "")
        elif kind == "response.reasoning_text.delta":
            index = self._index(event, 0)
            if index not in self.summaries:
                self.streamed.add(index)
                yield ReasoningDelta(text(event["delta"]) or "")
        elif kind == "response.reasoning_summary_text.delta":
            yield from self._summary(event, text(event["delta"]) or "")
        elif kind == "response.output_item.added":
            item = event["item"]
            made = item.get("type")
            if made == "function_call":
                yield _call(count(self._item_index(event, item)), {**item, "arguments": ""})
            else:
                if "output_index" not in event and "id" in item:
                    self._item_index(event, item)  # placed for the deltas naming it
                if made == "message":
                    yield MessageStart(text(item.get("phase")))
                elif made == "custom_tool_call":
                    yield CallBegun(item)
        elif kind == "response.function_call_arguments.delta":
            index = self._index(event)
            self.streamed.add(index)
            yield ToolCallDelta(count(index), None, None, text(event["delta"]) or "")
        elif kind == "response.custom_tool_call_input.delta":
            if piece := text(event["delta"]):
                yield CallInput(piece)
        elif kind == "response.output_item.done":
            item = event["item"]
            yield from self._done(item, self._item_index(event, item))
        elif kind == "response.output_text.done":
            place = (self._index(event, 0), count(event.get("content_index")))
            self.texts[place] = len(text(event.get("text")) or "")
        elif kind == "response.output_text.annotation.added":
            yield from self._annotation(event)
        elif kind in _TERMINAL:
            self.finished = True
            response = event["response"]
            if self.answered is not None:
                self.answered.note(response.get("id"), response.get("model"))
            yield from _finish(response)
        elif kind in ("response.failed", "error"):
            raise Reported(
                (event.get("response") or {}).get("error") or event.get("error") or event
            )
        elif kind is None and "error" in event:  # llama-server's: its Chat error chunk
            raise Reported(event["error"])

    def _index(self, event: dict[str, Any], unplaced: int | None = None) -> int:
        """A delta's item: its ``output_index``; else the place of the item its ``item_id``
        names (llama-server's); else ``unplaced``, if given (a text delta naming neither
        is the first item's). An item no event can place is a ``KeyError``: malformed."""
        index: int | None = event.get("output_index")
        if index is not None:
            return index
        item_id = event.get("item_id")
        place = self.places.get(item_id) if isinstance(item_id, str) else None
        if place is not None:
            return place
        if unplaced is None:
            raise KeyError("output_index")
        return unplaced

    def _item_index(self, event: dict[str, Any], item: dict[str, Any]) -> int:
        """The place of an item added or done: its ``output_index``; else (llama-server)
        the place its ``id`` was added at, or, for one not seen yet, the next place. An
        item without either is a ``KeyError``: malformed."""
        index: int | None = event.get("output_index")
        if index is not None:
            return index
        place = self.places.get(item["id"])
        if place is None:
            place = self.places[item["id"]] = len(self.places)
        return place

    def _summary(self, event: dict[str, Any], delta: str) -> Iterator[Delta]:
        """A reasoning item's summary is its text when it streams no reasoning text (as
        OpenAI's reasoning models stream it); each part after the first begins with a
        :class:`SummaryBreak`."""
        index = self._index(event, 0)
        if index in self.streamed and index not in self.summaries:
            return  # it streams its reasoning text: the summary would repeat it
        part = event.get("summary_index", 0)
        if index in self.summaries and part != self.part:
            yield _SUMMARY_BREAK
        self.summaries.add(index)
        self.streamed.add(index)
        self.part = part
        if delta:
            yield ReasoningDelta(delta)

    def _annotation(self, event: dict[str, Any]) -> Iterator[Delta]:
        """An annotation of a streamed text part, its indices moved past the message's
        earlier parts (none: nothing)."""
        index, part = self._index(event, 0), count(event.get("content_index"))
        offset = sum(
            size for (at, earlier), size in self.texts.items() if at == index and earlier < part
        )
        if (annotation := event.get("annotation")) is not None:
            yield Annotation(_moved(obj(annotation), offset))

    def _done(self, item: dict[str, Any], index: int) -> Iterator[Delta]:
        kind = item.get("type")
        if kind == "custom_tool_call":  # whole, it ends the call begun
            yield OutputItem(item)
            return
        if index in self.streamed:
            if kind == "reasoning":
                yield from _seal(item, self.maker)
            return
        if kind == "function_call":
            yield _call(count(index), item)
        elif kind in _MODELLED_OUTPUT:  # whole: what a non-streamed reply would say of it
            yield from _whole(item, self.tokens, self.maker, started=True)
        else:
            yield OutputItem(item)


def from_upstream_response(
    payload: dict[str, Any],
    tokens: bool = False,
    answered: Answered | None = None,
    maker: str = SEALED_BY_RESPONSES,
) -> Iterator[Delta]:
    """Deltas of a whole ``response`` (its id and model noted in ``answered``, if given;
    its reasoning's blobs behind ``maker``)."""
    if payload.get("status") == "failed" or reports_error(payload, "output"):
        raise Reported(payload.get("error") or {})
    if answered is not None:
        answered.note(payload.get("id"), payload.get("model"))
    for index, item in enumerate(payload.get("output") or ()):
        if item.get("type") == "function_call":
            yield _call(index, item)
        elif item.get("type") in _MODELLED_OUTPUT:
            yield from _whole(item, tokens, maker)
        else:
            yield OutputItem(item)
    yield from _finish(payload)


def _whole(
    item: dict[str, Any], tokens: bool, maker: str, *, started: bool = False
) -> Iterator[Delta]:
    """A whole reasoning item or message as deltas (a message after its
    :class:`MessageStart`, unless ``started``): its text, then its refusal."""
    if item.get("type") == "reasoning":
        reasoning = "".join(_texts(item.get("content")))
        if reasoning:
            yield ReasoningDelta(reasoning)
        else:  # its summary, each part after the first past a break, as it would stream
            for at, part in enumerate(_texts(item.get("summary"))):
                if at:
                    yield _SUMMARY_BREAK
                if part:
                    yield ReasoningDelta(part)
        yield from _seal(item, maker)
        return
    if not started:
        yield MessageStart(text(item.get("phase")))
    parts = item.get("content")
    answer = "".join(_texts(parts, "output_text"))
    if answer:
        yield TextDelta(answer, _tokens(parts) if tokens else None)
    yield from _annotations(parts)
    refusal = "".join(_texts(parts, "refusal", "refusal"))
    if refusal:
        yield RefusalDelta(refusal)


def _annotations(parts: Any) -> Iterator[Delta]:
    """The annotations of a whole message's ``output_text`` parts, in order, their indices
    moved to where their part stands in the message's one text."""
    offset = 0
    for part in parts or ():
        if part.get("type") != "output_text":
            continue
        for annotation in part.get("annotations") or ():
            if annotation is not None:
                yield Annotation(_moved(obj(annotation), offset))
        offset += len(text(part.get("text")) or "")


def _moved(annotation: dict[str, Any], offset: int) -> Item:
    """``annotation`` with its indices into the text (``start_index``, ``end_index``)
    moved by ``offset``; another index (a file citation's ``index``, its file's place in a
    list) stays."""
    moved = dict(annotation)
    for key in ("start_index", "end_index"):
        value = moved.get(key)
        if offset and isinstance(value, int) and not isinstance(value, bool):
            moved[key] = value + offset
    return moved


def _seal(item: dict[str, Any], maker: str) -> Iterator[Delta]:
    """A hidden reasoning item's ``encrypted_content``, which ends it, if it has one."""
    blob = text(item.get("encrypted_content"))
    if blob and not any(_texts(item.get("content"))):
        yield ReasoningSignature(maker + blob)


def _call(index: int, item: dict[str, Any]) -> ToolCallDelta:
    return ToolCallDelta(
        index, text(item.get("call_id")), text(item.get("name")), text(item.get("arguments")) or ""
    )


def _tokens(parts: Any) -> list[Item] | None:
    """The tokens of a message's ``output_text`` parts, when they carry any."""
    tokens = [
        token
        for part in parts or ()
        if part.get("type") == "output_text" and part.get("logprobs")
        for token in logprobs.tokens(part["logprobs"])
    ]
    return tokens or None


def _texts(parts: Any, kind: str | None = None, field: str = "text") -> list[str]:
    """The ``field`` of each part (of type ``kind``, if given)."""
    return [
        text(part.get(field)) or ""
        for part in parts or ()
        if kind is None or part.get("type") == kind
    ]


def _finish(response: dict[str, Any]) -> Iterator[Delta]:
    usage = obj(response.get("usage"))
    if usage:
        details = obj(usage.get("input_tokens_details"))
        yield UsageReport(
            Usage(
                input_tokens=count(usage.get("input_tokens")),
                output_tokens=count(usage.get("output_tokens")),
                cached_tokens=count(details.get("cached_tokens")),
                reasoning_tokens=count(
                    obj(usage.get("output_tokens_details")).get("reasoning_tokens")
                ),
                cache_write_tokens=count(details.get("cache_write_tokens")),
            )
        )
    reason = ((response.get("incomplete_details") or {}).get("reason")) or ""
    if response.get("status") == "incomplete":
        yield Finish("content_filter" if reason == "content_filter" else "length")
    else:
        yield Finish("stop")
