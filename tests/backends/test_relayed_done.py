"""Where a relayed stream's ``data: [DONE]`` is, and whether it ends its event alone
(:mod:`stateway.backends.relayed_done`), read directly; the relay's use of them:
``test_relayed_stream*.py``."""

from __future__ import annotations

import pytest

from stateway.backends.relayed_done import done_at, done_ending, more_after_done

CHUNK = b'data: {"choices": [{"delta": {"content": "[DONE] x"}}]}\n\n'


@pytest.mark.parametrize("ending", [b"\n", b"\r"])
def test_a_done_line_after_a_line_break_at_the_reads_start(ending: bytes) -> None:
    chunk = ending + b"data: [DONE]" + ending * 2
    assert done_at(chunk) == 1
    assert done_ending(chunk) == 1
    assert not more_after_done(chunk)


@pytest.mark.parametrize(
    "chunk",
    [
        b"",
        CHUNK,  # none but in an answer's text
        b"data: [DONE]\n",  # its blank line not yet read
        b"data: [DONE] more\n\n",  # more on its line
        b"data: [DONE]\ndata: more\n\n",  # more data in its event
    ],
)
def test_no_done_ending_the_read_is_minus_one(chunk: bytes) -> None:
    assert done_ending(chunk) == -1


def test_more_after_done_reads_from_the_done_line_not_an_earlier_done() -> None:
    assert not more_after_done(CHUNK + b"data: [DONE]\n\n")
    assert more_after_done(CHUNK + b"data: [DONE] more\n\n")


def test_a_second_done_on_the_done_line_is_more_data() -> None:
    assert more_after_done(b"data: [DONE] [DONE]\n\n")
    assert done_ending(b"data: [DONE] [DONE]\n\n") == -1


@pytest.mark.parametrize("ending", [b"\r\n", b"\r"])
def test_an_events_blank_line_ends_it_in_each_line_ending(ending: bytes) -> None:
    chunk = b"data: [DONE]" + ending * 2 + b"data: next" + ending * 2
    assert not more_after_done(chunk)


@pytest.mark.parametrize("field", [b"data \n", b"dataX\n", b"data\t\n"])
def test_a_field_only_like_data_is_no_more_data(field: bytes) -> None:
    """A field's name is all before its colon, or the whole line: ``data `` is not
    ``data``."""
    assert not more_after_done(b"data: [DONE]\n" + field + b"\n")
    assert more_after_done(b"data: [DONE]\ndata\n\n")
