"""Backend for upstreams speaking the Anthropic Messages API (Anthropic itself, or any
server that does): ``{url}/messages``, ``{url}/messages/count_tokens``, ``{url}/models``.

The request is built by :mod:`.anthropic_request`; replies become deltas here. Content
blocks map onto deltas in order: ``text`` to text and its ``citations`` (streamed:
``citations_delta``) to :class:`Citation` deltas, a text block right after another
beginning a message of its own (:class:`MessageStart`: Anthropic splits cited text into
blocks, which a Messages client gets back as they were), ``thinking`` to reasoning
sealed by its ``signature`` (:class:`ReasoningSignature`), ``redacted_thinking`` to a
whole reasoning item, ``tool_use`` to a call indexed by its block (an input that never streamed, or
streamed only an empty ``partial_json`` as Anthropic streams a call without input, is
``{}``); other blocks (an upstream's own server tools: ``server_tool_use``,
``web_search_tool_result``, ...) are not the client's and are left out, streamed or not.
``stop_reason`` becomes the finish reason (``tool_use`` -> ``tool_calls``,
``max_tokens`` and ``model_context_window_exceeded`` -> ``length``, ``refusal`` ->
``content_filter``, ``pause_turn`` -> paused, ``stop_sequence`` -> ``stop`` naming the
sequence); the last three reasons go along as they came, with any ``stop_details``, for
a Messages client to be answered them, and so do any ``safeguard_results`` (Claude Code's
auto mode). Usage: ``input_tokens`` is the whole prompt, cache reads
and writes included, as the other wires count it; streamed, ``message_start``'s usage (the
prompt's) is reported as it comes, before any output, then the final one at
``message_delta``. A mid-stream ``error`` event, or a 200
reply that is only an error (Anthropic's ``error`` object, or a proxy's OpenAI-shaped
``{"error": ...}``; to a streamed request too, whose JSON reply is read as a non-streamed
one), is an upstream failure by the one rule for errors an upstream reports in a 200 reply
(:func:`~stateway.backends.upstream_status.classify_reported`: the key scrubbed, the
message cut, ``overloaded_error`` a 503 ``upstream_overloaded``).
"""

from __future__ import annotations

from collections.abc import AsyncGenerator, Callable, Iterator, Mapping
from dataclasses import replace
from functools import partial
from typing import Any

import orjson

from stateway.backends.anthropic_names import ToolNames
from stateway.backends.anthropic_request import (
    AnthropicOptions,
    blank_stop,
    count_body,
    to_upstream,
)
from stateway.backends.anthropic_thinking import ThinkingTypes
from stateway.backends.anthropic_tool_choice import ToolChoices
from stateway.backends.model_windows import listed_windows
from stateway.backends.stop_sequences import stopping
from stateway.backends.upstream_http import UpstreamClient
from stateway.backends.upstream_reply import cut_short
from stateway.backends.upstream_status import classify_reported, reports_error
from stateway.backends.upstream_values import count, obj, text
from stateway.core.backend import TOOL_OUTPUT, AdvertisedWindows
from stateway.core.errors import GatewayError, UpstreamError
from stateway.core.ids import new_id
from stateway.core.inference import (
    PAUSED,
    Answered,
    Citation,
    Delta,
    Finish,
    InferenceRequest,
    MessageStart,
    OutputItem,
    ReasoningDelta,
    ReasoningSignature,
    TextDelta,
    ToolCallDelta,
    UsageReport,
)
from stateway.core.reasoning import redacted_item
from stateway.core.tools.history import REWRITTEN_ITEM_TYPES
from stateway.core.usage import Usage

CARRIED = (
    frozenset({"message", "function_call", "function_call_output", "reasoning"})
    | REWRITTEN_ITEM_TYPES
)
_TEXT = frozenset({"input_text", "output_text", "text", "summary_text"})
CARRIED_PARTS: Mapping[str, frozenset[str]] = {
    "user": _TEXT | {"input_image", "input_file"},
    "system": _TEXT,
    "developer": _TEXT,
    "assistant": _TEXT | {"refusal"},
    TOOL_OUTPUT: _TEXT | {"input_image", "input_file"},
}
BETA = "anthropic-beta"
MODEL_PAGE = 1000
"""Models asked for per page of ``GET /models`` (Anthropic's most; its default is 20)."""
MAX_MODEL_PAGES = 10
_FINISH = {
    "end_turn": "stop",
    "stop_sequence": "stop",
    "pause_turn": PAUSED,
    "tool_use": "tool_calls",
    "max_tokens": "length",
    "model_context_window_exceeded": "length",
    "refusal": "content_filter",
}
_CARRIED_REASONS = frozenset({"model_context_window_exceeded", "pause_turn", "refusal"})
"""Stop reasons the finish reason says less than: they go along as they came."""


class AnthropicBackend:
    carried_item_types = CARRIED
    carried_part_types = CARRIED_PARTS
    api = "anthropic"
    inlines_text_files = False  # it takes files as they are
    carries_unknown_types = False
    min_output_tokens = 1

    def __init__(self, client: UpstreamClient, options: AnthropicOptions | None = None) -> None:
        self._client = client
        self.name = client.target.name
        self.address = client.target.address
        self._options = options or AnthropicOptions()
        self._choices = ToolChoices(client)
        """How its server takes a tool choice, once its listing told."""
        self._thinking = ThinkingTypes()
        """Which thinking each model takes, once its listing told."""

    def follow(self, leader: object) -> None:
        """Learn which thinking each model takes from the listing ``leader`` reads: the
        window discovery asks one backend of a server (``leader``), and another backend
        on it (another key, another route's settings) would otherwise never learn it."""
        if isinstance(leader, AnthropicBackend) and leader is not self:
            self._thinking = leader._thinking

    def infer(self, request: InferenceRequest) -> AsyncGenerator[Delta, None]:
        """The round's deltas; ended by the gateway at a blank stop sequence, which
        Anthropic refuses (:mod:`stateway.backends.stop_sequences`)."""
        deltas = self._deltas(request)
        held = [s for s in request.settings.stop_sequences if s and blank_stop(s)]
        return stopping(deltas, request, held) if held else deltas

    async def _deltas(self, request: InferenceRequest) -> AsyncGenerator[Delta, None]:
        names = ToolNames()
        body = to_upstream(request, self._options_for(request.model), names)
        await self._choices.send(body)
        body = self._client.target.filled(body)
        betas, waiting = self._betas(request), request.first_output
        async with self._client.post(
            "/messages", body, headers=betas, first_output=waiting
        ) as reply:
            if not request.stream or reply.whole:
                message = self._parse(await reply.read())
                if message.get("type") == "error" or reports_error(message, "content"):
                    raise self._reported(message.get("error"), mid_stream=False)
                if request.answered is not None:
                    request.answered.note(message.get("id"), message.get("model"))
                for delta in self._decode(partial(from_upstream_message, message, names)):
                    yield delta
                return
            reported = partial(self._reported, mid_stream=True)
            stream = StreamState(names, reported, request.answered)
            async for event in reply.events():
                data = self._parse(event.data)
                for delta in self._decode(partial(stream.feed, data)):
                    yield delta
                if stream.finished:
                    return
            raise cut_short(self.name)

    def _options_for(self, model: str) -> AnthropicOptions:
        """The backend's options, asking ``model`` for the thinking it takes
        (:mod:`stateway.backends.anthropic_thinking`)."""
        thinking = self._thinking.asked(model, self._options.thinking)
        if thinking == self._options.thinking:
            return self._options
        return replace(self._options, thinking=thinking)

    def _betas(self, request: InferenceRequest) -> dict[str, str] | None:
        """A Messages client's ``anthropic-beta`` features, after the backend's own."""
        wanted = request.settings.anthropic_beta
        if not wanted:
            return None
        own = [v for k, v in self._client.target.headers if k.lower() == BETA]
        return {BETA: ",".join([*own, *(b for b in wanted if b not in own)])}

    async def count_tokens(self, request: InferenceRequest) -> int:
        body = to_upstream(request, self._options_for(request.model), ToolNames())
        await self._choices.send(body)
        body = count_body(body)
        betas = self._betas(request)
        async with self._client.post("/messages/count_tokens", body, headers=betas) as reply:
            payload = self._parse(await reply.read())
        try:
            return count(payload["input_tokens"])
        except (KeyError, TypeError) as exc:
            raise UpstreamError(f"The model server '{self.name}' sent a malformed count.") from exc

    def _parse(self, data: bytes) -> dict[str, Any]:
        try:
            payload = orjson.loads(data)
        except orjson.JSONDecodeError:
            payload = None
        if not isinstance(payload, dict):
            raise UpstreamError(f"The model server '{self.name}' sent a malformed event.")
        return payload

    def _reported(self, error: object, *, mid_stream: bool) -> GatewayError:
        """The error an ``error`` object the upstream sent in a 200 reply stands for."""
        return classify_reported(error, self.name, self._client.scrub, mid_stream=mid_stream)

    def _decode(self, parse: Callable[[], Iterator[Any]]) -> list[Any]:
        try:
            return list(parse())
        except UpstreamError as failed:  # the upstream's own words: mask its key
            failed.message = self._client.scrub(failed.message)
            raise
        except (KeyError, TypeError, AttributeError, ValueError) as exc:
            raise UpstreamError(f"The model server '{self.name}' sent a malformed reply.") from exc

    def full(self, pending: int = 0) -> bool:
        return self._client.full(pending)

    async def list_models(self) -> list[str]:
        return [entry["id"] for entry in await self._listing()]

    async def advertised_windows(self) -> AdvertisedWindows:
        """Each model's ``max_input_tokens`` (:mod:`stateway.backends.model_windows`), or
        llama.cpp's slot window; the listing also tells how its server takes a tool
        choice (:mod:`stateway.backends.anthropic_tool_choice`)."""
        listing = await self._listing()
        self._choices.learn(listing)
        self._thinking.learn(listing)
        return await listed_windows(self._client, listing)

    async def _listing(self) -> list[dict[str, Any]]:
        """Every page of the listing: Anthropic answers 20 models unless asked for more
        (at most 1,000 a page), with ``has_more`` and ``last_id`` to go on from."""
        params = {"limit": str(MODEL_PAGE)}
        entries: list[dict[str, Any]] = []
        for _ in range(MAX_MODEL_PAGES):
            page, body = await self._client.model_page(params)
            entries += [
                e for e in body["data"] if isinstance(e, dict) and isinstance(e.get("id"), str)
            ]
            last = body.get("last_id")
            if body.get("has_more") is not True or not isinstance(last, str) or not page:
                break
            params = {"limit": str(MODEL_PAGE), "after_id": last}
        return entries

    async def aclose(self) -> None:
        await self._client.aclose()


class StreamState:
    """Follows one upstream event stream: which blocks are calls, and the usage so far;
    ``reported``: the error an ``error`` event's object stands for."""

    __slots__ = (
        "_answered",
        "_calls",
        "_last",
        "_reported",
        "_streamed",
        "_usage",
        "finished",
        "names",
    )

    def __init__(
        self,
        names: ToolNames,
        reported: Callable[[object], GatewayError],
        answered: Answered | None = None,
    ) -> None:
        self.names = names
        self._reported = reported
        self._answered = answered
        """A traced attempt's: the message's id and model noted as it starts."""
        self.finished = False
        self._last: Any = None
        """The type of the last block started."""
        self._calls: set[int] = set()
        self._streamed: set[int] = set()
        self._usage: dict[str, Any] = {}

    def feed(self, event: dict[str, Any]) -> Iterator[Delta]:
        kind = event.get("type")
        if kind == "content_block_delta":
            yield from self._delta(count(event["index"]), obj(event["delta"]))
        elif kind == "content_block_start":
            index = count(event["index"])
            block = obj(event["content_block"])
            if block.get("type") == "tool_use":
                self._calls.add(index)
                block = {**block, "input": None}  # its input streams as JSON deltas
            yield from _block(index, block, self.names, self._last)
            self._last = block.get("type")
        elif kind == "content_block_stop":
            index = count(event["index"])
            if index in self._calls and index not in self._streamed:
                yield ToolCallDelta(index, None, None, "{}")
        elif kind == "message_start":
            message = obj(event["message"])
            if self._answered is not None:
                self._answered.note(message.get("id"), message.get("model"))
            self._usage = dict(obj(message.get("usage")))
            if self._usage:  # the prompt's count, known before any output
                yield UsageReport(_usage(self._usage))
        elif kind == "message_delta":
            self._usage.update((k, v) for k, v in obj(event.get("usage")).items() if v is not None)
            yield UsageReport(_usage(self._usage))
            yield _finish(obj(event["delta"]))
        elif kind == "message_stop":
            self.finished = True
        elif kind == "error":
            raise self._reported(event.get("error"))

    def _delta(self, index: int, delta: dict[str, Any]) -> Iterator[Delta]:
        match delta.get("type"):
            case "text_delta":
                yield TextDelta(text(delta["text"]) or "")
            case "thinking_delta":
                yield ReasoningDelta(text(delta["thinking"]) or "")
            case "signature_delta":
                yield ReasoningSignature(text(delta["signature"]) or "")
            case "citations_delta":
                if cited := obj(delta["citation"]):
                    yield Citation(cited)
            case "input_json_delta":
                # Anthropic opens every input with an empty piece (a call without input
                # sends only that); a server tool's input is no call of the client's
                partial = text(delta["partial_json"]) or ""
                if partial and index in self._calls:
                    self._streamed.add(index)
                    yield ToolCallDelta(index, None, None, partial)


def from_upstream_message(message: dict[str, Any], names: ToolNames) -> Iterator[Delta]:
    """Deltas of a whole ``message`` object, in streaming order."""
    last = None
    for index, block in enumerate(message.get("content") or ()):
        yield from _block(index, obj(block), names, last)
        last = obj(block).get("type")
    yield UsageReport(_usage(obj(message.get("usage"))))
    yield _finish(message)


def _block(index: int, block: dict[str, Any], names: ToolNames, last: Any) -> Iterator[Delta]:
    """The deltas a content block starts with (all of them, for a whole block); ``last``:
    the type of the block before it."""
    match block.get("type"):
        case "text":
            if last == "text":
                yield MessageStart()
            yield TextDelta(text(block.get("text")) or "")
            for citation in block.get("citations") or ():
                yield Citation(obj(citation))
        case "thinking":
            yield ReasoningDelta(text(block.get("thinking")) or "")
            signature = text(block.get("signature"))
            if signature:
                yield ReasoningSignature(signature)
        case "redacted_thinking":
            yield OutputItem(redacted_item(new_id("rs"), text(block["data"]) or ""))
        case "tool_use":
            name = names.from_upstream(text(block["name"]) or "")
            tool_input = block.get("input")
            arguments = "" if tool_input is None else orjson.dumps(obj(tool_input)).decode()
            yield ToolCallDelta(index, text(block["id"]), name, arguments)


def _finish(delta: dict[str, Any]) -> Finish:
    """The finish of a ``message`` or of a stream's ``message_delta`` (its ``delta``)."""
    reason = text(delta.get("stop_reason")) or "end_turn"
    matched = text(delta.get("stop_sequence")) if reason == "stop_sequence" else None
    results = delta.get("safeguard_results")
    results = results if isinstance(results, list) else None
    if reason not in _CARRIED_REASONS:
        return Finish(_FINISH.get(reason, "stop"), stop_sequence=matched, safeguard_results=results)
    details = delta.get("stop_details")
    details = details if isinstance(details, dict) else None
    return Finish(
        _FINISH[reason], stop_reason=reason, stop_details=details, safeguard_results=results
    )


def _usage(usage: dict[str, Any]) -> Usage:
    read = count(usage.get("cache_read_input_tokens"))
    written = count(usage.get("cache_creation_input_tokens"))
    details = obj(usage.get("output_tokens_details"))
    return Usage(
        input_tokens=count(usage.get("input_tokens")) + read + written,
        output_tokens=count(usage.get("output_tokens")),
        cached_tokens=read,
        reasoning_tokens=count(details.get("thinking_tokens")),
        cache_write_tokens=written,
    )
