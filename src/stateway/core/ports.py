"""Ports: what the core needs from the outside, implemented in ``backends/`` and ``storage/``."""

from __future__ import annotations

from collections.abc import AsyncGenerator, AsyncIterator, Mapping
from dataclasses import dataclass, field
from typing import Any, Literal, Protocol, runtime_checkable

from stateway.core.errors import GatewayError
from stateway.core.inference import Delta, InferenceRequest
from stateway.core.items import Item
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
    """Input item types this upstream API can carry; others are rejected before sending."""
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
    tools and their items natively); for a backend without it they are a 400 naming the
    type."""
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
    a client needs (``content-type``, and ``retry-after`` and ``content-length`` when sent,
    never an event stream's length)
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

    async def forward_chat(self, body: bytes) -> Relay:
        """Send ``body`` to the upstream's ``/chat/completions`` once a connection slot is
        free; its answer, whatever the status. Raises
        :class:`~stateway.core.errors.GatewayError` when no answer arrives (overloaded,
        unreachable, timed out)."""
        ...


@dataclass(slots=True, frozen=True)
class ConversationTurn:
    """A response's part in a conversation, written with its row.

    Saved with the in-progress row, it takes the conversation: refused while another
    turn holds it, or when the conversation no longer has ``seen`` items (the length its
    context was read at). Written with the run's end, it appends ``items`` (none for a
    turn that failed or was cancelled) and lets the conversation go, in the same
    transaction.
    """

    conversation_id: str
    seen: int = 0
    items: list[Item] = field(default_factory=list)


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


class CacheSalts(Protocol):
    """Each tenant's ``cache_salt``: what keeps its calls out of the prefix cache other
    tenants' calls fill on a model server they all reach with the gateway's credentials
    (:mod:`stateway.sealing.cache_salts`). Stable for a tenant, unguessable without the
    server's key, and telling nothing of the tenant id. None: no salt
    (:class:`NoCacheSalts`)."""

    def salt(self, tenant_id: str) -> str | None: ...


class NoCacheSalts:
    """Salts no tenant's calls: the default where no server key is given (in-memory
    tests); every cache is shared."""

    def salt(self, tenant_id: str) -> None:
        return None


class Sealer(Protocol):
    """Seals what clients carry but must neither read nor forge (the ``encrypted_content``
    of ``compaction`` and ``reasoning`` items), bound to a tenant and a kind of content."""

    def seal(self, kind: str, tenant_id: str, plaintext: bytes) -> str: ...

    def owns(self, sealed: str) -> bool:
        """Whether ``sealed`` is in this sealer's format (whatever its key or binding): a
        reasoning item's ``encrypted_content`` that is not came from an upstream (an
        Anthropic thinking signature, ...) and travels as it is."""
        ...

    def unseal(self, kind: str, tenant_id: str, sealed: str) -> bytes | None:
        """The plaintext, or None unless ``sealed`` came from :meth:`seal` with this key,
        ``kind`` and ``tenant_id``, unaltered."""
        ...


@dataclass(slots=True)
class ResponseRecord:
    """A stored response: its state body, and its items, each stored once."""

    tenant_id: str
    id: str
    previous_response_id: str | None
    status: str
    created_at: float
    body: dict[str, Any]
    input_items: list[Item] = field(default_factory=list)
    output_items: list[Item] = field(default_factory=list)
    owner: str | None = None
    """The process running it while ``in_progress`` (see :mod:`stateway.core.ownership`)."""
    turn: ConversationTurn | None = None
    """Set when the response is a conversation turn (see :class:`ConversationTurn`)."""
    events: EventBatch | None = None
    """Event log entries :meth:`ResponseStore.finish` appends in the same transaction (a
    background run's last events, its terminal event among them)."""
    served_by: str | None = None
    """The candidate key (``backend/model``) whose attempt last succeeded, if any: a
    continuation's cache affinity hint (:mod:`stateway.core.routing.affinity`)."""


@dataclass(slots=True, frozen=True)
class EventBatch:
    """Consecutive entries of a background run's persisted event log: wire payloads (one
    line of JSON each, as the run's watchers were sent them; see ADR 0008), the first
    numbered ``first``, the others following one by one."""

    first: int
    payloads: list[bytes]

    @property
    def end(self) -> int:
        """The sequence number after the last payload."""
        return self.first + len(self.payloads)


@dataclass(slots=True)
class EventLog:
    """A stored response's event log after some position, and what decides how to follow it."""

    status: str
    background: bool
    last: int
    """The highest sequence number logged; -1 when nothing is."""
    events: EventBatch
    """The events after the position asked for (``first`` is the one just after it)."""


@dataclass(slots=True)
class StoredChain:
    """The items of a ``previous_response_id`` chain, and the status of its last response
    and the candidate that served it (:attr:`ResponseRecord.served_by`)."""

    items: list[Item]
    status: str
    served_by: str | None = None


@dataclass(slots=True)
class ItemPage:
    items: list[Item]
    has_more: bool


class ResponseStore(Protocol):
    """Responses and their items, scoped by tenant. Every method is one transaction."""

    async def save(self, record: ResponseRecord) -> None:
        """Insert the response with its input and output items, atomically. A run's
        in-progress row is saved this way, with its input, before the run starts. With a
        ``turn`` it also takes the conversation, or raises
        :class:`~stateway.core.errors.ConversationLocked` /
        :class:`~stateway.core.errors.ConversationNotFound` having written nothing."""
        ...

    async def finish(self, record: ResponseRecord) -> bool:
        """Update an unfinished response to ``record``'s status and body and add its output
        items and its ``events``, atomically. A deleted response stays deleted. With a
        ``turn``, the turn's items are appended to the conversation it holds (unless
        deleted) and the conversation is let go, in the same transaction. Return False,
        having written nothing, when the response is finished already (another process
        failed it: its lease was judged lapsed) or unknown."""
        ...

    async def in_progress(self) -> list[ResponseRecord]:
        """Every response not finished (``queued`` or ``in_progress``), deleted or not, with
        its owner and no items: read at start-up to find runs whose process died."""
        ...

    async def append_events(self, tenant_id: str, response_id: str, batch: EventBatch) -> None:
        """Add a batch to the stored response's event log, in one transaction (writes
        arriving together share it). A batch starting where another one did is refused."""
        ...

    async def read_events(self, tenant_id: str, response_id: str, after: int) -> EventLog | None:
        """The response's logged events numbered above ``after``, in order, read after its
        status (so a finished status comes with its whole log); None when the response is
        unknown or deleted. A constant number of queries, whatever the length."""
        ...

    async def get(self, tenant_id: str, response_id: str) -> ResponseRecord | None:
        """The response with its ``output_items`` (``input_items`` left empty), or None
        when unknown or deleted."""
        ...

    async def load_context(self, tenant_id: str, response_id: str) -> StoredChain | None:
        """Every item of the chain ending at ``response_id``, oldest response first, each
        response's input items then its output items (none for a ``failed`` response: its
        output was cut off), and that response's status and ``served_by``; None when the
        response is unknown or deleted. A constant number of queries, whatever the depth."""
        ...

    async def find_items(self, tenant_id: str, item_ids: list[str]) -> dict[str, Item]:
        """The stored items with these ids (what ``item_reference`` input items name), by
        id: among responses not deleted, an output item before an input item, then the
        latest response's; else among the live items of live conversations, the latest
        appended. Ids with no such item are left out.

        Responses come first because a turn copies its response's items into its
        conversation under their ids: an id held by both names the response's item, the
        original, never edited (and still there when the conversation's copy is deleted).
        Looking in conversations last also leaves every reference that resolved before
        they were looked in resolving as it did: only ids no response holds (those the
        Conversations API gave the items it added) are newly found."""
        ...

    async def delete(self, tenant_id: str, response_id: str) -> bool:
        """Make the response unretrievable; False when unknown or already deleted. Its items
        stay as context for responses that continue from it."""
        ...

    async def list_input_items(
        self,
        tenant_id: str,
        response_id: str,
        *,
        after: str | None,
        limit: int,
        order: Literal["asc", "desc"],
    ) -> ItemPage | None:
        """One page of the response's own input items; None when the response is unknown."""
        ...

    async def ping(self) -> None:
        """Raise :class:`~stateway.core.errors.StorageError` when storage is unreachable,
        or :class:`~stateway.core.errors.StorageNotWritable` when it answers but refuses
        writes (until one lands again)."""
        ...

    async def aclose(self) -> None: ...


class ResponsePurger(Protocol):
    """Deletes stored responses for good (:mod:`stateway.core.retention`)."""

    async def purge(self, before: float, limit: int) -> int:
        """Delete at most ``limit`` finished responses created before ``before`` (a Unix
        time), deleted or not, with their items and event logs, in one transaction; how
        many were. Calls with the same ``before`` make one sweep, each going on where the
        last stopped, until one deletes fewer than ``limit``; the next call starts
        another."""
        ...


@dataclass(slots=True, frozen=True)
class Heartbeat:
    """An owner's beat count, and the seconds it promised to beat within."""

    count: int
    timeout: float


class OwnerLeases(Protocol):
    """The heartbeats of the processes that own runs (see :mod:`stateway.core.leases`):
    one counter per owner, named as its in-progress rows name their ``owner``."""

    async def renew(self, owner: str) -> bool:
        """Count ``owner``'s beat up; False when it has no row (never registered, or
        judged dead and removed by another process): the caller registers again."""
        ...

    async def register(self, owner: str, lease: float) -> None:
        """Add ``owner``'s row (a beat of 0), judged dead once silent for ``lease``
        seconds; one that exists is left as it is."""
        ...

    async def beats(self) -> dict[str, Heartbeat]:
        """Every registered owner's heartbeat."""
        ...

    async def forget(self, owners: list[str]) -> None:
        """Remove these owners' rows (they ended, or were judged dead)."""
        ...
