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


def from_chat_usage(usage: dict[str, Any]) -> Usage:
    """Raises ``TypeError`` for a count that is not one."""
    prompt = obj(usage.get("prompt_tokens_details"))
    return Usage(
        input_tokens=count(usage.get("prompt_tokens")),
        output_tokens=count(usage.get("completion_tokens")),
        cached_tokens=count(prompt.get("cached_tokens")),
        reasoning_tokens=count(obj(usage.get("completion_tokens_details")).get("reasoning_tokens")),
        cache_write_tokens=count(prompt.get("cache_write_tokens")),
    )


def reported_usage(tail: bytes) -> Usage | None:
    """The last ``"usage": {...}`` in ``tail`` (None when there is none, it is ``null``,
    or it does not parse as a usage object). The object ends at the first closing brace
    that balances its braces (a usage object has no strings holding braces), so it is
    parsed once, and nothing is raised on the way."""
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
    end = start
    while True:  # the first closing brace that balances the object's braces ends it
        end = tail.find(b"}", end + 1)
        if end < 0:
            return None
        found = tail[start : end + 1]
        if found.count(b"{") == found.count(b"}"):
            break
    try:
        return from_chat_usage(orjson.loads(found))
    except (orjson.JSONDecodeError, TypeError):
        return None
