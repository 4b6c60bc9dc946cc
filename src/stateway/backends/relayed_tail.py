"""What a relay keeps of the 200 stream it relays: its last two reads, the events they
and the reads before held, and whether it said it is done (``data: [DONE]``).

The last two reads kept are where the answer's usage is (:meth:`RelayedTail.usage`) and
its end: a read that is not whole events of its own is kept after the last read kept, not
in its place (:meth:`RelayedTail.joined`), so that they hold a ``[DONE]``, the usage and
the finish before it however the stream's last bytes were split. A read that may end the
stream (told by :func:`~.relayed_stream.telling`) is judged from them
(:meth:`RelayedTail.ending`): an event reporting an error, a ``[DONE]`` ending no
answer, or one going on with more data in its event (a malformed chunk); a stream that
ends with no ``[DONE]`` told is judged once, at its end (:meth:`RelayedTail.unended`).
The relay's loop (:mod:`.upstream_relay`) updates the reads and the count itself for
every ordinary read.
"""

from __future__ import annotations

from stateway.backends.chat_usage import reported_usage
from stateway.backends.relayed_done import DONE, DONE_ENDS, done_at, done_ending, more_after_done
from stateway.backends.relayed_stream import KEPT, reported_error, unanswered, unended
from stateway.backends.upstream_reply import malformed_chunk
from stateway.core.errors import GatewayError
from stateway.core.usage import Usage
from stateway.redaction import KeyScrubber


class RelayedTail:
    __slots__ = ("_backend", "_scrub", "done", "events", "last", "previous")

    def __init__(self, backend: str, scrub: KeyScrubber | None) -> None:
        self._backend = backend
        self._scrub = scrub
        self.previous = self.last = b""
        """The last two reads relayed (one that ends no event joined to the one before it):
        where the answer's usage is (:meth:`usage`), and its end."""
        self.events = 0
        """The ``data:`` lines relayed (the relay's output estimate)."""
        self.done = False
        """Whether the stream said it is done (``data: [DONE]``), as an answer's ends."""

    def ending(self, chunk: bytes, events: int, erring: bool) -> tuple[bytes, GatewayError] | None:
        """The error ``chunk`` (relayed, scrubbed; ``events`` data lines, a split one
        among them; told by :func:`~.relayed_stream.telling`; ``erring``: it holds the
        bytes ``error``, or goes on with them) ends the stream with, and what of it goes
        before it: an event's that reports one (:func:`~.relayed_stream.reported_error`),
        or that of its ``[DONE]`` ending no answer (:func:`~.relayed_stream.unanswered`,
        which reads the chunks before it) or going on with more data in its event (a
        malformed chunk: :meth:`_malformed`); None when it ends none. ``[DONE]`` read alone
        (most streams' last read) is told by one comparison; no read is read whole unless
        it holds ``error``, and one that holds ``[DONE]`` is read from its end
        (:func:`~.relayed_done.done_ending`: comments and blank lines may follow it): an
        answer ended as every answer is costs a stream the fewest calls."""
        at = 0
        if chunk != DONE:
            if erring:
                reported = self._reported(chunk)
                if reported is not None:
                    at, error = reported
                    return chunk[:at], error
            if chunk.endswith(DONE_ENDS):
                at = -1  # its [DONE] line found below, if it ends a failure
            else:
                at = done_ending(chunk)
                if at < 0:  # no [DONE] ends it: none, or one going on with more data
                    return self._malformed(chunk)
        self.done = True  # the answer's end judged here (its [DONE] line found if it fails)
        before = self.events + events - 1
        failed = unanswered(self.previous, self.last, chunk, before, self._backend)
        if failed is None:
            return None
        if at < 0:
            at = done_at(chunk)
            if at < 0:  # "[DONE]" ending no data line: no end
                self.done = False
                return None
        return chunk[:at], failed

    def _malformed(self, chunk: bytes) -> tuple[bytes, GatewayError] | None:
        """What goes before the ``[DONE]`` line of ``chunk`` when its event goes on with
        more data (:func:`~.relayed_done.more_after_done`), and the malformed chunk it
        is; None when it does not."""
        if not more_after_done(chunk):
            return None
        self.done = True  # ended here, by its error
        return chunk[: done_at(chunk)], malformed_chunk(self._backend)

    def _reported(self, chunk: bytes) -> tuple[int, GatewayError] | None:
        """The first event in ``chunk`` that reports an error, and where it starts
        (:func:`~.relayed_stream.reported_error`; 0 for one begun in the read before). When
        that read ended inside a line (only a read relayed as one ordinary event, with the
        first bytes of the next line, does: any other holds back the event it ends inside),
        ``chunk`` goes on with that line, read whole: an answer's (``error"}]}``, a finish
        reason's value read apart, names no ``error`` field), or an error's begun there
        (``d`` then ``ata: {"error": ...}``), whose bytes in ``chunk`` are left out."""
        last = self.last
        begun = b""
        if last and not last.endswith((b"\n", b"\r")):
            begun = last[max(last.rfind(b"\n"), last.rfind(b"\r")) + 1 :]
        reported = reported_error(begun + chunk, self._backend, self._scrub or str)
        if reported is None:
            return None
        return max(reported[0] - len(begun), 0), reported[1]

    def joined(self, chunk: bytes, events: int) -> None:
        """``chunk`` of a 200 stream, relayed, that is not whole events of its own (its
        ``events`` data lines counted, a split one among them): an event's end read apart,
        a comment, an event cut by the read's end (a ``[DONE]`` split), one going on with
        the line the read before it began (whole events after it or not: a read of one
        ordinary event relays the first bytes of the next line unread, and that line is
        read whole only with them). Kept after the last read kept (its last
        :data:`~.relayed_stream.KEPT` bytes), not in its place: the last two reads kept
        hold a ``[DONE]``, the usage and the finish before it however the stream's last
        bytes were split. Rare: an ordinary read is one event."""
        self.last = self.last[-KEPT:] + chunk
        self.events += events

    def noted(self, chunk: bytes) -> bytes:
        """``chunk``, relayed: where the usage is, and the events counted (the relay's loop
        inlines this for every chunk past a stream's opening)."""
        self.previous, self.last = self.last, chunk
        self.events += chunk.count(b"data:")
        return chunk

    def unended(self) -> GatewayError | None:
        """At the end of a stream that told no ``[DONE]`` (:attr:`done`): finished, else
        cut (:func:`~.relayed_stream.unended`)."""
        return unended(self.previous, self.last, self.events, self._backend)

    def usage(self) -> Usage | None:
        previous = self.previous
        return reported_usage(previous + self.last if previous else self.last)
