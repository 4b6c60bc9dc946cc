"""Tool names and tool-use ids as the Messages API accepts them: ``[A-Za-z0-9_-]``.

Gateway names may hold other characters (an MCP tool called ``files.read``, a client's
``call:1`` id). Such a name is sent as a safe spelling with a short hash of the original
(so two names never meet in one spelling) and restored when the model calls it; an id is
respelled the same way wherever it appears, so a call and its result still pair up (the
model's own new ids are already safe).
"""

from __future__ import annotations

from typing import Final

from stateway.core.tools import model_names

NAME_LENGTH: Final = 128
"""The longest tool name (and tool-use id) the Messages API takes."""


def safe_name(name: str) -> str:
    """``name`` if the Messages API accepts it, else a respelling unique to it."""
    return model_names.safe_name(name, NAME_LENGTH)


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
