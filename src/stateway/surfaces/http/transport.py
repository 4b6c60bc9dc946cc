"""Watching for a client that goes away while its answer is made (a disconnect watcher
task, started late; an awaited model call cancelled when the client leaves), and the
header telling where a token count came from. A body is read by
:mod:`stateway.surfaces.asgi.bodies`, JSON answered by :mod:`stateway.surfaces.asgi.answers`
and the SSE response is ``sse.py``'s.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import TypeVar

from starlette.requests import ClientDisconnect
from starlette.types import Receive

T = TypeVar("T")


async def watch_disconnect(receive: Receive, on_disconnect: Callable[[], None]) -> None:
    """Wait for ``http.disconnect`` and report it; run as a task, cancel when done."""
    while True:
        message = await receive()
        if message["type"] == "http.disconnect":
            on_disconnect()
            return


WATCH_AFTER = 0.05
"""Seconds a :class:`DisconnectWatch` waits before it starts watching."""


TOKEN_COUNT_HEADER = "Stateway-Token-Count"
"""On the token-counting routes: ``upstream`` (the model server's tokenizer counted) or
``estimate`` (the gateway's estimate: no tokenizer to ask)."""


def token_count_header(estimated: bool) -> dict[str, str]:
    """The header telling where a token count came from."""
    return {TOKEN_COUNT_HEADER: "estimate" if estimated else "upstream"}


class DisconnectWatch:
    """Cancels the task answering a request (the current one) when its client leaves,
    once the answer has taken ``after`` seconds: only then does a watcher task start
    (:func:`watch_disconnect`), so an answer done sooner (most relayed non-streamed ones)
    pays for a timer instead of a task, and a client that leaves sooner is noticed then.
    The task catches the ``CancelledError`` and asks :meth:`left` whether it was this
    watch's; :meth:`stop` when the answer is done (or watched otherwise). Given ``leave``,
    the watch calls it instead of cancelling the task (an attached run's
    :meth:`~stateway.core.runs.Run.cancel`, which knows when a cancel may interrupt it);
    :meth:`stop` then tells whether the client left."""

    __slots__ = ("_gone", "_leave_with", "_receive", "_task", "_timer", "_watcher")

    def __init__(
        self,
        receive: Receive,
        after: float = WATCH_AFTER,
        *,
        leave: Callable[[], None] | None = None,
    ) -> None:
        task = asyncio.current_task()
        assert task is not None
        self._task = task
        self._receive = receive
        self._gone = False
        self._leave_with = leave
        self._watcher: asyncio.Task[None] | None = None
        self._timer: asyncio.TimerHandle | None = asyncio.get_running_loop().call_later(
            after, self._watch
        )

    def _watch(self) -> None:
        self._timer = None
        self._watcher = asyncio.get_running_loop().create_task(
            watch_disconnect(self._receive, self._leave)
        )

    def _leave(self) -> None:
        self._gone = True
        if self._leave_with is None:
            self._task.cancel()
        else:
            self._leave_with()

    def calling(self, leave: Callable[[], None]) -> None:
        """From now on, call ``leave`` when the client leaves instead of cancelling the
        task (see the class)."""
        self._leave_with = leave

    def left(self) -> bool:
        """Whether the ``CancelledError`` being handled is this watch's alone: the
        client left (and no one else cancelled the task)."""
        return self._gone and self._task.uncancel() == 0

    def stop(self) -> bool:
        """Stop watching; whether the client left."""
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        if self._watcher is not None:
            self._watcher.cancel()
            self._watcher = None
        return self._gone


async def while_present(receive: Receive, answer: Awaitable[T]) -> T:
    """``answer`` (a model call: a summary, a token count), awaited while its client is
    watched once its body is read: a client that leaves cancels it, closing the upstream
    request, and is ``ClientDisconnect`` (nobody to answer)."""
    watch = DisconnectWatch(receive)
    try:
        return await answer
    except asyncio.CancelledError:
        if not watch.left():
            raise
        raise ClientDisconnect from None
    finally:
        watch.stop()
