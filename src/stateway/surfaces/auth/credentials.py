"""Reading a request's credential: ``Authorization: Bearer <credential>`` or
``x-api-key: <credential>`` (what Anthropic clients send), on every route.

When both headers are present, ``Authorization`` is the one used. A credential is 1 to
``MAX_CREDENTIAL`` visible ASCII characters; anything else (another scheme, a header
sent twice, control characters, an oversized token) is refused as malformed, without
echoing it.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from typing import Final

from stateway.core.errors import Unauthorized

MAX_CREDENTIAL: Final = 8192
"""Bytes a credential may have (an OIDC token with many claims stays well below)."""

_VISIBLE: Final = re.compile(rb"[\x21-\x7e]+")
_BEARER: Final = b"bearer"


def credential_of(headers: Iterable[tuple[bytes, bytes]]) -> str | None:
    """The credential an ASGI request's headers carry; None when they carry none."""
    authorization: bytes | None = None
    api_key: bytes | None = None
    for name, value in headers:
        if name == b"authorization":
            if authorization is not None:
                raise _malformed("The request has more than one Authorization header.")
            authorization = value
        elif name == b"x-api-key":
            if api_key is not None:
                raise _malformed("The request has more than one x-api-key header.")
            api_key = value
    if authorization is not None:
        scheme, _, rest = authorization.strip().partition(b" ")
        if scheme.lower() != _BEARER:
            raise _malformed(
                "Send the credential as 'Authorization: Bearer <credential>' or 'x-api-key'."
            )
        return _checked(rest.strip())
    if api_key is not None:
        return _checked(api_key.strip())
    return None


def sendable(credential: str) -> bool:
    """Whether a request could send ``credential`` (as :func:`credential_of` reads one):
    a key configured otherwise would never match."""
    raw = credential.encode("utf-8")
    return len(raw) <= MAX_CREDENTIAL and _VISIBLE.fullmatch(raw) is not None


def _checked(raw: bytes) -> str:
    if len(raw) > MAX_CREDENTIAL:
        raise _malformed(f"The credential is longer than {MAX_CREDENTIAL} bytes.")
    if _VISIBLE.fullmatch(raw) is None:
        raise _malformed("The credential is malformed.")
    return raw.decode("ascii")


def _malformed(message: str) -> Unauthorized:
    return Unauthorized(message)
