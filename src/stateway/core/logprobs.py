"""Token log probabilities of output text (``include: ["message.output_text.logprobs"]``).

A token is kept in the Responses API's own shape, which every layer passes on unchanged:
``{"token", "bytes", "logprob", "top_logprobs": [{"token", "bytes", "logprob"}]}``. As on
the hosted API, they are given only when a request includes them; ``top_logprobs`` (0-20)
says how many alternatives each token lists. Backends ask their upstream for them and
read its tokens with :func:`tokens`; an upstream that has none gives none.
"""

from __future__ import annotations

from typing import Any

from stateway.core.commands import GenerationSettings
from stateway.core.items import Item

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
