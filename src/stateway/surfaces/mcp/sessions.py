"""The ``mcp`` SDK's Streamable HTTP session manager, each tenant's share of its sessions
bounded.

The SDK bounds the sessions of a process (``max_sessions``: beyond, opening one is a
503) but not who holds them, so one tenant opening sessions without end (an
``initialize`` request each) would keep every other tenant from opening one until its
sessions went idle. Here a session is refused to a tenant that holds ``tenant_sessions``
already (a 429, :class:`TenantSessionsFull`), decided where the SDK admits a session:
under its lock, so concurrent openings cannot all pass. A session's tenant is the
``client_id`` the surface gives the SDK for the caller (``server.py``).
"""

from __future__ import annotations

from typing import Any

from mcp.server.auth.middleware.bearer_auth import AuthorizationContext
from mcp.server.streamable_http import StreamableHTTPServerTransport
from mcp.server.streamable_http_manager import StreamableHTTPSessionManager

from stateway.core.errors import InvalidRequest


class TenantSessionsFull(InvalidRequest):
    """A tenant opening a session while it holds as many as it may."""

    def __init__(self, limit: int) -> None:
        super().__init__(
            f"This tenant has {limit} MCP sessions open, as many as it may; end one "
            "(DELETE /mcp with its mcp-session-id) or let one go idle first.",
            code="too_many_sessions",
            status=429,
        )


class TenantSessionManager(StreamableHTTPSessionManager):
    def __init__(self, app: Any, *, tenant_sessions: int | None, **options: Any) -> None:
        """``tenant_sessions``: sessions one tenant may hold (None: no share of its own);
        ``options``: the SDK manager's."""
        super().__init__(app, **options)
        self._tenant_sessions = tenant_sessions

    def _admit_session(
        self, requestor: AuthorizationContext | None
    ) -> StreamableHTTPServerTransport | None:
        limit = self._tenant_sessions
        if limit is not None and requestor is not None:
            tenant = requestor["client_id"]
            held = sum(1 for owner in self._session_owners.values() if owner["client_id"] == tenant)
            if held >= limit:
                raise TenantSessionsFull(limit)
        return super()._admit_session(requestor)
