"""Stop sequences the gateway keeps for an upstream with no field for them: the text cut at
the first, wherever the upstream's pieces split it, and a stream closed there."""

from __future__ import annotations

from collections.abc import AsyncGenerator

from hypothesis import given, settings
from hypothesis import strategies as st

from stateway.backends.stop_sequences import stopping
from stateway.core.generation_settings import GenerationSettings
from stateway.core.inference import (
    Delta,
    Finish,
    InferenceRequest,
    MessageStart,
    ReasoningDelta,
    TextDelta,
    ToolCallDelta,
    UsageReport,
)
from stateway.core.items import Item
from stateway.core.token_estimate import estimate_tokens
from stateway.core.usage import Usage


class Upstream:
    """A scripted round's deltas; knows whether it was read to its end or closed."""

    def __init__(self, deltas: list[Delta]) -> None:
        self.deltas = deltas
        self.read = 0
        self.closed = False

    async def infer(self) -> AsyncGenerator[Delta, None]:
        try:
            for delta in self.deltas:
                self.read += 1
                yield delta
        finally:
            self.closed = self.read < len(self.deltas)


def request(*stops: str, stream: bool = True) -> InferenceRequest:
    settings = GenerationSettings(stop_sequences=list(stops))
    return InferenceRequest("m", None, [], settings, stream=stream)


async def run(upstream: Upstream, asked: InferenceRequest) -> list[Delta]:
    return [delta async for delta in stopping(upstream.infer(), asked)]


def text_of(deltas: list[Delta]) -> str:
    return "".join(d.text for d in deltas if isinstance(d, TextDelta))


async def test_a_stop_sequence_split_across_pieces_ends_the_stream_there() -> None:
    upstream = Upstream(
        [
            TextDelta("Hello wo"),
            TextDelta("rld! and "),
            TextDelta("more"),
            ToolCallDelta(0, "c", "f", "{}"),
            UsageReport(Usage(9, 9)),
            Finish("tool_calls"),
        ]
    )
    asked = request("world")
    deltas = await run(upstream, asked)
    assert text_of(deltas) == "Hello "
    assert [d for d in deltas if not isinstance(d, TextDelta)] == [
        UsageReport(Usage(estimate_tokens(asked), 2)),  # 6 bytes said, estimated
        Finish("stop", "world"),
    ]
    assert upstream.closed, "the upstream's stream is closed at the stop sequence"
    assert upstream.read == 2


async def test_a_whole_reply_is_cut_and_keeps_its_own_usage() -> None:
    upstream = Upstream(
        [
            TextDelta("one STOP two"),
            ToolCallDelta(0, "c", "f", "{}"),
            UsageReport(Usage(4, 6)),
            Finish("tool_calls"),
        ]
    )
    deltas = await run(upstream, request("STOP", stream=False))
    assert deltas == [TextDelta("one "), UsageReport(Usage(4, 6)), Finish("stop", "STOP")]
    assert not upstream.closed


async def test_a_tail_that_may_begin_a_sequence_waits_then_goes_on() -> None:
    """Held while it could begin one; passed on once the next piece rules it out, or before
    other output (a new message, reasoning, a call, the finish)."""
    upstream = Upstream(
        [
            TextDelta("say EN"),
            TextDelta("ough"),
            TextDelta(" E"),
            MessageStart(),
            TextDelta("N"),
            ReasoningDelta("hm"),
            TextDelta("the E"),
            Finish("stop"),
        ]
    )
    deltas = await run(upstream, request("END"))
    assert deltas == [
        TextDelta("say "),
        TextDelta("ENough"),
        TextDelta(" "),
        TextDelta("E"),
        MessageStart(),
        TextDelta("N"),
        ReasoningDelta("hm"),
        TextDelta("the "),
        TextDelta("E"),
        Finish("stop"),
    ]


async def test_the_earliest_sequence_wins_and_empty_ones_are_ignored() -> None:
    upstream = Upstream([TextDelta("a b c d"), Finish("stop")])
    deltas = await run(upstream, request("", "c", "b c", "d"))
    assert deltas[0] == TextDelta("a ")
    assert deltas[-1] == Finish("stop", "b c")


async def test_the_sequence_the_model_says_first_wins_however_the_text_comes() -> None:
    """The one the model completes first ends the text (as a server checking each token
    stops there), not the one beginning first: a whole reply and a stream whose piece
    ends inside a longer sequence stop alike."""
    stops = ("w3 w4 w5", "w4")
    whole = await run(Upstream([TextDelta("w1 w2 w3 w4 w5"), Finish("stop")]), request(*stops))
    pieces = [TextDelta("w1 w2 w3 w4"), TextDelta(" w5"), Finish("stop")]
    streamed = await run(Upstream(pieces), request(*stops))
    assert text_of(whole) == text_of(streamed) == "w1 w2 w3 "
    assert whole[-1] == streamed[-1] == Finish("stop", "w4")


async def test_tokens_go_with_their_text_and_past_the_cut_are_dropped() -> None:
    def token(text: str) -> Item:
        return {"token": text, "logprob": -0.1, "bytes": list(text.encode()), "top_logprobs": []}

    upstream = Upstream(
        [
            TextDelta("ab", [token("ab")]),
            TextDelta("c", [token("c")]),
            TextDelta("dX", [token("dX")]),
            Finish("stop"),
        ]
    )
    deltas = await run(upstream, request("cdX"))
    assert deltas[:-2] == [TextDelta("ab", [token("ab")])]
    assert deltas[-1] == Finish("stop", "cdX")


async def test_a_piece_cut_keeps_the_tokens_before_the_cut() -> None:
    """A whole reply is one piece holding every token: those spelling the text before the
    stop sequence stay with it (a token reaching past the cut does not)."""

    def token(text: str) -> Item:
        return {"token": text, "logprob": -0.1, "bytes": list(text.encode()), "top_logprobs": []}

    words = ["one ", "twé", " STOP", " th", "ree"]
    upstream = Upstream([TextDelta("".join(words), [token(w) for w in words]), Finish("stop")])
    deltas = await run(upstream, request("STOP", stream=False))
    assert deltas == [TextDelta("one twé ", [token("one "), token("twé")]), Finish("stop", "STOP")]


async def test_without_a_match_everything_passes_unchanged() -> None:
    script: list[Delta] = [
        TextDelta("no stop here"),
        UsageReport(Usage(1, 2)),
        Finish("length"),
    ]
    assert await run(Upstream(script), request("STOP")) == script


class Counted(str):
    """A stop sequence that counts the pieces of itself taken to compare with the text."""

    pieces = 0

    def __getitem__(self, key: object) -> str:
        Counted.pieces += 1
        return str.__getitem__(self, key)  # type: ignore[index]


async def test_a_long_held_text_is_not_compared_again_at_every_size_for_each_piece() -> None:
    """A reply that spells the beginning of a long stop sequence is held back whole, piece
    after piece; another long sequence that never begins it is compared with the new pieces
    only, not with every end of the held text again (that was a reply's length squared for
    each piece: a client's request could hold the process for minutes)."""
    words = [f"w{i} " for i in range(2000)]
    spelled = "".join(words) + "Z"  # never completed
    other = Counted("q" * 50_000)
    Counted.pieces = 0
    pieces: list[Delta] = [TextDelta(w) for w in words]
    deltas = await run(Upstream([*pieces, Finish("stop")]), request(other, spelled))
    assert text_of(deltas) == "".join(words)
    assert Counted.pieces <= 2 * len("".join(words))


class Touched(str):
    """A stop sequence that counts each time the matcher measures or slices it."""

    count = 0

    def __len__(self) -> int:
        Touched.count += 1
        return str.__len__(self)

    def __getitem__(self, key: object) -> str:
        Touched.count += 1
        return str.__getitem__(self, key)  # type: ignore[index]


async def test_many_sequences_are_not_each_looked_at_for_every_piece() -> None:
    """Thousands of sequences that all begin with a space, as the reply's every piece ends:
    each piece is compared only with the sequences it could continue or begin, not with
    each of them (that was thousands of comparisons a piece: a reply of 20,000 words held
    the process for half a minute)."""
    letters = "abcdefghijklmnopqrstuvwxy"
    stops = [Touched(f" {a}{b}{c}!") for a in letters for b in letters for c in letters[:4]]
    words = [f"z{i} " for i in range(4000)]
    Touched.count = 0
    pieces: list[Delta] = [TextDelta(w) for w in words]
    deltas = await run(Upstream([*pieces, Finish("stop")]), request(*stops))
    assert text_of(deltas) == "".join(words)
    assert Touched.count <= 5 * len(stops) + 5 * len(words)
    ended = await run(Upstream([*pieces[:9], TextDelta("abc!"), *pieces]), request(*stops))
    assert text_of(ended) == "".join(words[:9]).rstrip()
    assert ended[-1] == Finish("stop", " abc!")


def reference(pieces: list[str], stops: list[str]) -> tuple[list[str], str | None]:
    """What passes, piece by piece, by the plain rule: the text up to the first sequence
    completed (ending first, then beginning first), else all but the longest end that
    begins a sequence; the rest once the text ends."""
    sequences = [s for s in dict.fromkeys(stops) if s]
    text, passed, out = "", 0, []
    for piece in pieces:
        text += piece
        found = [(at + len(s), at, s) for s in sequences if (at := text.find(s)) >= 0]
        if found:
            _, at, matched = min(found)
            return [*out, text[passed:at]], matched
        held = max((k for s in sequences for k in range(len(s)) if text.endswith(s[:k])), default=0)
        out.append(text[passed : len(text) - held])
        passed = len(text) - held
    return [*out, text[passed:]], None


@settings(max_examples=400, deadline=None)
@given(
    pieces=st.lists(st.text("ab c", max_size=6), max_size=12),
    stops=st.lists(st.text("ab c", max_size=4), max_size=12),
)
async def test_the_pieces_passed_are_the_plain_rules(pieces: list[str], stops: list[str]) -> None:
    expected, matched = reference(pieces, stops)
    script: list[Delta] = [*(TextDelta(p) for p in pieces), Finish("length")]
    deltas = await run(Upstream(script), request(*stops))
    assert [d.text for d in deltas if isinstance(d, TextDelta)] == [t for t in expected if t]
    assert deltas[-1] == (Finish("length") if matched is None else Finish("stop", matched))


async def test_an_empty_piece_passes_its_tokens_on_when_nothing_is_held() -> None:
    token: Item = {"token": "", "logprob": -0.1, "bytes": [], "top_logprobs": []}
    script: list[Delta] = [TextDelta("a "), TextDelta("", [token]), Finish("stop")]
    deltas = await run(Upstream(script), request("STOP"))
    assert deltas == [TextDelta("a "), TextDelta("", [token]), Finish("stop")]
