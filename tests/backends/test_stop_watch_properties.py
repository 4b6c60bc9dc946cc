"""The stop watch's incremental matching held to a naive one that looks through the whole
text again at each piece: the same text passed on after every piece, the same cut, the
same sequence named, however the pieces split the text, flushed or not in between."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from stateway.backends.stop_sequences import StopWatch
from stateway.core.inference import Delta, ReasoningDelta, TextDelta

_LETTERS = st.sampled_from(["a", "b", "ab", "é", "😀", "\n", " ", "ba", "aa"])
_TEXT = st.lists(_LETTERS, max_size=6).map("".join)
_SEQUENCES = st.lists(_TEXT, max_size=4)
_STEP = st.one_of(_TEXT.map(lambda text: ("text", text)), st.just(("flush", "")))


class NaiveWatch:
    """The whole text since the last flush looked through again at each piece."""

    def __init__(self, sequences: list[str]) -> None:
        self.sequences = list(dict.fromkeys(s for s in sequences if s))
        self.text = ""
        self.released = 0
        self.matched: str | None = None

    def feed(self, piece: str) -> str:
        self.text += piece
        found = [
            (at + len(s), at, rank, s)
            for rank, s in enumerate(self.sequences)
            if (at := self.text.find(s)) >= 0
        ]
        if found:
            _, at, _, self.matched = min(found)
            self.text = self.text[:at]
            return self._release(at)
        tail = max(
            (
                size
                for s in self.sequences
                for size in range(1, len(s))
                if self.text.endswith(s[:size])
            ),
            default=0,
        )
        return self._release(len(self.text) - tail)

    def flush(self) -> str:
        out = self._release(len(self.text))
        self.text, self.released = "", 0
        return out

    def _release(self, cut: int) -> str:
        out = self.text[self.released : cut]
        self.released = cut
        return out


def _said(deltas: list[Delta]) -> str:
    return "".join(d.text for d in deltas if isinstance(d, TextDelta))


@settings(max_examples=400, deadline=None)
@given(_SEQUENCES, st.lists(_STEP, max_size=12))
def test_the_watch_passes_on_what_a_naive_look_through_the_whole_text_would(
    sequences: list[str], steps: list[tuple[str, str]]
) -> None:
    watch, naive = StopWatch(sequences), NaiveWatch(sequences)
    for kind, piece in steps:
        if kind == "text":
            assert _said(watch.feed(TextDelta(piece))) == naive.feed(piece)
        else:
            assert _said(watch.feed(ReasoningDelta(""))) == naive.flush()
        assert watch.matched == naive.matched
        if watch.ended():
            break
    assert _said(watch.flush()) == naive.flush()


def _spelled(piece: str) -> list[dict[str, object]]:
    """A token for each character of ``piece``, as logprobs carry them."""
    return [{"token": c, "bytes": list(c.encode()), "logprob": 0.0} for c in piece]


@settings(max_examples=300, deadline=None)
@given(_SEQUENCES, st.lists(_STEP, max_size=12))
def test_the_tokens_passed_on_spell_the_text_passed_on(
    sequences: list[str], steps: list[tuple[str, str]]
) -> None:
    watch, said, tokens = StopWatch(sequences), [], []
    for kind, piece in steps:
        delta = TextDelta(piece, _spelled(piece)) if kind == "text" else ReasoningDelta("")
        said += watch.feed(delta)
        if watch.ended():
            break
    said += watch.flush()
    for delta in said:
        if isinstance(delta, TextDelta) and delta.logprobs:
            tokens += delta.logprobs
    assert bytes(b for token in tokens for b in token["bytes"]) == _said(said).encode()
