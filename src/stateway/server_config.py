"""The configuration's ``[server]`` table: where the gateway listens, the Host names it
answers to, and the bounds it keeps on each client (a request's body and header block, an
idle or unread connection, requests waiting for an upstream). Environment:
``STATEWAY_HOST`` and ``STATEWAY_PORT`` (also the ``--host`` and ``--port`` flags, read with
the other flags in :mod:`stateway.config`), and a variable per bound (:data:`SERVER_ENV`).
"""

from __future__ import annotations

import ipaddress
from collections.abc import Callable, Mapping
from typing import Any, Final
from urllib.parse import urlsplit

from pydantic import Field, field_validator

from stateway.config_section import Section
from stateway.exposure import is_loopback

HOST_ENV: Final = "STATEWAY_HOST"
PORT_ENV: Final = "STATEWAY_PORT"

LOOPBACK_NAMES: tuple[str, ...] = ("127.0.0.1", "localhost", "::1", "[::1]")
"""Host names a loopback-bound server answers to by default (DNS-rebinding guard)."""


class ServerConfig(Section):
    host: str = "127.0.0.1"
    port: int = Field(default=8080, ge=0, le=65535)
    max_body_bytes: int = Field(default=32 * 1024 * 1024, ge=1024)
    """Requests with a larger body are refused with 413."""
    request_body_timeout: float = Field(default=30.0, gt=0)
    """The longest a client may take to send a whole request body (408 after; a 400 on
    the Messages routes, as hosted Anthropic answers it)."""
    max_header_bytes: int = Field(default=64 * 1024, ge=1024)
    """Requests with a larger header block (request line included) are refused with 431."""
    header_timeout: float = Field(default=30.0, gt=0)
    """The longest a client may take to send a request's headers (closed after)."""
    keep_alive_timeout: int = Field(default=75, ge=1)
    """Seconds a connection idle between requests is kept open. Longer than clients' own
    idle expiry (httpx, so the openai and anthropic SDKs: 5 s) and load balancers' (60 s
    on AWS's): else the gateway may close a connection just as a client reuses it, and
    that request fails ("Server disconnected")."""
    send_timeout: float = Field(default=60.0, gt=0)
    """The longest a client may take none of the output waiting for it (a stream it
    stopped reading, its connection kept open): the connection is then dropped, as if the
    client had left (nginx's ``send_timeout``)."""
    max_input_items: int = Field(default=10_000, ge=1)
    """Input items one request may carry (400 beyond)."""
    drain_timeout: float = Field(default=30.0, ge=0)
    """On SIGTERM: how long in-flight requests may finish before they are ended."""
    max_queued_requests: int = Field(default=1024, ge=0)
    """Requests that may wait for an upstream connection slot at once; beyond this, new
    requests are refused up front with 503 ``overloaded``."""
    allowed_hosts: list[str] | None = None
    """``Host`` header names accepted (without port, in any case, with or without a fully
    qualified name's final dot; ``"*.example.com"`` accepts any subdomain of
    ``example.com``, ``"*"`` any host). Default: the loopback names when bound to a
    loopback address, any host otherwise."""
    cors_origins: list[str] = Field(default_factory=list)
    """Web pages' origins (``https://app.example.com``, ``http://localhost:5173``) whose
    scripts may call the gateway from a browser (CORS), open a WebSocket to it and drive
    ``/mcp``; ``"*"``: any page's. Default: none, and no CORS headers are sent."""

    @field_validator("allowed_hosts")
    @classmethod
    def _served_names(cls, hosts: list[str] | None) -> list[str] | None:
        """Each entry as the Host check compares it (:func:`served_name`)."""
        if hosts is None:
            return None
        names = [served_name(host) for host in hosts if host.strip()]
        if not names:  # else every request is refused (421)
            raise ValueError(
                "names no host, so every request would be refused; '*' serves any host, "
                "and leaving the setting out the default"
            )
        for name in names:
            if "*" in name and name != "*" and not _subdomain_wildcard(name):
                raise ValueError(
                    f"allowed_hosts entry {name!r}: a wildcard is '*' (any host) or a whole "
                    "first label ('*.example.com': any subdomain of example.com)"
                )
        return names

    @field_validator("cors_origins")
    @classmethod
    def _serialized_origins(cls, origins: list[str]) -> list[str]:
        """Each entry as a browser's ``Origin`` header writes it (:func:`serialized_origin`)."""
        return [serialized_origin(origin) for origin in origins if origin.strip()]

    @property
    def effective_allowed_hosts(self) -> frozenset[str] | None:
        """The accepted host names, or None when any host is accepted."""
        if self.allowed_hosts is not None:
            hosts = frozenset(h.lower() for h in self.allowed_hosts)
            return None if "*" in hosts else hosts
        if is_loopback(self.host):  # however written: the exposure check's rule
            return frozenset(LOOPBACK_NAMES) | {served_name(self.host)}
        return None


def served_name(entry: str) -> str:
    """An ``allowed_hosts`` entry as a request's ``Host`` is compared with it: lower-case,
    without a port (``gw.internal:8080``), an IPv6 address in brackets (``::1`` is
    ``[::1]``), as a ``Host`` header writes it."""
    name = entry.strip().lower()
    try:
        ipaddress.IPv6Address(name)
    except ValueError:
        pass
    else:
        return f"[{name}]"
    if name.startswith("["):
        end = name.find("]")
        return name[: end + 1] if end > 0 else name
    return name.partition(":")[0]


def serialized_origin(entry: str) -> str:
    """A ``cors_origins`` entry as a browser sends the origin in ``Origin``: lower-case,
    without a final ``/`` or an http(s) scheme's default port (``https://App.example.com:443/``
    is ``https://app.example.com``); ``"*"`` as it is. ``ValueError`` for anything but a
    scheme and a host (and a port): a path, a wildcard in a name, user info."""
    origin = entry.strip().lower()
    if origin == "*":
        return origin
    try:
        parts = urlsplit(origin.removesuffix("/"))
        port = parts.port
    except ValueError:
        parts, port = None, None
    if (
        parts is None
        or not parts.scheme
        or not parts.hostname
        or "*" in origin
        or "@" in parts.netloc
        or parts.path
        or parts.query
        or parts.fragment
    ):
        raise ValueError(
            f"cors_origins entry {entry!r}: an origin is a scheme and a host, and a port "
            "if not the default ('https://app.example.com', 'http://localhost:5173'), "
            "or '*' for any"
        )
    if port is not None and _DEFAULT_PORTS.get(parts.scheme) == port:
        return f"{parts.scheme}://{parts.netloc.rpartition(':')[0]}"
    return f"{parts.scheme}://{parts.netloc}"


_DEFAULT_PORTS: Final = {"http": 80, "https": 443}
"""The ports a browser leaves out of an origin."""


def _subdomain_wildcard(name: str) -> bool:
    """Whether ``name`` is ``*.`` and a domain without wildcards: ``*.example.com``."""
    domain = name.removeprefix("*.")
    return domain != name and "*" not in domain and domain.strip(".") != ""


def apply_server_env(
    data: dict[str, Any], env: Mapping[str, str], *, host: str | None, port: int | str | None
) -> None:
    """Set ``[server]`` from the flags' (or the environment's) ``host`` and ``port`` and from
    the environment's bounds (over the file's) in ``data``, the file's tables. A value that
    does not parse is a ``ValueError`` naming its variable."""
    server = dict(data.get("server", {}))
    if host is not None:
        server["host"] = host
    if port is not None:
        server["port"] = _port(port)
    for key, (var, parse) in SERVER_ENV.items():
        if env.get(var):
            server[key] = parse(env[var], var)
    data["server"] = server


def _port(value: int | str) -> int:
    """The flag's (an int already), or ``STATEWAY_PORT``'s."""
    return value if isinstance(value, int) else _int(value, PORT_ENV)


def _int(value: str, name: str) -> int:
    try:
        return int(value)
    except ValueError:
        raise ValueError(f"{name} must be an integer, got {value!r}") from None


def _float(value: str, name: str) -> float:
    try:
        return float(value)
    except ValueError:
        raise ValueError(f"{name} must be a number, got {value!r}") from None


def _listed(value: str, name: str) -> list[str]:
    """A comma-separated list."""
    return [entry.strip() for entry in value.split(",") if entry.strip()]


SERVER_ENV: dict[str, tuple[str, Callable[[str, str], Any]]] = {
    "max_body_bytes": ("STATEWAY_MAX_BODY_BYTES", _int),
    "request_body_timeout": ("STATEWAY_REQUEST_BODY_TIMEOUT", _float),
    "max_header_bytes": ("STATEWAY_MAX_HEADER_BYTES", _int),
    "header_timeout": ("STATEWAY_HEADER_TIMEOUT", _float),
    "keep_alive_timeout": ("STATEWAY_KEEP_ALIVE_TIMEOUT", _int),
    "send_timeout": ("STATEWAY_SEND_TIMEOUT", _float),
    "max_input_items": ("STATEWAY_MAX_INPUT_ITEMS", _int),
    "drain_timeout": ("STATEWAY_DRAIN_TIMEOUT", _float),
    "max_queued_requests": ("STATEWAY_MAX_QUEUED_REQUESTS", _int),
    "allowed_hosts": ("STATEWAY_ALLOWED_HOSTS", _listed),
    "cors_origins": ("STATEWAY_CORS_ORIGINS", _listed),
}
"""``[server]`` keys settable from the environment, with their variable and parser."""
