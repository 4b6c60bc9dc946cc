"""Waits of this process on another one, ended when this process shuts down.

Nothing here ends what another gateway process runs, so a request of this process
waiting on it (a watch of a run there, following its stored log; a cancel sent there,
waiting for the run's end) would outlive this process's drain window, until the server's
last resort cut it without a word. Known to this process's
:class:`~stateway.core.run_registry.RunRegistry` while it waits (one of the answers relayed from
elsewhere, :class:`~stateway.core.run_registry.Relaying`), such a wait is ended with the runs
(:meth:`RunRegistry.end_all <stateway.core.run_registry.RunRegistry.end_all>`): the wait under way
is interrupted, and it and any later one raise
:class:`~stateway.core.errors.ServerShuttingDown` with the words its request gets, which
tell its client what goes on elsewhere and where to ask again.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import TypeVar

from stateway.core.errors import GatewayError, ServerShuttingDown
from stateway.core.run_registry import RunRegistry

T = TypeVar("T")


class ForeignWait:
    """The waits of one request on another process. Without ``runs`` (a caller that has
    none), waits are only waits; :meth:`close` once the request waits no more."""

    __slots__ = ("_ended", "_guard", "_known", "_message", "_runs")

    def __init__(self, runs: RunRegistry | None, message: str) -> None:
        """``message``: what the request's client is told when shutting down ends it."""
        self._runs = runs
        self._message = message
        self._known = False
        """Whether ``runs`` holds it (from its first wait on, until :meth:`close`)."""
        self._ended = False
        self._guard: asyncio.Timeout | None = None
        """The wait under way's way out."""

    async def waited(self, wait: Callable[[], Awaitable[T]]) -> T:
        """What ``wait()`` gives, unless this process shuts down first (or has)."""
        runs = self._runs
        if runs is None:
            return await wait()
        if not self._known and not self._ended:
            if runs.closing:  # ended already: it would not be ended again
                self._ended = True
            else:
                runs.add_relay(self)
                self._known = True
        if self._ended:
            raise ServerShuttingDown(self._message)
        guard = asyncio.timeout(None)
        self._guard = guard
        try:
            async with guard:
                return await wait()
        except TimeoutError:
            if not guard.expired():  # the wait's own: it has no deadline but this end
                raise
            raise ServerShuttingDown(self._message) from None
        finally:
            self._guard = None

    async def end(self, error: GatewayError) -> None:
        """:class:`~stateway.core.run_registry.Relaying`: interrupt the wait under way, if any,
        and every later one (its client is told this wait's own words, not ``error``'s:
        what it waited on goes on elsewhere)."""
        self._ended = True
        guard = self._guard
        if guard is not None and not guard.expired():
            guard.reschedule(asyncio.get_running_loop().time())

    def close(self) -> None:
        if self._known and self._runs is not None:
            self._known = False
            self._runs.discard_relay(self)
