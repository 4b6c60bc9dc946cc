"""Tool names and tool-use ids as the Messages API accepts them: ``[A-Za-z0-9_-]``.

Gateway names may hold other characters (an MCP tool called ``files.read``, a client's
``call:1`` id). Such a name is sent as a safe spelling with a short hash of the original
(so two names never meet in one spelling) and restored when the model calls it; an id is
respelled the same way wherever it appears, so a call and its result still pair up (the
model's own new ids are already safe).
"""

from __future__ import annotations

import hashlib
import re

_SAFE = re.compile(r"[A-Za-z0-9_-]{1,128}")
_UNSAFE = re.compile(r"[^A-Za-z0-9_-]")
_HASH_LENGTH = 8
_KEPT = 128 - _HASH_LENGTH - 1


def safe_name(name: str) -> str:
    """``name`` if the Messages API accepts it, else a respelling unique to it."""
    if _SAFE.fullmatch(name):
        return name
    digest = hashlib.sha256(name.encode()).hexdigest()[:_HASH_LENGTH]
    return f"{_UNSAFE.sub('_', name)[:_KEPT]}_{digest}"


class ToolNames:
    """The respellings of one request, to restore the names the model calls."""

    __slots__ = ("_original",)

    def __init__(self) -> None:
        self._original: dict[str, str] = {}

    def to_upstream(self, name: str) -> str:
        safe = safe_name(name)
        if safe != name:
            self._original[safe] = name
        return safe

    def from_upstream(self, name: str) -> str:
        return self._original.get(name, name)
