"""A relayed event stream (the Chat Completions fast path) is judged the same however the
network cut it into reads: realistic streams of vLLM, SGLang, llama-server and LM Studio
(answered, given up on, no answer, cut short, failing with an error event; with a proxy's
keepalive comments, trailing blank lines, lines ended by CRLF or a CR alone, a ``[DONE]``
with a trailing space) are relayed whole and cut at every place near their end, with a
first read of a few bytes, a byte at a time, and at seeded random places; each relay's
verdict, usage and relayed bytes must be the unsplit stream's, whose verdict must be a run's
(:mod:`stateway.backends.relayed_stream`)."""

from __future__ import annotations

import asyncio
import itertools
import random
from collections.abc import Iterator
from typing import Final

import orjson
import pytest
from aiohttp import web

from stateway.backends.chat_forwarder import OpenAIChatBackend
from stateway.backends.chat_reply import gave_up
from stateway.backends.upstream_http import UpstreamClient
from stateway.backends.upstream_reply import cut_short, no_answer
from stateway.backends.upstream_status import classify_event, classify_reported
from stateway.backends.upstream_target import UpstreamTarget
from stateway.core.errors import GatewayError
from stateway.core.usage import Usage
from tests.backends.conftest import Loopback
from tests.backends.test_redaction import inference
from tests.backends.test_relayed_stream import reads_told

DONE: Final = b"data: [DONE]\n\n"
KEEPALIVE: Final = b": keep-alive\n\n"
"""A proxy's comment, kept between events and after the last."""
USED = {"prompt_tokens": 3, "completion_tokens": 2, "total_tokens": 5}
USAGE = Usage(input_tokens=3, output_tokens=2)


def event(chunk: dict[str, object]) -> bytes:
    return b"data: " + orjson.dumps(chunk) + b"\n\n"


def vllm(delta: dict[str, object] | None, reason: str | None = None) -> bytes:
    """vLLM's chunk: ``finish_reason`` in each, null but the last; None: its usage chunk."""
    head = {"id": "chatcmpl-7", "object": "chat.completion.chunk", "created": 1, "model": "m"}
    if delta is None:
        return event({**head, "choices": [], "usage": USED})
    choice = {"index": 0, "delta": delta, "logprobs": None, "finish_reason": reason}
    return event({**head, "choices": [choice]})


def sglang(delta: dict[str, object] | None, reason: str | None = None) -> bytes:
    """SGLang's chunk: ``"usage": null`` in each but its usage chunk."""
    head = {"id": "c1", "object": "chat.completion.chunk", "created": 1, "model": "m"}
    if delta is None:
        return event({**head, "choices": [], "usage": USED})
    choice = {
        "index": 0,
        "delta": {"role": None, "content": None, "reasoning_content": None, **delta},
        "logprobs": None,
        "finish_reason": reason,
        "matched_stop": None,
    }
    return event({**head, "choices": [choice], "usage": None})


def llama(delta: dict[str, object], reason: str | None = None) -> bytes:
    """llama-server's chunk: ``choices`` first; its last holds the usage and timings."""
    choice = {"finish_reason": reason, "index": 0, "delta": delta}
    chunk: dict[str, object] = {"choices": [choice], "created": 1, "id": "chatcmpl-x"}
    chunk |= {"model": "m", "object": "chat.completion.chunk"}
    if reason is not None:
        chunk |= {"usage": USED, "timings": {"prompt_n": 3, "predicted_n": 2}}
    return event(chunk)


ROLE = vllm({"role": "assistant", "content": ""})
ANSWER = ROLE + vllm({"content": "Hi"}) + vllm({"content": " there"})
LLAMA = llama({"role": "assistant", "content": None}) + llama({"content": "Hi"})
SGLANG = sglang({"role": "assistant", "content": ""}) + sglang({"content": "Hi"})
AZURE = (
    b'data: {"choices":[],"created":0,"id":"","model":"","object":"",'
    b'"prompt_filter_results":[{"prompt_index":0,"content_filter_results":{}}]}\n\n'
)
"""How Azure OpenAI opens a stream, before its role chunk: no output."""

SPACED: Final = b"data: [DONE] \n\n"
"""A ``[DONE]`` with a trailing space: a run reads its data stripped, so done all the same."""
NUMBERED: Final = b"data: [DONE]\nid: 7\n\n"
"""A ``[DONE]`` event with a field after its data (an ``id``, as a server numbering its
events writes): its data is ``[DONE]`` all the same, to a run and to the ``openai`` SDK."""


def cr(body: bytes) -> bytes:
    """``body`` with its lines ended by a CR alone (an event stream may end them so)."""
    return body.replace(b"\n", b"\r")


FAILED_WORDS = orjson.dumps({"code": 500, "message": "engine died", "type": "server_error"})
FAILURE = b'{"error":' + FAILED_WORDS + b"}"
"""An error event's data, as vLLM (``data:``), llama-server (its ``error:`` line: the
object within) and LM Studio (an event named ``error``) write it."""
REPORTED = classify_reported(orjson.loads(FAILED_WORDS), "up", str, mid_stream=True)
LINE = classify_event(FAILED_WORDS, "up", str)

STREAMS: dict[str, tuple[bytes, GatewayError | None, Usage | None]] = {
    "vllm": (ANSWER + vllm({}, "stop") + vllm(None) + DONE, None, USAGE),
    "vllm-aborted": (ANSWER + vllm({}, "abort") + vllm(None) + DONE, gave_up("abort"), USAGE),
    "vllm-error": (ANSWER + vllm({}, "error") + DONE, gave_up("error"), None),
    "vllm-no-answer": (ROLE + DONE, no_answer("up"), None),
    "vllm-done-alone": (DONE, no_answer("up"), None),
    "vllm-cut": (ANSWER + vllm(None), cut_short("up"), USAGE),
    "vllm-cut-in-done": (ANSWER + vllm(None) + DONE[:-1], cut_short("up"), USAGE),
    "vllm-finished-in-done": (ANSWER + vllm({}, "stop") + vllm(None) + DONE[:-1], None, USAGE),
    "vllm-done-unspaced": (
        ANSWER + vllm({}, "stop") + vllm(None) + b"data:[DONE]\n\n",
        None,
        USAGE,
    ),
    "vllm-crlf": (
        (ANSWER + vllm({}, "abort") + vllm(None) + DONE).replace(b"\n", b"\r\n"),
        gave_up("abort"),
        USAGE,
    ),
    "sglang-proxied": (
        KEEPALIVE + SGLANG + KEEPALIVE + sglang({}, "abort") + sglang(None) + DONE + KEEPALIVE,
        gave_up("abort"),
        USAGE,
    ),
    "sglang-blank-lines": (
        SGLANG + sglang({}, "stop") + sglang(None) + DONE + b"\n\n",
        None,
        USAGE,
    ),
    "llama-server": (LLAMA + llama({}, "stop") + DONE, None, USAGE),
    "llama-server-no-done": (LLAMA + llama({}, "stop"), None, USAGE),
    "llama-server-proxied": (LLAMA + llama({}, "stop") + DONE + KEEPALIVE, None, USAGE),
    "azure-no-answer": (AZURE + ROLE + DONE + b"\n", no_answer("up"), None),
    "no-finish-proxied": (ROLE + vllm({"content": "Hi"}) + DONE + KEEPALIVE, None, None),
    "vllm-done-spaced": (ANSWER + vllm({}, "stop") + vllm(None) + SPACED, None, USAGE),
    "vllm-aborted-done-spaced": (
        ANSWER + vllm({}, "abort") + vllm(None) + SPACED,
        gave_up("abort"),
        USAGE,
    ),
    "vllm-no-answer-done-spaced": (ROLE + SPACED, no_answer("up"), None),
    "done-numbered": (ANSWER + vllm({}, "stop") + vllm(None) + NUMBERED, None, USAGE),
    "aborted-done-numbered-crlf": (
        (ANSWER + vllm({}, "abort") + vllm(None) + NUMBERED).replace(b"\n", b"\r\n"),
        gave_up("abort"),
        USAGE,
    ),
    "no-finish-done-numbered": (ROLE + vllm({"content": "Hi"}) + NUMBERED, None, None),
    "no-answer-done-retry-proxied": (
        ROLE + b"data: [DONE]\nretry: 3000\n: keep-alive\n\n",
        no_answer("up"),
        None,
    ),
    "vllm-cr": (cr(ANSWER + vllm({}, "stop") + vllm(None) + DONE), None, USAGE),
    "vllm-cr-aborted": (
        cr(ANSWER + vllm({}, "abort") + vllm(None) + DONE),
        gave_up("abort"),
        USAGE,
    ),
    "vllm-cr-no-answer": (cr(ROLE + DONE), no_answer("up"), None),
    "vllm-cr-cut": (cr(ANSWER + vllm(None)), cut_short("up"), USAGE),
    "sglang-cr-proxied": (
        cr(KEEPALIVE + SGLANG + sglang({}, "stop") + sglang(None) + DONE + KEEPALIVE),
        None,
        USAGE,
    ),
    "vllm-error-event": (ANSWER + b"data: " + FAILURE + b"\n\n" + DONE, REPORTED, None),
    "vllm-cr-error-event": (cr(ANSWER + b"data: " + FAILURE + b"\n\n" + DONE), REPORTED, None),
    "llama-server-error-line": (LLAMA + b"error: " + FAILED_WORDS + b"\n\n" + DONE, LINE, None),
    "lm-studio-error-event": (
        ANSWER + b"event: error\ndata: " + FAILURE + b"\n\n",
        REPORTED,
        None,
    ),
}
"""Streams as servers (and proxies before them) write them, each with a run's verdict
(None: answered) and the usage the relay finds at its end."""

NEAR_END: Final = 48
"""The last bytes of a stream cut at every place: its ``[DONE]``, its finish and usage."""
RANDOM: Final = 80
"""Seeded random ways to cut each stream (anywhere, mostly near its end)."""


def cuttings(size: int, rng: random.Random) -> Iterator[tuple[int, ...]]:
    """Where to cut a body of ``size`` bytes into reads: once at every place near its end;
    after a first read of one to four bytes (a ``data:`` split in a read that holds more),
    and near its end; at every byte (a trickle); at random places."""
    near = range(max(1, size - NEAR_END), size)
    yield from ((at,) for at in near)
    yield from ((first, at) for first in range(1, 5) for at in near[::5] if at > first)
    yield tuple(range(1, size))
    for _ in range(RANDOM):
        count = rng.choice([2, 3, 4, 6, 12])
        cuts = {
            rng.randrange(1, size) if rng.random() < 0.3 else rng.choice(near) for _ in range(count)
        }
        if rng.random() < 0.3:
            cuts.add(rng.randrange(1, min(5, size)))
        yield tuple(sorted(cuts))


def cut(body: bytes, cuts: tuple[int, ...]) -> list[bytes]:
    bounds = [0, *cuts, len(body)]
    return [body[start:end] for start, end in itertools.pairwise(bounds)]


Verdict = tuple[type[GatewayError], int, str, str] | None


def verdict(error: GatewayError | None) -> Verdict:
    return None if error is None else (type(error), error.status, error.code, error.message)


class Relays:
    """One model server for many relays: each request is answered with the next writes,
    each written once the one before it was read (so each is one read of the relay:
    :class:`~tests.backends.test_relayed_stream.ReadsTold`)."""

    def __init__(self, loopback: Loopback) -> None:
        self._loopback = loopback
        self._writes: list[bytes] = []
        self._relayed = asyncio.Event()
        self._backend: OpenAIChatBackend | None = None

    async def _answers(self, request: web.Request) -> web.StreamResponse:
        writes, relayed = self._writes, self._relayed
        response = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await response.prepare(request)
        for index, write in enumerate(writes):
            if index:
                await relayed.wait()
                relayed.clear()
                if relayed is not self._relayed:  # the relay ended before this write
                    return response
            await response.write(write)
        await response.write_eof()
        return response

    async def relayed(self, writes: list[bytes]) -> tuple[bytes, Verdict, Usage | None]:
        """What a relay of ``writes`` relays, its verdict, and the usage it found."""
        chunks, judged, found = await self.relayed_chunks(writes)
        return b"".join(chunks), judged, found

    async def relayed_chunks(
        self, writes: list[bytes]
    ) -> tuple[list[bytes], Verdict, Usage | None]:
        """The chunks a relay of ``writes`` relays, its verdict, and the usage it found."""
        if self._backend is None:
            client = UpstreamClient(UpstreamTarget("up", await self._loopback.serve(self._answers)))
            self._backend = OpenAIChatBackend(self._loopback.adopt(client))
        self._writes, self._relayed = writes, relayed = [*writes], asyncio.Event()
        asked = b'{"model": "m", "messages": [], "stream": true}'
        relay = reads_told(
            await self._backend.forward_chat(asked, orjson.loads(asked)), relayed.set
        )
        chunks: list[bytes] = []
        error: GatewayError | None = None
        try:
            async for chunk in relay.chunks():
                chunks.append(chunk)
        except GatewayError as raised:
            error = raised
        finally:
            self._relayed = asyncio.Event()
            relayed.set()  # the server's handler, if waiting, ends
            await relay.aclose()
        return chunks, verdict(error), relay.usage()


async def run_verdict(loopback: Loopback, body: bytes) -> Verdict:
    """A translated request's verdict on a stream of ``body``."""

    async def answers(request: web.Request) -> web.Response:
        return web.Response(body=body, content_type="text/event-stream")

    client = UpstreamClient(UpstreamTarget("up", await loopback.serve(answers)))
    backend = OpenAIChatBackend(loopback.adopt(client))
    try:
        async for _ in backend.infer(inference(True)):
            pass
    except GatewayError as error:
        return verdict(error)
    return None


def begun_apart(body: bytes, whole: bytes, relayed: bytes) -> bool:
    """Whether ``relayed`` is what the unsplit ``body`` relays (``whole``) but for the first
    bytes of the line after it, which a read relayed as one ordinary event ended with (not
    read: an ordinary read costs the fewest instructions), or all the rest of ``body`` (a
    ``[DONE]`` so begun, judged at the stream's end)."""
    rest = body[len(whole) :]
    extra = relayed[len(whole) :]
    if not relayed.startswith(whole) or not rest.startswith(extra) or not extra:
        return False
    return extra == rest or (b"\n" not in extra and b"\r" not in extra)


@pytest.mark.parametrize("name", STREAMS)
async def test_a_stream_is_judged_the_same_however_it_is_cut_into_reads(
    loopback: Loopback, name: str
) -> None:
    """Reads as the network cuts them are rare past a stream's opening, but no stream's
    verdict may depend on them, nor what is relayed: cut anywhere, it gets the unsplit
    stream's verdict (a run's) and its usage, and relays what the unsplit stream relays
    (all of it, but for a ``[DONE]`` that ends a failure, and an event reporting an
    error and what follows it, left out)."""
    body, failure, usage = STREAMS[name]
    relays = Relays(loopback)
    whole = await relays.relayed([body])
    assert whole[1:] == (verdict(failure), usage)
    assert await run_verdict(loopback, body) == verdict(failure)
    assert body.startswith(whole[0])
    assert failure is not None or whole[0] == body
    rng = random.Random(name)
    for cuts in cuttings(len(body), rng):
        relayed, judged, found = await relays.relayed(cut(body, cuts))
        assert (judged, found) == whole[1:], cuts
        assert relayed == whole[0] or begun_apart(body, whole[0], relayed), cuts


OUTPUT = vllm({"content": "Hi"})
ABORTED = [vllm({}, "abort"), vllm(None)]
"""An answer's finish saying the server gave up on it, and the usage after it: two reads."""
FAILED = vllm({}, "error")
"""vLLM's finish of an answer that failed: its ``error`` read alone is no error field."""


@pytest.mark.parametrize(
    ("writes", "failure"),
    [
        pytest.param([b"d", ROLE[1:] + b"data: [DO", b"NE]\n\n"], no_answer("up"), id="split-data"),
        pytest.param(
            [b"da", ROLE[2:] + DONE[:-1], b"\n"], no_answer("up"), id="split-data-done-apart"
        ),
        pytest.param(
            [AZURE, ROLE + b"d", b"ata: [DONE]\n\n\n"], no_answer("up"), id="split-done-data"
        ),
        pytest.param(
            [ROLE, OUTPUT, *ABORTED, b"data: [DO", b"NE]\n\n"], gave_up("abort"), id="finish-3-back"
        ),
        pytest.param(
            [ROLE, OUTPUT, *ABORTED, DONE[:-1], b"\n"], gave_up("abort"), id="finish-3-back-blank"
        ),
        pytest.param(
            [ROLE, OUTPUT, FAILED[:-11], FAILED[-11:-6], FAILED[-6:], DONE],
            gave_up("error"),
            id="finish-reason-error-apart",
        ),
        pytest.param([ROLE, OUTPUT, DONE + KEEPALIVE], None, id="done-keepalive"),
        pytest.param([ROLE, DONE + b"\n"], no_answer("up"), id="done-blank-line"),
        pytest.param(
            [ROLE, OUTPUT, *ABORTED, DONE + KEEPALIVE],
            gave_up("abort"),
            id="done-keepalive-given-up",
        ),
        pytest.param(
            [ROLE, OUTPUT, *ABORTED, b"data: [DONE]\n", KEEPALIVE],
            gave_up("abort"),
            id="done-keepalive-apart",
        ),
        pytest.param(
            [ROLE, OUTPUT + b"dat", *cut(b"".join(ABORTED)[3:], (37, 176)), DONE],
            gave_up("abort"),
            id="finish-begun-by-an-ordinary-read",
        ),
        pytest.param(
            [ROLE, OUTPUT + b"d", ABORTED[0][1:] + ABORTED[1][:20], ABORTED[1][20:]],
            gave_up("abort"),
            id="finish-begun-by-an-ordinary-read-no-done",
        ),
        pytest.param([ROLE, OUTPUT, *ABORTED, NUMBERED], gave_up("abort"), id="done-numbered"),
        pytest.param(
            [ROLE, OUTPUT, *ABORTED, NUMBERED[:13], NUMBERED[13:]],
            gave_up("abort"),
            id="done-numbered-apart",
        ),
    ],
)
async def test_a_stream_whose_end_the_reads_hide_is_judged_as_a_run_judges_it(
    loopback: Loopback, writes: list[bytes], failure: GatewayError | None
) -> None:
    """A ``data:`` split in a read that holds another event is counted (here the only
    event before ``[DONE]``), and the read kept with the one it goes on from (here the
    last event before ``[DONE]``); a finish three reads before a split ``[DONE]`` is read, and
    the value ``error`` of one read alone is no ``error:`` line; a finish whose first bytes
    ended a read of one ordinary event is read whole, however many reads come after it
    before its stream's end; a ``[DONE]`` split, or
    followed by a comment or a blank line in its read, ends the stream as one read alone
    does (left out when it ends a failure, unless its first bytes ended an ordinary read)."""
    body = b"".join(writes)
    assert await run_verdict(loopback, body) == verdict(failure)
    relayed, judged, _ = await Relays(loopback).relayed(writes)
    assert judged == verdict(failure)
    done = body.rfind(b"data: [DONE]")
    kept = body if failure is None or done < 0 else body[:done]
    assert relayed == kept or begun_apart(body, kept, relayed)


@pytest.mark.parametrize("size", [97, 61])
@pytest.mark.parametrize("lines", [b"\n", b"\r\n", b"\r"])
async def test_reads_that_never_end_an_event_are_relayed_an_event_at_a_time(
    loopback: Loopback, size: int, lines: bytes
) -> None:
    """A stream a proxy cut into reads of one size (none ending an event) holds no event
    back past the read after the one that ends it: a read ending inside an event is held
    until that event ends, and what it read of the next goes with the next read (held
    until a read ends as an event does, the stream would come out at its end: its client
    would see no token until the answer was done)."""
    events = [vllm({"content": f"word {n}"}) for n in range(30)]
    body = (ROLE + b"".join(events) + vllm({}, "stop") + vllm(None) + DONE).replace(b"\n", lines)
    writes = [body[at : at + size] for at in range(0, len(body), size)]
    relayed, judged, found = await Relays(loopback).relayed_chunks(writes)
    assert (b"".join(relayed), judged, found) == (body, None, USAGE)
    ends = lines * 2
    assert all(chunk.count(ends) <= 2 for chunk in relayed), [c.count(ends) for c in relayed]


ERROR_LINE = b"error: " + FAILED_WORDS + b"\n\n"
"""llama-server's 2025 error line, which an event-stream reader drops (a run reads it)."""
UNNAMED_LINE = b'error: {"code": 500, "message": "engine died"}\n\n'
"""An error line whose bytes past its first 11 do not say ``error`` again."""


def crlf(body: bytes) -> bytes:
    return body.replace(b"\n", b"\r\n")


@pytest.mark.parametrize(
    "writes",
    [
        pytest.param([ROLE, OUTPUT + ERROR_LINE, DONE], id="line-then-done"),
        pytest.param([ROLE, OUTPUT + ERROR_LINE], id="line-then-end"),
        pytest.param([ROLE, OUTPUT, OUTPUT, OUTPUT + ERROR_LINE, DONE], id="after-more-events"),
        pytest.param([ROLE, OUTPUT + ERROR_LINE, KEEPALIVE, DONE], id="line-keepalive-done"),
        pytest.param(
            [ROLE, OUTPUT + UNNAMED_LINE[:11], UNNAMED_LINE[11:], DONE], id="line-split-then-done"
        ),
        pytest.param(
            [crlf(ROLE), crlf(OUTPUT + ERROR_LINE), crlf(DONE)],
            id="crlf",
        ),
        pytest.param(
            [ROLE, OUTPUT + b"event: error\n", b"data: the engine stopped\n\n", DONE],
            id="named-event-split",
        ),
        pytest.param(
            [ROLE, OUTPUT + b"event: error\n", b"data: the engine stopped\n\n"],
            id="named-event-split-then-end",
        ),
    ],
)
async def test_an_error_read_with_the_ordinary_event_before_it_ends_the_stream(
    loopback: Loopback, writes: list[bytes]
) -> None:
    """A read of one ordinary event is relayed unread (the fewest instructions), so an
    error line or an event named ``error`` the same read holds whole after it goes out as
    it came (an event-stream reader drops an ``error:`` line); one the read ends inside is
    held for its end, judged, and left out. The stream's end, judged from its last reads,
    still ends it with the error a run gets, its ``[DONE]`` left out."""
    body = b"".join(writes)
    failure = await run_verdict(loopback, body)
    assert failure is not None
    assert failure[2] == "upstream_error"  # the error the server reported, not a cut
    relayed, judged, _ = await Relays(loopback).relayed(writes)
    assert judged == failure
    done = body.rfind(b"data: [DONE]")
    error = max(body.rfind(b"\nerror:"), body.rfind(b"\nevent: error")) + 1
    holding = next(write for write in writes if b"error" in write)  # the error's first bytes
    whole = holding.endswith((b"}\n\n", b"}\r\n\r\n"))  # the read ends as an answer's chunk
    assert relayed == ((body if done < 0 else body[:done]) if whole else body[:error])


@pytest.mark.parametrize("done", [DONE, b""], ids=["done", "no-done"])
@pytest.mark.parametrize(
    "named",
    [b"event: error\n", b"event:error\n", b"event: error\nid: 7\n"],
    ids=["spaced", "unspaced", "id"],
)
async def test_an_error_event_a_read_of_one_ordinary_event_named_is_told_at_the_end(
    loopback: Loopback, done: bytes, named: bytes
) -> None:
    """A read of one ordinary event that also holds an ``event: error`` line and the first
    byte of that event's data line is relayed unread, and so is the rest of the line,
    whose words say ``error`` no more: the stream's end, read from its last reads, tells
    the event's name (after a space, if any) and ends the stream with the error a run gets, that
    of its data (not of a field between)."""
    writes = [ROLE, OUTPUT + named + b"d", b"ata: the engine stopped\n\n", done]
    body = b"".join(writes)
    failure = await run_verdict(loopback, body)
    assert failure is not None
    assert failure[2] == "upstream_error"
    relayed, judged, _ = await Relays(loopback).relayed([write for write in writes if write])
    assert judged == failure
    assert relayed == body.removesuffix(DONE)
