"""The HTTP leg to a search API: one lazily created aiohttp session per provider, and the one
place where transport and HTTP failures become :class:`ToolFailure` messages (an HTTP error
status kept as the failure's ``http`` error).

Messages are written here, never copied from the search API's response: they reach the
model and the client, so they name the provider and the kind of failure (timed out, API key
rejected, rate limited, unavailable, unreadable answer) and nothing else. The API key is in
a header only; as a second guard every message is scrubbed of it before it is raised. A
failure's detail is logged for the operator, except aiohttp's error for an answer that is
not HTTP, whose repr holds the request's headers (the key) and URL (the query).

Each request (headers, body and JSON decoding together) runs under ``asyncio.timeout`` of
the configured seconds. A cancelled request (the tool executor's own deadline) leaves the
session usable: aiohttp closes the half-read connection instead of pooling it.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Mapping
from typing import Any

import aiohttp
import orjson

from stateway.core.tools.ports import ToolError, ToolFailure
from stateway.response_bodies import read_capped

log = logging.getLogger(__name__)

MAX_RESPONSE_BYTES = 4 * 1024 * 1024
"""A search answer larger than this is refused: it cannot be a page of hits."""
MAX_ERROR_BYTES = 16 * 1024

ErrorClassifier = Callable[[int, Any], "str | None"]
"""``(status, decoded error body or None)`` -> the failure message, or None for the
generic one of the status. Lets a provider read its structured error codes."""


class SearchTransport:
    """GET or POST one JSON request to a search API; return the decoded JSON body."""

    def __init__(
        self,
        provider: str,
        *,
        timeout: float,
        headers: Mapping[str, str] | None = None,
        secret: str | None = None,
        classify_error: ErrorClassifier | None = None,
    ) -> None:
        self.provider = provider
        """The name shown in failure messages (``SearXNG``, ``Brave Search``, ``Tavily``)."""
        self._timeout = timeout
        self._headers = dict(headers or {})
        self._secret = secret
        self._classify_error = classify_error
        self._session: aiohttp.ClientSession | None = None

    async def get(self, url: str, params: Mapping[str, str]) -> Any:
        return await self._request("GET", url, params=params)

    async def post(self, url: str, body: Mapping[str, Any]) -> Any:
        return await self._request("POST", url, data=orjson.dumps(body))

    async def aclose(self) -> None:
        session, self._session = self._session, None
        if session is not None:
            await session.close()

    async def _request(
        self,
        method: str,
        url: str,
        *,
        params: Mapping[str, str] | None = None,
        data: bytes | None = None,
    ) -> Any:
        try:
            async with asyncio.timeout(self._timeout):
                return await self._exchange(method, url, params, data)
        except TimeoutError:
            message = f"{self.provider} search timed out after {self._timeout:g}s"
            raise self._failure(message) from None
        except aiohttp.ClientConnectorError as exc:
            raise self._failure(f"{self.provider} is unreachable") from exc
        except aiohttp.ClientResponseError as exc:  # its status line or headers unparsed
            # Not logged: its repr holds the request's headers (the key) and URL (the query).
            raise self._failure(f"{self.provider} sent an answer that is not HTTP") from exc
        except aiohttp.ClientError as exc:
            log.warning("the connection to %s failed: %r", self.provider, exc)
            raise self._failure(f"The connection to {self.provider} failed") from exc

    async def _exchange(
        self, method: str, url: str, params: Mapping[str, str] | None, data: bytes | None
    ) -> Any:
        headers = {"Content-Type": "application/json"} if data is not None else None
        async with self._client().request(
            # Not followed: the key travels in a header (Brave's X-Subscription-Token is not
            # one aiohttp drops on a redirect to another origin), and a search API answers.
            method,
            url,
            params=params,
            data=data,
            headers=headers,
            allow_redirects=False,
        ) as response:
            if response.status != 200:
                message = await self._status_message(response)
                raise self._failure(message, status=response.status)
            body = await self._read(response)
        try:
            return orjson.loads(body)
        except orjson.JSONDecodeError:
            raise self._failure(f"{self.provider} returned invalid JSON") from None

    async def _read(self, response: aiohttp.ClientResponse) -> bytes:
        body = await read_capped(response, MAX_RESPONSE_BYTES)
        if body is None:
            raise self._failure(f"{self.provider} returned an oversized answer")
        return body

    async def _status_message(self, response: aiohttp.ClientResponse) -> str:
        status = response.status
        if self._classify_error is not None:
            message = self._classify_error(status, await _error_body(response))
            if message is not None:
                return message
        name = self.provider
        if 300 <= status < 400:
            return f"{name} redirected the search (HTTP {status}); configure its final URL"
        if status == 401:
            return f"{name} rejected the API key (HTTP 401)"
        if status == 403:
            return f"{name} refused the search (HTTP 403)"
        if status == 429:
            return f"{name} rate limited the search (HTTP 429); try again later"
        if status >= 500:
            return f"{name} is unavailable (HTTP {status})"
        return f"{name} rejected the search (HTTP {status})"

    def _failure(self, message: str, *, status: int | None = None) -> ToolFailure:
        """An error status is kept as an ``http`` error: what names the cause (a 429 is
        ``too_many_requests`` on the Messages API) whatever the message says."""
        if self._secret:
            message = message.replace(self._secret, "***")
        return ToolFailure(message if status is None else ToolError.http(status, message))

    def _client(self) -> aiohttp.ClientSession:
        if self._session is None or self._session.closed:
            self._session = aiohttp.ClientSession(
                headers=self._headers,
                timeout=aiohttp.ClientTimeout(total=None),  # the asyncio.timeout above rules
                raise_for_status=False,
            )
        return self._session


async def _error_body(response: aiohttp.ClientResponse) -> Any:
    """The decoded JSON of an error response, or None (not JSON, or too large)."""
    raw = await read_capped(response, MAX_ERROR_BYTES)
    if raw is None:
        return None
    try:
        return orjson.loads(raw)
    except orjson.JSONDecodeError:
        return None
