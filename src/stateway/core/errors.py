"""The one error tree of the gateway.

Every error a client can see is a :class:`GatewayError` carrying its HTTP status, the
OpenAI error ``type`` and ``code`` and, for request errors, the offending ``param``.
Protocols render it in their own error shape; nothing classifies errors by message text
(but an upstream 429's ``type``, ``tokens`` or ``requests``, which only its words tell:
:func:`rate_limit_type`).

    GatewayError
    ├── InvalidRequest            400 invalid_request_error
    │   ├── BodyTimeout           408 code=request_timeout (the body did not arrive in time:
    │   │                             the connection is closed)
    │   ├── ContextTooLong        400 code=context_length_exceeded (the gateway's own window
    │   │                             check: with the estimated tokens and the window)
    │   ├── PreviousResponseNotFound   400 code=previous_response_not_found
    │   ├── ResponseInProgress    400 code=response_in_progress
    │   ├── UncarriedPart         400 code=unsupported_content_type (a content part the
    │   │                             backend's upstream API cannot carry: its type, the
    │   │                             backend's name)
    │   └── ConfigRejected        400 code=config_invalid (a reload; the last good serves on)
    ├── Unauthorized              401 code=invalid_api_key (a missing, wrong, expired or
    │   │                             revoked credential: API key, token, admin key)
    │   └── CredentialRevoked     401 (the credential a connection was opened with, revoked
    │                                 or expired since: the connection is closed)
    ├── Forbidden                 403 code=permission_denied (a credential used where it
    │                                 does not reach: a tenant's on an admin route)
    ├── RequestTooLarge           413 invalid_request_error
    ├── NotFound                  404 invalid_request_error
    │   ├── ModelNotFound         404 code=model_not_found
    │   ├── ResponseNotFound      404 param=response_id (a retrieve, delete, cancel or watch)
    │   └── ConversationNotFound  404 (also an unknown conversation named by a response)
    ├── ConversationLocked        409 code=conversation_locked (another turn holds it)
    ├── IdempotencyKeyReused      409 code=idempotency_key_reused (the id named another request)
    ├── RateLimited               429 type=requests|tokens code=rate_limit_exceeded, Retry-After
    ├── UpstreamError             502 upstream_error (any upstream failure, status mapped)
    │   ├── UpstreamTimeout       504
    │   ├── UpstreamUnavailable   502 (connect refused, DNS, ...); 503 when upstream said 503
    │   ├── UpstreamResponseTooLarge  502 code=upstream_response_too_large
    │   └── UpstreamRejected      4xx the model server refused the request itself
    ├── Overloaded                503 code=overloaded, Retry-After (the gateway's own queue)
    ├── StorageError              503 server_error
    ├── IdentityUnavailable       503 code=identity_provider_unavailable (OIDC discovery
    │                                 or JWKS unreachable)
    ├── ServerShuttingDown        503 code=server_shutting_down
    ├── ServerRestarted           503 code=server_restarted (its process judged stopped)
    └── InternalError             500 server_error (a gateway bug, logged; no details leak)
"""

from __future__ import annotations

import math
import re
from typing import Final, Literal


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


class UncarriedPart(InvalidRequest):
    """A content part of the request's input that the backend's upstream API cannot carry
    (``param`` names it): its ``part_type`` and the ``backend``'s name, by which a frontend
    words the refusal its own way."""

    code = "unsupported_content_type"

    def __init__(self, message: str, *, param: str, part_type: str, backend: str) -> None:
        super().__init__(message, param=param)
        self.part_type = part_type
        self.backend = backend


class BodyTimeout(InvalidRequest):
    """A request body that did not arrive within ``within`` seconds
    (``[server] request_body_timeout``): answered, then the connection is closed."""

    status = 408
    code = "request_timeout"

    def __init__(self, within: float) -> None:
        super().__init__(
            f"The request body did not arrive within {within:g} seconds.",
            headers={"Connection": "close"},
        )


class PreviousResponseNotFound(InvalidRequest):
    code = "previous_response_not_found"

    def __init__(self, response_id: str) -> None:
        super().__init__(
            f"Previous response with id '{response_id}' not found.",
            param="previous_response_id",
        )


class ConfigRejected(InvalidRequest):
    """A configuration reload failed; the message says why. The generation in effect
    serves on."""

    code = "config_invalid"


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


class IdentityUnavailable(GatewayError):
    """The identity provider (OIDC discovery or its JWKS) could not be reached or gave
    no usable answer, so a token could not be checked."""

    status = 503
    type = "server_error"
    code = "identity_provider_unavailable"


class RequestTooLarge(GatewayError):
    status = 413
    type = "invalid_request_error"
    code = "request_too_large"


class NotFound(GatewayError):
    status = 404
    type = "invalid_request_error"
    code = "not_found"


CONTEXT_LENGTH_EXCEEDED: Final = "context_length_exceeded"
"""The code of a context too long for the model, the gateway's estimate or an upstream's
refusal (what clients act on: Codex compacts)."""
IMAGE_INPUT_UNSUPPORTED: Final = "image_input_unsupported"
"""The code of an upstream's refusal of an image its model cannot take (a text-only model:
vLLM's ``... is not a multimodal model``)."""
PROMPT_TOO_LONG: Final = "prompt is too long"
"""Anthropic's words for a context too long (its error has no code): what an Anthropic
upstream's refusal starts with, and what Claude Code looks for."""


class ContextTooLong(InvalidRequest):
    """A context larger than a candidate's ``context_window``, by the gateway's estimate:
    ``tokens`` and that ``window`` (Anthropic's wording needs both)."""

    code = CONTEXT_LENGTH_EXCEEDED

    def __init__(self, message: str, *, tokens: int, window: int, param: str = "input") -> None:
        super().__init__(message, param=param)
        self.tokens = tokens
        self.window = window
        self.requested: int | None = None
        """The output tokens asked for (None: not known, or not the cause)."""


class ModelNotFound(NotFound):
    code = "model_not_found"

    def __init__(self, model: str) -> None:
        super().__init__(
            f"The model '{model}' does not exist or is not served here.", param="model"
        )


class ResponseNotFound(NotFound):
    def __init__(self, response_id: str) -> None:
        super().__init__(f"Response with id '{response_id}' not found.", param="response_id")


class ConversationNotFound(NotFound):
    def __init__(self, conversation_id: str, *, param: str = "conversation_id") -> None:
        super().__init__(f"Conversation with id '{conversation_id}' not found.", param=param)


THREAD_NOT_FOUND: Final = "thread_not_found"
THREAD_ALREADY_CONTINUED: Final = "thread_already_continued"
THREAD_CONTINUE_IN_FLIGHT: Final = "thread_continue_in_flight"
THREAD_CODES: Final = frozenset(
    {THREAD_NOT_FOUND, THREAD_ALREADY_CONTINUED, THREAD_CONTINUE_IN_FLIGHT}
)
"""The codes of a Messages thread's refusals (:mod:`stateway.core.threads`), which the
Messages wire shows as ``error.details.error_code``: what the ``anthropic`` SDK picks its
error class by."""


class ThreadNotFound(NotFound):
    """No usable thread state for the message a continue names: unknown, another
    tenant's, deleted, not made in a thread, or a turn that failed (nothing was kept)."""

    code = THREAD_NOT_FOUND

    def __init__(self, message_id: str) -> None:
        super().__init__(
            f"No thread state found for message '{message_id}'. Replay the full "
            'conversation with thread: {"type": "create"} to start a new thread.',
            param="thread.previous_message_id",
        )


class ThreadAlreadyContinued(InvalidRequest):
    code = THREAD_ALREADY_CONTINUED

    def __init__(self, message_id: str) -> None:
        super().__init__(
            f"Message '{message_id}' has already been continued, and each message can be "
            "continued only once. Continue from the thread's most recent message id.",
            param="thread.previous_message_id",
        )


class ThreadContinueInFlight(InvalidRequest):
    code = THREAD_CONTINUE_IN_FLIGHT

    def __init__(self, message_id: str, *, generating: bool = False) -> None:
        what = (
            f"Message '{message_id}' is still being generated."
            if generating
            else f"Another request is still continuing from message '{message_id}'."
        )
        super().__init__(
            f"{what} Wait for it to complete and continue from its message id, or replay "
            'the full conversation with thread: {"type": "create"}.',
            param="thread.previous_message_id",
        )


class ConversationLocked(GatewayError):
    """Another turn is running on the conversation (or it changed since the turn read it).
    Hosted answers 400 with this code and message; 409 here (docs/compatibility.md)."""

    status = 409
    type = "invalid_request_error"
    code = "conversation_locked"

    def __init__(self) -> None:
        super().__init__(
            "Another process is currently operating on this conversation. "
            "Please retry in a few seconds.",
            param="conversation",
        )


class UpstreamError(GatewayError):
    """The model server failed. ``status`` is what the client sees, not what upstream sent."""

    status = 502
    type = "upstream_error"
    code = "upstream_error"


class UpstreamTimeout(UpstreamError):
    status = 504
    code = "upstream_timeout"


class UpstreamUnavailable(UpstreamError):
    code = "upstream_unavailable"


class UpstreamResponseTooLarge(UpstreamError):
    """The upstream's reply outgrew the backend's ``max_response_bytes``."""

    code = "upstream_response_too_large"


class StorageError(GatewayError):
    status = 503
    type = "server_error"
    code = "storage_unavailable"
    reason: str | None = None
    """What the database said (the driver's own error, without SQL text or parameters):
    for the log lines, which show ``str(error)``; a client gets only :attr:`message`."""

    def __str__(self) -> str:
        return self.message if self.reason is None else f"{self.message} ({self.reason})"


class UpstreamRejected(UpstreamError):
    """The model server answered 4xx: the request itself was refused (too long, bad schema,
    rate limited). Its status and structured code are passed on."""

    status = 400
    type = "invalid_request_error"


class UpstreamContextTooLong(UpstreamRejected):
    """An upstream's refusal of a context too long that says by how much: the input
    ``tokens``, the output tokens ``requested`` (None: not said) and the ``window``."""

    code = CONTEXT_LENGTH_EXCEEDED

    def __init__(self, message: str, *, tokens: int, window: int, requested: int | None) -> None:
        super().__init__(message, param="input")
        self.tokens = tokens
        self.window = window
        self.requested = requested


class InternalError(GatewayError):
    status = 500
    type = "server_error"
    code = "internal_error"

    def __init__(self) -> None:
        super().__init__("The gateway failed to handle the request.")


class Overloaded(GatewayError):
    """Too many requests are already waiting for a connection slot to the model server, or
    this one waited longer than ``pool_timeout``: refused early, with ``Retry-After``."""

    status = 503
    type = "server_error"
    code = "overloaded"

    def __init__(self, message: str, *, retry_after: int = 1) -> None:
        super().__init__(message, headers={"Retry-After": str(retry_after)})


class ResponseInProgress(InvalidRequest):
    code = "response_in_progress"

    def __init__(self, response_id: str) -> None:
        super().__init__(
            f"Response with id '{response_id}' is still in progress; continue from it once "
            "it has finished.",
            param="previous_response_id",
        )


class ServerShuttingDown(GatewayError):
    status = 503
    type = "server_error"
    code = "server_shutting_down"

    def __init__(self) -> None:
        super().__init__("The server is shutting down; the response was ended before it finished.")


class ServerRestarted(GatewayError):
    """The response's process was judged stopped (it died, or was paused past its lease)
    and the response was marked failed: the same words for the store and the clients."""

    status = 503
    type = "server_error"
    code = "server_restarted"

    def __init__(self) -> None:
        super().__init__("The server stopped before the response finished; it was not completed.")


class IdempotencyKeyReused(GatewayError):
    """A command id (``Idempotency-Key``, ``command_id``) came back with another request."""

    status = 409
    type = "invalid_request_error"
    code = "idempotency_key_reused"

    def __init__(self, param: str = "Idempotency-Key") -> None:
        super().__init__(
            "This idempotency key was already used with a different request; "
            "use a new key for a new request.",
            param=param,
        )


_TOKENS_RAN_OUT = re.compile(r"\btokens per (?:min|day)", re.IGNORECASE)
"""How a rate limit on tokens says so: hosted OpenAI's "on tokens per min (TPM)" and "on
tokens per day (TPD)" (Groq's alike), Anthropic's "input tokens per minute", the
gateway's own "on tokens per minute"."""


def rate_limit_type(code: str | None, message: str) -> str:
    """The OpenAI error type of an upstream's rate limit with ``code`` and ``message``, as
    hosted types its own: by what ran out (``tokens`` when its words say tokens, else
    ``requests``; a quota is its own type)."""
    if code == "insufficient_quota":
        return code
    return "tokens" if _TOKENS_RAN_OUT.search(message) else "requests"


class RateLimited(GatewayError):
    """A principal used up its requests or tokens per minute (``[rate_limits]``). OpenAI
    types the error by what ran out (``requests`` or ``tokens``); ``Retry-After`` is in
    whole seconds, rounded up."""

    status = 429
    code = "rate_limit_exceeded"

    def __init__(self, kind: Literal["requests", "tokens"], limit: int, wait: float) -> None:
        seconds = max(1, math.ceil(round(wait, 6)))  # not 21 for 20.000000000000004
        super().__init__(
            f"Rate limit reached on {kind} per minute (limit {limit}). "
            f"Please try again in {seconds}s.",
            headers={"Retry-After": str(seconds)},
        )
        self.type = kind
        self.retry_after = seconds
