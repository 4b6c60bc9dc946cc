"""The ``data: [DONE]`` of a relayed Chat Completions stream (the fast path): where its
line is in a read, whether it ends the stream as a run and the ``openai`` SDK read it (its
event's data ``[DONE]`` alone), or goes on with more data in its event, which a run reads
as a malformed chunk (:mod:`~stateway.backends.relayed_stream` judges the stream's end
with these)."""

from __future__ import annotations

from typing import Final

DONE: Final = b"data: [DONE]\n\n"
"""How every server known here ends a stream."""

DONE_ENDS: Final = (DONE, b"data: [DONE]\r\n\r\n", b"data:[DONE]\n\n", b"data:[DONE]\r\n\r\n")
"""How a read holding a stream's ``data: [DONE]`` mostly ends: it is the stream's last
event, told by one ``endswith``. A read that holds ``[DONE]`` but ends otherwise (a
proxy's keepalive comment or a blank line after it, an ``id`` after it in its event) is
read from its end
(:func:`done_ending`) unless it ends as an answer's chunk does
(:data:`~.relayed_stream.OBJECT_ENDS`)."""


def done_at(chunk: bytes) -> int:
    """Where the ``data: [DONE]`` line of ``chunk`` starts; -1 when it has none. The last
    one in it (searched from its end, where a stream's is), past a ``[DONE]`` an answer's
    text says after it (in a JSON string, which holds no line end: its line is the
    chunk's ``data: {...``), or a comment."""
    end = len(chunk)
    while (at := chunk.rfind(b"[DONE]", 0, end)) >= 0:
        start = max(chunk.rfind(b"\n", 0, at), chunk.rfind(b"\r", 0, at)) + 1
        if chunk[start:at] in (b"data: ", b"data:"):
            return start
        end = at
    return -1


def done_ending(chunk: bytes) -> int:
    """Where the ``data: [DONE]`` line that ends ``chunk`` starts: the last event of it, a
    blank line after it, and after that only comments (a proxy's keepalive) or blank lines
    (a server's extra line break), which a run never reads (it stops at ``[DONE]``); -1
    when no ``[DONE]`` ends it so (none, one not yet followed by its blank line, one in a
    comment). Its event may name itself or have an ``id`` or a ``retry`` after its data
    (:func:`done_field`). Searched from the end: a few bytes read of a read that ends a
    stream."""
    start = done_at(chunk)
    if start < 0:
        return -1
    after = chunk[chunk.index(b"[DONE]", start) + 6 :].splitlines(keepends=True)
    if not after or after[0].strip():  # more on its line than spaces: no [DONE] alone
        return -1
    for line in after[1:]:
        if line[:1] in (b"\n", b"\r"):  # a blank line: [DONE] was dispatched
            return start
        if line[:1] != b":" and not done_field(line):
            return -1
    return -1  # not dispatched (yet): its blank line may be in the next read


def more_after_done(chunk: bytes) -> bool:
    """Whether the ``data: [DONE]`` line of ``chunk`` (:func:`done_at`) goes on, in its
    event, with more data: on its line past spaces, or in a data line before the blank
    line that ends the event (comments and other fields between). A run reads that
    event's data, ``[DONE]`` and more, as a malformed chunk
    (:func:`~stateway.backends.upstream_reply.malformed_chunk`), and so does the relay:
    no end, nor a cut."""
    start = done_at(chunk)
    if start < 0:
        return False
    after = chunk[chunk.index(b"[DONE]", start) + 6 :].splitlines(keepends=True)
    if not after:
        return False
    if after[0].strip():  # more on its line than spaces
        return True
    for line in after[1:]:
        if line[:1] in (b"\n", b"\r"):  # a blank line: the event ended at [DONE]
            return False
        if line.rstrip(b"\r\n").partition(b":")[0] == b"data":
            return True
    return False


def done_field(line: bytes) -> bool:
    """Whether ``line``, after a ``data: [DONE]`` line in its event, leaves its data
    ``[DONE]`` alone, as a run and the ``openai`` SDK read it: an ``id``, a ``retry``, an
    unknown field, an ``event`` naming it anything but ``error``; not a ``data`` line
    (more data), nor an ``error`` one (llama.cpp's, which a run reads as an error's)."""
    name, _, value = line.rstrip(b"\r\n").partition(b":")
    if name == b"event":
        return value.removeprefix(b" ") != b"error"
    return name not in (b"data", b"error")
