"""Coordination ports: what gateway processes share beyond the database.

- :class:`CommandResults` remembers the outcome of each command a client sent with an id
  (``Idempotency-Key`` on REST, ``command_id`` in WebSocket frames and MCP tool
  arguments), per (tenant, principal, command id). A command is *claimed* before it runs,
  so a retry that arrives while the first attempt still runs waits for its outcome
  instead of running again (ADR 0011).
- :class:`CancelSignals` carries a cancel to the process that runs a background response.
- :class:`EventFanout` carries each batch of a run's event log, once committed, to the
  processes whose clients follow that run (``GET /v1/responses/{id}?stream=true``), and
  a follower's question of how far the run's log is to the process running it.

The adapters live in :mod:`stateway.coordination`: in process (the embedded default) or
Redis (several processes behind a load balancer); ``app/gateway.py`` picks one.
"""

from __future__ import annotations

from collections.abc import Callable
from contextlib import AbstractAsyncContextManager
from dataclasses import dataclass
from typing import Protocol

from stateway.core.ports import EventBatch

MAX_COMMAND_ID = 255
"""The longest command id (``Idempotency-Key``, ``command_id``) accepted."""


@dataclass(frozen=True, slots=True)
class CommandKey:
    """Whose command this is, and the id its client gave it."""

    tenant_id: str
    principal: str
    """The caller's :attr:`~stateway.core.principal.Principal.scope`."""
    command_id: str

    def __str__(self) -> str:
        return joined_key(self.tenant_id, self.principal, self.command_id)


SEPARATOR, ESCAPE = "\x1f", "\x1b"


def joined_key(*parts: str) -> str:
    """``parts`` joined by unit separators into one key that names them alone.

    A WebSocket ``command_id`` or a token's ``sub`` may hold a unit separator itself, so
    one within a part is escaped (``ESC US``), as is the escape (``ESC ESC``): no two
    tuples of parts join alike. A key of parts holding neither is their plain join, as
    before escaping, so that what is stored under it (a command's outcome in Redis) is
    found again after an upgrade."""
    return SEPARATOR.join(
        part.replace(ESCAPE, ESCAPE * 2).replace(SEPARATOR, ESCAPE + SEPARATOR) for part in parts
    )


@dataclass(frozen=True, slots=True)
class Outcome:
    """What a command's first attempt answered, as its surface encoded it.

    ``body`` is the answer every retry gets byte for byte. A streamed create remembers its
    ``response_id`` instead: a retry streams that response's event log from the start."""

    fingerprint: str
    """Digest of the request that ran: the same id with another request is refused."""
    body: bytes = b""
    response_id: str | None = None


class CommandResults(Protocol):
    shared: bool
    """True when the outcomes live outside the process (Redis): :meth:`ping` checks it."""

    async def ping(self) -> None:
        """Raise :class:`~stateway.core.errors.StorageError` when the store holding the
        outcomes does not answer (``GET /ready`` reports it; in process it always does)."""
        ...

    async def claim(
        self, key: CommandKey, fingerprint: str, waiting: Callable[[], None] | None = None
    ) -> Outcome | None:
        """Claim ``key`` for a command whose request digests to ``fingerprint``.

        None: the caller holds the claim; it runs the command and then calls
        :meth:`complete` (or :meth:`release` when it failed). An :class:`Outcome`: the
        command ran already, or another attempt was running it and this call waited for
        its outcome. An attempt that fails leaves no outcome: a waiter then claims the
        key itself. Raises :class:`~stateway.core.errors.IdempotencyKeyReused` when the
        key was used with another request. ``waiting`` is called (once, at most) when the
        call finds another attempt running the command and begins to wait for it."""
        ...

    async def complete(self, key: CommandKey, outcome: Outcome) -> None:
        """Remember ``outcome`` for ``key`` (claimed by the caller) and wake its waiters."""
        ...

    async def release(self, key: CommandKey) -> None:
        """Give up the caller's claim without an outcome: a retry runs the command again.

        Both raise :class:`~stateway.core.errors.StorageError` when the store cannot be
        reached, unlogged: the caller logs what that loses (``exactly_once._settle``),
        the error's ``str`` telling why."""
        ...

    async def aclose(self) -> None: ...


CancelHandler = Callable[[str, str], None]
"""Called with ``(tenant_id, response_id)`` when a cancel for that response arrives."""


class CancelSignals(Protocol):
    shared: bool
    """True when signals reach other processes; False: only this process's runs can be
    cancelled."""

    async def send(self, tenant_id: str, response_id: str) -> None:
        """Ask whichever process runs the response to cancel it."""
        ...

    async def start(self, handler: CancelHandler) -> None:
        """Deliver the cancels sent from now on (by any process) to ``handler``."""
        ...

    async def aclose(self) -> None: ...


@dataclass(frozen=True, slots=True)
class Published:
    """A batch of a run's event log, published once its owner had committed it; or, with
    no payloads, a *mark*: its owner had logged ``batch.first`` events (committed or not)
    when it was asked ``question`` (:meth:`EventFanout.ask`)."""

    batch: EventBatch
    last: bool
    """The batch ends with the run's terminal event."""
    question: str | None = None
    """Of a mark: the question it answers. Every follower of the run receives every mark;
    only the asker's own says how far the log was once it asked. None: the question of
    a process older than question ids."""


class Following(Protocol):
    """The batches published for one response, from when the following began."""

    async def next(self, within: float) -> Published | None:
        """The next batch received; None when none came within ``within`` seconds (or
        the channel is not available: the follower reads the store instead)."""
        ...

    def pending(self) -> int:
        """Bytes of payloads received and not taken yet."""
        ...


AskHandler = Callable[[str, str, str | None], None]
"""Called with ``(tenant_id, response_id, question)`` when a process asks how far that
log is (``question`` None: asked by a process older than question ids)."""


class EventFanout(Protocol):
    """Batches of event logs between processes: published by the process that runs a
    response, received by every process following it. Delivery is best effort: a
    follower reads what it missed from the store, which holds every batch published.
    A follower may :meth:`ask` how far a log is: the process running the response
    answers with a :meth:`mark` on it."""

    def publish(self, tenant_id: str, response_id: str, batch: EventBatch, last: bool) -> None:
        """Send a batch just committed to the response's stored log; returns at once
        (sent in order, in the background) and never fails."""
        ...

    def follow(self, tenant_id: str, response_id: str) -> AbstractAsyncContextManager[Following]:
        """Receive the batches published for the response from now on, until exit."""
        ...

    def ask(self, tenant_id: str, response_id: str, question: str) -> None:
        """Ask every process how far the response's log is: the one running it answers
        with a :meth:`mark` naming ``question`` (an id unique to the asker; best effort,
        as :meth:`publish`: returns at once and never fails)."""
        ...

    def mark(self, tenant_id: str, response_id: str, logged: int, question: str | None) -> None:
        """Answer ``question``: publish that this process had logged ``logged`` events of
        the response when it was asked (as :meth:`publish`: at once, never failing)."""
        ...

    async def start(self, asked: AskHandler) -> None:
        """Deliver the questions asked from now on (by any process) to ``asked``."""
        ...

    async def aclose(self) -> None: ...
