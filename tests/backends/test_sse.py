from typing import cast

import aiohttp
import pytest

from stateway.backends.sse import ServerSentEvent, SSEDecoder
from stateway.backends.upstream_reply import UpstreamReply
from stateway.core.errors import UpstreamResponseTooLarge


def feed_all(chunks: list[bytes]) -> list[ServerSentEvent]:
    decoder = SSEDecoder()
    events: list[ServerSentEvent] = []
    for chunk in chunks:
        events.extend(decoder.feed(chunk))
    return events + decoder.close()


STREAM = b'data: {"a": 1}\n\nevent: done\ndata: [DONE]\n\n'


def test_whole_stream_in_one_chunk() -> None:
    assert feed_all([STREAM]) == [
        ServerSentEvent(None, b'{"a": 1}'),
        ServerSentEvent("done", b"[DONE]"),
    ]


@pytest.mark.parametrize("size", [1, 2, 3, 5, 7])
def test_chunks_split_anywhere_give_the_same_events(size: int) -> None:
    chunks = [STREAM[i : i + size] for i in range(0, len(STREAM), size)]
    assert feed_all(chunks) == feed_all([STREAM])


@pytest.mark.parametrize("size", [1, 2, 3, 4, 100])
def test_a_byte_order_mark_starting_the_stream_is_skipped(size: int) -> None:
    """As the WHATWG rules say: read as part of the first field's name, it lost the first
    event (its text) without a word."""
    marked = b"\xef\xbb\xbf" + STREAM
    chunks = [marked[i : i + size] for i in range(0, len(marked), size)]
    assert feed_all(chunks) == feed_all([STREAM])
    later = feed_all([STREAM, b"\xef\xbb\xbfdata: x\n\n"])  # only at the start
    assert len(later) == 2


def test_an_event_with_empty_data_is_not_dispatched() -> None:
    """``data:`` alone is an event with no data: WHATWG dispatches nothing (parsing it as
    JSON failed the answer)."""
    assert feed_all([b"data:\n\n", b"data: \n\n", STREAM]) == feed_all([STREAM])
    assert feed_all([b"data:\ndata:\n\n"]) == [ServerSentEvent(None, b"\n")]
    assert feed_all([b"data: \n\n\n"]) == []  # and a blank line more: still none


def test_crlf_and_cr_line_endings() -> None:
    crlf = STREAM.replace(b"\n", b"\r\n")
    cr = STREAM.replace(b"\n", b"\r")
    assert feed_all([crlf]) == feed_all([STREAM])
    assert feed_all([cr]) == feed_all([STREAM])
    mixed = [b"data: x\r\n\n", b"data: y\rid: 1\n\n"]  # a line ends with each
    assert feed_all(mixed) == [ServerSentEvent(None, b"x"), ServerSentEvent(None, b"y")]


def test_crlf_split_between_cr_and_lf() -> None:
    assert feed_all([b"data: x\r", b"\n\r", b"\n"]) == [ServerSentEvent(None, b"x")]
    assert feed_all([b"data: a\r", b"\ndata: b\r\n\r\n"]) == [ServerSentEvent(None, b"a\nb")]


def test_multiline_data_joins_with_lf() -> None:
    assert feed_all([b"data: one\ndata: two\ndata:three\n\n"]) == [
        ServerSentEvent(None, b"one\ntwo\nthree")
    ]


def test_comments_and_unknown_fields_are_ignored() -> None:
    assert feed_all([b": keep-alive\n:\nid: 7\nretry: 10\ndata: x\n\n"]) == [
        ServerSentEvent(None, b"x")
    ]


def test_blank_lines_without_data_dispatch_nothing() -> None:
    assert feed_all([b"\n\n: ping\n\n"]) == []


def test_unterminated_event_at_end_is_dropped() -> None:
    assert feed_all([b"data: complete\n\ndata: partial"]) == [ServerSentEvent(None, b"complete")]


def test_event_name_resets_after_dispatch() -> None:
    events = feed_all([b"event: a\ndata: 1\n\ndata: 2\n\n"])
    assert [e.event for e in events] == ["a", None]


def test_event_names_are_utf8_and_invalid_bytes_are_replaced() -> None:
    events = feed_all([b"event: caf\xc3\xa9\ndata: 1\n\nevent: d\xffne\ndata: 2\n\n"])
    assert events == [ServerSentEvent("caf\u00e9", b"1"), ServerSentEvent("d\ufffdne", b"2")]


class _Content:
    """What :class:`UpstreamReply` reads of an aiohttp response: ``readany``."""

    def __init__(self, chunks: list[bytes]) -> None:
        self._chunks = list(chunks)

    async def readany(self) -> bytes:
        return self._chunks.pop(0) if self._chunks else b""


class _Response:
    def __init__(self, chunks: list[bytes]) -> None:
        self.content = _Content(chunks)


def reply(chunks: list[bytes], limit: int = 1 << 20) -> UpstreamReply:
    return UpstreamReply(cast(aiohttp.ClientResponse, _Response(chunks)), "up", limit)


async def collect(source: UpstreamReply, into: list[ServerSentEvent]) -> None:
    async for event in source.events():
        into.append(event)


async def test_a_replys_events_from_its_chunks() -> None:
    events: list[ServerSentEvent] = []
    await collect(reply([STREAM[i : i + 4] for i in range(0, len(STREAM), 4)]), events)
    assert events == feed_all([STREAM])
    held: list[ServerSentEvent] = []
    await collect(reply([b"data: last\r", b"\r"]), held)
    assert held == [ServerSentEvent(None, b"last")]  # a CR held at the end still ends a line


async def test_a_replys_events_stop_at_its_byte_budget() -> None:
    chunks = [b'data: {"t": 1}\n\n'] * 10
    events: list[ServerSentEvent] = []
    with pytest.raises(UpstreamResponseTooLarge):
        await collect(reply(chunks, limit=len(chunks[0]) * 3), events)
    assert len(events) == 3


def test_one_event_per_chunk_as_model_servers_send_tokens() -> None:
    """The shape most chunks have: ``data: ...`` and a blank line, nothing else."""
    chunks = [
        b'data: {"t": 1}\n\n',
        b"event: delta\n",  # a name in a chunk of its own, for the next chunk's data
        b'data: {"t": 2}\n\n',
        b'data: {"t": 3}\n\n',
        b"data: two\ndata: lines\n\n",
        b"data: held\n",  # a partial event: the next whole chunk is not taken alone
        b'data: {"t": 4}\n\n',
        b"data: crlf\r\n\r\n",
    ]
    assert feed_all(chunks) == [
        ServerSentEvent(None, b'{"t": 1}'),
        ServerSentEvent("delta", b'{"t": 2}'),
        ServerSentEvent(None, b'{"t": 3}'),
        ServerSentEvent(None, b"two\nlines"),
        ServerSentEvent(None, b'held\n{"t": 4}'),
        ServerSentEvent(None, b"crlf"),
    ]


def test_an_error_line_is_an_error_event() -> None:
    """llama.cpp's servers before late 2025 wrote a mid-stream failure as a field named
    ``error`` (ggml-org/llama.cpp#16109): read as an event named ``error``, not dropped."""
    stream = b'data: {"a": 1}\n\nerror: {"code": 500}\n\ndata: [DONE]\n\n'
    assert feed_all([stream]) == [
        ServerSentEvent(None, b'{"a": 1}'),
        ServerSentEvent("error", b'{"code": 500}'),
        ServerSentEvent(None, b"[DONE]"),
    ]


def test_a_chunk_is_taken_alone_only_when_it_is_one_whole_event() -> None:
    """A read shaped like one token's chunk is not one when it goes on a line read before
    (a comment's words or a data line's) or goes on past its first line with another line
    and no blank one: no event until the blank line, and then of every line."""
    assert feed_all([b": ", b"data: x\n\n"]) == []  # a comment that says "data: x"
    assert feed_all([b"data: ", b"data: x\n\n"]) == [ServerSentEvent(None, b"data: x")]
    assert feed_all([b"data: a\n:\n", b"data: b\n\n"]) == [ServerSentEvent(None, b"a\nb")]
    assert feed_all([b"data: a\nd", b"ata: b\n\n"]) == [ServerSentEvent(None, b"a\nb")]


def test_field_names_are_case_sensitive() -> None:
    """As the WHATWG rules say: ``DATA`` is no ``data`` field, ``EVENT`` no ``event``."""
    assert feed_all([b"DATA: x\n\n", b"Data: y\n\n"]) == []
    assert feed_all([b"EVENT: e\ndata: z\n\n"]) == [ServerSentEvent(None, b"z")]
