"""A relayed Chat Completions event stream (the fast path), read only where it must be.

A relay passes a stream on as bytes, but an event reporting an error is no answer a
client could read, and a translated request's run fails on it
(:mod:`stateway.backends.openai_chat`), so the relay must too, with the same error
(:mod:`stateway.backends.upstream_status`): ``data: {"error": ...}`` (vLLM's, SGLang's,
llama-server's and hosted OpenAI's; relayed as it came, in the server's shape, and
followed by vLLM's ``[DONE]``), llama-server's 2025 ``error:`` line (which the client's
event-stream reader drops: its answer just ends), an event named ``error`` (LM Studio's).
The relay raises it after the events before it, the upstream's own line and what follows
it left out, and the route ends the stream with it in the OpenAI shape (what the
``openai`` SDK raises).

So too for a stream that ends as no answer, which a run fails on and a client reading
the relayed bytes could not tell from one; each is told once per stream, at its end,
from the last chunks the relay keeps anyway, however its bytes were split between reads
(a read that ends inside an event, but for one ordinary event ended, or followed by one
byte of the next, is relayed to the end of what it holds whole, its events and comment
lines, and the start of the event it ends inside held, judged joined to the reads that
end it, what they hold of the next event going with the read after: :data:`EVENT_ENDS`,
:func:`whole_end`; a read that ends no event otherwise, or goes on with a line the read
before it began, is kept with that read: :data:`KEPT`, :data:`OBJECT_ENDS`; a ``data:``
split between two reads is counted: :func:`straddling`; an event the body's end cuts
is relayed only when that end tells no failure: the route's error line after it would
end it, and a client's event-stream reader take its broken JSON, or its ``[DONE]``, for
an event). Lines may end with LF, CRLF or a CR alone, as the event-stream rules allow;
a ``[DONE]`` may be followed by spaces (a run reads an event's data stripped). A stream
that ends without ``data: [DONE]`` and without a finish in its last chunks
(:func:`unended`, :func:`unfinished`) was cut short (a proxy's
timeout, a server dying between two events: the body ends cleanly), as is one that ends
with no byte at all. At ``[DONE]`` (:func:`done_ending`: its read's last event, perhaps
followed by a proxy's keepalive comments or blank lines, or with an ``id`` after it in its
event; left out when it ends a failure), :func:`unanswered` reads
the last chunks' events only when there were few (two at most: vLLM's ``[DONE]`` alone,
after an error it dropped before the first token; a role chunk and ``[DONE]``, no
output: ``no_answer``) or when the last ``finish_reason`` says the server gave up on the
answer (vLLM's and SGLang's ``abort``, vLLM's ``error``) or the bytes ``error`` follow it
(:func:`told_at_end`, searches from the end), as a run reads them
(:func:`~stateway.backends.chat_reply.from_upstream_chunk`, and an error event). A
``[DONE]`` that goes on with more data in its event (:func:`more_after_done`) is neither
an end nor a cut but a malformed chunk, as a run reads that event's data: told in the
event's place, or at the stream's end when its read went out unjudged.

The relay's loop adds almost nothing to an ordinary chunk, one event that starts as an
answer's chunk does (:data:`ORDINARY`) and ends as an event does (:data:`LF`): one
``startswith`` of a chunk whose ``data:`` lines it counts anyway, and one byte read. Any
other chunk (several events read together, a comment, an error, ``[DONE]``) is searched
for the bytes ``error`` and ``[DONE]`` (with ``bytes.find`` and ``rfind``: ``in`` first
tries its operand as an integer, raising and clearing a
``TypeError``, some 1,800 instructions a search, counted with callgrind), its split
``data:`` counted (:func:`straddling`), and only one that holds ``error`` is read line by
line (:func:`reported_error`, from its first whole line; the key ``"error"`` cannot
appear inside a chunk's strings, where its quotes are escaped, nor can ``[DONE]`` start
a line there), one that holds ``[DONE]`` from its end (:func:`done_ending`); one that is
not whole events (an event's end read apart, a comment, an event cut by the read's end)
is kept with the read before it (:data:`KEPT`). An error event split between two reads
is judged as one read whole: held with the read that ends it, or, begun by the last bytes
of a read of one ordinary event (a ``d``, an ``erro``: relayed unread), read from that
line's start (the route's error goes apart from those bytes). What is not seen so (an
``error:`` line, or an event named ``error``, read together with the one ordinary event
before it) is relayed as it came (an event-stream reader drops an ``error:`` line), and
told at the stream's end, from its last reads (:func:`told_at_end`): llama-server's
``[DONE]`` follows its error line at once.

The status line has gone out with the first chunk, so an error before any output is the
same error line after a 200 (a translated stream holds its status line for its first
output, up to a keepalive, and answers such an error with its status): holding a stream
until its first output cost the fast path some 13% more instructions per streamed
request (docs/benchmarks.md), measured with callgrind, so its opening is relayed as it
comes.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from typing import Final

import orjson

from stateway.backends.chat_reply import from_upstream_chunk
from stateway.backends.relayed_done import DONE, DONE_ENDS, done_ending, more_after_done
from stateway.backends.upstream_reply import cut_short, malformed_chunk, no_answer
from stateway.backends.upstream_status import classify_event, classify_reported, reports_error
from stateway.core.errors import GatewayError
from stateway.core.inference import Delta, Finish

ORDINARY: Final = (b'data: {"id"', b'data: {"choices"')
"""How the one event of an ordinary chunk starts: an answer's chunk, no error alone (vLLM,
SGLang, hosted OpenAI, Ollama and LM Studio write ``id`` first, llama-server ``choices``)."""
LF: Final = 0x0A
"""The byte an ordinary chunk's next to last is: it ends as an event does (``}\\n\\n``), or
with one byte of the next event's first line after it. One that ends otherwise (a read
ending inside its data line, as the network may cut a long event) is read as any other
read, held for its end (:data:`OBJECT_ENDS` tells a CRLF stream's whole one): relayed
unread, an answer's chunk cut part-way would be ended by the route's error line after
it, and a client's event-stream reader would take its broken JSON for an event (the
``openai`` SDK raises a ``JSONDecodeError``, never the error)."""

Scrub = Callable[[str], str]
"""Masks the backend's key in an upstream's words."""

FEW: Final = 2
"""Events before ``[DONE]`` that may be no answer (:func:`unanswered`): none, a role chunk,
Azure's prompt filter results."""


def reported_error(chunk: bytes, backend: str, scrub: Scrub) -> tuple[int, GatewayError] | None:
    """The first event in ``chunk`` that reports an error: where it starts in ``chunk``, and
    the error; None when none does. An ``error`` field's line, a data line of an event
    named ``error``, or a data line holding ``"error"`` whose object is an error alone
    (no ``choices``)."""
    start = at = 0
    named = False
    for line in chunk.splitlines(keepends=True):  # LF, CRLF or a CR alone
        field = line.rstrip(b"\r\n")
        at += len(line)
        if not field:  # a blank line ends an event: the next starts after it
            start, named = at, False
            continue
        name, _, value = field.partition(b":")
        value = value[1:] if value[:1] == b" " else value
        if name == b"error" or (name == b"data" and named):
            return start, classify_event(value, backend, scrub)
        if name == b"event":
            named = value == b"error"
        elif name == b"data" and b'"error"' in value:
            error = _reported(value, backend, scrub)
            if error is not None:
                return start, error
    return None


def _reported(data: bytes, backend: str, scrub: Scrub) -> GatewayError | None:
    """The error a data line's object reports, if it is an error alone (a line cut short
    by its read is none)."""
    try:
        payload = orjson.loads(data)
    except orjson.JSONDecodeError:
        return None
    if isinstance(payload, dict) and reports_error(payload, "choices"):
        return classify_reported(payload["error"], backend, scrub, mid_stream=True)
    return None


OBJECT_ENDS: Final = (b"}\n\n", b"}\r\n\r\n", b"}\r\r")
"""How a read whose last event is an answer's chunk ends: no ``[DONE]`` looked for in it.
One that ends otherwise (a comment, a blank line or an event's end read apart, the
body's end inside an event), or that goes on with a ``data:`` line the read before it
began, is kept with the read before it (:data:`KEPT`): kept, a read loses nothing."""
EVENT_ENDS: Final = (b"\n\n", b"\r\r", b"\n\r", b"\n\r\n", b"\r\r\n")
"""How a read that ends an event ends: two line ends (LF, CRLF or a CR alone), the second
a blank line. A read that is not one ordinary event and ends otherwise, inside an event
(:func:`ends_inside`), holds back the start of that event until a read ends it
(:func:`whole_end`)."""

LINE_ENDS: Final = (b"\n", b"\r")
"""The last byte of a line (LF, CRLF or a CR alone): a read ending otherwise begins a line
the next read goes on with (:data:`KEPT`)."""


def ends_inside(chunk: bytes) -> bool:
    """Whether ``chunk`` ends inside an event (not past a blank line): not when it is just
    line ends (a blank line read apart, an event's own end read apart from it), nor after
    a whole comment line (a proxy's keepalive needs no blank line after it, and may be
    what a client waits on while the upstream is silent): nothing to hold."""
    if not chunk or chunk.endswith(EVENT_ENDS):
        return False
    text = chunk.rstrip(b"\r\n")
    if len(text) == len(chunk):  # its last line not ended
        return True
    line = max(text.rfind(b"\n"), text.rfind(b"\r")) + 1
    return bool(text) and text[line : line + 1] != b":"


def last_event_end(data: bytes) -> int:
    """Where the last event that ends in ``data`` ends (past its blank line); -1 when none
    does (:func:`whole_end`)."""
    return max(at + len(end) if (at := data.rfind(end)) >= 0 else -1 for end in EVENT_ENDS)


def whole_end(data: bytes, before: bytes = b"") -> int:
    """Where what ``data`` holds whole ends: past its last event end
    (:func:`last_event_end`), or past an ended comment line after it (what
    :func:`ends_inside` holds nothing for); 0 when neither. ``before``: the last byte
    relayed before ``data``, read with it (after a line end, a line end that begins
    ``data`` is the blank line ending the event before: read apart from the line it
    ends, it goes out at once too; after a line's start, ``data`` goes on with that line,
    no comment line). A read held for its event's end is relayed to there at once, the
    rest going with the next read: nothing whole waits for the upstream's next read (a
    proxy's keepalive, whole or ending a split one, is what a silent upstream's client
    waits on; held until a read ends just as an event does, a stream a proxy cut into
    reads of one size would come out at its end). Read only for a read that ends inside
    an event."""
    if before:
        data = before + data
    end = max(last_event_end(data), 0)
    at = start = end
    for line in data[end:].splitlines(keepends=True):  # LF, CRLF or a CR alone
        start += len(line)
        if line[:1] == b":" and line[-1:] in LINE_ENDS:
            at = start
    return max(at - len(before), 0)


def alone(chunk: bytes) -> AsyncIterator[bytes]:
    """``chunk`` as a body's one read: the start of an event a held read left over
    (:func:`whole_end`), when the body ended after it."""

    async def read() -> AsyncIterator[bytes]:
        yield chunk

    return read()


def telling(chunk: bytes) -> bool:
    """Whether a read that is not one ordinary event may end the stream: ``[DONE]`` (read
    alone, or in it) or the bytes ``error`` (the relay's loop inlines this)."""
    return (
        chunk == DONE
        or chunk.endswith(DONE_ENDS)
        or chunk.find(b"error") >= 0
        or (not chunk.endswith(OBJECT_ENDS) and chunk.rfind(b"[DONE]") >= 0)
    )


KEPT: Final = 4096
"""Bytes of the last read kept (for the usage and the stream's end) that a read that is
not whole events (an event's end read apart, a comment, an event cut by the body's end:
:data:`OBJECT_ENDS`), or that goes on with a line it began (:data:`LINE_ENDS`), is kept
after, not in its place: however a stream's last bytes were
split between reads, the two reads kept then hold its ``[DONE]``, and the usage and the
finish before it (events of a few hundred bytes). A bound, so that a stream read a byte
at a time copies no more than this a read."""


def straddling(before: bytes, chunk: bytes) -> int:
    """The ``data:`` lines that begin in ``before`` (what was relayed before ``chunk``: its
    last four bytes are enough) and go on in ``chunk``: a split the count of ``data:`` in
    each read missed."""
    return (before[-4:] + chunk[:4]).count(b"data:")


FINISH_REASON: Final = b'"finish_reason"'
_VALUE: Final = len(FINISH_REASON) + 1
"""Where the value of a ``"finish_reason"`` key found starts: after its colon (and a
space, as Python's ``json`` writes it, one byte further)."""
GAVE_UP_VALUES: Final = frozenset({b'"abort"', b'"error"'})
"""The finish reasons of an answer the server gave up on
(:data:`~stateway.backends.chat_reply.GAVE_UP`), as JSON strings."""


def told_at_end(tail: bytes) -> bool:
    """Whether the end of ``tail`` (a stream's last reads, joined: a read may end inside a
    key or value) may tell a failure: its last ``finish_reason`` says the server gave up
    on the answer, or the bytes ``error`` come after it (an ``error:`` line or an event
    named ``error`` that a read of one ordinary event before it left unread). Searched
    from the end, where an answer finishes (after it only its usage and ``[DONE]``): the
    searches read little of a long answer; slices look at the value (a method call costs
    more)."""
    at = tail.rfind(FINISH_REASON)
    if at >= 0:
        value = tail[at + _VALUE : at + _VALUE + 8]
        if value[:7] in GAVE_UP_VALUES or value[1:] in GAVE_UP_VALUES:
            return True
    return tail.find(b"error", max(at, 0)) >= 0


def unanswered(
    previous: bytes, last: bytes, chunk: bytes, events: int, backend: str
) -> GatewayError | None:
    """The error of a stream whose read ``chunk`` says it is done (``[DONE]``), after the
    reads ``previous`` and ``last`` and ``events`` data lines, as a run judges it: an
    answer the server gave up on; an error event relayed unread (:func:`_deltas`); no
    answer when no event gave any output (every one of them read here); else None. Read
    only when there were few events, or the end may tell a failure
    (:func:`told_at_end`): otherwise an answer ended as every answer does."""
    tail = previous + last + chunk  # one search, one parse: a call costs more than a copy
    if events > FEW and not told_at_end(tail):
        return None
    try:
        deltas, read = _deltas(tail, backend)  # [DONE] is no JSON: not read
    except GatewayError as error:  # a finish reason saying the server gave up, an error
        return error
    return no_answer(backend) if not deltas and read == events else None


def unended(previous: bytes, last: bytes, events: int, backend: str) -> GatewayError | None:
    """The error of a stream whose body ended with no ``[DONE]`` told, after the reads
    ``previous`` and ``last`` and ``events`` data lines: judged as at ``[DONE]``
    (:func:`unanswered`, from these two reads alone) when they end with one
    (:func:`done_ending`; a ``[DONE]`` split between reads, however: reads that are not
    whole events were kept with the read before them, :data:`KEPT`, so these two hold the
    answer's finish and its usage after it); a malformed chunk when their ``[DONE]`` goes
    on with more data in its event (:func:`more_after_done`: one in a read ending as an
    answer's chunk does is not judged as it is relayed); else by its finish
    (:func:`unfinished`). Once a stream, at its end."""
    tail = previous + last
    if done_ending(tail) >= 0:
        return unanswered(b"", previous, last, events - 1, backend)
    if more_after_done(tail):
        return malformed_chunk(backend)
    return unfinished(tail, backend)


def unfinished(tail: bytes, backend: str) -> GatewayError | None:
    """The error of a stream that ended without ``[DONE]`` after ``tail`` (its last chunks):
    an answer the server gave up on, none when ``tail`` holds the answer's finish (a server
    that sends no ``[DONE]``: its finish, perhaps its usage, come last), else a cut. Only
    events ended by a blank line are read: an event-stream reader (the client's, a run's)
    drops the one the stream's end cut, even before its blank line alone."""
    lines = tail.replace(b"\r\n", b"\n").replace(b"\r", b"\n")  # a CR alone ends a line too
    try:
        deltas, _ = _deltas(lines[: lines.rfind(b"\n\n") + 1], backend)
    except GatewayError as error:
        return error
    return None if any(type(delta) is Finish for delta in deltas) else cut_short(backend)


def _deltas(tail: bytes, backend: str) -> tuple[list[Delta], int]:
    """The deltas of the events of ``tail`` a run would read, and how many events were
    read: whole ones only (its first line may be the end of one read apart: no field
    told by its name). Raises the ``UpstreamError`` of a finish reason saying the
    server gave up, and the error an ``error:`` line or an event named ``error`` reports,
    as :func:`reported_error` reads them (its bytes relayed already: scrubbed)."""
    deltas: list[Delta] = []
    read = 0
    named = False
    for index, line in enumerate(tail.splitlines()):  # LF, CRLF or a CR alone
        name, _, value = line.partition(b":")
        if name != b"data" or named:
            if index:  # not the end of a line read apart
                named = _named(line, name, value, named, backend)
            continue
        try:
            payload = orjson.loads(value)
        except orjson.JSONDecodeError:
            continue
        if isinstance(payload, dict):
            read += 1
            try:
                deltas += from_upstream_chunk(payload)
            except (KeyError, TypeError, AttributeError):  # malformed: relayed as it came
                continue
    return deltas, read


def _named(line: bytes, name: bytes, value: bytes, named: bool, backend: str) -> bool:
    """Whether the event ``line`` is in (a line of :func:`_deltas` but its first; ``named``:
    whether a line before it named that event ``error``) is named ``error`` after it;
    raises the error of an ``error`` field, or of a data line of an event so named."""
    value = value[1:] if value[:1] == b" " else value
    if name == b"error" or (name == b"data" and named):
        raise classify_event(value, backend, str)
    if not line:  # a blank line ends an event
        return False
    return value == b"error" if name == b"event" else named
