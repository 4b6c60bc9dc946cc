"""The HTTP leg to a model server: one pooled aiohttp session per backend, and the single
boundary where transport and HTTP failures become :mod:`stateway.core.errors`.

Errors are classified by status and structured code only. Messages passed on to clients
are the upstream's own, shortened, with the gateway's upstream credential scrubbed.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager, contextmanager
from dataclasses import dataclass
from typing import Any

import aiohttp
import orjson

from stateway.core.errors import (
    GatewayError,
    UpstreamError,
    UpstreamRejected,
    UpstreamTimeout,
    UpstreamUnavailable,
)

_MAX_ERROR_BODY = 16 * 1024
_MAX_MESSAGE = 500


@dataclass(slots=True, frozen=True)
class UpstreamTarget:
    name: str
    base_url: str
    """Including ``/v1``, without a trailing slash."""
    api_key: str | None = None
    connect_timeout: float = 10.0
    read_timeout: float = 600.0
    """The longest silence tolerated between two bytes of a response."""
    max_connections: int = 256


class UpstreamClient:
    def __init__(self, target: UpstreamTarget) -> None:
        self.target = target
        self._session: aiohttp.ClientSession | None = None
        headers = {"Content-Type": "application/json"}
        if target.api_key:
            headers["Authorization"] = f"Bearer {target.api_key}"
        self._headers = headers
        self._timeout = aiohttp.ClientTimeout(
            total=None, connect=target.connect_timeout, sock_read=target.read_timeout
        )

    def _client(self) -> aiohttp.ClientSession:
        if self._session is None or self._session.closed:
            self._session = aiohttp.ClientSession(
                connector=aiohttp.TCPConnector(limit=self.target.max_connections),
                timeout=self._timeout,
                headers=self._headers,
                skip_auto_headers=("User-Agent",),
            )
        return self._session

    @asynccontextmanager
    async def post(self, path: str, body: dict[str, Any]) -> AsyncIterator[aiohttp.ClientResponse]:
        """POST ``body``; yield a 2xx response, or raise the classified error. Failures while
        the caller reads the body are classified too."""
        url = self.target.base_url + path
        with self._failures():
            async with self._client().post(url, data=orjson.dumps(body)) as response:
                if response.status >= 400:
                    raise await self._error(response)
                yield response

    async def list_models(self, within: float = 5.0) -> list[str]:
        """The model ids of the upstream's ``GET /models``."""
        timeout = aiohttp.ClientTimeout(total=within)
        with self._failures():
            async with self._client().get(
                self.target.base_url + "/models", timeout=timeout
            ) as response:
                if response.status >= 400:
                    raise await self._error(response)
                raw = await response.read()
        try:
            body = orjson.loads(raw)
        except orjson.JSONDecodeError:
            body = None
        data = body.get("data") if isinstance(body, dict) else None
        if not isinstance(data, list):
            raise UpstreamError(
                f"The model server '{self.target.name}' sent a malformed model list."
            )
        return [m["id"] for m in data if isinstance(m, dict) and isinstance(m.get("id"), str)]

    @contextmanager
    def _failures(self) -> Iterator[None]:
        """Transport failures inside the block, as the core's upstream errors."""
        name = self.target.name
        try:
            yield
        except GatewayError:
            raise
        except (TimeoutError, aiohttp.ServerTimeoutError) as exc:
            raise UpstreamTimeout(f"The model server '{name}' timed out.") from exc
        except aiohttp.ClientConnectorError as exc:
            raise UpstreamUnavailable(f"The model server '{name}' is unreachable.") from exc
        except aiohttp.ClientPayloadError as exc:  # the body ended before it was complete
            raise cut_short(name) from exc
        except (aiohttp.ClientError, OSError) as exc:
            raise UpstreamError(
                f"The connection to model server '{name}' failed: {type(exc).__name__}."
            ) from exc

    async def aclose(self) -> None:
        if self._session is not None:
            await self._session.close()

    async def _error(self, response: aiohttp.ClientResponse) -> GatewayError:
        raw = await response.content.read(_MAX_ERROR_BODY)
        message, code = _parse_error(raw)
        message = self._scrub(message)
        return classify_status(response.status, message, code, self.target.name, response.headers)

    def _scrub(self, text: str) -> str:
        key = self.target.api_key
        if key and key in text:
            text = text.replace(key, "***")
        return text[:_MAX_MESSAGE]


def classify_status(
    status: int, message: str, code: str | None, backend: str, headers: Any = None
) -> GatewayError:
    """Map an upstream HTTP status (and structured code) to the error the client sees."""
    detail = f"Model server '{backend}' answered {status}" + (f": {message}" if message else ".")
    if status in (401, 403):
        return UpstreamError(
            f"Model server '{backend}' refused the gateway's credentials ({status}).",
            code="upstream_auth_failed",
        )
    if status == 429:
        retry_after = headers.get("Retry-After") if headers is not None else None
        return UpstreamRejected(
            detail,
            status=429,
            code=code or "rate_limit_exceeded",
            headers={"Retry-After": retry_after} if retry_after else None,
        )
    if status == 404:
        return UpstreamRejected(detail, status=404, code=code or "model_not_found")
    if status in (408, 504):
        return UpstreamTimeout(detail)
    if 400 <= status < 500:
        return UpstreamRejected(detail, status=400, code=code or "upstream_rejected")
    return UpstreamError(detail)


def _parse_error(raw: bytes) -> tuple[str, str | None]:
    try:
        body = orjson.loads(raw)
    except orjson.JSONDecodeError:
        return raw.decode("utf-8", "replace").strip(), None
    if isinstance(body, dict):
        error = body.get("error", body)
        if isinstance(error, dict):
            message = error.get("message") or error.get("detail") or ""
            code = error.get("code")
            return str(message), code if isinstance(code, str) else None
        if isinstance(error, str):
            return error, None
        detail = body.get("detail")
        if detail is not None:
            return str(detail), None
    return "", None


def cut_short(backend: str) -> UpstreamError:
    return UpstreamError(
        f"The model server '{backend}' closed the stream before finishing.",
        code="upstream_stream_cut",
    )
