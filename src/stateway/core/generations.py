"""Config generations: what the configuration compiled into, held by everything admitted
under it until that work ends.

A :class:`Generation` is immutable once published: its router (routes, backends with
their upstream pools, stages, health policy) and its loop (round limit, gateway tools
with their MCP pools). :class:`Generations` holds the current one. Every request and run
takes a lease on the current generation when the gateway admits it and gives it back
when it ends (a run's tool loop rounds all run on it); publishing a new generation
changes what new admissions get, never what already runs. A superseded generation is
retired, its pools closed, when its last lease is given back: at once when none is out.

Triggers and compiling live outside the core (the composition root compiles; a
:class:`Reloads` port reloads and reports); this module only holds and retires.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

from stateway.core.backend import ChatForwarder, Relay
from stateway.core.errors import CredentialRevoked, GatewayError, ServerShuttingDown
from stateway.core.loop import Loop
from stateway.core.routing import Router
from stateway.core.routing.attempts import Outcome
from stateway.core.usage import Usage

if TYPE_CHECKING:
    from stateway.core.run_registry import RunRegistry

log = logging.getLogger(__name__)


class Generation:
    __slots__ = ("_closed", "leases", "loaded_at", "loop", "number", "retired", "router")

    def __init__(self, number: int, router: Router, loop: Loop, loaded_at: float) -> None:
        self.number = number
        self.router = router
        self.loop = loop
        self.loaded_at = loaded_at
        """Unix seconds it was published at."""
        self.leases = 0
        """Requests and runs admitted under it and not yet ended."""
        self.retired = asyncio.Event()
        """Set once its pools are closed."""
        self._closed = False

    async def aclose(self) -> None:
        """Close its backends' upstream pools and its gateway tools' sessions, once."""
        if self._closed:
            return
        self._closed = True
        try:
            for backend in self.router.backends:
                await backend.aclose()
            await self.loop.tools.aclose()
        finally:
            self.retired.set()


class Generations:
    def __init__(self, router: Router, loop: Loop) -> None:
        """Generation 1 serves ``router`` with ``loop``."""
        self.current = Generation(1, router, loop, time.time())
        self._superseded: set[Generation] = set()
        """Superseded generations still leased."""
        self._retiring: set[asyncio.Task[None]] = set()

    def acquire(self) -> Generation:
        """A lease on the current generation; give it back with :meth:`release`."""
        generation = self.current
        generation.leases += 1
        return generation

    def retain(self, generation: Generation) -> None:
        """One more lease on ``generation``, which must be leased already."""
        assert generation.leases > 0
        generation.leases += 1

    def release(self, generation: Generation) -> None:
        """Give a lease back; the last one of a superseded generation retires it."""
        generation.leases -= 1
        if generation.leases == 0 and generation is not self.current:
            self._superseded.discard(generation)
            self._retire(generation)

    @contextmanager
    def lease(self) -> Iterator[Generation]:
        """The current generation, leased for the block."""
        generation = self.acquire()
        try:
            yield generation
        finally:
            self.release(generation)

    def publish(self, router: Router, loop: Loop) -> Generation:
        """Serve new admissions from a new generation; what runs keeps its own. The new
        router takes over what the old one learned that still holds
        (:meth:`Router.follow`)."""
        previous = self.current
        router.follow(previous.router)
        self.current = Generation(previous.number + 1, router, loop, time.time())
        if previous.leases == 0:
            self._retire(previous)
        else:
            self._superseded.add(previous)
        return self.current

    @property
    def retiring(self) -> list[int]:
        """The numbers of superseded generations still in use, oldest first."""
        return sorted(g.number for g in self._superseded)

    async def aclose(self) -> None:
        """Close every generation (shutting down: runs have ended), and wait for the
        retirements under way."""
        for generation in [self.current, *self._superseded]:
            await generation.aclose()
        self._superseded.clear()
        if self._retiring:
            await asyncio.gather(*self._retiring)

    def _retire(self, generation: Generation) -> None:
        task = asyncio.create_task(_retire(generation))
        self._retiring.add(task)
        task.add_done_callback(self._retiring.discard)


async def _retire(generation: Generation) -> None:
    try:
        await generation.aclose()
    except Exception:  # the top of a retirement's task: a failing close is only logged
        log.exception("closing generation %d failed", generation.number)
    else:
        log.info("config generation %d retired", generation.number)


_ENDINGS = (ServerShuttingDown, CredentialRevoked)
"""Errors that end a relay as expected (shutting down, a credential revoked or expired),
not as its upstream failing it: its attempt is ``cancelled``, as its client leaving is."""

Ended = Callable[[Relay | None, Outcome, GatewayError | None], None]
"""Told how a relay ended: its upstream's answer (None: there was none), the outcome, the
upstream's error that failed or cut it (:class:`HeldRelay`)."""


class HeldRelay:
    """A forwarded request and its relayed answer, holding its generation's lease from
    when it is sent until it is closed (its upstream connection belongs to that
    generation's pool); ``ended`` is told once, with the upstream's answer (None: there was
    none), how its upstream attempt ended: ``ok`` (relayed to its end), ``failed`` (an
    error status, or the upstream failed before any body byte was relayed), ``cut`` (the
    upstream failed part-way) or ``cancelled`` (closed before its end: the client left,
    or the server shut down), and the upstream's error that failed or cut it, if one did.

    ``runs`` knows it meanwhile (:meth:`RunRegistry.add_relay`), so that shutting down ends
    it (:meth:`end`): still waiting for the status line, that wait is cancelled and
    :meth:`open` raises the error; relaying, its upstream answer is closed, and the read
    failing thereby makes :meth:`chunks` raise the error instead. Nothing is added per chunk.
    """

    __slots__ = (
        "_after_close",
        "_ended",
        "_ending",
        "_error",
        "_generations",
        "_held",
        "_outcome",
        "_relay",
        "_runs",
        "_waiting",
        "headers",
        "status",
        "whole",
    )

    status: int
    headers: Mapping[str, str]
    whole: bool
    """All three set by :meth:`open`."""

    def __init__(
        self,
        generations: Generations,
        generation: Generation,
        runs: RunRegistry,
        ended: Ended | None = None,
    ) -> None:
        self._generations = generations
        self._held: Generation | None = generation
        self._runs = runs
        self._ended = ended
        self._relay: Relay | None = None
        self._waiting: asyncio.Task[object] | None = None
        """The task waiting in :meth:`open` for the status line."""
        self._ending: GatewayError | None = None
        """Why it was ended (:meth:`end`), if it was."""
        self._outcome: Outcome = "cancelled"
        """Until the body has been relayed to its end (or failed)."""
        self._error: GatewayError | None = None
        """The upstream's error that failed or cut it, once one did."""
        self._after_close: Callable[[], Awaitable[object]] | None = None
        """What :meth:`aclose` awaits last (:meth:`also_ended`)."""

    async def open(
        self, forwarder: ChatForwarder, body: bytes, fields: Mapping[str, Any]
    ) -> HeldRelay:
        """Send ``body`` upstream (``fields``: the client's body parsed, for the
        forwarder to read): this relay, once its status line came. Raises what
        :meth:`ChatForwarder.forward_chat` raises, or the error it was ended with meanwhile,
        having told ``ended`` and given nothing back (the lease is then its caller's)."""
        self._runs.add_relay(self)
        task = self._waiting = asyncio.current_task()
        try:
            relay = await forwarder.forward_chat(body, fields)
        except GatewayError as error:  # no answer at all: unreachable, timed out, overloaded
            self._error = error
            self._gone(None, "failed")
            raise
        except BaseException as exc:  # the client left, or it was ended (or a bug)
            self._gone(None, "cancelled")
            ending = self._ending if isinstance(exc, asyncio.CancelledError) else None
            if ending is not None and task is not None and task.uncancel() == 0:
                raise ending from None  # cancelled by its end alone
            raise
        finally:
            self._waiting = None
        self._relay = relay
        self.status = relay.status
        self.headers = relay.headers
        self.whole = relay.whole
        if self._ending is not None:  # ended as its answer came: its chunks fail
            await relay.aclose()
        return self

    async def end(self, error: GatewayError) -> None:
        """Interrupt it (the server is shutting down); its reads fail, raising ``error``."""
        if self._ending is not None:
            return
        self._ending = error
        if self._relay is not None:
            await self._relay.aclose()  # the read under way, or the next one, fails
        elif self._waiting is not None:
            self._waiting.cancel()

    async def body(self) -> bytes:
        relay = self._relay
        assert relay is not None, "relayed once opened"
        try:
            body = await relay.body()
        except GatewayError as error:
            if self._ending is not None:  # its read failed because it was ended
                raise self._ending from error
            if isinstance(error, _ENDINGS):
                raise  # ended, not failed by its upstream: still "cancelled"
            self._outcome = "failed"  # nothing of it was relayed
            self._error = error
            raise
        self._outcome = "ok" if self.status < 400 else "failed"
        return body

    async def chunks(self) -> AsyncIterator[bytes]:
        relay = self._relay
        assert relay is not None, "relayed once opened"
        relayed = False
        try:
            async for chunk in relay.chunks():
                relayed = True
                yield chunk
        except GatewayError as error:
            if self._ending is not None:  # its read failed because it was ended
                raise self._ending from error
            if isinstance(error, _ENDINGS):
                raise  # ended, not failed by its upstream: still "cancelled"
            self._outcome = "cut" if relayed and self.status < 400 else "failed"
            self._error = error
            raise
        self._outcome = "ok" if self.status < 400 else "failed"

    def also_ended(self, told: Callable[[], None], closed: Callable[[], Awaitable[object]]) -> None:
        """Tell ``told`` too when it ends, after ``ended`` (at once if it has ended); and
        have :meth:`aclose` await ``closed()`` once it has told them (a slot's give-back
        answered: its route closes it before the last bytes of its answer)."""
        self._after_close = closed
        if self._held is None:
            told()
            return
        ended = self._ended

        def both(relay: Relay | None, outcome: Outcome, error: GatewayError | None) -> None:
            try:
                if ended is not None:
                    ended(relay, outcome, error)
            finally:
                told()

        self._ended = both

    def usage(self) -> Usage | None:
        return None if self._relay is None else self._relay.usage()

    def output_estimate(self) -> int:
        return 0 if self._relay is None else self._relay.output_estimate()

    def failure(self) -> GatewayError | None:
        return None if self._relay is None else self._relay.failure()

    async def aclose(self) -> None:
        try:
            if self._relay is not None:
                await self._relay.aclose()
        finally:
            if self._held is not None:
                self._generations.release(self._held)
                self._gone(self._relay, self._outcome)
        closed, self._after_close = self._after_close, None
        if closed is not None:
            await closed()

    def _gone(self, relay: Relay | None, outcome: Outcome) -> None:
        """Forgotten by ``runs``, its lease no longer its own, ``ended`` told."""
        self._held = None
        self._runs.discard_relay(self)
        if self._ended is not None:
            self._ended(relay, outcome, self._error)


@dataclass(frozen=True, slots=True)
class ConfigStatus:
    generation: int
    """The current generation's number: +1 per successful reload."""
    loaded_at: float
    """Unix seconds the current generation was published at."""
    last_error: str | None
    """Why the last reload failed (the generation it would have replaced serves on);
    None once a reload succeeds."""
    restart_required: tuple[str, ...]
    """Settings read once at start-up whose configured value differs from the one in
    effect: not applied until a restart."""
    retiring: tuple[int, ...]
    """Superseded generations still serving requests or runs admitted under them."""


class Reloads(Protocol):
    """Reloading the configuration into a new generation, and how that went."""

    async def reload(self) -> ConfigStatus:
        """Compile and publish a new generation. Raises
        :class:`~stateway.core.errors.ConfigRejected` (the current one serves on)."""
        ...

    def status(self) -> ConfigStatus: ...
