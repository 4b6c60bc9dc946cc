"""A custom tool's input read from the offered function's arguments: whole, and as they
stream, cut anywhere."""

from __future__ import annotations

import json

import orjson
import pytest

from stateway.core.tools.custom_tools import custom_input
from stateway.core.tools.streamed_input import StreamedInput

INPUTS = [
    "",
    "plain",
    '*** Begin Patch\n*** Add File: a.json\n+{"input": "x"}\n*** End Patch',
    'quotes " and \\ backslashes \\" and /slashes/ \t tabs \r\n',
    "unicode é ü ✓ and an emoji 😀 and \u0001 a control",
]


def pieces(text: str, size: int) -> list[str]:
    return [text[at : at + size] for at in range(0, len(text), size)] or [""]


def streamed(arguments: list[str]) -> str:
    reader = StreamedInput()
    said = "".join(reader.feed(piece) for piece in arguments)
    assert reader.said == len(said)
    return said


@pytest.mark.parametrize("raw", INPUTS)
@pytest.mark.parametrize("encode", [orjson.dumps, lambda v: json.dumps(v).encode()])
def test_the_input_streams_as_it_reads_whole_however_its_arguments_are_cut(
    raw: str, encode: object
) -> None:
    """orjson's arguments and json's (``\\uXXXX`` escapes, surrogate pairs), cut into
    pieces of every size from one character up: the input said is the input."""
    arguments = encode({"input": raw}).decode()  # type: ignore[operator]
    assert custom_input(arguments) == raw
    for size in range(1, len(arguments) + 1):
        assert streamed(pieces(arguments, size)) == raw


def test_the_input_streams_before_its_arguments_end() -> None:
    reader = StreamedInput()
    assert reader.feed('{"in') == ""
    assert reader.feed('put": "*** Begin') == "*** Begin"
    assert reader.feed(" Patch\\") == " Patch"  # the escape held until it is whole
    assert reader.feed("n+a\\u00") == "\n+a"
    assert reader.feed('e9"}') == "é"
    assert reader.feed("more") == ""  # past the string's end: not input
    assert reader.opened


@pytest.mark.parametrize(
    ("arguments", "raw"),
    [
        ('{"input": "abc", "other": 1}', "abc"),
        ('  {\n "input" :\t"abc"}', "abc"),
        ('{"input":"cut sho', "cut sho"),  # the answer's length ran out
        ('{"input":"a\nb"}', "a\nb"),  # a raw line break, as a model may write it
        ('{"input":"a\\qb"}', "a\\qb"),  # an unknown escape, kept as written
        ('{"input":"a\\ud83d b"}', "a\\ud83d b"),  # a lone surrogate, kept as written
        ('{"other": 1, "input": "x"}', "x"),  # not opened as asked: parsed whole
        ('{"input": 5}', '{"input": 5}'),  # no input string: the arguments as they are
        ("*** Begin Patch", "*** Begin Patch"),  # a model that ignored the schema
    ],
)
def test_arguments_not_quite_as_asked(arguments: str, raw: str) -> None:
    assert custom_input(arguments) == raw
    said = streamed(pieces(arguments, 1))
    assert raw.startswith(said)  # what was said, the input goes on from
