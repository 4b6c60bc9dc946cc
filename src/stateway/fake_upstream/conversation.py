"""The model's view of a request, shared by both wires.

Each wire walks its own request shape and feeds a :class:`ConversationBuilder`, which keeps
the ``[[echo]]`` transcript, the text of the last user message (where the script lives),
the tool results the conversation ends with, and the prompt size in words.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class Conversation:
    """What the fake model received, reduced to what its behaviour depends on."""

    lines: list[str]
    """The ``[[echo]]`` transcript, one line per received item."""
    user_text: str
    """Raw text of the last user message ("" when there is none)."""
    tool_outputs: list[str]
    """Outputs of the tool results the conversation ends with (empty if it ends otherwise)."""
    prompt_tokens: int
    """Whitespace-separated words across every received text."""
    calls_since_user: int = 0
    """Tool calls the assistant made after the last user message (``[[rounds]]``)."""


class ConversationBuilder:
    """Accumulates a :class:`Conversation` item by item, in conversation order."""

    __slots__ = ("_calls", "_lines", "_tokens", "_tool_outputs", "_user_text")

    def __init__(self) -> None:
        self._lines: list[str] = []
        self._tokens = 0
        self._tool_outputs: list[str] = []
        self._user_text = ""
        self._calls = 0

    def message(self, role: str, text: str) -> None:
        """A message (or instructions) from ``role``; user messages carry the script."""
        self._add(f"{role}: {text}", text)
        self._tool_outputs = []
        if role == "user":
            self._user_text = text
            self._calls = 0

    def tool_call(self, name: str, arguments: str) -> None:
        """A function call the assistant made earlier."""
        self._add(f"assistant->{name}({arguments})", arguments)
        self._tool_outputs = []
        self._calls += 1

    def tool_result(self, call_id: str, text: str) -> None:
        """The output of an earlier function call."""
        self._add(f"tool[{call_id}]: {text}", text)
        self._tool_outputs.append(text)

    def reasoning(self, text: str) -> None:
        """Reasoning the assistant produced earlier and the client sent back."""
        self._add(f"reasoning: {text}", text)
        self._tool_outputs = []

    def other(self, kind: str) -> None:
        """An item the fake does not interpret, shown as ``<kind>``."""
        self._add(f"<{kind}>", "")
        self._tool_outputs = []

    def build(self) -> Conversation:
        return Conversation(
            self._lines, self._user_text, self._tool_outputs, self._tokens, self._calls
        )

    def _add(self, line: str, text: str) -> None:
        self._lines.append(line)
        self._tokens += len(text.split())


def content_text(content: object) -> str:
    """Text of a message content: a string, or the concatenation of a list of parts."""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "".join(_part_text(part) for part in content)
    return ""


def _part_text(part: object) -> str:
    """Text parts give their text, image parts ``<image>``, a search result its text,
    other parts ``<type>``."""
    if isinstance(part, str):
        return part
    if not isinstance(part, dict):
        return ""
    text = part.get("text")
    if isinstance(text, str):
        return text
    kind = part.get("type")
    if not isinstance(kind, str):
        return ""
    if kind == "search_result":  # its text, as a model reads it
        return content_text(part.get("content"))
    if kind == "refusal":
        refusal = part.get("refusal")
        return refusal if isinstance(refusal, str) else ""
    if "image" in kind:
        return "<image>"
    return f"<{kind.removeprefix('input_')}>"
