"""Keeping the gateway's credentials out of text that came from the servers it sent them to.

An upstream error may echo the key it was sent, whole or in part, in any letter case. Every
upstream text bound for a client, the database or the log passes through
:class:`KeyScrubber`, which masks each case-insensitive occurrence of any run of
:data:`RUN` consecutive characters of the key (so the whole key, its prefix, a lower-cased
copy and a fragment cut off by truncation are all masked). A key shorter than that is
masked whole. A model server's scrubber masks its key, the credentials among its
configured headers (:func:`header_credentials`: a proxy's token, a key put there by
hand) and those its URL sends as Basic credentials (:func:`url_credentials`). The MCP
client masks the header values it sent a server out of that server's error messages the
same way (:mod:`stateway.mcp_client.failures`).

:func:`masked_url` shows a configured URL (an upstream's, Redis's) without the password it
carries, for the start-up summary and the log.

It imports nothing of the gateway's, so that both adapters that send credentials, the
model servers' (:mod:`stateway.backends`) and the MCP servers'
(:mod:`stateway.mcp_client`), depend on it and not on each other.
"""

from __future__ import annotations

import base64
import re
from collections.abc import Iterable
from typing import Final
from urllib.parse import unquote, urlsplit

RUN = 8
"""The shortest stretch of the key that is treated as revealing it."""
MASK = "***"
_QUERY_PASSWORD = re.compile(r"([?&]password=)[^&#]*")


def masked_url(url: str) -> str:
    """``url`` with its password masked: the user information's (``user:***@``) and a
    ``password`` query parameter's (a Redis URL may carry it so)."""
    scheme, _, rest = url.partition("://")
    netloc, slash, path = rest.partition("/")
    userinfo, at, host = netloc.rpartition("@")
    user, colon, _ = userinfo.partition(":")
    if colon:
        url = f"{scheme}://{user}:{MASK}{at}{host}{slash}{path}"
    return _QUERY_PASSWORD.sub(rf"\g<1>{MASK}", url)


SAME_LETTERS: Final = (
    "i\u0131", "s\u017f", "\u00b5\u03bc", "\u0345\u03b9\u1fbe", "\u0390\u1fd3",
    "\u03b0\u1fe3", "\u03b2\u03d0", "\u03b5\u03f5", "\u03b8\u03d1", "\u03ba\u03f0",
    "\u03c0\u03d6", "\u03c1\u03f1", "\u03c3\u03c2", "\u03c6\u03d5", "\u0432\u1c80",
    "\u0434\u1c81", "\u043e\u1c82", "\u0441\u1c83", "\u0442\u1c84\u1c85",
    "\u044a\u1c86", "\u0463\u1c87", "\ua64b\u1c88", "\u1e61\u1e9b", "\ufb06\ufb05",
)  # fmt: skip
"""Lower-case letters a case-insensitive search takes for one another besides (Python's
``re`` table: a dotless i for an i, a long s for an s, a final sigma for a sigma, ...)."""
_ALIKE: Final = {ord(letter): letters[0] for letters in SAME_LETTERS for letter in letters[1:]}
"""Each of :data:`SAME_LETTERS` to the first of its group."""
_OTHERS: Final = re.compile("[" + "".join(re.escape(chr(code)) for code in _ALIKE) + "]")
"""Any of :data:`_ALIKE`'s letters: a text holds one but rarely (searched for, it costs
a tenth of translating one that has none)."""


def _folded(text: str) -> str:
    """``text`` in lower case, with letters a case-insensitive search takes alike made one
    (as long as ``text`` unless a letter lowers to two, as a dotted capital I does)."""
    folded = text.lower()
    if folded.isascii() or _OTHERS.search(folded) is None:
        return folded
    return folded.translate(_ALIKE)


_CREDENTIAL_NAMES: Final = (
    "auth", "key", "token", "secret", "password", "credential", "cookie", "signature"
)  # fmt: skip
"""What the name of a header carrying a credential holds (``Authorization``,
``Proxy-Authorization``, ``x-api-key``, ``api-key``, ``X-Proxy-Token``, ...)."""
_SCHEMED: Final = frozenset({"authorization", "proxy-authorization"})
"""Headers whose value is ``scheme credentials`` (``Bearer sk-...``)."""


def header_credentials(headers: Iterable[tuple[str, str]]) -> list[str]:
    """The values of configured ``headers`` that carry a credential, told by the header's
    name (an ``Authorization`` value without its scheme), of :data:`RUN` characters or
    more, as the MCP client's. Any other value (a beta, an organization; a placeholder
    such as ``Bearer none``, a number) is no secret: masking it would blot its stretches,
    or a short one wherever it stands, out of answers."""
    found: list[str] = []
    for name, value in headers:
        folded = name.lower()
        if not any(part in folded for part in _CREDENTIAL_NAMES):
            continue
        _, space, credential = value.strip().partition(" ")
        credential = credential.strip() if folded in _SCHEMED and space else value
        if len(credential) >= RUN:
            found.append(credential)
    return found


def url_credentials(url: str) -> list[str]:
    """What the user information of ``url`` sends as Basic credentials: its password, and
    ``user:password`` as the ``Authorization`` header carries it (base64, in Latin-1 as
    aiohttp encodes it), each of :data:`RUN` characters or more (as
    :func:`header_credentials`'); none without a password."""
    parts = urlsplit(url)
    if not parts.password:
        return []
    password = unquote(parts.password)
    pair = f"{unquote(parts.username or '')}:{password}"
    try:
        sent = pair.encode("latin-1")
    except UnicodeEncodeError:
        sent = pair.encode()
    found = [password, base64.b64encode(sent).decode("ascii")]
    return [credential for credential in found if len(credential) >= RUN]


class KeyScrubber:
    """Text is first checked for a stretch of a key, one set lookup a place (a text holding
    none, as nearly every relayed chunk, passes at that cost: a search of every stretch at
    every place costs as many tries a place as the keys have stretches, thousands for a
    long bearer token), then searched for them all, which masks them."""

    __slots__ = ("_pattern", "_runs", "_sizes")

    def __init__(self, *keys: str | None) -> None:
        """Masks every key of ``keys`` (None or empty ones are none)."""
        self._pattern: re.Pattern[str] | None = None
        runs: set[str] = set()
        for key in keys:
            if key:
                folded = _folded(key)
                size = min(RUN, len(folded))
                runs.update(folded[i : i + size] for i in range(len(folded) - size + 1))
        self._runs = frozenset(runs)
        self._sizes = sorted({len(run) for run in runs})
        """The lengths of the stretches (:data:`RUN`, a shorter key's own)."""
        if runs:
            ordered = sorted(runs, key=lambda run: (-len(run), run))  # the longest first
            alternatives = "|".join(re.escape(run) for run in ordered)
            # A lookahead finds every (overlapping) run; their union is what gets masked.
            self._pattern = re.compile(f"(?=({alternatives}))", re.IGNORECASE)

    def _may_reveal(self, text: str) -> bool:
        """Whether ``text`` may hold a stretch of a key: it does, in any letter case (or
        with letters the search takes alike, :data:`SAME_LETTERS`), or its lower case is
        not as long (a letter that lowers to two: searched)."""
        folded = _folded(text)
        if len(folded) != len(text):
            return True
        runs = self._runs
        return any(
            not runs.isdisjoint([folded[i : i + size] for i in range(len(folded) - size + 1)])
            for size in self._sizes
        )

    @property
    def active(self) -> bool:
        """Whether there is a key to mask (else text passes unread)."""
        return self._pattern is not None

    def __call__(self, text: str) -> str:
        """``text`` with every stretch of a key replaced by :data:`MASK`."""
        if self._pattern is None or not text or not self._may_reveal(text):
            return text
        pieces: list[str] = []
        kept_from = 0
        span_start = span_end = -1
        for match in self._pattern.finditer(text):
            start, end = match.start(1), match.end(1)
            if start <= span_end:  # overlaps or touches the current stretch
                span_end = max(span_end, end)
                continue
            if span_end >= 0:
                pieces += (text[kept_from:span_start], MASK)
                kept_from = span_end
            span_start, span_end = start, end
        if span_end < 0:
            return text
        pieces += (text[kept_from:span_start], MASK, text[span_end:])
        return "".join(pieces)
