"""A request body's content codings undone (:mod:`stateway.surfaces.asgi.content_coding`):
which are, in what order, within what bound, and what does not decode."""

from __future__ import annotations

import gzip
import tracemalloc
import zlib
from collections.abc import Callable

import pytest

from stateway.core.errors import RequestTooLarge, UndecodableBody, UnsupportedContentEncoding
from stateway.surfaces.asgi.content_coding import BodyDecoder, body_decoder

BODY = b'{"model": "m", "input": "' + b"hello " * 2000 + b'"}'
LIMIT = 1024 * 1024


def scope(*codings: str) -> dict[str, object]:
    headers = [(b"content-type", b"application/json")]
    headers += [(b"content-encoding", coding.encode()) for coding in codings]
    return {"type": "http", "headers": headers}


def decoder(*codings: str, limit: int = LIMIT) -> BodyDecoder:
    made = body_decoder(scope(*codings), limit)
    assert made is not None
    return made


def decoded(made: BodyDecoder, data: bytes, size: int | None = None) -> bytes:
    """``data`` fed in chunks of ``size`` bytes (whole when None), then ended."""
    size = size or len(data)
    out = b"".join(made.decode(data[i : i + size]) for i in range(0, len(data), size))
    made.end()
    return out


def deflated(body: bytes) -> bytes:
    return zlib.compress(body)


def raw_deflated(body: bytes) -> bytes:
    squeezer = zlib.compressobj(wbits=-15)
    return squeezer.compress(body) + squeezer.flush()


@pytest.mark.parametrize("codings", [(), ("identity",), ("Identity, ",), ("identity", "")])
def test_a_body_sent_as_it_is_has_no_decoder(codings: tuple[str, ...]) -> None:
    assert body_decoder(scope(*codings), LIMIT) is None


@pytest.mark.parametrize("coding", ["gzip", "x-gzip", "GZIP", " gzip ", "identity, gzip"])
def test_gzip_is_undone(coding: str) -> None:
    assert decoded(decoder(coding), gzip.compress(BODY)) == BODY


@pytest.mark.parametrize("encode", [deflated, raw_deflated])
@pytest.mark.parametrize("size", [None, 1, 2, 3, 1000])
def test_deflate_is_undone_zlib_wrapped_or_raw_in_any_chunks(
    encode: Callable[[bytes], bytes], size: int | None
) -> None:
    assert decoded(decoder("deflate"), encode(BODY), size) == BODY


def test_several_codings_are_undone_the_last_applied_first() -> None:
    data = deflated(gzip.compress(BODY))  # gzip applied, then deflate
    assert decoded(decoder("gzip, deflate"), data, 100) == BODY
    assert decoded(decoder("gzip", "deflate"), data, 100) == BODY  # two header lines


def test_gzip_members_one_after_another_are_one_body() -> None:
    data = gzip.compress(BODY[:100]) + gzip.compress(BODY[100:])
    assert decoded(decoder("gzip"), data) == BODY
    assert decoded(decoder("gzip"), data, 7) == BODY


@pytest.mark.parametrize("size", [None, 1, 7, 1000])
def test_zero_padding_after_a_gzip_member_is_skipped_as_gzipfile_skips_it(
    size: int | None,
) -> None:
    """Zeros past a complete member (a block device's or tape's padding) are ignored, as
    GNU gzip and Python's ``GzipFile`` ignore them; a member after them is read on, as
    ``GzipFile`` reads it."""
    padded = gzip.compress(BODY) + b"\0" * 512
    assert gzip.decompress(padded) == BODY
    assert decoded(decoder("gzip"), padded, size) == BODY
    between = gzip.compress(BODY[:100]) + b"\0" * 9 + gzip.compress(BODY[100:]) + b"\0"
    assert gzip.decompress(between) == BODY
    assert decoded(decoder("gzip"), between, size) == BODY


@pytest.mark.parametrize("coding", ["br", "zstd", "compress", "gzip;q=1"])
def test_another_coding_is_a_415_naming_those_accepted(coding: str) -> None:
    with pytest.raises(UnsupportedContentEncoding) as refused:
        body_decoder(scope(f"gzip, {coding}"), LIMIT)
    error = refused.value
    assert (error.status, error.code) == (415, "unsupported_content_encoding")
    assert error.headers["Accept-Encoding"] == "gzip, deflate"
    assert f"'{coding}'" in error.message
    assert not error.retryable


def test_more_codings_than_undone_are_a_415_before_any_inflater_is_made() -> None:
    """Each coding holds an inflater and its window: a header listing thousands (it may,
    within the header limit) would hold hundreds of megabytes for one request."""
    data = BODY
    for _ in range(3):
        data = gzip.compress(data)
    assert decoded(decoder("gzip, gzip", "identity, gzip"), data) == BODY
    with pytest.raises(UnsupportedContentEncoding) as refused:
        body_decoder(scope(", ".join(["gzip"] * 10_000)), LIMIT)
    error = refused.value
    assert error.status == 415
    assert "more than 3 codings" in error.message
    assert len(error.message) < 200
    assert error.headers["Accept-Encoding"] == "gzip, deflate"


def test_a_body_decoding_to_the_limit_is_taken_one_byte_past_it_refused() -> None:
    exact = b"x" * 5000
    assert decoded(decoder("gzip", limit=5000), gzip.compress(exact)) == exact
    with pytest.raises(RequestTooLarge) as refused:
        decoded(decoder("gzip", limit=5000), gzip.compress(exact + b"x"))
    assert "decoded" in refused.value.message
    assert "5000 bytes" in refused.value.message


def test_a_bomb_is_refused_at_its_first_chunk_never_inflated_whole() -> None:
    """Ten megabytes of zeros in about ten kilobytes: refused as it is read, having
    inflated no more than the limit and a byte."""
    bomb = gzip.compress(bytes(10 * 1024 * 1024))
    assert len(bomb) < 20 * 1024
    made = decoder("gzip", limit=64 * 1024)
    with pytest.raises(RequestTooLarge):
        made.decode(bomb[:4096])


def test_each_coding_of_several_is_bounded() -> None:
    """A bomb inside another coding: the inner coding's output is bounded alike."""
    bomb = deflated(gzip.compress(bytes(10 * 1024 * 1024)))
    with pytest.raises(RequestTooLarge):
        decoded(decoder("gzip, deflate", limit=64 * 1024), bomb)


@pytest.mark.parametrize(
    ("coding", "data"),
    [
        ("gzip", b"this is no gzip"),
        ("deflate", b"\x78\x9cthis is no deflate"),
        ("gzip", gzip.compress(BODY) + b"garbage"),
        ("gzip", gzip.compress(BODY) + b"\0\0garbage"),
        ("deflate", deflated(BODY) + b"more"),
        ("deflate", deflated(BODY) + b"\0"),
    ],
    ids=[
        "no-gzip",
        "no-deflate",
        "gzip-then-garbage",
        "gzip-then-zeros-then-garbage",
        "deflate-then-more",
        "deflate-then-zero",
    ],
)
def test_a_corrupt_body_is_undecodable(coding: str, data: bytes) -> None:
    with pytest.raises(UndecodableBody) as refused:
        decoded(decoder(coding), data)
    error = refused.value
    assert (error.status, error.code) == (400, "invalid_json")
    assert f"'{coding}'" in error.message


@pytest.mark.parametrize(
    ("coding", "data"),
    [
        ("gzip", gzip.compress(BODY)[:-4]),
        ("gzip", gzip.compress(BODY)[:10]),
        ("deflate", deflated(BODY)[:50]),
        ("deflate", b"\x78"),
    ],
    ids=["gzip-without-trailer", "gzip-header-only", "deflate-half", "deflate-one-byte"],
)
def test_a_body_cut_short_is_undecodable_at_its_end(coding: str, data: bytes) -> None:
    made = decoder(coding)
    made.decode(data)
    with pytest.raises(UndecodableBody, match="ends before its end"):
        made.end()


def test_an_empty_body_raw_deflated_in_two_bytes_is_undone() -> None:
    """Raw deflate's empty body is two bytes (``03 00``): enough to tell its format."""
    assert raw_deflated(b"") == b"\x03\x00"
    assert decoded(decoder("deflate"), raw_deflated(b"")) == b""


def stored_block(first: int, data: bytes) -> bytes:
    """A raw deflate stream: a stored block whose first byte is ``first`` (its padding bits
    set as no encoder sets them, which inflaters ignore), holding ``data``, then an empty
    last block."""
    size = len(data).to_bytes(2, "little")
    return bytes([first]) + size + bytes(b ^ 0xFF for b in size) + data + b"\x01\x00\x00\xff\xff"


@pytest.mark.parametrize(
    "data",
    [
        raw_deflated(b"\x00h hello"),  # its first two bytes pass zlib's check, but not deflate
        stored_block(0x08, b"hello"),  # deflate's method, but failing zlib's check
        stored_block(0x88, b"x" * 28),  # method and check, but a window past 32 KiB
    ],
    ids=["check-only", "method-only", "window-too-large"],
)
def test_raw_deflate_is_told_from_zlib_by_every_part_of_its_header(data: bytes) -> None:
    expected = zlib.decompress(data, -zlib.MAX_WBITS)
    assert decoded(decoder("deflate"), data) == expected


def test_a_byte_other_than_zero_between_gzip_members_is_corrupt() -> None:
    data = gzip.compress(BODY[:100]) + b"X" + gzip.compress(BODY[100:])
    with pytest.raises(UndecodableBody) as refused:
        decoded(decoder("gzip"), data)
    assert refused.value.message == (
        "The request body could not be decoded as its Content-Encoding 'gzip' says: "
        "its data is corrupt (incorrect header check)."
    )


def test_the_words_of_data_past_a_deflate_body_and_of_one_cut_short() -> None:
    with pytest.raises(UndecodableBody) as refused:
        decoded(decoder("deflate"), deflated(BODY) + b"more")
    assert refused.value.message == (
        "The request body could not be decoded as its Content-Encoding 'deflate' says: "
        "data follows its end."
    )
    made = decoder("gzip")
    made.decode(gzip.compress(BODY)[:-4])
    with pytest.raises(UndecodableBody) as refused:
        made.end()
    assert refused.value.message == (
        "The request body could not be decoded as its Content-Encoding 'gzip' says: "
        "its data ends before its end."
    )


def test_too_many_codings_are_named_in_the_415() -> None:
    with pytest.raises(UnsupportedContentEncoding) as refused:
        body_decoder(scope("gzip, deflate", "gzip, deflate"), LIMIT)
    assert refused.value.message.startswith(
        "The request body's Content-Encoding 'gzip, deflate, gzip, deflate' lists more than 3"
    )


def test_a_bomb_is_inflated_no_further_than_the_limit() -> None:
    """What is held while a bomb is refused: about the limit, not what it would decode to
    (ten megabytes)."""
    bomb = gzip.compress(bytes(10 * 1024 * 1024))
    made = decoder("gzip", limit=64 * 1024)
    tracemalloc.start()
    try:
        with pytest.raises(RequestTooLarge):
            made.decode(bomb)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 1024 * 1024
