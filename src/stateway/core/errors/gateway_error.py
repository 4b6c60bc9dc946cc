"""The root of the error tree, and the kinds every branch refines.

A :class:`GatewayError` carries its HTTP status, the OpenAI error ``type`` and ``code``
and, for request errors, the offending ``param``; protocols render it in their own error
shape. :class:`InvalidRequest` and :class:`NotFound` are what a request's own errors
(:mod:`.request`, :mod:`.threads`) are kinds of; :class:`InternalError` is what a bug
becomes.

The official SDKs (``openai``, ``anthropic``) and Claude Code retry an answer by its status
(408, 409, 429 and 5xx) unless it carries ``x-should-retry: false``: an error the same
request meets again (:attr:`GatewayError.retryable` false) carries it
(:data:`NOT_RETRIED`), so the client is told at once rather than after its retries.
"""

from __future__ import annotations

from typing import Final

NOT_RETRIED: Final = {"x-should-retry": "false"}
"""The header by which the SDKs leave an answer they would retry by its status unretried."""
MAX_RETRY_WAIT: Final = 120.0
"""The longest ``Retry-After`` (seconds) the ``openai`` SDK waits out to retry: past it, it
does not retry, while the ``anthropic`` SDK would sleep it through. An answer asking a
longer wait (a rate limit's debt, an upstream's daily quota) is not retryable, the wait
still told."""


class GatewayError(Exception):
    status: int = 500
    type: str = "server_error"
    code: str | None = None
    retryable: bool = True
    """Whether the same request, sent again, may be answered otherwise (the SDKs retry a
    408, 409, 429 or 5xx by themselves): when not, the answer says so (:data:`NOT_RETRIED`)."""

    def __init__(
        self,
        message: str,
        *,
        param: str | None = None,
        code: str | None = None,
        status: int | None = None,
        headers: dict[str, str] | None = None,
        retryable: bool | None = None,
    ) -> None:
        super().__init__(message)
        self.headers = headers or {}
        self.told_retryable(self.retryable if retryable is None else retryable)
        self.message = message
        self.param = param
        if code is not None:
            self.code = code
        if status is not None:
            self.status = status

    def told_retryable(self, retryable: bool) -> None:
        """Tell it as :attr:`retryable` or not from now on: a round's other candidate
        failed for a while only (it may pass), the gateway ran a tool call for the request
        (a retry runs it again)."""
        self.retryable = retryable
        headers = {k: v for k, v in self.headers.items() if k not in NOT_RETRIED}
        self.headers = headers if retryable else {**headers, **NOT_RETRIED}

    def to_dict(self) -> dict[str, str | None]:
        return {"message": self.message, "type": self.type, "param": self.param, "code": self.code}


class InvalidRequest(GatewayError):
    status = 400
    type = "invalid_request_error"


class NotFound(GatewayError):
    status = 404
    type = "invalid_request_error"
    code = "not_found"


class InternalError(GatewayError):
    status = 500
    type = "server_error"
    code = "internal_error"

    def __init__(self) -> None:
        super().__init__("The gateway failed to handle the request.")
