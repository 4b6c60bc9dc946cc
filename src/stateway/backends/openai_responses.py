"""Backend for upstreams speaking a *stateless* OpenAI Responses API (vLLM's
``/v1/responses`` with ``store: false``): the whole context is sent every round, in the
body :mod:`.responses_request` builds; replies become deltas here.

A stream's events and a whole response turn into the same deltas
(:mod:`.responses_reply`).

Where the upstream hides its reasoning (OpenAI's reasoning models: no reasoning text, at
most a summary), its ``encrypted_content`` is all the model can continue from when
nothing is stored: it is kept on the item behind this backend's prefix
(:func:`~stateway.core.reasoning.responses_maker`, as a :class:`ReasoningSignature`)
and sent back to this backend as it came (another server or account would refuse it).
Where the reasoning text is given (vLLM), the text is what is
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
not relayed), but a custom tool's call, whose input streams between its
``response.output_item.added`` and its whole item (:class:`CallBegun`,
:class:`CallInput`).

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
from stateway.backends.responses_reply import Reported, StreamState, from_upstream_response
from stateway.backends.responses_request import to_upstream
from stateway.backends.stop_sequences import stopping
from stateway.backends.tokenizer import UpstreamTokenizer
from stateway.backends.upstream_http import UpstreamClient
from stateway.backends.upstream_reply import cut_short
from stateway.backends.upstream_status import classify_reported, reports_error
from stateway.core import logprobs
from stateway.core.backend import TOOL_OUTPUT, AdvertisedWindows
from stateway.core.errors import InvalidRequest, UpstreamError, UpstreamRejected
from stateway.core.inference import (
    Delta,
    InferenceRequest,
)
from stateway.core.reasoning import responses_maker
from stateway.core.tools.history import REWRITTEN_ITEM_TYPES

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
        self._maker = responses_maker(self.name)
        """In front of the blobs sealing its reasoning: they go back to it alone."""
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
        body = to_upstream(request, self._maker)
        if self.cache_salted and request.cache_salt is not None:
            body["cache_salt"] = request.cache_salt
        body, waiting = self._client.target.filled(body), request.first_output
        async with self._client.post("/responses", body, first_output=waiting) as reply:
            if not request.stream or reply.whole:
                read = partial(
                    from_upstream_response,
                    tokens=tokens,
                    answered=request.answered,
                    maker=self._maker,
                )
                for delta in self._decode(read, await reply.read(), mid_stream=False):
                    yield delta
                return
            stream = StreamState(tokens, request.answered, self._maker)
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
        except Reported as reported:  # the upstream's own words: its key masked
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
        body = to_upstream(request, self._maker)
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
