"""How a transport failure on the HTTP leg to a model server becomes the core's upstream
error (an HTTP error status is :mod:`stateway.backends.upstream_status`'s): a connection
not accepted within ``connect_timeout``, silence past ``read_timeout``, a call past
``total_timeout`` (a listing past its own deadline), a body cut short, a connection
broken, a TLS certificate that does not verify (not retryable: a CA or URL to
configure), each told in words rather than the client library's class names.
:class:`~stateway.backends.upstream_http.UpstreamClient` keeps one
:class:`TransportFailures` for its calls (and the replies and relays it hands out) and makes
one for each listing, which has a deadline of its own.
"""

from __future__ import annotations

import errno
import logging
from types import TracebackType

import aiohttp

from stateway.backends.upstream_reply import cut_short
from stateway.backends.upstream_target import UpstreamTarget
from stateway.core.errors import (
    GatewayError,
    UpstreamError,
    UpstreamTimeout,
    UpstreamUnavailable,
)

log = logging.getLogger(__name__)


class TransportFailures:
    """:meth:`~stateway.backends.upstream_http.UpstreamClient._failures`: transport
    failures inside the block, as the core's upstream errors (a :class:`GatewayError`
    passes as it is). A class rather than a ``contextmanager``, whose generator cost about
    7,000 more CPU instructions a block."""

    __slots__ = ("_asked", "_listing", "_target")

    def __init__(self, target: UpstreamTarget, listing: float | None, asked: str) -> None:
        self._target = target
        self._listing = listing
        self._asked = asked

    def __enter__(self) -> None:
        return None

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        if exc is not None:
            self.raise_from(exc)

    def raise_from(self, exc: BaseException) -> None:
        """Raise the upstream error ``exc`` is, if it is a transport failure (nothing for
        what is not: a :class:`GatewayError` already, a cancellation)."""
        error = self._translated(exc)
        if error is not None:
            try:
                raise error from exc
            finally:
                del error  # this frame is on its traceback: not kept there, no cycle

    def _translated(self, exc: BaseException) -> UpstreamError | None:
        if isinstance(exc, GatewayError):
            return None
        target = self._target
        name = target.name
        if isinstance(exc, aiohttp.ConnectionTimeoutError):
            return UpstreamTimeout(
                f"The model server '{name}' did not accept a connection within "
                f"{target.connect_timeout:g} s."
            )
        if isinstance(exc, aiohttp.SocketTimeoutError):
            return UpstreamTimeout(
                f"The model server '{name}' sent nothing for {target.read_timeout:g} s "
                "(read_timeout)."
            )
        if isinstance(exc, TimeoutError):  # the whole-call deadline (a listing's: aiohttp's)
            if self._listing is not None:
                asked = self._asked
                what = "list its models" if asked == "/models" else f"answer GET {asked}"
                return UpstreamTimeout(
                    f"The model server '{name}' did not {what} within {self._listing:g} s."
                )
            return UpstreamTimeout(
                f"The model server '{name}' did not finish within "
                f"{target.total_timeout:g} s (total_timeout)."
            )
        if isinstance(exc, aiohttp.ClientConnectorCertificateError):  # its CA, or its URL
            return UpstreamUnavailable(
                f"The model server '{name}' presented a TLS certificate that could not be "
                "verified.",
                retryable=False,
            )
        if isinstance(exc, aiohttp.ClientConnectorError):
            return UpstreamUnavailable(f"The model server '{name}' is unreachable.")
        if isinstance(exc, aiohttp.ClientPayloadError):  # the body ended before it was complete
            return cut_short(name)
        if isinstance(exc, aiohttp.ClientError | OSError):
            return broken_connection(name, exc)
        return None


def broken_connection(name: str, exc: aiohttp.ClientError | OSError) -> UpstreamError:
    """A connection failure told in words, not in the client library's class names; one
    the words do not cover is logged with its detail."""
    if isinstance(exc, aiohttp.ServerDisconnectedError):
        return UpstreamError(f"The model server '{name}' closed the connection.")
    if isinstance(exc, OSError) and exc.errno == errno.ECONNRESET:
        return UpstreamError(f"The model server '{name}' reset the connection.")
    if isinstance(exc, aiohttp.ClientResponseError):  # its status line or headers unparsed
        return UpstreamError(f"The model server '{name}' sent an answer that is not HTTP.")
    log.warning("the connection to model server %s failed: %r", name, exc)
    return UpstreamError(f"The connection to model server '{name}' failed.")
