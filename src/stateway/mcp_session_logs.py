"""Keeping MCP session ids out of the ``mcp`` SDK's log records.

A session's id (``mcp-session-id``) is a bearer-like handle: whoever holds it and the
credential that opened the session acts in it. The SDK names it in records it writes at
``info`` and above, and libraries log at ``info`` here (:mod:`stateway.telemetry.logs`):
its Streamable HTTP server (the gateway's ``/mcp``) when a session opens, ends, idles or
crashes, when a request names an unknown one, and, at ``warning``, when a request with
another credential names one; its Streamable HTTP client (the gateway calling an MCP
server) when a server gives it one. :class:`SessionIdMask`, on those loggers, keeps each
record's message and replaces the id with :func:`masked`: a digest's prefix, the same for
one id each time, so a session's records still read as one, revealing nothing of the id
(nor of a made-up one a client sent, which may be anything).

It imports nothing of the gateway's but :mod:`stateway.redaction`, so that both the MCP
surface and the MCP client install it (:func:`mask_session_ids`).
"""

from __future__ import annotations

import hashlib
import logging
import re
from typing import Final

from stateway.redaction import MASK

LOGGERS: Final = (
    "mcp.server.streamable_http_manager",
    "mcp.server.streamable_http",
    "mcp.client.streamable_http",
)
"""The SDK's loggers whose records name a session."""
_NAMING: Final = tuple(
    re.compile(pattern, re.DOTALL)
    for pattern in (
        r"(Rejecting request for session )(.*)(: credential does not match the one that "
        r"created the session)\Z",
        r"(Rejected request with unknown or expired session ID: )(.*)()\Z",
        r"(Created new transport with session ID: )(.*)()\Z",
        r"(Terminating session: )(.*)()\Z",
        r"(Received session ID: )(.*)()\Z",
        r"(Session )(.*)( idle timeout| crashed)\Z",
    )
)
"""The SDK's messages that name a session, the id (whatever a client sent) the second
group: matched in full, so an id holding the words after it is masked whole."""
_SESSION_ID: Final = re.compile(r"(?<![0-9A-Za-z])[0-9a-f]{32}(?![0-9A-Za-z])")
"""An id the SDK makes (``uuid4().hex``), in a message not among :data:`_NAMING`."""


def masked(session_id: str) -> str:
    """``session_id`` as the log shows it."""
    return f"{MASK}#{hashlib.sha256(session_id.encode(errors='replace')).hexdigest()[:8]}"


class SessionIdMask(logging.Filter):
    """Masks the session id in each record it sees (passing every record)."""

    def filter(self, record: logging.LogRecord) -> bool:
        message = record.getMessage()
        for naming in _NAMING:
            if (match := naming.match(message)) is not None:
                before, session_id, after = match.groups()
                masked_message = f"{before}{masked(session_id)}{after}"
                break
        else:
            masked_message = _SESSION_ID.sub(lambda found: masked(found[0]), message)
        if masked_message != message:
            record.msg = masked_message
            record.args = None
        return True


_MASK: Final = SessionIdMask()


def mask_session_ids() -> None:
    """Install the mask on the SDK's loggers (once, however often called)."""
    for name in LOGGERS:
        logger = logging.getLogger(name)
        if _MASK not in logger.filters:
            logger.addFilter(_MASK)
