"""Where one backend's model server is, and how it is called: its URL and key, the
headers and body fields every call carries, its deadlines, connection limits and the
largest reply it may send (``[[backends]]``, compiled by :mod:`stateway.app.generation`)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlsplit


@dataclass(slots=True, frozen=True)
class UpstreamTarget:
    name: str
    base_url: str
    """Including ``/v1``, without a trailing slash."""
    api_key: str | None = None
    connect_timeout: float = 10.0
    read_timeout: float = 600.0
    """The longest silence tolerated between two bytes of a response body."""
    max_connections: int = 256
    total_timeout: float = 1800.0
    """The longest one whole call may take, from sending to the last byte read."""
    first_byte_timeout: float | None = None
    """The longest to wait for the response headers; None: ``read_timeout``."""
    first_token_timeout: float | None = None
    """The longest to wait, after the headers, for the first output; None: unbounded
    (``read_timeout`` still bounds every silence)."""
    max_response_bytes: int = 16 * 1024 * 1024
    pool_idle_timeout: float = 4.0
    """How long an idle connection stays pooled; keep it below the upstream's keep-alive."""
    pool_timeout: float = 30.0
    """The longest a call waits for one of ``max_connections`` slots."""
    key_header: str = "Authorization"
    """Where ``api_key`` goes: ``Authorization`` (as ``Bearer KEY``) or another header
    that takes the bare key (Anthropic's ``x-api-key``)."""
    headers: tuple[tuple[str, str], ...] = ()
    """Sent on every call (Anthropic's ``anthropic-version``)."""
    extra_body: Mapping[str, Any] = field(default_factory=dict)
    """Fields every inference call carries unless it sets them itself (``[[backends]]
    extra_body``: a server's own parameters, such as vLLM's ``chat_template_kwargs``)."""

    @property
    def address(self) -> tuple[str, int] | None:
        """The server's host and port (its scheme's port when the URL names none); None
        for a URL without a host, or with a port that is no number."""
        url = urlsplit(self.base_url)
        try:
            port = url.port
        except ValueError:
            return None
        if not url.hostname:
            return None
        return url.hostname, port or (443 if url.scheme == "https" else 80)

    def filled(self, body: dict[str, Any]) -> dict[str, Any]:
        """``body``, given the :attr:`extra_body` fields it does not set (in place)."""
        for key, value in self.extra_body.items():
            body.setdefault(key, value)
        return body
