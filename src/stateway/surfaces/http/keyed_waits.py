"""A streamed keyed request waiting for its key, held open as a stream.

A retry of a keyed Chat Completions or Messages stream that arrives while the first
request with its key still runs waits for the first to end (:mod:`.keyed_runs`), which
takes as long as the first's generation. It must not wait in silence: a reverse proxy or
its client's read timeout would cut it (and its retry would wait in silence again). So a
retry still waiting after one keep-alive interval commits to its stream: its status line
(200) and the stream's headers go out, then its protocol's keep-alive (an SSE comment on
Chat, a ``ping`` event on Messages) at the route's interval until the wait ends. What
follows goes on in that stream: the first answer's events, or the retry's own answer when
the first left none, a failure before any output then its protocol's error event (the
status line is gone). A retry that finds its answer within the first interval is answered
as before, status line and all.
"""

from __future__ import annotations

import asyncio

from starlette.types import Send

from stateway.surfaces.http.sse import status_line


class WaitingStream:
    """The answer of a streamed keyed request while it waits for its key: after
    ``keepalive`` seconds its status line and ``headers`` go out with ``idle_frame``, then
    ``idle_frame`` again every ``keepalive`` seconds, until :meth:`end`. A write its
    client left fails quietly (the route's disconnect watch ends the wait)."""

    __slots__ = (
        "_ended",
        "_headers",
        "_idle_frame",
        "_keepalive",
        "_send",
        "_timer",
        "_writing",
        "opened",
    )

    def __init__(
        self, send: Send, keepalive: float, idle_frame: bytes, headers: dict[str, str]
    ) -> None:
        self._send = send
        self._keepalive = keepalive
        self._idle_frame = idle_frame
        self._headers = headers
        self._ended = False
        self.opened = False
        """Whether its status line went out (or is going out): its answer follows in the
        stream."""
        self._writing: asyncio.Task[None] | None = None
        self._timer: asyncio.TimerHandle | None = asyncio.get_running_loop().call_later(
            keepalive, self._write
        )

    def _write(self) -> None:
        """Timer callback: the next write (the status line first) in a task of its own,
        which the wait's end waits for, never cutting a write short."""
        self._timer = None
        self._writing = asyncio.get_running_loop().create_task(self._keep_alive())

    async def _keep_alive(self) -> None:
        try:
            if not self.opened:
                self.opened = True
                await self._send(status_line(self._headers))
            await self._send(
                {"type": "http.response.body", "body": self._idle_frame, "more_body": True}
            )
        except OSError:
            return  # its client left
        if self._ended:
            return
        self._writing = None
        self._timer = asyncio.get_running_loop().call_later(self._keepalive, self._write)

    async def end(self) -> bool:
        """Stop writing keep-alives (a write under way goes out whole first); whether the
        stream opened. May be called again."""
        self._ended = True
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        writing, self._writing = self._writing, None
        if writing is not None:
            await asyncio.shield(writing)
        return self.opened
