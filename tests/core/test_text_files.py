"""Which ``input_file`` parts are text files, and the text they are given as
(:mod:`stateway.core.text_files`)."""

from __future__ import annotations

import base64

import pytest

from stateway.core.items import Item
from stateway.core.text_files import file_text, inlined_text


def inline(media_type: str, data: bytes, **fields: object) -> Item:
    encoded = base64.b64encode(data).decode()
    return {"type": "input_file", "file_data": f"data:{media_type};base64,{encoded}", **fields}


@pytest.mark.parametrize(
    "media_type",
    [
        "text/plain",
        "text/markdown",
        "text/csv",
        "TEXT/Plain",
        "text/plain;charset=utf-8",
        "text/x-python; charset=US-ASCII",
        'text/plain;charset="UTF-8"',
        "text/plain;name=notes.txt;charset=utf-8",
        "application/json",
        "application/xml",
    ],
)
def test_a_text_file_is_its_text(media_type: str) -> None:
    assert inlined_text(inline(media_type, "naïve\nline two".encode())) == "naïve\nline two"


def test_base64_wrapped_in_lines_is_read_whole() -> None:
    """Some encoders break base64 into 76-character lines (MIME's ``encodebytes``)."""
    text = "a line of text long enough to be wrapped by the encoder, " * 3
    wrapped = base64.encodebytes(text.encode()).decode()
    assert "\n" in wrapped.strip()
    part = {"type": "input_file", "file_data": f"data:text/plain;base64,{wrapped}"}
    assert inlined_text(part) == text


def test_its_filename_and_context_lead_one_a_line() -> None:
    """As a ``search_result`` reaches such an upstream: its title and source, then its
    text (:mod:`stateway.protocols.messages.content`)."""
    part = inline("text/plain", b"The text.", filename="notes.txt", context="From Monday.")
    assert inlined_text(part) == "notes.txt\nFrom Monday.\nThe text."
    assert inlined_text({**part, "filename": "", "context": None}) == "The text."


@pytest.mark.parametrize(
    "part",
    [
        inline("application/pdf", b"%PDF-1.7"),
        inline("image/png", b"\x89PNG"),
        inline("application/octet-stream", b"text"),
        inline("text/plain", b"\xff\xfe bad utf-8"),
        inline("text/plain;charset=utf-16", "text".encode("utf-16")),
        # UTF-16 without a byte-order mark whose bytes also decode as UTF-8 (with NULs):
        # the named charset, wherever it stands among the parameters, refuses it
        inline("text/plain;charset=utf-16le", "text".encode("utf-16-le")),
        inline("text/plain;name=notes.txt;charset=utf-16le", "text".encode("utf-16-le")),
        # not base64: the first comma ends the header, the rest is its (URL-encoded) data
        {"type": "input_file", "file_data": "data:text/plain,a;base64,dGV4dA=="},
        {"type": "input_file", "file_data": "data:text/plain,not%20base64"},
        {"type": "input_file", "file_data": "data:text/plain;base64,@@@@"},
        {"type": "input_file", "file_data": base64.b64encode(b"no data URL").decode()},
        {"type": "input_file", "file_url": "https://x.test/notes.txt"},
        {"type": "input_file", "file_id": "file_1"},
        {"type": "input_text", "text": "not a file"},
    ],
)
def test_any_other_part_is_no_text_file(part: Item) -> None:
    assert inlined_text(part) is None


def test_a_byte_order_mark_is_no_part_of_the_text() -> None:
    """Editors on Windows write one; the model is given the text, not the mark."""
    data = "data:text/plain;base64," + base64.b64encode("\ufeffTea".encode()).decode()
    assert file_text({"type": "input_file", "file_data": data}) == "Tea"
