"""The sealing key: configured, or generated once and read back from a secret store."""

from __future__ import annotations

import base64

import pytest

from stateway.sealing import SEALING_KEY_SECRET, load_sealing_key, parse_key

KEY = bytes(range(32))


class MemorySecrets:
    def __init__(self, stored: dict[str, str] | None = None) -> None:
        self.values = dict(stored or {})
        self.offered: list[str] = []

    async def put_if_absent(self, name: str, value: str) -> str:
        self.offered.append(value)
        return self.values.setdefault(name, value)


@pytest.mark.parametrize(
    "text",
    [
        base64.b64encode(KEY).decode(),
        base64.urlsafe_b64encode(KEY).decode().rstrip("="),
        " " + base64.b64encode(KEY).decode() + "\n",
    ],
)
def test_parse_key_accepts_both_alphabets_and_no_padding(text: str) -> None:
    assert parse_key(text) == KEY


HIGH_KEY = bytes(range(224, 256))  # its base64 holds "+" and "/", "-" and "_" URL-safe


@pytest.mark.parametrize(
    "text", [base64.b64encode(HIGH_KEY).decode(), base64.urlsafe_b64encode(HIGH_KEY).decode()]
)
def test_parse_key_reads_the_last_two_characters_of_either_alphabet(text: str) -> None:
    assert parse_key(text) == HIGH_KEY


@pytest.mark.parametrize(
    ("text", "fragment"),
    [("not base64!", "not valid base64"), (base64.b64encode(b"x" * 31).decode(), "not 31")],
)
def test_parse_key_says_what_is_wrong_without_the_key(text: str, fragment: str) -> None:
    with pytest.raises(ValueError, match=fragment) as refused:
        parse_key(text)
    assert text not in str(refused.value)


def test_a_key_of_the_wrong_length_is_told_how_to_make_one() -> None:
    with pytest.raises(ValueError, match=r"\(make one with: openssl rand -base64 32\)$"):
        parse_key(base64.b64encode(bytes(16)).decode())


async def test_a_configured_key_is_used_and_nothing_is_stored() -> None:
    secrets = MemorySecrets()
    assert await load_sealing_key(base64.b64encode(KEY).decode(), secrets) == KEY
    assert secrets.values == {}
    assert secrets.offered == []


async def test_without_one_a_key_is_generated_once_and_read_back() -> None:
    secrets = MemorySecrets()
    first = await load_sealing_key(None, secrets)
    second = await load_sealing_key(None, secrets)
    assert len(first) == 32
    assert first == second
    assert parse_key(secrets.values[SEALING_KEY_SECRET]) == first
    assert len(set(secrets.offered)) == 2  # each start offered its own; the first stayed


async def test_an_unusable_stored_key_is_an_error() -> None:
    secrets = MemorySecrets({SEALING_KEY_SECRET: "c2hvcnQ="})
    with pytest.raises(ValueError, match="stored in the database is unusable"):
        await load_sealing_key(None, secrets)
