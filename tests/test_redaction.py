"""Every stretch of a credential is masked in text that may echo it; nothing else is."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from stateway.redaction import (
    MASK,
    RUN,
    SAME_LETTERS,
    KeyScrubber,
    header_credentials,
    url_credentials,
)

KEY = "sk-Proj-AbCdEfGh0123456789-XyZ"
ECHOES = [
    KEY,
    KEY.lower(),
    KEY.upper(),
    KEY[:RUN],
    KEY[:12],
    KEY[5 : 5 + RUN].lower(),
    KEY[-RUN:],
]


def reveals(text: str, key: str = KEY) -> bool:
    """Whether ``text`` holds any RUN-character stretch of ``key``, in any case."""
    folded = text.lower()
    return any(key[i : i + RUN].lower() in folded for i in range(len(key) - RUN + 1))


@pytest.mark.parametrize("echo", ECHOES)
def test_every_stretch_of_the_key_is_masked(echo: str) -> None:
    scrub = KeyScrubber(KEY)
    text = f"error: key {echo} is not valid here"
    assert reveals(text)
    scrubbed = scrub(text)
    assert not reveals(scrubbed)
    assert scrubbed == f"error: key {MASK} is not valid here"


def test_overlapping_and_repeated_stretches_become_one_mask_each() -> None:
    scrub = KeyScrubber(KEY)
    assert scrub(f"{KEY[:10]}{KEY[3:15]} and {KEY.lower()}") == f"{MASK} and {MASK}"


def test_every_separate_stretch_is_masked_in_place() -> None:
    scrub = KeyScrubber(KEY)
    text = f"a {KEY[:RUN]} b {KEY[6 : 6 + RUN]} c {KEY[-RUN:].upper()} d"
    assert scrub(text) == f"a {MASK} b {MASK} c {MASK} d"


def test_shorter_stretches_and_unrelated_text_stay() -> None:
    scrub = KeyScrubber(KEY)
    text = f"the word {KEY[: RUN - 1]} and {KEY[4 : 4 + RUN - 1]} and {KEY[-RUN + 1 :]} stay"
    assert scrub(text) == text
    assert KeyScrubber(None)(text) == text


def test_a_short_key_is_masked_whole() -> None:
    assert KeyScrubber("AbC12")("key abc12!") == f"key {MASK}!"


@given(st.text(max_size=40), st.text(max_size=40), st.sampled_from(ECHOES))
def test_no_stretch_survives_in_any_surroundings(before: str, after: str, echo: str) -> None:
    assert not reveals(KeyScrubber(KEY)(before + echo + after))


def test_several_keys_are_masked_by_one_scrubber() -> None:
    other = "tok-Zz9Yy8Xx7Ww6"
    scrub = KeyScrubber(KEY, None, other, "AbC12")
    masked = scrub(f"{KEY[3:15]} then {other.upper()} then abc12 then plain words")
    assert masked == f"{MASK} then {MASK} then {MASK} then plain words"
    assert scrub.active
    assert not KeyScrubber(None, "").active


@pytest.mark.parametrize(
    ("headers", "credentials"),
    [
        ({"Authorization": "Bearer sk-abc123456789"}, ["sk-abc123456789"]),
        ({"Proxy-Authorization": "Basic dXNlcjpwYXNzd29yZA=="}, ["dXNlcjpwYXNzd29yZA=="]),
        ({"x-api-key": "sk-ant-0123456789"}, ["sk-ant-0123456789"]),
        ({"X-Proxy-Token": "t0k3n-value"}, ["t0k3n-value"]),
        ({"api-key": "azure-key-value"}, ["azure-key-value"]),
        ({"X-Client-Secret": "s3cr3t s3cr3t"}, ["s3cr3t s3cr3t"]),
        ({"Cookie": "session=abcdef123456"}, ["session=abcdef123456"]),
        ({"anthropic-beta": "context-1m-2025-08-07"}, []),
        ({"X-Org": "my-organization"}, []),
    ],
)
def test_configured_headers_that_carry_credentials(
    headers: dict[str, str], credentials: list[str]
) -> None:
    """By the header's name: a value of any other header (a beta, an organization) is
    no secret, and masking it would blot its stretches out of answers and errors."""
    assert header_credentials(headers.items()) == credentials


class _Unread:
    """A masking search that must not run."""

    def finditer(self, text: str) -> None:
        raise AssertionError(f"searched {text!r}")


@pytest.mark.parametrize("key", [KEY, "eyJ" + "a1B2c3D4" * 120, "AbC12"])
def test_text_without_a_stretch_of_a_key_is_passed_over_unsearched(key: str) -> None:
    """A relayed chunk (the Chat fast path scrubs each) holds no stretch of the key but
    rarely: its check costs one set lookup per place, not a search of every stretch of
    every key there (a long bearer token among a backend's headers has a thousand)."""
    scrub = KeyScrubber(key, "other-credential-value")
    scrub._pattern = _Unread()  # type: ignore[assignment]
    chunk = 'data: {"id":"c","choices":[{"delta":{"content":" ab c12 ok"}}]}\n\n'
    assert scrub(chunk) is chunk


@given(st.text(max_size=40), st.text(max_size=40), st.sampled_from(ECHOES))
def test_a_stretch_among_other_keys_is_masked(before: str, after: str, echo: str) -> None:
    scrub = KeyScrubber("another-credential-value", KEY, "AbC12")
    assert not reveals(scrub(before + echo + after))


@pytest.mark.parametrize(
    "headers",
    [{"Authorization": "Bearer none"}, {"x-api-key": "test"}, {"X-Max-Tokens": "4096"}],
)
def test_a_configured_header_value_shorter_than_a_stretch_is_no_credential(
    headers: dict[str, str],
) -> None:
    """Masked whole, it would blot every ``none``, ``test`` or ``4096`` out of every
    answer (a relayed chunk's JSON too): as the MCP client's scrubber, only a value of
    :data:`RUN` characters or more is taken for a secret."""
    assert header_credentials(headers.items()) == []


@pytest.mark.parametrize(
    ("key", "echo"),
    [
        ("sk-live-1234567890abcdef", "\u017fk-live-"),  # a long s, taken for s
        ("sk-live-1234567890abcdef", "SK-LIVE-"),
        ("pi-token-0123456789", "p\u0131-token-"),  # a dotless i, taken for i
        ("\u03c3\u03b5\u03c1\u03b2\u03b5\u03c1-0123", "\u03a3\u0395\u03a1\u0392\u0395\u03a1-0"),
        (
            "x\u03c3\u03c3\u03c3\u03c3\u03c3\u03c3\u03c3y",
            "x\u03c3\u03c3\u03c3\u03c3\u03c3\u03c3\u03c2",
        ),
        (
            "\u0432\u043e\u0442-\u043a\u043b\u044e\u0447-12",
            "\u1c80\u1c82\u1c84-\u043a\u043b\u044e\u0447",
        ),
        ("K\u03b5y\u03b8\u03c6\u03c0\u03c1\u03ba", "k\u03f5Y\u03d1\u03d5\u03d6\u03f1\u03f0"),
    ],
)
def test_a_stretch_the_search_takes_for_the_key_is_masked(key: str, echo: str) -> None:
    """Whatever letters the masking search (Python's case-insensitive matching) takes
    for the key's, the check before it takes too: else it passes over the stretch."""
    assert KeyScrubber(key)._pattern.search(echo)  # type: ignore[union-attr]
    assert KeyScrubber(key)(f"bad key {echo} here") == f"bad key {MASK} here"


def test_the_letters_taken_alike_are_the_search_engines() -> None:
    """The check's table of letters taken for one another is Python's own (a Python
    with more would have the check pass over stretches the search masks)."""
    from re._casefix import _EXTRA_CASES  # the table the search is compiled with

    engines = {frozenset({code, *others}) for code, others in _EXTRA_CASES.items()}
    ours = {frozenset(map(ord, letters)) for letters in SAME_LETTERS}
    assert ours == engines


_CONFUSABLE = "sSiIk\u017f\u0131\u212a\u0130\u03c3\u03c2\u03a3-0"


@given(st.text(_CONFUSABLE, min_size=1, max_size=12), st.text(_CONFUSABLE, max_size=24))
def test_the_check_never_passes_over_what_the_search_masks(key: str, text: str) -> None:
    scrub = KeyScrubber(key)
    pattern = scrub._pattern
    assert pattern is not None
    if pattern.search(text):
        assert scrub(text) != text


@pytest.mark.parametrize(
    ("url", "credentials"),
    [
        ("http://u:pass%2Fword-99@h/v1", ["pass/word-99", "dTpwYXNzL3dvcmQtOTk="]),
        ("http://proxy:pw@h/v1", ["cHJveHk6cHc="]),  # the password alone is too short
        ("http://u:@h/v1", []),
        ("http://user-only@h/v1", []),
        ("http://h/v1", []),
    ],
)
def test_the_credentials_a_url_sends_as_basic(url: str, credentials: list[str]) -> None:
    assert url_credentials(url) == credentials
