"""The identity provider's documents (its discovery document, its key set), fetched for
:mod:`.oidc`.

Every token that needs a key waits on a fetch, so a fetch is bounded in all: ``timeout``
seconds for the whole of it (connecting, the answer's head, its body: a provider
trickling its answer a byte at a time is not waited out read by read), and
``MAX_DOCUMENT`` bytes (a key set is a few kilobytes; a larger answer is refused unread,
not held in memory). A redirect is not followed: the documents are named by the issuer's
own URL, and a key set fetched from where a redirect points is not the issuer's. A proxy
named by the environment (``HTTPS_PROXY``) is used.
"""

from __future__ import annotations

import asyncio
import json
from typing import Any, Final

import aiohttp

from stateway.response_bodies import read_capped

MAX_DOCUMENT: Final = 1 << 20
"""Bytes a discovery document or key set may have."""


class DocumentUnusable(Exception):
    """A document that could not be fetched, or is no JSON object; the message says why
    (for the log: it names no token)."""


async def fetch_document(url: str, what: str, seconds: float) -> dict[str, Any]:
    """The JSON object at ``url``, within ``seconds`` in all. Raises
    :class:`DocumentUnusable`, its message naming the document as ``what``."""
    try:
        async with (
            asyncio.timeout(seconds),
            aiohttp.ClientSession(
                timeout=aiohttp.ClientTimeout(total=None), trust_env=True
            ) as session,
            session.get(
                url, headers={"Accept": "application/json"}, allow_redirects=False
            ) as answer,
        ):
            if answer.status != 200:
                raise DocumentUnusable(f"{what} was answered with HTTP {answer.status}")
            body = await read_capped(answer, MAX_DOCUMENT)
            if body is None:
                raise DocumentUnusable(f"{what} is larger than {MAX_DOCUMENT} bytes")
    except TimeoutError:
        raise DocumentUnusable(f"{what} took longer than {seconds:g}s") from None
    except (aiohttp.ClientError, OSError) as exc:
        raise DocumentUnusable(f"{what} could not be fetched: {exc}") from None
    try:
        document = json.loads(body)
    except ValueError:
        raise DocumentUnusable(f"{what} is not JSON") from None
    if not isinstance(document, dict):
        raise DocumentUnusable(f"{what} is not a JSON object")
    return document
