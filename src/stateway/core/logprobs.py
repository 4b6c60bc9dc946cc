"""Token log probabilities of output text (``include: ["message.output_text.logprobs"]``).

A token is kept in the Responses API's own shape, which every layer passes on unchanged:
``{"token", "bytes", "logprob", "top_logprobs": [{"token", "bytes", "logprob"}]}``. As on
the hosted API, they are given only when a request includes them; ``top_logprobs`` (0-20)
says how many alternatives each token lists. Backends ask their upstream for them and
read its tokens with :func:`tokens`; an upstream that has none gives none.

Tokens are output only: stored with a response for the client to read, they are not part
of what a later turn sends the model nor of its estimated size (:func:`without_tokens`).
"""

from __future__ import annotations

from typing import Any

from stateway.core.generation_settings import GenerationSettings
from stateway.core.items import MESSAGE, Item

INCLUDE = "message.output_text.logprobs"


def wanted(settings: GenerationSettings) -> bool:
    """Whether the request asked for the output text's log probabilities."""
    return INCLUDE in settings.include


def tokens(entries: Any) -> list[Item]:
    """An upstream's tokens: Chat Completions' ``logprobs.content`` and the Responses
    API's ``logprobs`` share this shape. A wrong type raises ``TypeError`` (a malformed
    reply to the backend's caller)."""
    if not isinstance(entries, list):
        raise TypeError(f"expected a list of tokens, got {type(entries).__name__}")
    return [
        _token(entry) | {"top_logprobs": [_token(top) for top in entry.get("top_logprobs") or ()]}
        for entry in entries
    ]


def asked(tokens: list[Item], top: int) -> list[Item]:
    """``tokens`` listing at most the ``top`` alternatives asked for (``top_logprobs``; none
    by default, as on the hosted API). An upstream may list more: llama-server lists 20 of
    each token when a request names no ``top_logprobs``, and none at all when it names 0, so
    0 is never sent. The same list when none lists more (the usual case)."""
    if all(len(token["top_logprobs"]) <= top for token in tokens):
        return tokens
    return [{**token, "top_logprobs": token["top_logprobs"][:top]} for token in tokens]


def _token(entry: Any) -> Item:
    """``token``, ``bytes`` (the token's UTF-8 when the upstream sent none: Chat servers
    may send ``null``) and ``logprob``."""
    text, logprob = entry["token"], entry["logprob"]
    if (
        not isinstance(text, str)
        or isinstance(logprob, bool)
        or not isinstance(logprob, int | float)
    ):
        raise TypeError(f"expected a token and its logprob, got {entry!r}"[:200])
    raw = entry.get("bytes")
    return {
        "token": text,
        "bytes": raw if isinstance(raw, list) else list(text.encode()),
        "logprob": float(logprob),
    }


def without_tokens(item: Item) -> Item:
    """``item`` without its parts' tokens: the item itself when it holds none (the common
    case, checked without copying), else a copy."""
    content = item.get("content")
    if item.get("type") != MESSAGE or not isinstance(content, list):
        return item
    for part in content:  # a loop, not any(): this runs for every message of every round
        if isinstance(part, dict) and part.get("logprobs"):
            break
    else:
        return item
    parts = [
        {k: v for k, v in part.items() if k != "logprobs"}
        if isinstance(part, dict) and part.get("logprobs")
        else part
        for part in content
    ]
    return {**item, "content": parts}
