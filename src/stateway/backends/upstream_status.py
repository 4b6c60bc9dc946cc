"""How an upstream HTTP error becomes the error the client sees: by status and structured
code only, never by message text.

=========  ==========================================================================
upstream   client
=========  ==========================================================================
401, 403   502 ``upstream_auth_failed`` (the gateway's credential, not the client's)
404        404, the upstream's code or ``model_not_found``
408, 504   504 ``upstream_timeout``
429        429, the upstream's code or ``rate_limit_exceeded``, with its ``Retry-After``
503        503 ``upstream_unavailable``, with its ``Retry-After``
529        503 ``upstream_overloaded`` (Anthropic's "overloaded"), with its ``Retry-After``
other 4xx  400, the upstream's code or ``upstream_rejected``
other 5xx  502 ``upstream_error``
=========  ==========================================================================

A prompt longer than the model's context is told apart by structure, as each server
reports it, and becomes ``context_length_exceeded`` (which clients such as Codex act on):
OpenAI's ``code``, llama.cpp's ``type`` ``exceed_context_size_error``, vLLM's ``param``
``input_tokens`` (its ``code`` is the number 400). Anthropic's error has no structure to
tell it by: the one exception to "never by message text" is its documented wording, an
Anthropic-shaped error (``"type": "error"``) whose message starts ``prompt is too long``
(what Claude Code itself looks for).
"""

from __future__ import annotations

import re
from collections.abc import Mapping

import orjson

from stateway.core.errors import (
    CONTEXT_LENGTH_EXCEEDED,
    PROMPT_TOO_LONG,
    GatewayError,
    UpstreamError,
    UpstreamRejected,
    UpstreamTimeout,
    UpstreamUnavailable,
)

OVERLOADED = 529
"""Anthropic's status for an API that is temporarily overloaded."""
UPSTREAM_OVERLOADED = "upstream_overloaded"
_CONTEXT_TYPES = frozenset({"exceed_context_size_error"})
_CONTEXT_PARAMS = frozenset({"input_tokens"})
_RETRY_AFTER = re.compile(r"[0-9]{1,10}|[A-Za-z0-9 ,:]{1,64}")
"""Delta-seconds or an HTTP-date; anything else is not passed on."""


def classify_status(
    status: int,
    message: str,
    code: str | None,
    backend: str,
    headers: Mapping[str, str] | None = None,
) -> GatewayError:
    """Map an upstream HTTP status (and structured code) to the error the client sees."""
    detail = f"Model server '{backend}' answered {status}" + (f": {message}" if message else ".")
    retry = retry_after(headers)
    if status in (401, 403):
        return UpstreamError(
            f"Model server '{backend}' refused the gateway's credentials ({status}).",
            code="upstream_auth_failed",
        )
    if status == 429:
        return UpstreamRejected(
            detail, status=429, code=code or "rate_limit_exceeded", headers=retry
        )
    if status == 404:
        return UpstreamRejected(detail, status=404, code=code or "model_not_found")
    if status in (408, 504):
        return UpstreamTimeout(detail)
    if status == 503:
        return UpstreamUnavailable(detail, status=503, headers=retry)
    if status == OVERLOADED:
        return UpstreamUnavailable(detail, status=503, code=UPSTREAM_OVERLOADED, headers=retry)
    if 400 <= status < 500:
        return UpstreamRejected(detail, status=400, code=code or "upstream_rejected")
    return UpstreamError(detail)


def retry_after(headers: Mapping[str, str] | None) -> dict[str, str] | None:
    """The upstream's ``Retry-After``, to pass on, when it is well-formed."""
    value = headers.get("Retry-After", "").strip() if headers is not None else ""
    return {"Retry-After": value} if _RETRY_AFTER.fullmatch(value) else None


def _structured_code(error: dict[str, object]) -> str | None:
    """The code an error without a string ``code`` means by its other structured fields."""
    kind, param = error.get("type"), error.get("param")
    if (isinstance(kind, str) and kind in _CONTEXT_TYPES) or (
        isinstance(param, str) and param in _CONTEXT_PARAMS
    ):
        return CONTEXT_LENGTH_EXCEEDED
    return None


def parse_error(raw: bytes) -> tuple[str, str | None]:
    """The message and structured code of an upstream error body (JSON or plain text)."""
    try:
        body = orjson.loads(raw)
    except orjson.JSONDecodeError:
        return raw.decode("utf-8", "replace").strip(), None
    if isinstance(body, dict):
        error = body.get("error", body)
        if isinstance(error, dict):
            message = str(error.get("message") or error.get("detail") or "")
            code = error.get("code")
            if isinstance(code, str):
                return message, code
            if body.get("type") == "error" and message.startswith(PROMPT_TOO_LONG):
                return message, CONTEXT_LENGTH_EXCEEDED
            return message, _structured_code(error)
        if isinstance(error, str):
            return error, None
        detail = body.get("detail")
        if detail is not None:
            return str(detail), None
    return "", None
