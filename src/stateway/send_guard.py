"""Dropping a connection whose client stopped reading (``[server] send_timeout``), as
nginx's ``send_timeout`` and a Go server's write deadline do.

A client that keeps its connection open but reads nothing more holds whatever is sent to
it: the task streaming an HTTP answer and the run it streams (a relayed Chat Completions
stream, its upstream request too: it is read at the client's pace), a WebSocket session;
and the connection itself, for ever, even once the gateway closes it (a 4429, a keep-alive
expiring): asyncio's and uvloop's ``close()`` wait for the bytes still queued to be taken.
So once output has waited ``send_timeout`` seconds without the client taking any of it,
the connection is aborted (what waits is dropped). Everything above it sees what it sees
of a client that left: an HTTP request's ``receive`` gives ``http.disconnect`` (a stream's
run ends ``incomplete``, ``client_disconnected``, unless it runs in the background; a
relay's upstream request is closed), a WebSocket session its ``websocket.disconnect``.

Output waits when the transport holds bytes the kernel would not take (the socket's
buffers full: the client's window closed). The server's connection sweep
(:class:`~stateway.header_guard.HeaderSweep`, every second or so) reads how many: the clock
starts when it first sees some waiting, and starts again whenever fewer wait than at its
last look, or writing resumed meanwhile (the transport drained to its low-water mark):
the client took some. More waiting is no sign of a reader (the app writes on until the
transport's high-water mark), so a client that takes a little less in every interval than
is written to it, with the socket's buffers full and the transport below its high-water
mark, is dropped too: it has fallen megabytes behind and keeps falling. Nothing is done
per write; a drain of the transport (pause, then resume) sets one attribute.
"""

from __future__ import annotations

import asyncio
import logging

log = logging.getLogger(__name__)


class SendGuarded(asyncio.Protocol):
    """Mixed into a uvicorn protocol (listed before it): its connection's waiting output,
    as the sweep last saw it (:meth:`abort_if_unread`)."""

    transport: asyncio.Transport
    _unread = 0
    """Bytes waiting at the sweep's last look (0: none, or writing resumed since)."""
    _unread_since = 0.0
    """When the client last took some (as the sweep saw it)."""

    def resume_writing(self) -> None:
        self._unread = 0  # the client took what waited, down to the low-water mark
        super().resume_writing()

    def abort_if_unread(self, now: float, timeout: float) -> None:
        """The sweep's look at ``now``: abort the connection once output has waited
        ``timeout`` seconds without the client taking any (a connection being closed
        included: its close waits for them)."""
        waiting = self.transport.get_write_buffer_size()
        if waiting == 0 or self._unread == 0 or waiting < self._unread:
            self._unread, self._unread_since = waiting, now
            return
        self._unread = waiting
        if now - self._unread_since > timeout:
            log.info(
                "dropping a connection whose client took none of the %d bytes waiting for it "
                "in %g seconds (send_timeout)",
                waiting,
                timeout,
            )
            self._unread = 0
            self.transport.abort()
