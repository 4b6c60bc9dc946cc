"""How an upstream HTTP error becomes the error the client sees: by status and structured
code, and by fixed wording only where a server gives nothing else to tell by (a context
too long, below; what a 429 ran out of).

=========  ==========================================================================
upstream   client
=========  ==========================================================================
401-403    502 ``upstream_auth_failed`` (the gateway's credential or account, not the
           client's: a 402 is its payment, as OpenRouter and Anthropic refuse one),
           not retryable (``x-should-retry: false``: the SDKs would retry a 502)
404        404, the upstream's code or ``model_not_found``
413        413, the upstream's code or ``request_too_large`` (a body over the server's
           size limit, as hosted OpenAI and Anthropic refuse one); a context refusal
           (some proxies answer one with a 413) as any 4xx's, below
408, 504   504 ``upstream_timeout``
429        429, the upstream's code or ``rate_limit_exceeded``, with its ``Retry-After``
           (one over :data:`~stateway.core.errors.MAX_RETRY_WAIT`, 120 s, not
           retryable: the ``anthropic`` SDK would sleep it through, so for 503 and 529);
           typed ``tokens`` when its words say tokens ran out, else ``requests``; an
           ``insufficient_quota`` (a quota used up, not a rate) not retryable
503        503 ``upstream_unavailable``, with its ``Retry-After``
529        503 ``upstream_overloaded`` (Anthropic's "overloaded"), with its ``Retry-After``
other 4xx  400, the upstream's code or ``upstream_rejected``
other 5xx  502 ``upstream_error`` (an image refused in words: 400, below)
3xx        502 ``upstream_error``, not retryable (redirects are not followed)
=========  ==========================================================================

A prompt longer than the model's context becomes ``context_length_exceeded`` (which
clients such as Codex act on), told by each server's structure or, failing that, its fixed
words, with the numbers it states (:mod:`stateway.backends.context_refusals`). vLLM's
refusal of output tokens beyond the whole window, before it counted the prompt
(``max_tokens=N cannot be greater than max_model_len=M``), stays the 400 it was, with its
numbers (:class:`~stateway.core.errors.UpstreamOutputOverWindow`).

A model that takes no images refuses one in words alone too: vLLM's ``MODEL is not a
multimodal model``, llama.cpp's ``image input is not supported`` (no projector loaded; with
a 500, its status for any error but a few, which is still the request's: a 400 here) and
Ollama's ``does not support image input`` become ``image_input_unsupported``, by which a
Messages client is told which block to leave out (Claude Code does, and goes on).
llama-server refuses ``logprobs`` with tools in a streamed Chat Completions request, in
words alone too (``logprobs is not supported with tools + stream``): that 400 is
:data:`STREAMED_LOGPROBS_UNSUPPORTED`, on which the Chat backend asks such rounds whole
(:mod:`stateway.backends.openai_chat`). LM Studio refuses a message whose ``content`` is
null (the spec's shape of an assistant message of tool calls alone) in words alone too
(``Invalid 'content': 'content' field must be a string or an array of objects``): that 400
is :data:`NULL_CONTENT_UNSUPPORTED`, on which the Chat backend sends the call again with
``""`` (lmstudio-ai/lmstudio-bug-tracker#261).

Some OpenAI-compatible servers report a failure inside a 200 reply: a whole body, or a
stream event, that is only ``{"error": {...}}`` (or Anthropic's ``{"type": "error",
"error": {...}}``). A whole body is one whatever the request asked for: some servers and
proxies answer a streamed request so, with a JSON body instead of an event stream, which
each backend then reads as it reads a non-streamed reply (:func:`reports_error` tells
such a body by its wire's answer field missing). :func:`classify_reported` holds the one
rule for both: the error is classified as the status it names would be, by an HTTP status
in its ``code`` (vLLM's and SGLang's number), a known string ``code`` or an error ``type``
that names one (OpenAI's and Anthropic's), or LM Studio's words for a route it does not
serve (``Unexpected endpoint or method``, a 404, as other servers answer a URL without its
``/v1``); otherwise it is a 502 ``upstream_error``. The upstream's message is passed on
either way.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping

import orjson

from stateway.backends.context_refusals import (
    Stated,
    output_over_window,
    says_too_long,
    stated_in_fields,
    structured_as_too_long,
    too_long,
)
from stateway.core.errors import (
    CONTEXT_LENGTH_EXCEEDED,
    IMAGE_INPUT_UNSUPPORTED,
    INSUFFICIENT_QUOTA,
    PROMPT_TOO_LONG,
    GatewayError,
    RequestTooLarge,
    UpstreamError,
    UpstreamOutputOverWindow,
    UpstreamRejected,
    UpstreamTimeout,
    UpstreamUnavailable,
    rate_limit_type,
)
from stateway.core.routing.attempts import waits_past_retries

OVERLOADED = 529
"""Anthropic's status for an API that is temporarily overloaded."""
REQUEST_TOO_LARGE = 413
UPSTREAM_OVERLOADED = "upstream_overloaded"
STREAMED_LOGPROBS_UNSUPPORTED = "streamed_logprobs_unsupported"
"""A server's refusal of ``logprobs`` with tools in a streamed request (llama-server's)."""
NULL_CONTENT_UNSUPPORTED = "null_content_unsupported"
"""A server's refusal of a message whose ``content`` is null (LM Studio's)."""
_NO_IMAGE_WORDS = (
    "is not a multimodal model",  # vLLM's
    "image input is not supported",  # llama.cpp's, without a projector (mmproj)
    "does not support image input",  # Ollama's
)
"""Fixed words of refusals of an image by a model that takes none."""
_UNSERVED_WORDS = "Unexpected endpoint or method"
"""LM Studio's words for a route it does not serve, which it answers with a 200."""
_STREAMED_LOGPROBS_WORDS = "logprobs is not supported with tools + stream"
"""llama-server's words (and its only tell) for its refusal of streamed logprobs with tools."""
_NULL_CONTENT_WORDS = "Invalid 'content': 'content' field must be a string or an array of objects"
"""LM Studio's words (its only tell) for its refusal of a message whose content is null."""
_STATUS_OF_CODE = {
    CONTEXT_LENGTH_EXCEEDED: 400,
    "model_not_found": 404,
    "rate_limit_exceeded": 429,
    INSUFFICIENT_QUOTA: 429,
}
"""String codes of an error reported in a 200 reply that name the status it stands for."""
_STATUS_OF_TYPE = {
    "invalid_request_error": 400,
    "authentication_error": 401,
    "permission_error": 403,
    "not_found_error": 404,
    "rate_limit_error": 429,
    "request_too_large": REQUEST_TOO_LARGE,
    "overloaded_error": OVERLOADED,
}
"""Error types (OpenAI's and Anthropic's) that name the status they stand for."""
MAX_MESSAGE = 500
"""Characters of an upstream's error message passed on."""
_RETRY_AFTER = re.compile(r"[0-9]{1,10}|[A-Za-z0-9 ,:]{1,64}")
"""Delta-seconds or an HTTP-date; anything else is not passed on."""


def classify_reply(
    status: int,
    raw: bytes,
    backend: str,
    scrub: Callable[[str], str],
    headers: Mapping[str, str] | None = None,
) -> GatewayError:
    """The error the client sees for an upstream's error reply, its body ``raw`` (JSON or
    plain text): its message and code, the key masked by ``scrub``, classified with its
    status (:func:`classify_status`), and the numbers a context refusal states
    (:mod:`.context_refusals`)."""
    body = _decoded(raw)
    message, code = scrubbed(*_body_fields(body, raw), scrub)
    stated = stated_in_fields(body.get("error", body)) if isinstance(body, dict) else None
    return classify_status(status, message, code, backend, headers, stated=stated)


def classify_status(
    status: int,
    message: str,
    code: str | None,
    backend: str,
    headers: Mapping[str, str] | None = None,
    *,
    stated: Stated | None = None,
) -> GatewayError:
    """Map an upstream HTTP status (and structured code) to the error the client sees."""
    detail = f"Model server '{backend}' answered {status}" + (f": {message}" if message else ".")
    if 300 <= status < 400:
        return UpstreamError(
            f"Model server '{backend}' redirected the call ({status}); redirects are not "
            "followed: configure the URL it redirects to.",
            retryable=False,
        )
    error = _by_status(status, detail, message, code, backend, retry_after(headers), stated)
    if waits_past_retries(error):  # not slept through by an SDK that would
        error.told_retryable(False)
    return error


def classify_reported(
    error: object, backend: str, scrub: Callable[[str], str], *, mid_stream: bool
) -> GatewayError:
    """The error the client sees for the ``error`` member of a 200 reply's body or of a
    stream event (the module's docstring says the rule); ``scrub`` masks the upstream's
    key in its words."""
    message, code = scrubbed(*_fields({"error": error}), scrub)
    said = "failed mid-stream" if mid_stream else "answered with an error"
    detail = f"Model server '{backend}' {said}: {message}"[:MAX_MESSAGE]
    status = _reported_status(error, code)
    if status is None:
        return UpstreamError(detail)
    return _by_status(status, detail, message, code, backend, None, stated_in_fields(error))


def classify_event(data: bytes, backend: str, scrub: Callable[[str], str]) -> GatewayError:
    """The error a stream's ``error`` event reports (llama.cpp's ``error:`` line, an event
    named ``error``): its data, the error object or ``{"error": ...}`` around it (words that
    do not parse are the message), classified as a stream event's
    (:func:`classify_reported`)."""
    try:
        payload = orjson.loads(data)
    except orjson.JSONDecodeError:
        payload = data.decode("utf-8", "replace")
    if isinstance(payload, dict) and "error" in payload:
        payload = payload["error"]
    return classify_reported(payload, backend, scrub, mid_stream=True)


def reports_error(body: Mapping[str, object], answer: str) -> bool:
    """Whether a 200 reply's body is only an error: it has an ``error`` member and not
    the ``answer`` field its wire answers in (Chat's ``choices``, Responses' ``output``,
    Messages' ``content``), in OpenAI's shape or Anthropic's."""
    return "error" in body and answer not in body


def scrubbed(message: str, code: str | None, scrub: Callable[[str], str]) -> tuple[str, str | None]:
    """An upstream error's message and code as passed on: the key masked, the message cut
    to :data:`MAX_MESSAGE`."""
    return scrub(message)[:MAX_MESSAGE], scrub(code) if code else None


def _reported_status(error: object, code: str | None) -> int | None:
    """The HTTP status a reported error names, if any."""
    named = _STATUS_OF_CODE.get(code) if code else None
    if not isinstance(error, dict):  # words alone: what they say, if anything
        return 404 if isinstance(error, str) and error.startswith(_UNSERVED_WORDS) else named
    number = error.get("code")
    if isinstance(number, int) and not isinstance(number, bool) and 400 <= number < 600:
        return number
    kind = error.get("type")
    return named or (_STATUS_OF_TYPE.get(kind) if isinstance(kind, str) else None)


def _by_status(
    status: int,
    detail: str,
    message: str,
    code: str | None,
    backend: str,
    retry: dict[str, str] | None,
    stated: Stated | None,
) -> GatewayError:
    if status in (401, 402, 403):
        return UpstreamError(
            f"Model server '{backend}' refused the gateway's credentials ({status}).",
            code="upstream_auth_failed",
            retryable=False,
        )
    if status == 429:
        quota = code == INSUFFICIENT_QUOTA  # used up, not a rate: no wait brings it back
        limited = UpstreamRejected(
            detail,
            status=429,
            code=code or "rate_limit_exceeded",
            headers=None if quota else retry,
            retryable=not quota,
        )
        limited.type = rate_limit_type(code, message)
        return limited
    if status == 404:
        return UpstreamRejected(detail, status=404, code=code or "model_not_found")
    if status == REQUEST_TOO_LARGE and code != CONTEXT_LENGTH_EXCEEDED:
        return UpstreamRejected(detail, status=413, code=code or RequestTooLarge.code)
    if status in (408, 504):
        return UpstreamTimeout(detail)
    if status == 503:
        return UpstreamUnavailable(detail, status=503, headers=retry)
    if status == OVERLOADED:
        return UpstreamUnavailable(detail, status=503, code=UPSTREAM_OVERLOADED, headers=retry)
    if 400 <= status < 500:
        if code == CONTEXT_LENGTH_EXCEEDED:
            return too_long(detail, message, stated)
        if status == 400 and (over := output_over_window(message)) is not None:
            return UpstreamOutputOverWindow(detail, requested=over[0], window=over[1])
        return UpstreamRejected(detail, status=400, code=code or "upstream_rejected")
    if code == IMAGE_INPUT_UNSUPPORTED:  # llama-server's, with a 500
        return UpstreamRejected(detail, status=400, code=code)
    return UpstreamError(detail)


def retry_after(headers: Mapping[str, str] | None) -> dict[str, str] | None:
    """The upstream's ``Retry-After``, to pass on, when it is well-formed."""
    value = headers.get("Retry-After", "").strip() if headers is not None else ""
    return {"Retry-After": value} if _RETRY_AFTER.fullmatch(value) else None


def _structured_code(error: dict[str, object]) -> str | None:
    """The code an error without a string ``code`` means by its other structured fields."""
    return CONTEXT_LENGTH_EXCEEDED if structured_as_too_long(error) else None


def parse_error(raw: bytes) -> tuple[str, str | None]:
    """The message and structured code of an upstream error body (JSON or plain text)."""
    return _body_fields(_decoded(raw), raw)


_NOT_JSON = object()


def _decoded(raw: bytes) -> object:
    """An error body's JSON, or :data:`_NOT_JSON`."""
    try:
        return orjson.loads(raw)
    except orjson.JSONDecodeError:
        return _NOT_JSON


def _body_fields(body: object, raw: bytes) -> tuple[str, str | None]:
    """The message and structured code of an error body (``raw``, :func:`_decoded`)."""
    if body is _NOT_JSON:
        return raw.decode("utf-8", "replace").strip(), None
    return _fields(body) if isinstance(body, dict) else ("", None)


def _fields(body: dict[str, object]) -> tuple[str, str | None]:
    """The message and structured code of a decoded error body."""
    error = body.get("error", body)
    if isinstance(error, dict):
        message = str(error.get("message") or error.get("detail") or "")
        code = error.get("code")
        if isinstance(code, str):
            return message, code
        if body.get("type") == "error" and message.startswith(PROMPT_TOO_LONG):
            return message, CONTEXT_LENGTH_EXCEEDED
        if says_too_long(message):
            return message, CONTEXT_LENGTH_EXCEEDED
        if any(words in message for words in _NO_IMAGE_WORDS):
            return message, IMAGE_INPUT_UNSUPPORTED
        if message.startswith(_STREAMED_LOGPROBS_WORDS):
            return message, STREAMED_LOGPROBS_UNSUPPORTED
        return message, _structured_code(error)
    if isinstance(error, str):  # LM Studio's errors are words alone
        if error.startswith(_NULL_CONTENT_WORDS):
            return error, NULL_CONTENT_UNSUPPORTED
        return error, CONTEXT_LENGTH_EXCEEDED if says_too_long(error) else None
    detail = body.get("detail")
    if detail is not None:
        return str(detail), None
    return "", None
