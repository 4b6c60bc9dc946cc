"""A relayed Chat Completions event stream (the fast path), read only where it must be.

A relay passes a stream on as bytes, but two things a stream may hold are no answer a
client could read, and a translated request's run fails on both
(:mod:`stateway.backends.openai_chat`), so the relay must too, with the same error
(:mod:`stateway.backends.upstream_status`):

- an event reporting an error: ``data: {"error": ...}`` (vLLM's, SGLang's, llama-server's
  and hosted OpenAI's; relayed as it came, in the server's shape, and followed by vLLM's
  ``[DONE]``), llama-server's 2025 ``error:`` line (which the client's event-stream reader
  drops: its answer just ends), an event named ``error`` (LM Studio's);
- a stream whose events end before any output: vLLM's ``[DONE]`` alone, after an error it
  dropped; a role chunk and ``[DONE]``; nothing at all (:func:`~.upstream_reply.no_answer`,
  :func:`~.upstream_reply.cut_short`, as a run's).

The stream's opening, its events up to the first that carries output (comments, a role
chunk whose content is empty), is read whole before a byte of it is relayed
(:func:`opened` judges each of its events), so that an error there is raised before the
answer starts: the route answers it with its status, as a run's. Past the opening, the
relay's loop adds almost nothing to an ordinary chunk, one event that starts as an
answer's chunk does (:data:`ORDINARY`): one ``startswith`` of a chunk whose ``data:``
lines it counts anyway. Any other chunk (several events read together, a comment, an
error) is searched for the bytes ``error``, and only one that holds them is read
line by line (:func:`reported_error`; the key ``"error"`` cannot appear inside a chunk's
strings, where its quotes are escaped). An error event there ends the relay after the
events before it, the upstream's own line and what follows it left out. What is not seen
so is relayed as it came, as before: an error event split between two reads, or an
``error:`` line read together with the one ordinary event before it.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Final

import orjson

from stateway.backends.sse import ServerSentEvent
from stateway.backends.upstream_reply import no_answer
from stateway.backends.upstream_status import classify_event, classify_reported, reports_error
from stateway.core.errors import GatewayError

ORDINARY: Final = (b'data: {"id"', b'data: {"choices"')
"""How the one event of an ordinary chunk starts: an answer's chunk, no error alone (vLLM,
SGLang, hosted OpenAI, Ollama and LM Studio write ``id`` first, llama-server ``choices``)."""

Scrub = Callable[[str], str]
"""Masks the backend's key in an upstream's words."""


def opened(event: ServerSentEvent, backend: str, scrub: Scrub) -> bool:
    """Whether ``event``, of a stream's opening, carries output (the answer starts with it);
    False for one that carries none (held with the opening). Raises the error an event
    reports, and :func:`~.upstream_reply.no_answer` for the ``[DONE]`` that ends a stream
    before any output. An event that is no chunk the relay knows carries output: it is
    the client's to judge."""
    if event.event == "error":
        raise classify_event(event.data, backend, scrub)
    if event.data.rstrip() == b"[DONE]":
        raise no_answer(backend)
    try:
        chunk = orjson.loads(event.data)
    except orjson.JSONDecodeError:
        return True
    if not isinstance(chunk, dict):
        return True
    if reports_error(chunk, "choices"):
        raise classify_reported(chunk["error"], backend, scrub, mid_stream=True)
    choices = chunk.get("choices")
    return not isinstance(choices, list) or any(_shows(choice) for choice in choices)


def _shows(choice: Any) -> bool:
    """Whether a chunk's choice carries output: a finish reason, or anything in its delta
    but its role (vLLM's first delta is ``{"role": "assistant", "content": ""}``)."""
    if not isinstance(choice, dict) or choice.get("finish_reason"):
        return True
    delta = choice.get("delta")
    if not isinstance(delta, dict):
        return True
    return any(value for name, value in delta.items() if name != "role")


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
