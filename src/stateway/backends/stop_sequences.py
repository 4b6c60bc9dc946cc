"""Stop sequences kept by the gateway, for an upstream with no field for them (the
Responses API) or that refuses them (Anthropic's, a blank one): a Chat client's ``stop``
and a Messages client's ``stop_sequences`` still end the output.

The round's text is passed on as it comes, but for its tail that could begin a stop
sequence, which waits for the text after it. At the first stop sequence the text is cut
(the sequence left out, as hosted), the round finishes with reason ``stop`` naming it, and
what the model said after it (text, tool calls) is dropped. A streamed round's upstream
request is closed there; its usage, which only the end of the stream would have told, is
then estimated (:mod:`stateway.core.token_estimate`'s rate; the input as the upstream
reported it before the output, as Anthropic does, else estimated too). A whole reply is
read to its end for its usage. Only message text is matched, each message's apart: reasoning,
refusals and tool arguments are not.
"""

from __future__ import annotations

from collections.abc import AsyncGenerator
from contextlib import aclosing
from dataclasses import replace

from stateway.core.inference import (
    Delta,
    Finish,
    InferenceRequest,
    ReasoningDelta,
    RefusalDelta,
    TextDelta,
    ToolCallDelta,
    UsageReport,
)
from stateway.core.items import Item
from stateway.core.token_estimate import BYTES_PER_TOKEN, estimate_tokens
from stateway.core.usage import Usage


async def stopping(
    deltas: AsyncGenerator[Delta, None],
    request: InferenceRequest,
    sequences: list[str] | None = None,
) -> AsyncGenerator[Delta, None]:
    """``deltas`` ended at the first of ``sequences`` (default: the request's)."""
    watch = StopWatch(request.settings.stop_sequences if sequences is None else sequences)
    said = 0
    """Bytes of output passed on, for a streamed round's estimated usage."""
    reported: Usage | None = None
    """The usage the upstream reported so far (Anthropic's, of the prompt, at the start)."""
    async with aclosing(deltas) as inner:
        async for delta in inner:
            if isinstance(delta, UsageReport):
                reported = delta.usage
            if watch.ended():  # a whole reply's rest: only its usage counts
                if isinstance(delta, UsageReport):
                    yield delta
                continue
            for out in watch.feed(delta):
                said += _output_bytes(out)
                yield out
            if watch.ended() and request.stream:
                break  # the upstream request is closed as the generator is
    if watch.matched is None:
        return
    if request.stream:
        output = -(-said // BYTES_PER_TOKEN)
        if reported is None:
            yield UsageReport(Usage(estimate_tokens(request), output))
        else:
            yield UsageReport(replace(reported, output_tokens=output, reasoning_tokens=0))
    yield Finish("stop", watch.matched)


def _output_bytes(delta: Delta) -> int:
    match delta:
        case TextDelta(text=said) | ReasoningDelta(text=said) | RefusalDelta(text=said):
            return len(said.encode())
        case ToolCallDelta(arguments=said):
            return len(said.encode())
        case _:
            return 0


class StopWatch:
    """Watches one round's text for stop sequences; holds back what could begin one.

    A piece is compared only with the sequences it could continue or begin: those whose
    beginning ends the held text (each with the length of it), and those whose first two
    characters it holds (one character, for a sequence that long). The sequences whose
    first character is the held text's last are one group, not each listed, until the next
    piece shows which of them it continues: a reply whose every piece ends with a space
    is not compared with every sequence beginning with one (a client may send thousands)."""

    __slots__ = ("_head", "_heads", "_held", "_open", "_pairs", "_sequences", "_tokens", "matched")

    def __init__(self, sequences: list[str]) -> None:
        self._sequences = tuple(dict.fromkeys(s for s in sequences if s))
        self._held = ""
        """Text not passed on yet: it may be the beginning of a stop sequence."""
        self._open: dict[int, int] = {}
        """For each sequence the held text ends with two or more characters of the
        beginning of, by rank, the longest such end. Text added can lengthen it by its own
        length at most, so each piece is compared from there down, not from the whole held
        text's length (which a reply spelling the beginning of a long sequence makes long):
        the comparisons add up to the text's length."""
        self._head = ""
        """The held text's last character when it begins a sequence (longer than it): each
        such sequence's held beginning is that character."""
        pairs: dict[str, list[int]] = {}
        for rank, sequence in enumerate(self._sequences):
            pairs.setdefault(sequence[:2], []).append(rank)
        self._pairs = pairs
        """The sequences by their first two characters (a one-character one by it)."""
        self._heads = frozenset(s[0] for s in self._sequences if len(s) > 1)
        self._tokens: list[tuple[int, list[Item]]] = []
        """The held text's tokens (``logprobs``), each delta's with where its text ends."""
        self.matched: str | None = None
        """The stop sequence that ended the text, once one did."""

    def ended(self) -> bool:
        """Whether a stop sequence ended the text."""
        return self.matched is not None

    def feed(self, delta: Delta) -> list[Delta]:
        """What can be passed on, given one more delta: other output than text after the
        text held back."""
        return self.text(delta) if isinstance(delta, TextDelta) else [*self.flush(), delta]

    def text(self, delta: TextDelta) -> list[Delta]:
        """What of the text so far can be passed on: up to the first stop sequence, once
        it is there; else all but the tail that could begin one."""
        added = delta.text
        held = self._held + added
        if delta.logprobs is not None:
            self._tokens.append((len(held), delta.logprobs))
        if not added:  # nothing to compare: its tokens may go
            return self._release(len(held) - self._holding())
        new = len(self._held)
        head, most = self._head, self._open
        ranks = self._touched(added)
        hit = _first(held, [(rank, self._sequences[rank]) for rank in ranks], new)
        if hit is not None:
            at, self.matched = hit
            self._held = held[:at]
            self._tokens = [
                (min(end, at), _before(tokens, len(held[at:end].encode())))
                for end, tokens in self._tokens
            ]
            return self.flush()
        self._open = {}
        for rank in ranks:
            sequence = self._sequences[rank]
            bound = most.get(rank, 1 if sequence[0] == head else 0) + len(added)
            if (size := _open_tail(held, sequence, bound)) > 1:
                self._open[rank] = size
        self._head = added[-1] if added[-1] in self._heads else ""
        self._held = held
        return self._release(len(held) - self._holding())

    def _holding(self) -> int:
        """The length of the held text's longest end that begins a sequence."""
        return max(max(self._open.values(), default=0), len(self._head))

    def _touched(self, added: str) -> set[int]:
        """The ranks of the sequences ``added`` could continue or begin."""
        pairs = self._pairs
        ranks = set(self._open)
        if self._head:
            ranks.update(pairs.get(self._head + added[0], ()))
        starts = {added[at : at + 2] for at in range(len(added) - 1)} | set(added)
        for start in starts & pairs.keys():
            ranks.update(pairs[start])
        return ranks

    def flush(self) -> list[Delta]:
        """The held text, passed on: what follows it is not text of the same message."""
        self._open, self._head = {}, ""
        return self._release(len(self._held))

    def _release(self, cut: int) -> list[Delta]:
        """The held text up to ``cut`` with the tokens whose text ends there or before."""
        released, self._held = self._held[:cut], self._held[cut:]
        tokens = [token for end, own in self._tokens if end <= cut for token in own]
        self._tokens = [(end - cut, own) for end, own in self._tokens if end > cut]
        if not released and not tokens:
            return []
        return [TextDelta(released, tokens if tokens else None)]


def _before(tokens: list[Item], over: int) -> list[Item]:
    """``tokens`` without those spelling any of their text's last ``over`` bytes (past a
    cut): a piece holding many (a whole reply) keeps those before the cut."""
    kept = len(tokens)
    while kept and over > 0:
        kept -= 1
        over -= len(tokens[kept]["bytes"])
    return tokens[:kept]


def _first(text: str, sequences: list[tuple[int, str]], new: int) -> tuple[int, str] | None:
    """Where the first stop sequence in ``text`` begins, and which: the one the model
    completed first (ending first, as a server checking each token stops there), of two
    ending together the one beginning first, then the earlier listed. So a whole reply and
    a stream stop alike, wherever its pieces split the text. The text before ``new`` holds
    none (it was looked through already), so each is looked for only where it would end
    past it. ``sequences``: those to look for, each with its rank in the list."""
    found = [
        (at + len(s), at, rank, s)
        for rank, s in sequences
        if (at := text.find(s, max(0, new - len(s) + 1))) >= 0
    ]
    if not found:
        return None
    _, at, _, sequence = min(found)
    return at, sequence


def _open_tail(text: str, sequence: str, most: int) -> int:
    """The length of the longest end of ``text``, ``most`` long at most, that begins
    ``sequence`` (and is not all of it)."""
    for size in range(min(len(sequence) - 1, len(text), most), 0, -1):
        if text.endswith(sequence[:size]):
            return size
    return 0
