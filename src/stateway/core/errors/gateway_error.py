"""The root of the error tree, and the kinds every branch refines.

A :class:`GatewayError` carries its HTTP status, the OpenAI error ``type`` and ``code``
and, for request errors, the offending ``param``; protocols render it in their own error
shape. :class:`InvalidRequest` and :class:`NotFound` are what a request's own errors
(:mod:`.request`, :mod:`.threads`) are kinds of; :class:`InternalError` is what a bug
becomes.
"""

from __future__ import annotations


class GatewayError(Exception):
    status: int = 500
    type: str = "server_error"
    code: str | None = None

    def __init__(
        self,
        message: str,
        *,
        param: str | None = None,
        code: str | None = None,
        status: int | None = None,
        headers: dict[str, str] | None = None,
    ) -> None:
        super().__init__(message)
        self.headers = headers or {}
        self.message = message
        self.param = param
        if code is not None:
            self.code = code
        if status is not None:
            self.status = status

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
