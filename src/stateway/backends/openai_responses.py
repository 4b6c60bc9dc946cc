"""Backend for upstreams speaking a *stateless* OpenAI Responses API (vLLM's
``/v1/responses`` with ``store: false``): the whole context is sent every round, in the
body :mod:`.responses_request` builds; replies become deltas here.

A stream's events (:class:`_StreamState`) and ``from_upstream_response`` turn replies into
the same deltas, using the upstream ``output_index`` of a function call as its tool
index: each message begun (:class:`MessageStart`, with its ``phase``), its text and its
refusal; reasoning from its text, else from its summary; an item that streamed no deltas
from its ``response.output_item.done``. llama-server's own ``/v1/responses`` numbers
nothing: there an item's place is the order it was added in, and an event's item the one
its ``item_id`` names; an event that neither numbers nor names an item it needs is
malformed, as before.

Where the upstream hides its reasoning (OpenAI's reasoning models: no reasoning text, at
most a summary), its ``encrypted_content`` is all the model can continue from when
nothing is stored: it is kept on the item
(:data:`~stateway.core.reasoning.SEALED_BY_RESPONSES`, as a :class:`ReasoningSignature`)
and sent back as it came. Where the reasoning text is given (vLLM), the text is what is
kept.

The API has no field for stop sequences (a Chat client's ``stop``, a Messages client's
``stop_sequences``): the gateway ends the output at them itself
(:mod:`stateway.backends.stop_sequences`).

An error the upstream reports in a reply (a ``response.failed`` or ``error`` event, an
event that is only ``{"error": ...}`` as llama-server ends its stream with, a
non-streamed response ``failed``, or a body that is only an error: as some proxies answer,
to a streamed request too, whose JSON reply is read as a non-streamed one) is the error it
names
(:func:`~stateway.backends.upstream_status.classify_reported`, as on the other backends:
``context_length_exceeded``, ``rate_limit_exceeded``, an error's ``type``), in the
upstream's words with its key masked.

This upstream speaks Responses natively (``carries_unknown_types``): input items and tools
of types the gateway does not model are sent untouched, as are the ``shell`` and
``apply_patch`` tools and their items; output items of such types come back whole
(:class:`OutputItem`, on ``response.output_item.done``; their own intermediate events are
not relayed).

With ``cache_salted`` (``cache_salt = "tenant"``) every call carries its tenant's
``cache_salt`` (vLLM's Responses API takes it as its Chat Completions does), over the
backend's ``extra_body``.

``min_output_tokens`` is the least ``max_output_tokens`` the server takes, as configured
(hosted OpenAI's is 16, vLLM takes any): the tool loop asks no round for less
(:mod:`stateway.core.loop`). A budget is always sent as it is, never raised to it: a
Chat or Messages client's small ``max_tokens`` is an exact bound.
"""

from __future__ import annotations

from collections.abc import AsyncGenerator, Callable, Iterator, Mapping
from functools import partial
from typing import Any

import orjson

from stateway.backends import chat_request
from stateway.backends.model_windows import server_windows
from stateway.backends.responses_request import to_upstream
from stateway.backends.stop_sequences import stopping
from stateway.backends.tokenizer import UpstreamTokenizer
from stateway.backends.upstream_http import UpstreamClient
from stateway.backends.upstream_reply import cut_short
from stateway.backends.upstream_status import classify_reported, reports_error
from stateway.backends.upstream_values import count, obj, text
from stateway.core import logprobs
from stateway.core.errors import InvalidRequest, UpstreamError, UpstreamRejected
from stateway.core.inference import (
    Answered,
    Delta,
    Finish,
    InferenceRequest,
    MessageStart,
    OutputItem,
    ReasoningDelta,
    ReasoningSignature,
    RefusalDelta,
    TextDelta,
    ToolCallDelta,
    UsageReport,
)
from stateway.core.items import Item
from stateway.core.ports import TOOL_OUTPUT, AdvertisedWindows
from stateway.core.reasoning import SEALED_BY_RESPONSES
from stateway.core.tools.history import REWRITTEN_ITEM_TYPES
from stateway.core.usage import Usage

CARRIED = (
    frozenset({"message", "function_call", "function_call_output", "reasoning"})
    | REWRITTEN_ITEM_TYPES
)
"""Tools reach this upstream as the same flattened functions a Chat Completions upstream
gets (``model_tools``/``model_items``), so calls come back in one shape for the assembler."""
_INPUT_PARTS = frozenset({"input_text", "input_image", "input_file"})
CARRIED_PARTS: Mapping[str, frozenset[str]] = {
    "user": _INPUT_PARTS,
    "system": _INPUT_PARTS,
    "developer": _INPUT_PARTS,
    "assistant": frozenset({"output_text", "refusal"}),
    TOOL_OUTPUT: _INPUT_PARTS,
}
_TERMINAL = frozenset({"response.completed", "response.incomplete"})
_MODELLED_OUTPUT = frozenset({"message", "reasoning", "function_call"})
"""Output item types turned into deltas; any other comes back whole."""
_SUMMARY_BREAK = "\n\n"
"""Between a reasoning summary's parts, read as the reasoning's text."""


class _Reported(Exception):
    """The error a reply reports (its ``error`` member), classified by the backend."""

    def __init__(self, error: object) -> None:
        super().__init__()
        self.error = error


class OpenAIResponsesBackend:
    carried_item_types = CARRIED
    carried_part_types = CARRIED_PARTS
    api = "responses"
    inlines_text_files = False  # it takes files as they are
    carries_unknown_types = True

    def __init__(
        self, client: UpstreamClient, *, cache_salted: bool = False, min_output_tokens: int = 1
    ) -> None:
        self._client = client
        self.name = client.target.name
        self.address = client.target.address
        self.cache_salted = cache_salted
        """Each call carries its tenant's ``cache_salt``."""
        self.min_output_tokens = min_output_tokens
        self._tokenizer = UpstreamTokenizer(client)

    def infer(self, request: InferenceRequest) -> AsyncGenerator[Delta, None]:
        """The round's deltas; ended by the gateway at a stop sequence, which this API has
        no field for (:mod:`stateway.backends.stop_sequences`)."""
        deltas = self._deltas(request)
        return stopping(deltas, request) if request.settings.stop_sequences else deltas

    async def _deltas(self, request: InferenceRequest) -> AsyncGenerator[Delta, None]:
        tokens = logprobs.INCLUDE in request.settings.include  # read only when asked for
        body = to_upstream(request)
        if self.cache_salted and request.cache_salt is not None:
            body["cache_salt"] = request.cache_salt
        body, waiting = self._client.target.filled(body), request.first_output
        async with self._client.post("/responses", body, first_output=waiting) as reply:
            if not request.stream or reply.whole:
                read = partial(from_upstream_response, tokens=tokens, answered=request.answered)
                for delta in self._decode(read, await reply.read(), mid_stream=False):
                    yield delta
                return
            stream = _StreamState(tokens, request.answered)
            async for event in reply.events():
                for delta in self._decode(stream.feed, event.data, mid_stream=True):
                    yield delta
                if stream.finished:
                    return
            raise cut_short(self.name)

    def _decode(
        self, parse: Callable[[Any], Iterator[Delta]], data: bytes, *, mid_stream: bool
    ) -> list[Delta]:
        try:
            return list(parse(orjson.loads(data)))
        except _Reported as reported:  # the upstream's own words: its key masked
            scrub = self._client.scrub
            raise classify_reported(
                reported.error, self.name, scrub, mid_stream=mid_stream
            ) from None
        except UpstreamError as failed:  # the upstream's own words: mask its key
            raise UpstreamError(self._client.scrub(failed.message)) from None
        except (orjson.JSONDecodeError, KeyError, TypeError, AttributeError) as exc:
            raise UpstreamError(f"The model server '{self.name}' sent a malformed event.") from exc

    def full(self, pending: int = 0) -> bool:
        return self._client.full(pending)

    async def list_models(self) -> list[str]:
        return await self._client.list_models()

    async def advertised_windows(self) -> AdvertisedWindows:
        return await server_windows(self._client)

    async def count_tokens(self, request: InferenceRequest) -> int | None:
        """The upstream's ``POST /responses/input_tokens`` (OpenAI's); where that is
        missing (vLLM; LM Studio, which answers it with a 200 that is only an error), its
        tokenizer endpoint (:mod:`stateway.backends.tokenizer`) given the same context as
        Chat Completions messages."""
        body = to_upstream(request)
        for key in ("stream", "store"):
            body.pop(key, None)
        try:
            async with self._client.post("/responses/input_tokens", body) as reply:
                raw = await reply.read()
        except UpstreamRejected as exc:
            if exc.status != 404:
                raise
        else:
            counted = self._input_tokens(raw)
            if counted is not None:
                return counted
        try:
            chat = chat_request.to_upstream(request)
        except InvalidRequest:  # parts a chat template cannot take (files): estimate
            return None
        return await self._tokenizer.count(chat)

    def _input_tokens(self, raw: bytes) -> int | None:
        """The count of a ``response.input_tokens`` object; None for a body that is only
        an error (the route not served)."""
        try:
            payload = orjson.loads(raw)
        except orjson.JSONDecodeError:
            payload = None
        if isinstance(payload, dict) and reports_error(payload, "input_tokens"):
            return None
        tokens = payload.get("input_tokens") if isinstance(payload, dict) else None
        if not isinstance(tokens, int) or isinstance(tokens, bool):
            raise UpstreamError(
                f"The model server '{self.name}' answered /responses/input_tokens with a "
                "malformed body."
            )
        return tokens

    async def aclose(self) -> None:
        await self._client.aclose()


class _StreamState:
    """Follows one upstream event stream; knows which items got deltas, so that an item
    whose content came only whole (on ``response.output_item.done``) is not lost, and
    one that streamed is not repeated."""

    __slots__ = ("answered", "finished", "part", "places", "streamed", "summaries", "tokens")

    def __init__(self, tokens: bool = False, answered: Answered | None = None) -> None:
        self.tokens = tokens
        """Whether the text's tokens (``logprobs``) were asked for: read only then."""
        self.answered = answered
        """A traced attempt's: the response's id and model noted as it ends."""
        self.finished = False
        self.streamed: set[int] = set()
        """Output indexes of the items that streamed their text, reasoning or arguments."""
        self.summaries: set[int] = set()
        """Output indexes of reasoning items read from their summary (no reasoning text)."""
        self.part = 0
        """The summary part being read."""
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
            if item.get("type") == "function_call":
                yield _call(count(self._item_index(event, item)), {**item, "arguments": ""})
            else:
                if "output_index" not in event and "id" in item:
                    self._item_index(event, item)  # placed for the deltas naming it
                if item.get("type") == "message":
                    yield MessageStart(text(item.get("phase")))
        elif kind == "response.function_call_arguments.delta":
            index = self._index(event)
            self.streamed.add(index)
            yield ToolCallDelta(count(index), None, None, text(event["delta"]) or "")
        elif kind == "response.output_item.done":
            item = event["item"]
            yield from self._done(item, self._item_index(event, item))
        elif kind in _TERMINAL:
            self.finished = True
            response = event["response"]
            if self.answered is not None:
                self.answered.note(response.get("id"), response.get("model"))
            yield from _finish(response)
        elif kind in ("response.failed", "error"):
            raise _Reported(
                (event.get("response") or {}).get("error") or event.get("error") or event
            )
        elif kind is None and "error" in event:  # llama-server's: its Chat error chunk
            raise _Reported(event["error"])

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
        OpenAI's reasoning models stream it); its parts a paragraph apart."""
        index = self._index(event, 0)
        if index in self.streamed and index not in self.summaries:
            return  # it streams its reasoning text: the summary would repeat it
        part = event.get("summary_index", 0)
        if index in self.summaries and part != self.part:
            yield ReasoningDelta(_SUMMARY_BREAK)
        self.summaries.add(index)
        self.streamed.add(index)
        self.part = part
        if delta:
            yield ReasoningDelta(delta)

    def _done(self, item: dict[str, Any], index: int) -> Iterator[Delta]:
        kind = item.get("type")
        if index in self.streamed:
            if kind == "reasoning":
                yield from _seal(item)
            return
        if kind == "function_call":
            yield _call(count(index), item)
        elif kind in _MODELLED_OUTPUT:  # whole: what a non-streamed reply would say of it
            yield from _whole(item, self.tokens, started=True)
        else:
            yield OutputItem(item)


def from_upstream_response(
    payload: dict[str, Any], tokens: bool = False, answered: Answered | None = None
) -> Iterator[Delta]:
    """Deltas of a whole ``response`` (its id and model noted in ``answered``, if given)."""
    if payload.get("status") == "failed" or reports_error(payload, "output"):
        raise _Reported(payload.get("error") or {})
    if answered is not None:
        answered.note(payload.get("id"), payload.get("model"))
    for index, item in enumerate(payload.get("output") or ()):
        if item.get("type") == "function_call":
            yield _call(index, item)
        elif item.get("type") in _MODELLED_OUTPUT:
            yield from _whole(item, tokens)
        else:
            yield OutputItem(item)
    yield from _finish(payload)


def _whole(item: dict[str, Any], tokens: bool, *, started: bool = False) -> Iterator[Delta]:
    """A whole reasoning item or message as deltas (a message after its
    :class:`MessageStart`, unless ``started``): its text, then its refusal."""
    if item.get("type") == "reasoning":
        summary = _SUMMARY_BREAK.join(_texts(item.get("summary")))
        reasoning = "".join(_texts(item.get("content"))) or summary
        if reasoning:
            yield ReasoningDelta(reasoning)
        yield from _seal(item)
        return
    if not started:
        yield MessageStart(text(item.get("phase")))
    parts = item.get("content")
    answer = "".join(_texts(parts, "output_text"))
    if answer:
        yield TextDelta(answer, _tokens(parts) if tokens else None)
    refusal = "".join(_texts(parts, "refusal", "refusal"))
    if refusal:
        yield RefusalDelta(refusal)


def _seal(item: dict[str, Any]) -> Iterator[Delta]:
    """A hidden reasoning item's ``encrypted_content``, which ends it, if it has one."""
    blob = text(item.get("encrypted_content"))
    if blob and not any(_texts(item.get("content"))):
        yield ReasoningSignature(SEALED_BY_RESPONSES + blob)


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
