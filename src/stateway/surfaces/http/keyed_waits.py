"""A streamed keyed request waiting for its key, held open as a stream.

A retry of a keyed Chat Completions or Messages stream that arrives while the first
request with its key still runs waits for the first to end (:mod:`.keyed_runs`), which
takes as long as the first's generation. It must not wait in silence: a reverse proxy or
its client's read timeout would cut it (and its retry would wait in silence again). So a
retry still waiting after one keep-alive interval (its claim having found the first's: a
first request whose claim is slow, Redis taking its time, is answered as ever, an error
status and all) commits to its stream: its status line (200) and the stream's headers go
out, then its protocol's keep-alive (an SSE comment on Chat, a ``ping`` event on
Messages) at the route's interval until the wait ends. What
follows goes on in that stream: the first answer's events, or the retry's own answer when
the first left none, a failure before any output then its protocol's error event (the
status line is gone). A retry that finds its answer within the first interval is answered
as before, status line and all.

Its stream open, the retry's credential is watched as any stream's is
(:class:`~stateway.surfaces.auth.revocation.RevocationWatch`): revoked or expired while it
waits, its wait ends (as its client leaving ends it: a claim Redis took for it meanwhile
let go, nothing of the first request cancelled) and its stream ends with its protocol's
authentication error. A client that does not read that last event (or the keep-alive
before it) is waited for a while only, as any stream's
(:func:`~stateway.surfaces.http.sse.send_ending`): its connection is then left
unfinished, which closes it.
"""

from __future__ import annotations

import asyncio

from starlette.types import Scope, Send

from stateway.core.errors import CredentialRevoked
from stateway.surfaces.auth.revocation import RevocationWatch
from stateway.surfaces.http.sse import status_line


class WaitingStream:
    """The answer of a streamed keyed request while it waits for its key (its task's):
    after ``keepalive`` seconds its status line and ``headers`` go out with
    ``idle_frame``, then ``idle_frame`` again every ``keepalive`` seconds, until
    :meth:`end`, once it is known to wait for another attempt (:meth:`waits`). A write
    its client left fails quietly (the route's disconnect watch ends the wait). Once
    open, a credential that stops holding ends the wait: its task is cancelled, and
    :meth:`revoked` tells why."""

    __slots__ = (
        "_ended",
        "_headers",
        "_idle_frame",
        "_keepalive",
        "_revocation",
        "_revoked",
        "_scope",
        "_send",
        "_task",
        "_timer",
        "_waits",
        "_writing",
        "opened",
    )

    def __init__(
        self,
        send: Send,
        keepalive: float,
        idle_frame: bytes,
        headers: dict[str, str],
        scope: Scope,
    ) -> None:
        task = asyncio.current_task()
        assert task is not None
        self._task = task
        self._send = send
        self._scope = scope
        self._keepalive = keepalive
        self._idle_frame = idle_frame
        self._headers = headers
        self._ended = False
        self._waits = False
        self.opened = False
        """Whether its status line went out (or is going out): its answer follows in the
        stream."""
        self._revocation: RevocationWatch | None = None
        self._revoked: CredentialRevoked | None = None
        self._writing: asyncio.Task[None] | None = None
        self._timer: asyncio.TimerHandle | None = asyncio.get_running_loop().call_later(
            keepalive, self._write
        )

    def waits(self) -> None:
        """Claim callback: the request waits for another attempt running its command; its
        stream opens once it has waited a keep-alive interval (at once if it has)."""
        self._waits = True
        if not self.opened and self._timer is None and not self._ended:
            self._write()  # its interval passed while its claim was under way

    def _write(self) -> None:
        """Timer callback: the next write (the status line first) in a task of its own,
        which the wait's end waits for, never cutting a write short; none before it is
        known to wait (:meth:`waits`)."""
        self._timer = None
        if not self._waits:
            return
        self._writing = asyncio.get_running_loop().create_task(self._keep_alive())

    async def _keep_alive(self) -> None:
        if not self._ended:  # else ended before its turn came: nothing to write
            await self._write_next()

    async def _write_next(self) -> None:
        try:
            if not self.opened:
                self.opened = True
                self._revocation = RevocationWatch.start(self._scope, self._revoke)
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

    def _revoke(self, revoked: CredentialRevoked) -> None:
        """:class:`RevocationWatch` callback: end the wait, as its client leaving does."""
        if not self._ended:
            self._revoked = revoked
            self._task.cancel()

    def revoked(self) -> CredentialRevoked | None:
        """Why the wait ended, when the ``CancelledError`` being handled is its revoked
        credential's alone (and no one else cancelled the task)."""
        if self._revoked is None or self._task.uncancel() > 0:
            return None
        return self._revoked

    def stop(self) -> bool:
        """Stop writing keep-alives (none starts from now on) and watching its credential;
        whether the stream opened. May be called again."""
        self._ended = True
        if self._revocation is not None:
            self._revocation.stop()
            self._revocation = None
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        return self.opened

    async def end(self) -> bool:
        """:meth:`stop`, a write under way going out whole first; whether the stream
        opened. May be called again. Cancelled meanwhile (its stream's end given up on a
        client that does not read), it gives up that write too: it is waited for once."""
        opened = self.stop()
        writing, self._writing = self._writing, None
        if writing is not None:
            try:
                await asyncio.shield(writing)
            except asyncio.CancelledError:
                writing.cancel()
                raise
        return opened
