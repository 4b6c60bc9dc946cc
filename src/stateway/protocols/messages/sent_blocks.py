"""The content blocks of a Messages request as the client sent it, each with its place:
what an error names by its path (``messages.N.content.M``), found again in the raw body
once the request has been decoded into items (which keep no such place)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import orjson


def sent_blocks(raw: bytes) -> Iterator[tuple[int, int, dict[str, Any]]]:
    """``(n, m, block)`` for each object block of each message's content list in ``raw``,
    in order; nothing for a body that is not a JSON object with a ``messages`` list."""
    try:
        messages = orjson.loads(raw).get("messages")
    except (orjson.JSONDecodeError, AttributeError):
        return
    for n, message in enumerate(messages if isinstance(messages, list) else ()):
        content = message.get("content") if isinstance(message, dict) else None
        for m, block in enumerate(content if isinstance(content, list) else ()):
            if isinstance(block, dict):
                yield n, m, block
