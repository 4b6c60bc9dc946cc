"""A deadline for one block of a task: what ``asyncio.timeout`` does, for less.

Python 3.11's ``asyncio.timeout`` is written in Python, as an async context manager that
keeps a state machine; the request path enters several per request (the body read, the
upstream's first byte), and they showed in its profile. :class:`Deadline` is a plain
context manager over one loop timer: when it fires, the task is cancelled, and leaving
the block turns that cancellation (and only that one) into ``TimeoutError``, as
``asyncio.timeout`` does. :class:`FirstOutput` is one whose block is entered in one place
and met in another (an upstream call's wait for its first output).
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from types import TracebackType


class Deadline:
    """``with Deadline(seconds):`` inside a task; None: no deadline. :attr:`expired` tells,
    after a ``TimeoutError``, that this deadline raised it."""

    __slots__ = ("_cancelling", "_delay", "_handle", "_task", "expired")

    def __init__(self, seconds: float | None) -> None:
        self._delay = seconds
        self._task: asyncio.Task[object] | None = None
        self._handle: asyncio.TimerHandle | None = None
        self._cancelling = 0
        self.expired = False

    def __enter__(self) -> Deadline:
        if self._delay is not None:
            task = asyncio.current_task()
            if task is None:
                raise RuntimeError("Deadline must be used inside a task")
            self._task = task
            self._cancelling = task.cancelling()
            self._handle = asyncio.get_running_loop().call_later(self._delay, self._expire)
        return self

    def clear(self) -> None:
        """No deadline from here on: the block goes on unbounded (what
        ``asyncio.Timeout.reschedule(None)`` does). Too late once it expired."""
        if self._handle is not None:
            self._handle.cancel()
            self._handle = None

    def _expire(self) -> None:
        self._handle = None
        self.expired = True
        if self._task is not None:
            self._task.cancel()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        task, self._task = self._task, None  # the task's frames may hold this deadline
        if self._handle is not None:
            self._handle.cancel()
            self._handle = None
        if (
            self.expired
            and exc_type is asyncio.CancelledError
            and task is not None
            and task.uncancel() <= self._cancelling
        ):
            raise TimeoutError from exc


class FirstOutput:
    """One upstream attempt's wait for its first output, bounded by its backend's
    ``first_token_timeout``. Its two ends are known in two places: the upstream client
    starts it once the response headers are in (:meth:`within`: the deadline it enters
    around the reading of the reply, and turns into its timeout error), and the round,
    the one judge of what counts as output, ends it with the first (:meth:`came`).
    Carried from one to the other on the attempt's
    :class:`~stateway.core.inference.InferenceRequest`; a request without one (a
    compaction's summary, a token count) is not bounded so."""

    __slots__ = ("_deadline", "seated")

    def __init__(self, seated: Callable[[], None] | None = None) -> None:
        self._deadline: Deadline | None = None
        self.seated = seated
        """Called by the upstream client once the call took its connection slot (past
        the gateway's waiting room): a queued background run starts working then
        (:class:`~stateway.core.run_row.QueuedStart`)."""

    def within(self, seconds: float) -> Deadline:
        """The deadline ``seconds`` from now, met by :meth:`came`."""
        deadline = self._deadline = Deadline(seconds)
        return deadline

    def came(self) -> None:
        """The first output arrived: the wait is over, whatever the block still reads."""
        deadline, self._deadline = self._deadline, None
        if deadline is not None:
            deadline.clear()
