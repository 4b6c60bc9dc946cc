"""A client's session, named in a request header: one more name its chain is known by
for cache affinity (:mod:`stateway.core.routing.affinity`).

Agent clients that keep no state on the server (every turn sends the whole conversation)
still name their session: Claude Code in ``X-Claude-Code-Session-Id`` on every request,
opencode (and Fireworks' convention) in ``x-session-affinity``. Their turns then keep to
the candidate holding their prefix, as a ``previous_response_id`` chain's do. The first
such header is taken; a value longer than :data:`MAX_LENGTH` (no client's id is) names
nothing, so the affinity table, bounded in entries, is bounded in bytes too.
"""

from __future__ import annotations

from typing import Final

from starlette.types import Scope

HEADERS: Final = frozenset({b"x-claude-code-session-id", b"x-session-affinity"})
"""Lower-case, as ASGI servers give header names."""

MAX_LENGTH: Final = 128


def session_of(scope: Scope) -> str | None:
    """The session the request's headers name, or None."""
    for key, value in scope["headers"]:
        if key in HEADERS:
            return value.decode("latin-1") if 0 < len(value) <= MAX_LENGTH else None
    return None
