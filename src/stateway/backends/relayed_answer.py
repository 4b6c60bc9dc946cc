"""A relayed whole answer: a 200 on the Chat Completions fast path that is no event stream.

It is read to its end before a byte of it is relayed (:mod:`.upstream_relay`), so it can
be judged as a translated request's answer is: a body that is only ``{"error": ...}``
(some servers answer so, even a streamed request) is no answer a client could read, and
one whose ``finish_reason`` says the server gave up on it is that failure.
"""

from __future__ import annotations

import orjson

from stateway.backends.chat_reply import GAVE_UP, gave_up
from stateway.backends.relayed_stream import Scrub
from stateway.backends.upstream_status import classify_reported, reports_error


def judged_answer(chunks: list[bytes], backend: str, scrub: Scrub | None) -> bytes:
    """The whole answer ``chunks`` make (read to its end); raises the error it reports,
    as a translated request's (:func:`~stateway.backends.upstream_status.classify_reported`),
    or that of a ``finish_reason`` saying the server gave up on it
    (:data:`~stateway.backends.chat_reply.GAVE_UP`). Parsed only when it names an
    ``"error"`` or ``"abort"`` at all (two ``bytes.find``: for an answer of a few
    kilobytes, fewer instructions than any call more)."""
    body = chunks[0] if len(chunks) == 1 else b"".join(chunks)
    if body.find(b'"error"') < 0 and body.find(b'"abort"') < 0:
        return body
    try:
        payload = orjson.loads(body)
    except orjson.JSONDecodeError:
        return body
    if not isinstance(payload, dict):
        return body
    if reports_error(payload, "choices"):
        raise classify_reported(payload["error"], backend, scrub or str, mid_stream=False)
    choices = payload.get("choices")
    choice = choices[0] if isinstance(choices, list) and choices else None
    reason = choice.get("finish_reason") if isinstance(choice, dict) else None
    if isinstance(reason, str) and reason in GAVE_UP:
        raise gave_up(reason)
    return body
