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
``openai`` SDK raises). A stream that ends with no byte at all is a run's cut stream
(:func:`~.upstream_reply.cut_short`).

The relay's loop adds almost nothing to an ordinary chunk, one event that starts as an
answer's chunk does (:data:`ORDINARY`): one ``startswith`` of a chunk whose ``data:``
lines it counts anyway. Any other chunk (several events read together, a comment, an
error) is searched for the bytes ``error``, and only one that holds them is read
line by line (:func:`reported_error`; the key ``"error"`` cannot appear inside a chunk's
strings, where its quotes are escaped). What is not seen so is relayed as it came: an
error event split between two reads, or an ``error:`` line read together with the one
ordinary event before it.

The status line has gone out with the first chunk, so an error before any output is the
same error line after a 200 (a translated stream holds its status line for its first
output, up to a keepalive, and answers such an error with its status). Nor is a stream
that ends before any output (vLLM's ``[DONE]`` alone, after an error it dropped; a role
chunk and ``[DONE]``) told from an answer: holding a stream until its first output cost
the fast path some 13% more instructions per streamed request (docs/benchmarks.md), measured with
callgrind, so its opening is relayed as it comes.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Final

import orjson

from stateway.backends.upstream_status import classify_event, classify_reported, reports_error
from stateway.core.errors import GatewayError

ORDINARY: Final = (b'data: {"id"', b'data: {"choices"')
"""How the one event of an ordinary chunk starts: an answer's chunk, no error alone (vLLM,
SGLang, hosted OpenAI, Ollama and LM Studio write ``id`` first, llama-server ``choices``)."""

Scrub = Callable[[str], str]
"""Masks the backend's key in an upstream's words."""


def reported_error(chunk: bytes, backend: str, scrub: Scrub) -> tuple[int, GatewayError] | None:
    """The first event in ``chunk`` that reports an error: where it starts in ``chunk``, and
    the error; None when none does. An ``error`` field's line, a data line of an event
    named ``error``, or a data line holding ``"error"`` whose object is an error alone
    (no ``choices``)."""
    start = at = 0
    named = False
    for line in chunk.split(b"\n"):
        field = line.rstrip(b"\r")
        at += len(line) + 1
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
