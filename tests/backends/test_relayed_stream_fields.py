"""The relay's byte-level readings of a stream's end, one at a time: which field after a
``data: [DONE]`` line leaves its data ``[DONE]`` (as the ``openai`` SDK reads an event),
whether a ``[DONE]`` goes on with more data in its event (a malformed chunk), and which
tail may tell a failure (so that it is parsed rather than taken as answered)."""

from __future__ import annotations

import pytest

from stateway.backends.relayed_done import done_at, done_field, more_after_done
from stateway.backends.relayed_stream import told_at_end, whole_end


@pytest.mark.parametrize(
    "line",
    [
        b"id: 7\n",
        b"id:7\r\n",
        b"retry: 3000\n",
        b"x-vendor: anything\n",
        b"event: message\n",
        b"event: done\r\n",
        b"event:errors\n",
        b"event: error \n",  # a value is the bytes after one space: "error " names no error
        b"event: errorX\n",
        b"ids: data\n",
    ],
)
def test_a_field_after_done_leaves_it_done(line: bytes) -> None:
    assert done_field(line)


@pytest.mark.parametrize(
    "line",
    [
        b"data: more\n",
        b"data:[DONE]\r\n",
        b"data\n",  # a field of no value is still a data line
        b'error: {"message": "boom"}\n',
        b"event: error\n",
        b"event:error\r\n",
        b"event: error\r\n",
    ],
)
def test_more_data_or_an_error_after_done_does_not(line: bytes) -> None:
    assert not done_field(line)


@pytest.mark.parametrize(
    "chunk",
    [
        b"data: [DONE]\ndata: more\n\n",
        b"data:[DONE]\r\ndata:more\r\n",  # its blank line not read yet
        b"data: [DONE] more\n\n",
        b"data: [DONE]\nid: 7\n: ping\ndata\n\n",  # a field of no value is a data line too
        b"data: [DONE]\rdata: more\r\r",
        # more data that is an answer's chunk whose text says [DONE]: the data line before
        # it is the one said, not the text
        b'data: [DONE]\ndata: {"choices":[{"delta":{"content":"data: [DONE]"}}]}\n\n',
    ],
)
def test_done_going_on_with_data_in_its_event_is_more_after_done(chunk: bytes) -> None:
    assert more_after_done(chunk)


@pytest.mark.parametrize(
    "chunk",
    [
        b"data: [DONE]\n\n",
        b"data: [DONE]  \n\n",
        b"data: [DONE]\n\ndata: more\n\n",  # another event: what a run never reads
        b"data: [DONE]\nid: 7\n\n",
        b'data: {"choices":[{"delta":{"content":"[DONE] more"}}]}\n\n',
        b": data: [DONE] more\n\n",
        b"data: [DONE]\n",  # its event goes on in a read to come
    ],
)
def test_done_alone_in_its_event_is_not(chunk: bytes) -> None:
    assert not more_after_done(chunk)


@pytest.mark.parametrize(
    ("chunk", "at"),
    [
        (b"data: [DONE]\n\n", 0),
        (b'data: {"choices":[{"delta":{"content":"data: [DONE]"}}]}\n\n', -1),
        (b": data: [DONE]\n\n", -1),
        # an event after the [DONE] line (what a run never reads) whose text says [DONE]
        (b'data: [DONE]\n\ndata: {"choices":[{"delta":{"content":"[DONE]"}}]}\n\n', 0),
        (b'data: {"choices":[{"delta":{"content":"[DONE]"}}]}\n\ndata:[DONE]\n\n', 52),
    ],
)
def test_the_done_line_is_found_past_a_done_in_an_answers_text(chunk: bytes, at: int) -> None:
    """Where the last ``data: [DONE]`` line starts, however many times an answer's text
    (a JSON string: no line end in it) says ``[DONE]`` after it."""
    assert done_at(chunk) == at


def _finished(reason: bytes, spaced: bool = False) -> bytes:
    colon = b": " if spaced else b":"
    return b'data: {"choices":[{"delta":{},"finish_reason"' + colon + reason + b"}]}\n\n"


@pytest.mark.parametrize("spaced", [False, True])
@pytest.mark.parametrize("reason", [b'"abort"', b'"error"'])
def test_a_finish_the_server_gave_up_on_may_tell_a_failure(reason: bytes, spaced: bool) -> None:
    assert told_at_end(_finished(reason, spaced) + b"data: [DONE]\n\n")


@pytest.mark.parametrize("spaced", [False, True])
@pytest.mark.parametrize("reason", [b'"stop"', b'"length"', b'"tool_calls"', b"null"])
def test_an_answer_finished_as_answers_finish_tells_none(reason: bytes, spaced: bool) -> None:
    # an "error" in the text before the finish is the answer's own words
    text = b'data: {"choices":[{"delta":{"content":"no error here"}}]}\n\n'
    assert not told_at_end(text + _finished(reason, spaced) + b"data: [DONE]\n\n")


def test_a_finish_at_the_tails_first_byte_is_read() -> None:
    assert told_at_end(b'"finish_reason":"abort"}]}\n\ndata: [DONE]\n\n')


def test_an_error_after_the_finish_may_tell_a_failure() -> None:
    tail = _finished(b'"stop"') + b'error: {"message": "boom"}\n\ndata: [DONE]\n\n'
    assert told_at_end(tail)


@pytest.mark.parametrize(
    "tail",
    [b'error: {"message": "boom"}\n\n', b"event: error\ndata: boom\n\n", b'{"error": 1}'],
)
def test_an_error_without_a_finish_may_tell_a_failure(tail: bytes) -> None:
    assert told_at_end(tail)


def test_a_tail_of_no_finish_and_no_error_tells_none() -> None:
    assert not told_at_end(b'data: {"choices":[{"delta":{"content":"hi"}}]}\n\ndata: [DONE]\n\n')


@pytest.mark.parametrize(
    ("data", "whole"),
    [
        (b'data: {"i":1}\n\ndata: {"i"', 15),  # to the event's end
        (b": ping\n", 7),  # an ended comment line
        (b"data: x\n: ping\n", 15),  # a comment line after a line of the event under way
        (b'data: {"i":1}\n\n: pi', 15),  # a comment begun: held
        (b'data: {"i"', 0),  # nothing whole
    ],
)
def test_what_a_read_holds_whole_ends_where_its_last_whole_line_does(
    data: bytes, whole: int
) -> None:
    assert whole_end(data) == whole


def test_a_blank_line_beginning_a_read_ends_the_event_relayed_before_it() -> None:
    assert whole_end(b'\ndata: {"i"', before=b"\n") == 1
    assert whole_end(b'\ndata: {"i"', before=b"}") == 0  # a line going on: no blank line
