"""Reasoning a Chat upstream leaves in its content between ``<think>`` tags (a backend's
``think_tags``), taken out as reasoning.

Open reasoning models (Qwen3, DeepSeek-R1, QwQ, GLM, ...) write their reasoning first,
between ``<think>`` and ``</think>``. A server splits it into ``reasoning_content`` (or
``reasoning``) only with a reasoning parser (vLLM's and SGLang's ``--reasoning-parser``;
llama.cpp unless ``--reasoning-format none``); others, and many proxies, leave it in
``content``. With ``think_tags``, content that begins (after whitespace) with ``<think>``
is reasoning up to ``</think>``, and what follows, whitespace at its start trimmed, is the
answer's text; a reply that never closes the block is all reasoning, as vLLM's parsers
read one. Content that does not begin so is text, as it came; unless the block is
``opened`` by the chat template (a generation prompt ending with ``<think>``, as
DeepSeek-R1's and Qwen3's thinking-only templates end it): then the reply is reasoning
from its start (a ``<think>`` the model writes anyway left out) up to ``</think>``.
Only ``content`` is read: a reasoning field the server also sent, a refusal and tool
calls go on as they came.

:class:`ThinkTags` splits one reply's content as it streams, the tags split across
chunks anywhere: it holds back only what may be the start of a tag (whitespace and a
partial ``<think>`` at the start; a partial ``</think>`` at a chunk's end), and, once the
content is known to be text, nothing (:attr:`ThinkTags.passing`). Its work is linear in
the chunk. :class:`TaggedReply` applies it to a reply's deltas (:func:`untagged`: a
stream's chunks, decoded), keeping the tokens (``logprobs``) of the text only.
"""

from __future__ import annotations

import enum
from collections.abc import Callable, Iterable

from stateway.backends.chat_logprobs import ending_tokens
from stateway.core.inference import Delta, ReasoningDelta, TextDelta
from stateway.core.items import Item

OPEN = "<think>"
CLOSE = "</think>"


class _Part(enum.Enum):
    START = enum.auto()
    """Nothing but whitespace yet, perhaps with the start of ``<think>``."""
    REASONING = enum.auto()
    """Inside the block."""
    GAP = enum.auto()
    """Past ``</think>``: whitespace before the text is trimmed."""
    TEXT = enum.auto()
    """Text from here on, as it comes."""


class ThinkTags:
    """One reply's content, fed as it arrives, split into reasoning and text."""

    __slots__ = ("_held", "_opened", "_part", "_tag")

    def __init__(self, *, opened: bool = False) -> None:
        self._opened = opened
        """The template opened the block: content not opening it is reasoning."""
        self._part = _Part.START
        self._held: list[str] = []
        """At the start: the content so far (whitespace, the start of ``<think>``)."""
        self._tag = ""
        """At the start: the part of ``<think>`` written; inside the block: the start of
        ``</think>`` that ended the last chunk."""

    @property
    def passing(self) -> bool:
        """Whether the content is text from here on: :meth:`feed` gives it back as it is."""
        return self._part is _Part.TEXT

    @property
    def holding(self) -> bool:
        """Whether content fed is held back, waiting for what follows."""
        return bool(self._held or self._tag)

    def feed(self, content: str) -> tuple[str, str]:
        """The reasoning and the text of ``content``, the next piece of the reply's, as far
        as they are known (what may be the start of a tag is held back)."""
        match self._part:
            case _Part.TEXT:
                return "", content
            case _Part.REASONING:
                return self._reasoning(content)
            case _Part.GAP:
                return "", self._gap(content)
            case _Part.START:
                return self._start(content)

    def flush(self) -> tuple[str, str]:
        """What is held back, given up as what it would be if the content ended here: a
        start that is no ``<think>`` as text (which it is then from here on; reasoning in a
        block the template ``opened``), a partial ``</think>`` as reasoning."""
        reasoning, text = self._past_start() if self._part is _Part.START else ("", "")
        partial, self._tag = self._tag, ""
        return reasoning + partial, text

    def _start(self, content: str) -> tuple[str, str]:
        tag = self._tag + content if self._tag else content.lstrip()
        if tag.startswith(OPEN):
            self._part, self._held, self._tag = _Part.REASONING, [], ""
            return self._reasoning(tag[len(OPEN) :])
        if OPEN.startswith(tag):  # "" too: whitespace only so far
            self._held.append(content)
            self._tag = tag
            return "", ""
        self._held.append(content)
        return self._past_start()

    def _past_start(self) -> tuple[str, str]:
        """The start held back, known to open no ``<think>``: text from here on, or, in a
        block the template ``opened``, reasoning up to ``</think>``."""
        held = "".join(self._held)
        self._held, self._tag = [], ""
        if self._opened:
            self._part = _Part.REASONING
            return self._reasoning(held)
        self._part = _Part.TEXT
        return "", held

    def _reasoning(self, content: str) -> tuple[str, str]:
        written = self._tag + content
        end = written.find(CLOSE)
        if end >= 0:
            self._part, self._tag = _Part.GAP, ""
            return written[:end], self._gap(written[end + len(CLOSE) :])
        cut = len(written) - _partial_close(written)
        self._tag = written[cut:]
        return written[:cut], ""

    def _gap(self, content: str) -> str:
        text = content.lstrip()
        if text:
            self._part = _Part.TEXT
        return text


def _partial_close(written: str) -> int:
    """The length of the longest end of ``written`` that begins ``</think>`` (short of the
    whole tag)."""
    for length in range(min(len(CLOSE) - 1, len(written)), 0, -1):
        if written.endswith(CLOSE[:length]):
            return length
    return 0


class TaggedReply:
    """One reply's deltas with the reasoning its content holds between think tags taken
    out. A text delta's tokens go with the text it gives: those of reasoning, and of tags
    and whitespace left out, are dropped (the least run of the tokens given since the last
    output that spells the text is kept, as :func:`ending_tokens` finds it)."""

    __slots__ = ("_tags", "_tokens")

    def __init__(self, *, opened: bool = False) -> None:
        self._tags = ThinkTags(opened=opened)
        self._tokens: list[Item] = []
        """Tokens of text fed and held back (with the request's logprobs only)."""

    @property
    def passing(self) -> bool:
        """Whether the deltas go on as they are from here on."""
        return self._tags.passing

    def split(self, deltas: Iterable[Delta]) -> list[Delta]:
        """``deltas`` (a chunk's, or a whole reply's) with their text split. What is held
        back is given up before a delta of another kind than text or reasoning (a tool
        call, a refusal, the finish), so nothing comes out of its order."""
        split: list[Delta] = []
        for delta in deltas:
            if type(delta) is TextDelta:
                reasoning, text = self._tags.feed(delta.text)
                self._add(split, reasoning, text, delta.logprobs)
                continue
            if type(delta) is not ReasoningDelta and self._tags.holding:
                reasoning, text = self._tags.flush()
                self._add(split, reasoning, text, None)
            split.append(delta)
        return split

    def _add(
        self, split: list[Delta], reasoning: str, text: str, tokens: list[Item] | None
    ) -> None:
        if reasoning:
            split.append(ReasoningDelta(reasoning))
        if tokens is None and not self._tokens:  # the common case: no logprobs asked for
            if text:
                split.append(TextDelta(text))
            return
        given = [*self._tokens, *(tokens or ())]
        if text:
            split.append(TextDelta(text, ending_tokens(given, text)))
            self._tokens = []
        else:
            self._tokens = [] if reasoning else given


def untagged(
    decode: Callable[[bytes, bool], list[Delta]], *, opened: bool = False
) -> Callable[[bytes, bool], list[Delta]]:
    """``decode`` (a stream's chunk -> its deltas) for one reply, its content's think
    tags taken out (the block ``opened`` by the template or not); past the start of its
    text, one check more a chunk."""
    reply = TaggedReply(opened=opened)

    def split(data: bytes, tokens: bool) -> list[Delta]:
        deltas = decode(data, tokens)
        return deltas if reply.passing else reply.split(deltas)

    return split
