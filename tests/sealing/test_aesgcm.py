"""AES-256-GCM sealing: round trip, and every way a blob must fail to open."""

from __future__ import annotations

import base64
import os

import pytest

from stateway.sealing import AesGcmSealer
from stateway.sealing.aesgcm import NONCE_BYTES, PREFIX, TAG_BYTES

KEY = bytes(range(32))


def test_round_trip_and_fresh_nonces() -> None:
    sealer = AesGcmSealer(KEY)
    first = sealer.seal("compaction", "t1", b"the summary")
    second = sealer.seal("compaction", "t1", b"the summary")
    assert first.startswith(PREFIX)
    assert first.isascii()
    assert first != second  # a random nonce each time
    assert b"summary" not in base64.urlsafe_b64decode(first[len(PREFIX) :] + "==")
    assert sealer.unseal("compaction", "t1", first) == b"the summary"
    assert sealer.unseal("compaction", "t1", second) == b"the summary"
    assert sealer.unseal("reasoning", "t1", sealer.seal("reasoning", "t1", b"")) == b""


def test_any_altered_or_added_character_fails() -> None:
    sealer = AesGcmSealer(KEY)
    # 12 + 41 + 16 bytes: a multiple of 3, so every base64 character carries bits
    sealed = sealer.seal("compaction", "t1", b"x" * 41)
    for position in range(len(PREFIX), len(sealed)):
        replacement = "A" if sealed[position] != "A" else "B"
        altered = sealed[:position] + replacement + sealed[position + 1 :]
        assert sealer.unseal("compaction", "t1", altered) is None, position
    for extra in ("!", " ", "=", "\n", "A"):
        assert sealer.unseal("compaction", "t1", sealed + extra) is None, extra
    assert sealer.unseal("compaction", "t1", sealed[:-1]) is None


@pytest.mark.parametrize(
    ("kind", "tenant", "key"),
    [
        ("compaction", "t2", KEY),  # another tenant
        ("reasoning", "t1", KEY),  # another kind
        ("compaction", "t1", bytes(32)),  # another key
    ],
)
def test_bound_to_its_tenant_kind_and_key(kind: str, tenant: str, key: bytes) -> None:
    sealed = AesGcmSealer(KEY).seal("compaction", "t1", b"secret")
    assert AesGcmSealer(key).unseal(kind, tenant, sealed) is None


# Sealed by this format with KEY and the nonce bytes 100..111: values clients and the
# database hold, which every later release must open (and seal alike). Plaintexts of 0, 1
# and 2 bytes past a multiple of 3 (each length of base64 tail), and one text ending in "X".
KNOWN_ANSWERS = [
    ("compaction", "t1", b"", "sw1.ZGVmZ2hpamtsbW5vAeZ0Lhq4-shB0Q7gKCragQ"),
    ("compaction", "t1", b"a", "sw1.ZGVmZ2hpamtsbW5vKeQiQLvee9I5gCZB8LU6vTE"),
    ("reasoning", "tenant-2", b"ab", "sw1.ZGVmZ2hpamtsbW5vKXl5qvUATwXtLUvkaBH9Iozy"),
    ("reasoning", "", b"abc", "sw1.ZGVmZ2hpamtsbW5vKXm9iNjUOf4l4qi-lzNcxpO8Lw"),
    ("compaction", "t1", b"\n\n", "sw1.ZGVmZ2hpamtsbW5vQhERwA4rKdXcjvBG8E1cxMmX"),
]


@pytest.mark.parametrize(
    ("kind", "tenant", "plaintext", "sealed"),
    KNOWN_ANSWERS,
    ids=["empty", "one-byte", "two-bytes", "three-bytes", "ending-in-X"],  # plain: no repr
)
def test_known_answers_open_and_seal_alike(
    kind: str, tenant: str, plaintext: bytes, sealed: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    sealer = AesGcmSealer(KEY)
    assert sealer.unseal(kind, tenant, sealed) == plaintext
    monkeypatch.setattr(os, "urandom", lambda size: bytes(range(100, 100 + size)))
    assert sealer.seal(kind, tenant, plaintext) == sealed


@pytest.mark.parametrize("prefix", ["sw2.", "sw1", "", "SW1.", "sw1.sw1."])
def test_a_seal_under_another_prefix_fails(prefix: str) -> None:
    sealer = AesGcmSealer(KEY)
    sealed = sealer.seal("compaction", "t1", b"secret")
    assert sealer.unseal("compaction", "t1", prefix + sealed[len(PREFIX) :]) is None


def test_tenant_and_kind_cannot_be_shifted_into_each_other() -> None:
    sealer = AesGcmSealer(KEY)
    sealed = sealer.seal("ab", "c", b"secret")
    assert sealer.unseal("a", "bc", sealed) is None


@pytest.mark.parametrize(
    "blob",
    [
        "",
        "sw1.",
        "sw2." + "A" * 60,  # another version
        "sw1." + "A" * (((NONCE_BYTES + TAG_BYTES) * 4 // 3) - 2),  # too short
        "sw1.***not base64***",
        "sw1.é",
        "plain text",
    ],
)
def test_malformed_blobs_fail(blob: str) -> None:
    assert AesGcmSealer(KEY).unseal("compaction", "t1", blob) is None


def test_owns_its_format_whatever_the_key() -> None:
    sealed = AesGcmSealer(KEY).seal("compaction", "t1", b"x")
    assert AesGcmSealer(bytes(32)).owns(sealed)
    assert AesGcmSealer(KEY).owns("sw1.anything")
    for foreign in ("EqQBCkYIBxgCKkDs", "redacted_thinking:x", "gAAAAABn", "", "sw2.x"):
        assert not AesGcmSealer(KEY).owns(foreign)


def test_key_must_be_32_bytes() -> None:
    with pytest.raises(ValueError, match="32 bytes"):
        AesGcmSealer(bytes(16))
