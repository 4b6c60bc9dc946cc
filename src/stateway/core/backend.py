"""The Backend port: what the core needs of a model server, implemented in ``backends/``
(one adapter per upstream API shape), and what some backends offer besides: a Chat
Completions request forwarded untouched (:class:`ChatForwarder`, its answer a
:class:`Relay`), the input tokens counted (:class:`TokenCounter`), the context windows
advertised (:class:`WindowAdvertiser`). Storage's ports are :mod:`stateway.core.ports`'.
"""

from __future__ import annotations

from collections.abc import AsyncGenerator, AsyncIterator, Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol, runtime_checkable

from stateway.core.errors import GatewayError
from stateway.core.inference import Delta, InferenceRequest
from stateway.core.usage import Usage

TOOL_OUTPUT = "tool_output"
"""The key of ``Backend.carried_part_types`` for parts of function call outputs."""


class Backend(Protocol):
    """One upstream model server, spoken to in one API shape."""

    name: str
    api: str
    """The API shape its upstream speaks, as ``[[backends]] api`` names it (``chat``,
    ``responses``, ``anthropic``)."""
    address: tuple[str, int] | None
    """The upstream server's host and port, as its URL names them (what traces show);
    None when it has none."""
    carried_item_types: frozenset[str]
    """Input item types this upstream API can carry; another of the types the gateway
    models is rejected before sending, one of any other type is not shown to its model
    (:func:`stateway.core.context.shown`)."""
    carried_part_types: Mapping[str, frozenset[str]]
    """Content part types it can carry, by message role, and under ``TOOL_OUTPUT`` for the
    parts of a ``function_call_output``; checked the same way."""
    inlines_text_files: bool
    """Whether a text file (an ``input_file`` :func:`~stateway.core.text_files.inlined_text`
    reads) is carried as its text wherever text is, though its upstream takes no files;
    checked the same way (any other file is refused as its part type is)."""
    carries_unknown_types: bool
    """Whether its upstream speaks Responses natively: input item and tool types the
    gateway does not model travel to it untouched (and the ``shell`` and ``apply_patch``
    tools and their items natively); a backend without it keeps them (echoed, stored) but
    does not show them to its model."""
    min_output_tokens: int
    """The least ``max_output_tokens`` its upstream may be asked for (1: any; hosted
    OpenAI's Responses API refuses one under 16): a later round of the tool loop left
    less ends its response instead (:mod:`stateway.core.loop`)."""

    def full(self, pending: int = 0) -> bool:
        """Whether a call now would be refused at once (:class:`~stateway.core.errors.
        Overloaded`: the gateway's own queue for this upstream is full), once ``pending``
        calls about to be made took their places first."""
        ...

    def infer(self, request: InferenceRequest) -> AsyncGenerator[Delta, None]:
        """Stream one round. Raises :class:`~stateway.core.errors.UpstreamError` subclasses,
        before the first delta or mid-stream. Closing the iterator cancels the upstream call."""
        ...

    async def list_models(self) -> list[str]: ...

    async def aclose(self) -> None: ...


class Relay(Protocol):
    """An upstream's answer to a forwarded request, as it arrived: its status, the headers
    a client needs (``content-type``, and ``retry-after``, ``retry-after-ms``,
    ``x-should-retry`` and ``content-length`` when sent, never an event stream's length)
    and its body bytes, read as they come. It holds an upstream connection until
    :meth:`aclose`, which must be called (it closes an unfinished upstream request) and may
    be called again, and while its chunks are being read: the read then fails with an
    :class:`~stateway.core.errors.UpstreamError` (how shutting down ends a relay)."""

    status: int
    headers: Mapping[str, str]
    whole: bool
    """Whether its body is judged whole before any of it is relayed (a 200 answer that is
    no event stream): :meth:`body` reads it so, in one piece."""

    async def body(self) -> bytes:
        """A whole answer's body (:attr:`whole`), read to its end: what :meth:`chunks`
        would yield, in one piece, raising as it would (before any of it)."""
        ...

    def chunks(self) -> AsyncIterator[bytes]:
        """The body, chunk by chunk. Raises :class:`~stateway.core.errors.UpstreamError`
        subclasses when the upstream fails part-way, reports an error in its stream, or
        ends a 200 stream as no whole answer (cut short, done before any output, an answer
        it gave up on), after the chunks before it (before the first, when none came)."""
        ...

    def usage(self) -> Usage | None:
        """The tokens the answer says it used, read from its last chunks once they were
        relayed (a stream says so only when its client asked, ``include_usage``); None
        when it did not say."""
        ...

    def output_estimate(self) -> int:
        """The output tokens of what was relayed, estimated (an event stream: one per
        event, as a model server streams a token or so per event; any other body: one per
        4 bytes): what a relayed answer cut short, or left by its client before its usage
        came, is charged."""
        ...

    def failure(self) -> GatewayError | None:
        """The error a translated request would get from the answer's status (None below
        400), its ``Retry-After`` and what was relayed of its body: how it counts on its
        candidate's circuit."""
        ...

    async def aclose(self) -> None: ...


def is_event_stream(headers: Mapping[str, str]) -> bool:
    """Whether a relay's (lower-case) headers say its body is an event stream: relayed
    event by event, without a length, and ended by an error event when cut."""
    return headers.get("content-type", "").lower().startswith("text/event-stream")


@runtime_checkable
class ChatForwarder(Protocol):
    """A backend whose upstream speaks Chat Completions itself, so a Chat Completions
    request can go to it untouched (the stateless fast path)."""

    cache_salted: bool
    """Whether every call to it carries its tenant's ``cache_salt`` (``cache_salt =
    "tenant"``): a forwarded body is then given it (:meth:`ForwardChat.salted_body_for
    <stateway.core.commands.ForwardChat.salted_body_for>`)."""
    takes_named_choice: bool
    """Whether its server is known to force the function a named ``tool_choice`` names,
    as sent: a request naming one is forwarded only then, else translated (the backend
    sends the choice as its server takes it)."""
    takes_custom_tools: bool
    """Whether its server is known to take OpenAI's tools beyond functions as sent (a
    ``custom`` tool; a ``custom`` or ``allowed_tools`` ``tool_choice``): OpenAI's own does,
    vLLM, SGLang and llama.cpp take functions alone. A request asking for one is forwarded
    only then, else translated (the backend offers a custom tool as a function)."""

    async def forward_chat(self, body: bytes, fields: Mapping[str, Any]) -> Relay:
        """Send ``body`` to the upstream's ``/chat/completions`` once a connection slot is
        free; its answer, whatever the status. ``fields``: the client's body parsed (its
        ``messages`` are ``body``'s), read to tell whether the backend must change
        ``body``, which it parses again only then. Raises
        :class:`~stateway.core.errors.GatewayError` when no answer arrives (overloaded,
        unreachable, timed out)."""
        ...


@runtime_checkable
class TokenCounter(Protocol):
    """A backend whose upstream counts a request's input tokens (optional: the gateway
    estimates for the others, see :mod:`stateway.core.token_estimate`)."""

    async def count_tokens(self, request: InferenceRequest) -> int | None:
        """The upstream's count, or None when it turns out to have no way to count (a
        server without a tokenizer endpoint): the gateway estimates then. Raises
        :class:`~stateway.core.errors.UpstreamError` subclasses."""
        ...


@dataclass(frozen=True, slots=True)
class AdvertisedWindows:
    """The context windows (tokens) a model server says its models hold."""

    models: Mapping[str, int] = field(default_factory=dict)
    """By model id, as its listing names them."""
    server: int | None = None
    """The window of whatever model is asked for: a server of one model that serves it
    under any name (llama.cpp)."""

    def of(self, model: str) -> int | None:
        return self.models.get(model, self.server)


@runtime_checkable
class WindowAdvertiser(Protocol):
    """A backend that can ask its model server for its models' context windows
    (:mod:`stateway.core.routing.windows`)."""

    name: str

    async def advertised_windows(self) -> AdvertisedWindows:
        """What the server advertises (nothing, for a server that does not say). Raises
        :class:`~stateway.core.errors.UpstreamError` subclasses when it does not answer."""
        ...
