"""Whether a caller gets in: its credential (missing, wrong, expired, revoked), where that
credential reaches, the identity provider that checks it, and its rate limits."""

from __future__ import annotations

import math
from typing import Literal

from stateway.core.errors.gateway_error import MAX_RETRY_WAIT, GatewayError
from stateway.core.errors.unavailable import Unavailable


class Unauthorized(GatewayError):
    """A missing, malformed, wrong, expired or revoked credential. The message never
    holds the credential."""

    status = 401
    type = "invalid_request_error"
    code = "invalid_api_key"

    def __init__(self, message: str) -> None:
        super().__init__(message, headers={"WWW-Authenticate": "Bearer"})


class CredentialRevoked(Unauthorized):
    """The credential a long-lived connection (a WebSocket, an SSE or MCP stream) was
    opened with, no longer holding since: an API key revoked or gone from the store, or a
    credential expired. It will not work again, so the connection ends."""


class Forbidden(GatewayError):
    """A valid credential that does not reach this route (a tenant's credential on an
    admin route, the admin credential on a tenant's)."""

    status = 403
    type = "invalid_request_error"
    code = "permission_denied"


class IdentityUnavailable(Unavailable):
    """The identity provider (OIDC discovery or its JWKS) could not be reached or gave
    no usable answer, so a token could not be checked; ``Retry-After`` is how long the
    verifier waits before asking it again (a retry sooner meets the same failure)."""

    code = "identity_provider_unavailable"


class RateLimited(GatewayError):
    """A principal used up its requests or tokens per minute, or holds all its concurrent
    requests (``[rate_limits]``). OpenAI types the error by what ran out (``requests`` or
    ``tokens``; concurrent requests are ``requests``); ``Retry-After`` is in whole
    seconds, rounded up (a wait past the SDKs' retries, a debt of tokens, not
    retryable)."""

    status = 429
    code = "rate_limit_exceeded"

    def __init__(
        self,
        kind: Literal["requests", "tokens"],
        limit: int,
        wait: float,
        *,
        message: str | None = None,
    ) -> None:
        seconds = max(1, math.ceil(round(wait, 6)))  # not 21 for 20.000000000000004
        super().__init__(
            message
            or f"Rate limit reached on {kind} per minute (limit {limit}). "
            f"Please try again in {seconds}s.",
            headers={"Retry-After": str(seconds)},
            retryable=seconds <= MAX_RETRY_WAIT,  # else the anthropic SDK sleeps it through
        )
        self.type = kind
        self.retry_after = seconds

    @classmethod
    def concurrent(cls, limit: int) -> RateLimited:
        """Every one of a principal's ``limit`` concurrent requests is in flight."""
        message = f"Too many concurrent requests (limit {limit}): wait for one to end."
        return cls("requests", limit, 1.0, message=message)
