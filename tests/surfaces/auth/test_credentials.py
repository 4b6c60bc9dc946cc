"""Reading the credential from request headers."""

from __future__ import annotations

import pytest

from stateway.core.errors import Unauthorized
from stateway.surfaces.auth.credentials import MAX_CREDENTIAL, credential_of


@pytest.mark.parametrize(
    ("headers", "credential"),
    [
        ([], None),
        ([(b"authorization", b"Bearer sk-sw-abc")], "sk-sw-abc"),
        ([(b"authorization", b"bearer   tok.en.x  ")], "tok.en.x"),
        ([(b"x-api-key", b"sk-sw-abc")], "sk-sw-abc"),
        ([(b"x-api-key", b"from-x"), (b"authorization", b"Bearer from-auth")], "from-auth"),
        ([(b"content-type", b"application/json")], None),
    ],
)
def test_the_credential_is_read_from_either_header(
    headers: list[tuple[bytes, bytes]], credential: str | None
) -> None:
    assert credential_of(headers) == credential


def test_a_credential_of_the_longest_length_is_read() -> None:
    longest = "x" * MAX_CREDENTIAL
    assert credential_of([(b"x-api-key", longest.encode())]) == longest


@pytest.mark.parametrize(
    "headers",
    [
        [(b"authorization", b"Basic dXNlcjpwYXNz")],
        [(b"authorization", b"Bearer")],
        [(b"authorization", b"Bearer a b")],
        [(b"authorization", b"Bearer a"), (b"authorization", b"Bearer b")],
        [(b"x-api-key", b"a"), (b"x-api-key", b"b")],
        [(b"x-api-key", b"")],
        [(b"x-api-key", b"key\x00null")],
        [(b"x-api-key", "cl\u00e9".encode())],
        [(b"x-api-key", b"x" * (MAX_CREDENTIAL + 1))],
    ],
)
def test_a_malformed_credential_is_unauthorized_without_echoing_it(
    headers: list[tuple[bytes, bytes]],
) -> None:
    with pytest.raises(Unauthorized) as refused:
        credential_of(headers)

    assert refused.value.status == 401
    for _, value in headers:
        secret = value.partition(b" ")[2] or value
        assert len(secret) < 3 or secret.decode("latin-1") not in refused.value.message
