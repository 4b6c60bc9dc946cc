"""A relayed event stream (the Chat Completions fast path) that reports an error, ends
before its answer (no byte, no finish and no ``[DONE]``, or ``[DONE]`` before any output)
or ends an answer the server gave up on (``finish_reason`` ``abort`` or ``error``): the
error a translated request's run gets from the same stream, raised after what was relayed
before it."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any, Literal

import orjson
import pytest
from aiohttp import web

from stateway.backends.chat_forwarder import OpenAIChatBackend
from stateway.backends.upstream_http import UpstreamClient
from stateway.backends.upstream_relay import UpstreamRelay
from stateway.backends.upstream_reply import UpstreamReply, cut_short
from stateway.backends.upstream_target import UpstreamTarget
from stateway.core.errors import GatewayError
from tests.backends.conftest import Loopback
from tests.backends.test_chat_reported_errors import streamed_failure
from tests.backends.test_redaction import inference

ROLE = b'data: {"id":"c","choices":[{"index":0,"delta":{"role":"assistant","content":""}}]}\n\n'
"""The chunk vLLM opens a stream with: no output yet."""
OUTPUT = b'data: {"id":"c","choices":[{"index":0,"delta":{"content":"Hi"}}]}\n\n'
DONE = b"data: [DONE]\n\n"
USAGE = (
    b'data: {"id":"c","choices":[],'
    b'"usage":{"prompt_tokens":3,"completion_tokens":1,"total_tokens":4}}\n\n'
)


def finished(reason: str) -> bytes:
    """The chunk that ends an answer with ``reason``."""
    return (
        b'data: {"id":"c","choices":[{"index":0,"delta":{},"finish_reason":"'
        + reason.encode()
        + b'"}]}\n\n'
    )


VLLM = orjson.dumps(
    {"error": {"message": "engine died", "type": "InternalServerError", "param": None, "code": 500}}
)
LLAMA_CPP = orjson.dumps(
    {"error": {"code": 500, "message": "context shift is disabled", "type": "server_error"}}
)
LIMITED = orjson.dumps({"error": {"message": "Too many requests", "type": "rate_limit_error"}})
ERROR_EVENTS = [
    pytest.param(b"data: " + VLLM + b"\n\n" + DONE, id="vllm"),
    pytest.param(b"data: " + LLAMA_CPP + b"\n\n", id="llama-server"),  # and no [DONE]
    pytest.param(b"error: " + LLAMA_CPP[9:-1] + b"\n\n" + DONE, id="llama-server-2025"),
    pytest.param(  # its words past ``error`` say it no more: split in the word, none to find
        b'error: {"code": 500, "message": "engine died"}\n\n' + DONE, id="llama-server-2025-words"
    ),
    pytest.param(b"event: error\ndata: " + LIMITED + b"\n\n", id="named-event"),
    pytest.param(b"event:error\ndata: the engine stopped\n\n", id="named-event-words"),
    pytest.param(b"data: " + VLLM + b"\r\n\r\n" + DONE, id="crlf"),
]


class ReadsTold:
    """A relay's reads of its upstream reply, each told (``read``) once it came: its server
    writes each of its writes only then, so each is one read of the relay (written at
    once, they would reach it as one). Told by reads, not by what is relayed: the relay
    holds a read that ends inside an event until one ends it."""

    def __init__(self, reply: UpstreamReply, read: Callable[[], None]) -> None:
        self._reply = reply
        self._read = read

    def __getattr__(self, name: str) -> Any:
        return getattr(self._reply, name)

    def __aiter__(self) -> ReadsTold:
        return self

    async def __anext__(self) -> bytes:
        chunk = await anext(self._reply)
        self._read()
        return chunk


def reads_told(relay: UpstreamRelay, read: Callable[[], None]) -> UpstreamRelay:
    """``relay``, each of its reads told (:class:`ReadsTold`)."""
    relay._reply = ReadsTold(relay._reply, read)  # type: ignore[assignment]
    return relay


async def forwarded(
    loopback: Loopback,
    *writes: bytes,
    ending: Literal["at once", "read", "dropped"] = "at once",
    **settings: Any,
) -> UpstreamRelay:
    """A relay of a 200 event stream whose server writes ``writes`` one by one, each one
    read (to a backend of ``settings``), then ends its body: at once, once the last write
    was read, or (``dropped``) then drops the connection instead."""
    read = asyncio.Event()

    async def answers(request: web.Request) -> web.StreamResponse:
        response = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await response.prepare(request)
        for index, write in enumerate(writes):
            if index:
                await read.wait()
                read.clear()
            await response.write(write)
        if ending != "at once":
            await read.wait()
        if ending == "dropped":
            assert request.transport is not None
            request.transport.abort()
        else:
            await response.write_eof()
        return response

    client = UpstreamClient(UpstreamTarget("up", await loopback.serve(answers), **settings))
    backend = OpenAIChatBackend(loopback.adopt(client))
    relay = await backend.forward_chat(
        b'{"model": "m", "messages": [], "stream": true}',
        orjson.loads(b'{"model": "m", "messages": [], "stream": true}'),
    )
    return reads_told(relay, read.set)


async def relayed_whole(relay: UpstreamRelay) -> bytes:
    """What ``relay`` relays, to its end (it raises nothing)."""
    relayed = b"".join([chunk async for chunk in relay.chunks()])
    await relay.aclose()
    return relayed


async def streamed_answer(loopback: Loopback, body: bytes) -> None:
    """A Chat backend's run of a 200 event stream of ``body`` (it raises nothing)."""

    async def answers(request: web.Request) -> web.Response:
        return web.Response(body=body, content_type="text/event-stream")

    client = UpstreamClient(UpstreamTarget("up", await loopback.serve(answers)))
    backend = OpenAIChatBackend(loopback.adopt(client))
    async for _ in backend.infer(inference(True)):
        pass


async def relayed_until(relay: UpstreamRelay) -> tuple[bytes, GatewayError]:
    """What ``relay`` relays before the error it raises, and that error."""
    chunks: list[bytes] = []

    async def read() -> None:
        async for chunk in relay.chunks():
            chunks.append(chunk)

    with pytest.raises(GatewayError) as caught:
        await read()
    await relay.aclose()
    return b"".join(chunks), caught.value


def lines_of(body: bytes) -> list[bytes]:
    """``body`` a line at a time (an event named ``error`` too: its lines read apart are
    held until its end, and judged as one read whole)."""
    return body.splitlines(keepends=True)


def same(relayed: GatewayError, translated: GatewayError) -> None:
    assert (relayed.status, relayed.code, relayed.message) == (
        translated.status,
        translated.code,
        translated.message,
    )
    assert type(relayed) is type(translated)


OPENING = b": ping\n\n" + ROLE
"""A stream's opening with no output: a comment and a role chunk."""
PROMPT_FILTERS = (
    b'data: {"choices":[],"created":0,"id":"","model":"","object":"",'
    b'"prompt_filter_results":[{"prompt_index":0,"content_filter_results":{}}]}\n\n'
)
"""How Azure OpenAI opens a stream, before its role chunk: no output."""


@pytest.mark.parametrize("event", ERROR_EVENTS)
@pytest.mark.parametrize("before", [b"", OPENING])
@pytest.mark.parametrize("apart", [False, True])
@pytest.mark.parametrize("first_token_timeout", [None, 30.0])
async def test_a_stream_failing_before_its_output_raises_after_its_opening(
    loopback: Loopback, event: bytes, before: bytes, apart: bool, first_token_timeout: Any
) -> None:
    """Relayed, a client would see an empty answer (or an error its SDK cannot read): it
    is the error a run gets from the same stream, raised after the events before it (a
    comment, a role chunk), for the route to end the stream with; its first read too,
    read apart with ``first_token_timeout``."""
    body = before + event
    writes = lines_of(body) if apart else [body]
    relay = await forwarded(loopback, *writes, first_token_timeout=first_token_timeout)
    relayed, error = await relayed_until(relay)
    assert relayed == before
    same(error, await streamed_failure(loopback, body))


async def test_lines_ending_in_crlf_are_read_as_lines(loopback: Loopback) -> None:
    """An event before the error in the same read, its lines ended by CRLF: relayed whole,
    the error raised after it."""
    opening = ROLE.replace(b"\n", b"\r\n")
    body = opening + b"data: " + VLLM + b"\r\n\r\n"
    relayed, error = await relayed_until(await forwarded(loopback, body))
    assert relayed == opening
    same(error, await streamed_failure(loopback, body))


async def test_a_stream_with_no_byte_is_a_cut_stream(loopback: Loopback) -> None:
    relayed, error = await relayed_until(await forwarded(loopback))
    assert relayed == b""
    same(error, await streamed_failure(loopback, b""))


@pytest.mark.parametrize("event", ERROR_EVENTS)
@pytest.mark.parametrize("apart", [False, True])
async def test_a_stream_failing_part_way_relays_its_output_then_raises(
    loopback: Loopback, event: bytes, apart: bool
) -> None:
    """Its output is relayed; the upstream's error event is not (nor what follows it): the
    relay raises the error a run gets, for the route to end the stream with, in the
    OpenAI shape. The event may come in the read of the output before it."""
    writes = [ROLE, OUTPUT, event] if apart else [ROLE + OUTPUT + event]
    relayed, error = await relayed_until(await forwarded(loopback, *writes))
    assert relayed == ROLE + OUTPUT
    same(error, await streamed_failure(loopback, ROLE + OUTPUT + event))


async def test_the_events_relayed_before_an_error_are_its_output_estimate(
    loopback: Loopback,
) -> None:
    """Each event relayed counts toward the relay's output estimate (what a stream whose
    usage never came is charged), the one read with the error event after it too."""
    relay = await forwarded(loopback, ROLE, OUTPUT + b"data: " + VLLM + b"\n\n" + DONE)
    relayed, _ = await relayed_until(relay)
    assert relayed == ROLE + OUTPUT
    assert relay.output_estimate() == 2


async def test_a_failed_opening_is_charged_nothing(loopback: Loopback) -> None:
    relay = await forwarded(loopback, b"data: " + VLLM + b"\n\n" + DONE)
    await relayed_until(relay)
    assert relay.output_estimate() == 0


@pytest.mark.parametrize("apart", [False, True])
async def test_a_stream_that_mentions_errors_is_relayed_as_it_came(
    loopback: Loopback, apart: bool
) -> None:
    """Words and fields that name an error inside an answer's chunks report none."""
    chunks = [
        b": error: not an event\n\n",
        b': {"error": {"message": "a comment"}}\n\n',
        ROLE,
        b'data: {"choices":[{"index":0,"delta":{"content":"error: \\"error\\"\\nerror:"}}]}\n\n',
        b'data: {"error":null,"choices":[{"index":0,"delta":{"content":"x"}}]}\n\n',
        b'data: {"choices":[{"index":0,"delta":{"tool_calls":[{"index":0,"function":'
        b'{"arguments":"{\\"error\\": 1}"}}]}}]}\n\n',
        b'data: {"choices":[{"index":0,"delta":{},"finish_reason":"stop"}]}\n\n',
        DONE,
    ]
    relay = await forwarded(loopback, *(chunks if apart else [b"".join(chunks)]))
    relayed = b"".join([chunk async for chunk in relay.chunks()])
    await relay.aclose()
    assert relayed == b"".join(chunks)


def writes_of(chunks: list[bytes], apart: bool) -> list[bytes]:
    """``chunks`` written one by one, or together in one write."""
    return chunks if apart else [b"".join(chunks)]


@pytest.mark.parametrize(
    "chunks",
    [
        pytest.param([ROLE, OUTPUT], id="output"),
        pytest.param([ROLE], id="role"),
        pytest.param([b": ping\n\n"], id="comment"),
        pytest.param([ROLE, OUTPUT, USAGE], id="usage"),
    ],
)
@pytest.mark.parametrize("apart", [False, True])
async def test_a_stream_ending_without_its_finish_or_done_is_cut(
    loopback: Loopback, chunks: list[bytes], apart: bool
) -> None:
    """A body ended cleanly mid-answer (a proxy's timeout, a server dying between two
    events): relayed as it came, a client could not tell it from a whole answer. What came
    is relayed; then the relay raises the cut a run gets from the same stream
    (``upstream_stream_cut``), for the route to end the stream with."""
    relayed, error = await relayed_until(await forwarded(loopback, *writes_of(chunks, apart)))
    assert relayed == b"".join(chunks)
    assert error.code == "upstream_stream_cut"
    same(error, await streamed_failure(loopback, relayed))


@pytest.mark.parametrize(
    "chunks",
    [
        pytest.param([ROLE, OUTPUT, finished("stop")], id="finish"),
        pytest.param([ROLE, OUTPUT, finished("length"), USAGE], id="finish-usage"),
        pytest.param([ROLE, OUTPUT, DONE], id="done-without-finish"),
        pytest.param([ROLE, OUTPUT, finished("stop"), USAGE, DONE], id="whole"),
        pytest.param([OUTPUT, DONE], id="output-done"),
        pytest.param(
            [ROLE, OUTPUT, finished("stop"), USAGE, b"data: [DONE]\n", b"\n"],
            id="done-apart-from-its-blank-line",
        ),
        pytest.param(
            [ROLE, OUTPUT, finished("stop"), USAGE, b"data: [DO", b"NE]\n\n"], id="done-split"
        ),
    ],
)
@pytest.mark.parametrize("apart", [False, True])
async def test_a_stream_a_run_takes_as_answered_is_relayed_whole(
    loopback: Loopback, chunks: list[bytes], apart: bool
) -> None:
    """A finish without ``[DONE]`` (a server that does not send it), or ``[DONE]`` after
    output without a finish: a run takes either as answered, and so does the relay."""
    body = b"".join(chunks)
    assert await relayed_whole(await forwarded(loopback, *writes_of(chunks, apart))) == body
    await streamed_answer(loopback, body)


@pytest.mark.parametrize(
    "opening",
    [
        pytest.param(b"", id="done-alone"),
        pytest.param(ROLE, id="role"),
        pytest.param(OPENING, id="comment-role"),
        pytest.param(PROMPT_FILTERS + ROLE, id="prompt-filters-role"),
    ],
)
@pytest.mark.parametrize(
    "done",
    [
        pytest.param(DONE, id="done"),
        pytest.param(b"data:[DONE]\r\n\r\n", id="crlf"),
        pytest.param(DONE + b": bye\n\n", id="keepalive-after"),
        pytest.param(b"data:[DONE]\r\n\r\n: bye\r\n\r\n", id="crlf-keepalive-after"),
        pytest.param(b"data: [DONE]\n: ping\n\n", id="comment-inside"),
    ],
)
@pytest.mark.parametrize("apart", [False, True])
@pytest.mark.parametrize("first_token_timeout", [None, 30.0])
async def test_a_stream_done_before_any_output_has_no_answer(
    loopback: Loopback, opening: bytes, done: bytes, apart: bool, first_token_timeout: Any
) -> None:
    """vLLM's ``[DONE]`` alone, after an error it dropped before the first token (or after
    its role chunk, or Azure's prompt filter results and a role chunk: every event before
    ``[DONE]`` read): relayed, an empty answer a client would take as the model's. Its
    opening is relayed, then the relay raises what a run gets (``no_answer``); with
    ``first_token_timeout`` too, whose first chunk is read apart. A ``[DONE]`` followed by
    a proxy's keepalive, or with a comment before its blank line, is a ``[DONE]`` too."""
    chunks = [opening, done] if opening else [done]
    relay = await forwarded(
        loopback, *writes_of(chunks, apart), first_token_timeout=first_token_timeout
    )
    relayed, error = await relayed_until(relay)
    assert relayed == opening
    assert "without an answer" in error.message
    same(error, await streamed_failure(loopback, opening + done))


@pytest.mark.parametrize("reason", ["abort", "error"])
@pytest.mark.parametrize(
    "ending",
    [[USAGE, DONE], [USAGE + DONE], [DONE], [USAGE], []],
    ids=["usage-done", "usage-with-done", "done", "usage", "none"],
)
@pytest.mark.parametrize("apart", [False, True])
async def test_an_answer_the_server_gave_up_on_raises_after_its_finish(
    loopback: Loopback, reason: str, ending: list[bytes], apart: bool
) -> None:
    """vLLM ends a request its engine aborted (a shutdown, a pause, a scale-down) with
    ``finish_reason: "abort"`` and ``[DONE]``, SGLang likewise, and vLLM's engine names a
    failed request's ``error``: a run fails on it, so the relay does, after relaying the
    answer's events (its usage too, charged), its ``[DONE]`` left out."""
    chunks = [ROLE, OUTPUT, finished(reason), *ending]
    relayed, error = await relayed_until(await forwarded(loopback, *writes_of(chunks, apart)))
    assert relayed == b"".join(chunks).removesuffix(DONE)
    assert f"'{reason}'" in error.message
    same(error, await streamed_failure(loopback, b"".join(chunks)))


GIVEN_UP = finished("abort") + USAGE


@pytest.mark.parametrize(
    "chunks",
    [
        pytest.param([b"data: [DONE]\n", b"\n"], id="alone-apart-from-its-blank-line"),
        pytest.param([b"data: [DO", b"NE]\n\n"], id="alone-split"),
        pytest.param([ROLE + b"data: [DONE]\n", b"\n"], id="no-output"),
        pytest.param([ROLE, OUTPUT, GIVEN_UP + b"data: [DONE]\n", b"\n"], id="given-up"),
        pytest.param([ROLE, OUTPUT, GIVEN_UP + b"data: [DO", b"NE]\n\n"], id="given-up-split"),
    ],
)
async def test_a_done_split_between_reads_is_judged_as_a_whole_one(
    loopback: Loopback, chunks: list[bytes]
) -> None:
    """A ``[DONE]`` whose line is split between two reads is held until the read that ends
    it, then judged as one read whole: the error a run gets, the ``[DONE]`` left out."""
    body = b"".join(chunks)
    relayed, error = await relayed_until(await forwarded(loopback, *chunks))
    assert relayed == body[: body.rindex(b"data: [DONE]")]
    same(error, await streamed_failure(loopback, body))


@pytest.mark.parametrize(
    "chunks", [[ROLE, b"data: [DONE]"], [ROLE + b"data: [DONE]"]], ids=["apart", "with-role"]
)
async def test_a_done_line_the_body_ends_is_a_cut(loopback: Loopback, chunks: list[bytes]) -> None:
    """A ``[DONE]`` line the body's end cuts before its line end was never dispatched: the
    stream was cut short, as a run judges it. The line is not relayed: the route's error
    line after it would end its event, and the ``openai`` SDK, reading ``[DONE]``, would
    stop there and never see the error."""
    body = b"".join(chunks)
    relayed, error = await relayed_until(await forwarded(loopback, *chunks))
    assert relayed == ROLE
    same(error, cut_short("up"))
    same(error, await streamed_failure(loopback, body))


async def test_a_done_read_after_the_cr_that_ends_the_event_before_it_has_no_answer(
    loopback: Loopback,
) -> None:
    """Lines may end in a CR alone: a read that begins with the CR that ends the event
    before its ``[DONE]`` (its blank line) relays that CR and leaves the ``[DONE]`` out."""
    role = ROLE.replace(b"\n", b"\r")
    chunks = [role[:-1], b"\rdata: [DONE]\r\r"]
    relayed, error = await relayed_until(await forwarded(loopback, *chunks))
    assert relayed == role
    assert "without an answer" in error.message
    same(error, await streamed_failure(loopback, b"".join(chunks)))


FINISH_CRLF = finished("stop").replace(b"\n", b"\r\n")


@pytest.mark.parametrize(
    "ending",
    [pytest.param(finished("stop")[:-end], id=f"lf-less-{end}") for end in range(1, 6)]
    + [pytest.param(FINISH_CRLF[:-end], id=f"crlf-less-{end}") for end in range(2, 6)],
)
@pytest.mark.parametrize("apart", [False, True])
async def test_a_stream_cut_before_its_finish_events_blank_line_is_cut(
    loopback: Loopback, ending: bytes, apart: bool
) -> None:
    """An event is dispatched at its blank line: cut before it, a finish was never given
    (an event-stream reader drops an unended event, the SDK's and a run's alike), so the
    stream was cut short, as a run judges it; the unended event is not relayed (the
    route's error line after it would end it)."""
    chunks = [ROLE, OUTPUT, ending]
    relayed, error = await relayed_until(await forwarded(loopback, *writes_of(chunks, apart)))
    assert relayed == ROLE + OUTPUT
    same(error, cut_short("up"))
    same(error, await streamed_failure(loopback, b"".join(chunks)))


@pytest.mark.parametrize("apart", [False, True])
async def test_a_finish_whose_blank_line_ends_in_a_cr_is_a_finish(
    loopback: Loopback, apart: bool
) -> None:
    """A line may end in a CR alone: ``\r\n\r`` ends an event too, for a run as for the
    relay (the last CR is held until the stream's end)."""
    chunks = [ROLE, OUTPUT, FINISH_CRLF[:-1]]
    relay = await forwarded(loopback, *writes_of(chunks, apart))
    assert await relayed_whole(relay) == b"".join(chunks)
    await streamed_answer(loopback, b"".join(chunks))


@pytest.mark.parametrize("apart", [False, True])
async def test_an_answer_that_says_done_or_abort_in_its_text_is_relayed_as_it_came(
    loopback: Loopback, apart: bool
) -> None:
    """``[DONE]`` and ``"abort"`` in an answer's text end nothing."""
    chunks = [
        ROLE,
        b'data: {"id":"c","choices":[{"index":0,"delta":{"content":"abort"}}]}\n\n',
        b'data: {"id":"c","choices":[{"index":0,"delta":{"content":"[DONE]"}}]}\n\n',
        b'data: {"id":"c","choices":[{"index":0,"delta":{"content":"\\ndata: [DONE]"}}]}\n\n',
        finished("stop"),
        DONE,
    ]
    relay = await forwarded(loopback, *writes_of(chunks, apart))
    assert await relayed_whole(relay) == b"".join(chunks)


@pytest.mark.parametrize("apart", [False, True])
async def test_a_finish_reason_written_with_spaces_is_read_too(
    loopback: Loopback, apart: bool
) -> None:
    """Python's ``json`` writes ``"finish_reason": "abort"``: told from the end as well,
    after an answer of many events."""
    words = [b'data: {"id": "c", "choices": [{"index": 0, "delta": {"content": "w"}}]}\n\n'] * 5
    finish = (
        b'data: {"id": "c", "choices": [{"index": 0, "delta": {}, "finish_reason": "abort"}]}\n\n'
    )
    chunks = [ROLE, *words, finish, DONE]
    relayed, error = await relayed_until(await forwarded(loopback, *writes_of(chunks, apart)))
    assert relayed == b"".join(chunks).removesuffix(DONE)
    same(error, await streamed_failure(loopback, b"".join(chunks)))


@pytest.mark.parametrize(
    "after",
    [
        pytest.param(b": bye\n\n", id="comment"),
        pytest.param(finished("abort"), id="given-up"),
    ],
)
async def test_a_read_after_done_undoes_nothing(loopback: Loopback, after: bytes) -> None:
    """A comment read after the read of ``[DONE]`` (a proxy's last keepalive), or an event:
    the stream was told done, and is not judged again at its end as if cut, or given up
    on by a finish a run reads no more."""
    chunks = [ROLE, OUTPUT, DONE, after]
    assert await relayed_whole(await forwarded(loopback, *chunks)) == b"".join(chunks)
    await streamed_answer(loopback, b"".join(chunks))


async def test_an_event_after_done_in_its_read_saying_done_undoes_nothing(
    loopback: Loopback,
) -> None:
    """An event read with the ``[DONE]`` before it, whose text says ``data: [DONE]``: the
    stream was told done (the ``[DONE]`` line, not the text), as a run stops at it."""
    chunks = [ROLE, OUTPUT, DONE + SAYS_DONE]
    assert await relayed_whole(await forwarded(loopback, *chunks)) == b"".join(chunks)
    await streamed_answer(loopback, b"".join(chunks))


@pytest.mark.parametrize(
    "chunks",
    [
        pytest.param([ROLE, OUTPUT, b": [DONE]\n\n"], id="done"),
        pytest.param([ROLE, b": data: [DONE]\n\n"], id="done-line-no-output"),
    ],
)
async def test_done_in_a_comment_ends_nothing(loopback: Loopback, chunks: list[bytes]) -> None:
    """Only a data line says a stream is done: a stream ending on a comment that says
    ``[DONE]``, or the whole ``data: [DONE]`` line, was cut short."""
    relayed, error = await relayed_until(await forwarded(loopback, *chunks))
    assert relayed == b"".join(chunks)
    assert error.code == "upstream_stream_cut"


GAVE_UP = finished("abort")


def finish_split(ending: bytes) -> list[Any]:
    """An answer given up on, its finish event cut between two reads at every byte (the
    usage with the second), then ``ending``: ``[DONE]`` alone, or a read that holds it
    and more (the usage's last byte)."""
    usage, name = (USAGE, "done") if ending == DONE else (USAGE[:-1], "with-done")
    return [
        pytest.param([ROLE, OUTPUT, GAVE_UP[:at], GAVE_UP[at:] + usage, ending], id=f"{name}-{at}")
        for at in range(1, len(GAVE_UP) + 1)
    ]


@pytest.mark.parametrize("writes", finish_split(DONE) + finish_split(b"\n" + DONE))
async def test_a_finish_split_between_reads_is_read_whole(
    loopback: Loopback, writes: list[bytes]
) -> None:
    """However the reads before ``[DONE]`` cut its finish (its key, its value, at either
    end), the answer was given up on: the error a run gets, ``[DONE]`` left out."""
    relayed, error = await relayed_until(await forwarded(loopback, *writes))
    assert relayed == b"".join(writes).removesuffix(DONE)
    same(error, await streamed_failure(loopback, b"".join(writes)))


def vllm(delta: str, reason: str | None = None) -> bytes:
    """A chunk as vLLM writes it: every one with its ``finish_reason``, null but the last."""
    choice = {"index": 0, "delta": orjson.loads(delta), "logprobs": None, "finish_reason": reason}
    chunk = {"id": "chatcmpl-1", "object": "chat.completion.chunk", "choices": [choice]}
    return b"data: " + orjson.dumps(chunk) + b"\n\n"


@pytest.mark.parametrize("done", [DONE, DONE + b": bye\n\n"], ids=["done", "keepalive-after"])
@pytest.mark.parametrize("apart", [False, True])
async def test_an_answer_given_up_on_is_told_by_its_last_finish_reason(
    loopback: Loopback, done: bytes, apart: bool
) -> None:
    """vLLM's chunks each say ``"finish_reason": null`` before the last says ``abort``; and
    an answer's text may say ``[DONE]`` in the read of the stream's own (a keepalive after
    it too): the last of each is the one read, the stream's ``[DONE]`` left out."""
    chunks = [
        vllm('{"role": "assistant", "content": ""}'),
        vllm('{"content": "data: [DONE]"}'),
        vllm("{}", "abort"),
        USAGE,
        done,
    ]
    relayed, error = await relayed_until(await forwarded(loopback, *writes_of(chunks, apart)))
    assert relayed == b"".join(chunks).removesuffix(done)
    same(error, await streamed_failure(loopback, b"".join(chunks)))


@pytest.mark.parametrize("event", ERROR_EVENTS)
@pytest.mark.parametrize("begun", [1, 2, 4, 7])
async def test_an_error_begun_by_an_ordinary_read_is_raised(
    loopback: Loopback, event: bytes, begun: int
) -> None:
    """A read of one ordinary event is relayed unread with the first byte of the line after
    it (a field name begun: a client's event-stream reader ignores it, dispatched alone by
    the route's error line after it); with more of that line (which may be a data line
    cut part-way) the read is held for that line's end, only the event relayed. The error
    event that line begins is read whole from the next read, and left out."""
    writes = [ROLE + event[:begun], event[begun:]]
    relayed, error = await relayed_until(await forwarded(loopback, *writes))
    assert relayed == (ROLE + event[:begun] if begun == 1 else ROLE)
    same(error, await streamed_failure(loopback, ROLE + event))


@pytest.mark.parametrize(
    "comment",
    [
        pytest.param(b": ping\n", id="ping"),
        pytest.param(b":\r\n", id="crlf"),
        pytest.param(OUTPUT + b": keep-alive\n", id="after-output"),
        pytest.param(ROLE + OUTPUT + b": keep-alive\n", id="after-two-events"),
        pytest.param((ROLE + OUTPUT).replace(b"\n", b"\r") + b": keep-alive\r", id="cr"),
    ],
)
async def test_a_keepalive_comment_ended_by_one_line_end_goes_out_at_once(
    loopback: Loopback, comment: bytes
) -> None:
    """A comment line needs no blank line after it: a proxy's keepalive so written (before
    the first token, or between two) is no event to hold for its end (the client may be
    waiting on it, and the upstream silent until the next token)."""
    sent = asyncio.Event()

    async def answers(request: web.Request) -> web.StreamResponse:
        response = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await response.prepare(request)
        await response.write(comment)
        await sent.wait()  # the next token, only once the comment went out
        await response.write(OUTPUT + finished("stop") + DONE)
        await response.write_eof()
        return response

    client = UpstreamClient(UpstreamTarget("up", await loopback.serve(answers)))
    relay = await OpenAIChatBackend(loopback.adopt(client)).forward_chat(
        b'{"stream": true}', orjson.loads(b'{"stream": true}')
    )
    chunks = relay.chunks()
    async with asyncio.timeout(5):
        assert await anext(chunks) == comment
    sent.set()
    assert b"".join([chunk async for chunk in chunks]) == OUTPUT + finished("stop") + DONE
    await relay.aclose()


CUT_CHUNK = b'data: {"id":"c","choices":[{"index":0,"delta":{"content":"Hel'
"""An answer's chunk cut part-way: the start of its data line, no line end."""


async def cut_part_way(loopback: Loopback, writes: list[bytes], dropped: bool) -> UpstreamRelay:
    """A relay of a 200 event stream whose server writes ``writes`` one by one, each one
    read, then ends its body cleanly or (``dropped``) drops the connection."""
    return await forwarded(loopback, *writes, ending="dropped" if dropped else "read")


@pytest.mark.parametrize(
    "writes",
    [
        pytest.param([ROLE, OUTPUT, CUT_CHUNK], id="alone"),
        pytest.param([ROLE, OUTPUT + CUT_CHUNK], id="after-an-event"),
        pytest.param([ROLE, CUT_CHUNK[:20], CUT_CHUNK[20:]], id="in-two-reads"),
        pytest.param([ROLE, OUTPUT, CUT_CHUNK + b'lo"}}]}\n'], id="before-its-blank-line"),
    ],
)
@pytest.mark.parametrize("dropped", [False, True], ids=["ended", "dropped"])
async def test_an_answers_chunk_cut_part_way_is_not_relayed(
    loopback: Loopback, writes: list[bytes], dropped: bool
) -> None:
    """The stream ends (or its connection drops) inside an answer's chunk: what came before
    that chunk is relayed, none of the chunk itself. The route ends the stream with its
    error line after what was relayed: a chunk begun before it would be ended by that
    line's blank line before it, and a client's event-stream reader would take the broken
    JSON for an event (the ``openai`` SDK raises a ``JSONDecodeError``, not the error)."""
    relay = await cut_part_way(loopback, writes, dropped)
    relayed, error = await relayed_until(relay)
    assert relayed == b"".join(writes).partition(CUT_CHUNK)[0]
    assert error.status == 502


@pytest.mark.parametrize("writes", [[CUT_CHUNK], [CUT_CHUNK[:20], CUT_CHUNK[20:]]])
@pytest.mark.parametrize("ending", ["at once", "dropped"])
async def test_a_first_read_apart_cut_part_way_is_not_relayed(
    loopback: Loopback, writes: list[bytes], ending: Any
) -> None:
    """With ``first_token_timeout`` the first read is read apart from the rest: an
    answer's chunk the body's end cuts there is not relayed either."""
    relay = await forwarded(loopback, *writes, ending=ending, first_token_timeout=30.0)
    relayed, error = await relayed_until(relay)
    assert relayed == b""
    assert error.status == 502


@pytest.mark.parametrize(
    "done",
    [
        pytest.param(b"data: [DONE]\ndata: more\n\n", id="more-data"),
        pytest.param(b"data:[DONE]\r\ndata: more\r\n\r\n", id="crlf"),
        pytest.param(b"data: [DONE]\n: ping\ndata: more\n\n", id="past-a-comment"),
        pytest.param(b"data: [DONE] more\n\n", id="on-its-line"),
    ],
)
@pytest.mark.parametrize(
    "before", [[ROLE, OUTPUT], [ROLE, OUTPUT, finished("stop")]], ids=["unfinished", "finished"]
)
@pytest.mark.parametrize("apart", [False, True])
async def test_more_data_after_done_in_its_event_is_a_malformed_chunk(
    loopback: Loopback, done: bytes, before: list[bytes], apart: bool
) -> None:
    """``[DONE]`` then more data in its event (another data line, or more on its line): no
    end, nor a cut, but an upstream's malformed chunk, as a run reads the event's data
    (``[DONE]`` and more), whether or not the answer had finished: told in that event's
    place, after those before it (relayed, the ``openai`` SDK would read it as ``[DONE]``
    and stop before the error). But for a ``[DONE]`` line read apart with a comment line
    after it: what a read holds up to an ended comment line goes out at once
    (:func:`~stateway.backends.relayed_stream.whole_end`), and the error is told at the
    stream's end, from its last reads."""
    writes = before + (lines_of(done) if apart else [done])
    relayed, error = await relayed_until(await forwarded(loopback, *writes))
    in_place = not apart or b": ping" not in done
    assert relayed == b"".join(before if in_place else writes)
    assert error.code == "upstream_error"
    same(error, await streamed_failure(loopback, b"".join(before) + done))


SAYS_DONE = b'data: {"id":"c","choices":[{"index":0,"delta":{"content":"data: [DONE]"}}]}\n\n'
"""An answer's chunk whose text says ``data: [DONE]`` (a JSON string: no line end in it)."""


@pytest.mark.parametrize("after", [OUTPUT, SAYS_DONE], ids=["output", "says-done"])
async def test_an_answers_chunk_after_done_in_its_event_is_told_at_the_streams_end(
    loopback: Loopback, after: bytes
) -> None:
    """``[DONE]`` then an answer's chunk in its event: a read ending as an answer's chunk
    does is relayed unread (no ``[DONE]`` looked for in it), and the malformed chunk told
    as the stream ends, from its last reads; its text saying ``[DONE]`` too."""
    chunks = [ROLE, OUTPUT, finished("stop"), b"data: [DONE]\n" + after]
    relayed, error = await relayed_until(await forwarded(loopback, *chunks))
    assert relayed == b"".join(chunks)
    same(error, await streamed_failure(loopback, b"".join(chunks)))


@pytest.mark.parametrize(
    "unread",
    [
        pytest.param(b"data: not json\n\n", id="no-json"),
        pytest.param(b'data: {"choices": 5}\n\n', id="malformed"),
    ],
)
async def test_an_event_relayed_unread_hides_no_finish_after_it(
    loopback: Loopback, unread: bytes
) -> None:
    """A data line that is no JSON, or a chunk of no known shape, is relayed as it came:
    the events after it are still read, a finish saying the server gave up among them."""
    chunks = [ROLE, unread, finished("abort"), DONE]
    _, error = await relayed_until(await forwarded(loopback, *chunks))
    assert error.code == "upstream_error"
    assert "finish_reason 'abort'" in error.message


async def test_the_blank_line_ending_an_event_read_apart_goes_out_at_once(
    loopback: Loopback,
) -> None:
    """An answer's chunk read to its data line's end and a keepalive comment after it (both
    relayed: the comment's line ended), then a read beginning with the blank line that
    ends that event and going on into the next: the blank line is relayed at once (a
    client's reader dispatches the event only then), not held with the next event."""
    read, sent = asyncio.Event(), asyncio.Event()
    rest = b'lo"}}]}\n\n' + finished("stop") + DONE

    async def answers(request: web.Request) -> web.StreamResponse:
        response = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await response.prepare(request)
        await response.write(OUTPUT[:-1] + b": ping\n")
        await read.wait()  # read apart from the blank line after it
        await response.write(b"\n" + CUT_CHUNK)
        await sent.wait()  # the rest, only once the blank line went out
        await response.write(rest)
        await response.write_eof()
        return response

    client = UpstreamClient(UpstreamTarget("up", await loopback.serve(answers)))
    relay = await OpenAIChatBackend(loopback.adopt(client)).forward_chat(
        b'{"stream": true}', orjson.loads(b'{"stream": true}')
    )
    chunks = reads_told(relay, read.set).chunks()
    async with asyncio.timeout(5):
        assert await anext(chunks) == OUTPUT[:-1] + b": ping\n"
        assert await anext(chunks) == b"\n"
    sent.set()
    assert b"".join([chunk async for chunk in chunks]) == CUT_CHUNK + rest
    await relay.aclose()


@pytest.mark.parametrize(
    "cut",
    [
        pytest.param([CUT_CHUNK], id="one-read"),
        pytest.param([CUT_CHUNK[:20], CUT_CHUNK[20:]], id="two"),
    ],
)
async def test_an_event_cut_after_the_answers_finish_is_relayed_as_it_came(
    loopback: Loopback, cut: list[bytes]
) -> None:
    """A stream answered (its finish read) whose body ends inside an event after it: no
    cut, and the event's bytes, held for its end, are relayed as they came."""
    writes = [ROLE, OUTPUT, finished("stop"), *cut]
    relay = await forwarded(loopback, *writes, ending="read")
    assert await relayed_whole(relay) == b"".join(writes)
