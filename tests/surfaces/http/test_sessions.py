"""The session a request header names, for cache affinity."""

from __future__ import annotations

import pytest

from stateway.surfaces.http.sessions import MAX_LENGTH, session_of


def scope(*headers: tuple[bytes, bytes]) -> dict[str, object]:
    return {"type": "http", "headers": [(b"content-type", b"application/json"), *headers]}


@pytest.mark.parametrize("name", [b"x-claude-code-session-id", b"x-session-affinity"])
def test_each_clients_session_header_names_it(name: bytes) -> None:
    assert session_of(scope((name, b"4f1c-9a"))) == "4f1c-9a"


def test_the_first_session_header_is_taken() -> None:
    sent = scope((b"x-session-affinity", b"one"), (b"x-claude-code-session-id", b"two"))
    assert session_of(sent) == "one"


@pytest.mark.parametrize("value", [b"", b"x" * (MAX_LENGTH + 1)])
def test_an_empty_or_overlong_session_names_nothing(value: bytes) -> None:
    assert session_of(scope((b"x-session-affinity", value))) is None
    assert session_of(scope((b"x-session-affinity", b"x" * MAX_LENGTH))) == "x" * MAX_LENGTH
    assert session_of(scope((b"x-session-affinity", b"x"))) == "x"


def test_without_a_session_header_there_is_none() -> None:
    assert session_of(scope((b"session", b"s"), (b"x-session-id-other", b"s"))) is None
