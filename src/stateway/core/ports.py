"""Ports: what the core needs of storage and sealing, implemented in ``storage/`` and
``sealing/`` (a model server's, the Backend port: :mod:`stateway.core.backend`)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal, Protocol

from stateway.core.items import Item


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
        failed it: its lease was judged lapsed) or unknown. (A queued background
        response's start is such an update too: to ``in_progress``, nothing added.)"""
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


class ResponseEraser(Protocol):
    """Erases the content of deleted responses (:mod:`stateway.core.retention`)."""

    async def purge(self, before: float, limit: int) -> int:
        """In one transaction, erase the items, event logs and body text of at most
        ``limit`` finished responses deleted before ``before`` (a Unix time) that no
        response continues from, then of the deleted ones they continued from that
        none now does, up their chains while fewer than ``limit`` were; how many were
        (fewer than twice ``limit``). What ``/v1/usage`` counts of each stays. Calls
        with the same ``before`` make one sweep, each going on where the last stopped
        (up a chain first), until one erases fewer than ``limit``; the next call starts
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
