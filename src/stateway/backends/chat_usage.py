"""A Chat Completions ``usage`` object as the core's :class:`~stateway.core.usage.Usage`,
and the one a relayed answer reports at its end.

A relayed answer (the fast path) is parsed by no one; only its last two chunks are kept,
and once it has been relayed :func:`reported_usage` looks there for the last ``"usage"``
object: a non-streamed answer ends with it, a stream sends it in its last chunk before
``[DONE]`` when its client asked (``stream_options.include_usage``). One search and one
parse per answer, none per chunk.
"""

from __future__ import annotations

from typing import Any, Final

import orjson

from stateway.backends.upstream_values import count, obj
from stateway.core.usage import Usage

_KEY: Final = b'"usage"'
_NONE: Final[dict[str, Any]] = {}
"""Details a usage object does not give (absent, or null)."""


def from_chat_usage(usage: dict[str, Any]) -> Usage:
    """Raises ``TypeError`` for a count that is not one. Counts that are plain ints (as
    every server writes them) are taken at once; any other goes through
    :func:`~.upstream_values.count` (absent or null: 0, a whole float: its int). The
    reasoning tokens are ``completion_tokens_details``' (OpenAI's, vLLM's), else
    ``usage``'s own ``reasoning_tokens`` (SGLang's, whose details, when it gives them,
    count speculative decoding's tokens)."""
    prompt = usage.get("prompt_tokens_details")
    prompt = _NONE if prompt is None else obj(prompt)
    completion = usage.get("completion_tokens_details")
    completion = _NONE if completion is None else obj(completion)
    given = usage.get("prompt_tokens", 0)
    made = usage.get("completion_tokens", 0)
    cached = prompt.get("cached_tokens", 0)
    reasoning = completion.get("reasoning_tokens")
    if reasoning is None:  # SGLang's: beside the other counts
        reasoning = usage.get("reasoning_tokens", 0)
    written = prompt.get("cache_write_tokens", 0)
    if (
        type(given) is int
        and type(made) is int
        and type(cached) is int
        and type(reasoning) is int
        and type(written) is int
        and given >= 0
        and made >= 0
        and cached >= 0
        and reasoning >= 0
        and written >= 0
    ):
        return Usage(given, made, cached, reasoning, written)
    return Usage(count(given), count(made), count(cached), count(reasoning), count(written))


def reported_usage(tail: bytes) -> Usage | None:
    """The last ``"usage": {...}`` in ``tail`` (None when there is none, it is ``null``,
    or it does not parse as a usage object). The object ends at the first closing brace
    that balances its braces (a usage object has no strings holding braces), found by
    counting the opening braces between one closing brace and the next (one ``find`` and
    one ``count`` per nested object, no slice), so it is parsed once, and nothing is
    raised on the way."""
    at = tail.rfind(_KEY)
    if at < 0:
        return None
    colon = tail.find(b":", at + len(_KEY))
    if colon < 0:
        return None
    start = colon + 1
    while start < len(tail) and tail[start] in b" \t\r\n":
        start += 1
    if tail[start : start + 1] != b"{":
        return None
    open_braces, end = 1, start
    while open_braces:
        after = end + 1
        end = tail.find(b"}", after)
        if end < 0:
            return None
        open_braces += tail.count(b"{", after, end) - 1
    try:
        return from_chat_usage(orjson.loads(tail[start : end + 1]))
    except (orjson.JSONDecodeError, TypeError):
        return None
