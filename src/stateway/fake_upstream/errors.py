"""OpenAI-shaped errors: the exception the app turns into a reply, and request validation.

Every error body has the OpenAI shape
``{"error": {"message", "type", "param", "code"}}``.
"""

from __future__ import annotations

from typing import Any, Literal

import orjson

# status -> (type, code) for [[error:STATUS]]; other 4xx are invalid_request_error.
_SCRIPTED: dict[int, tuple[str, str | None]] = {
    400: ("invalid_request_error", None),
    401: ("authentication_error", "invalid_api_key"),
    403: ("permission_error", "permission_denied"),
    404: ("not_found_error", "model_not_found"),
    409: ("conflict_error", "conflict"),
    422: ("invalid_request_error", "unprocessable_entity"),
    429: ("requests", "rate_limit_exceeded"),
}

_RETRY_AFTER = {429: [(b"retry-after", b"1")], 503: [(b"retry-after", b"2")]}
"""Statuses whose scripted error carries ``Retry-After`` (in seconds)."""


class UpstreamError(Exception):
    """An error reply, raised anywhere before the response has started."""

    def __init__(
        self,
        status: int,
        message: str,
        *,
        type_: str = "invalid_request_error",
        code: str | int | None = None,
        param: str | None = None,
        headers: list[tuple[bytes, bytes]] | None = None,
        fields: dict[str, Any] | str | None = None,
    ) -> None:
        super().__init__(message)
        self.status = status
        self.message = message
        self.type = type_
        self.code = code
        self.param = param
        self.headers = headers or []
        self.sent_status = status
        """The status line's (``[[reported]]``: 200, the body still this error's)."""
        self.fields = fields
        """The error object's whole fields, when a server's are not OpenAI's (LM Studio's
        error is its words alone)."""

    def body(self) -> bytes:
        if self.fields is not None:
            return orjson.dumps({"error": self.fields})
        error = {"message": self.message, "type": self.type, "param": self.param}
        return orjson.dumps({"error": {**error, "code": self.code}})

    def anthropic_body(self) -> bytes:
        """The error in Anthropic's shape, typed by status as Anthropic types it."""
        error = {"type": anthropic_type(self.status), "message": self.message}
        return orjson.dumps({"type": "error", "error": error})


_ANTHROPIC_TYPES = {
    401: "authentication_error",
    403: "permission_error",
    404: "not_found_error",
    413: "request_too_large",
    429: "rate_limit_error",
    500: "api_error",
    503: "overloaded_error",
    504: "timeout_error",
    529: "overloaded_error",
}


def anthropic_type(status: int) -> str:
    return _ANTHROPIC_TYPES.get(status, "api_error" if status >= 500 else "invalid_request_error")


def scripted_error(status: int) -> UpstreamError:
    """The error ``[[error:STATUS]]`` asks for, typed as the OpenAI API would."""
    if status >= 500:
        type_, code = "server_error", None
    else:
        type_, code = _SCRIPTED.get(status, ("invalid_request_error", None))
    headers = _RETRY_AFTER.get(status)
    message = f"Scripted failure: [[error:{status}]]"
    return UpstreamError(status, message, type_=type_, code=code, headers=headers)


def context_too_long(
    prompt: int, window: int, style: Literal["vllm", "openai", "anthropic", "llama.cpp"]
) -> UpstreamError:
    """A prompt over the context window, refused as vLLM (``param`` ``input_tokens``,
    ``code`` the number 400), OpenAI (``code`` ``context_length_exceeded``), Anthropic
    (a 400 ``invalid_request_error`` saying so) or llama-server (``type``
    ``exceed_context_size_error``, the numbers in ``n_prompt_tokens`` and ``n_ctx``, no
    ``param``) refuse it."""
    if style == "anthropic":
        return UpstreamError(400, f"prompt is too long: {prompt} tokens > {window} maximum")
    if style == "llama.cpp":
        words = (
            f"request ({prompt} tokens) exceeds the available context size ({window} tokens), "
            "try increasing it"
        )
        kind = "exceed_context_size_error"
        fields = {"code": 400, "message": words, "type": kind}
        counts = {"n_prompt_tokens": prompt, "n_ctx": window}
        return UpstreamError(400, words, type_=kind, code=400, fields=fields | counts)
    message = (
        f"This model's maximum context length is {window} tokens. However, your request has "
        f"{prompt} input tokens. Please reduce the length of the input messages."
    )
    if style == "vllm":
        return UpstreamError(400, message, type_="BadRequestError", code=400, param="input_tokens")
    return UpstreamError(400, message, code="context_length_exceeded", param="input")


def output_too_long(prompt: int, requested: int, window: int) -> UpstreamError:
    """A prompt that fits but not with the output tokens asked for, refused as vLLM
    refuses it, saying both."""
    message = (
        f"This model's maximum context length is {window} tokens. However, you requested "
        f"{prompt + requested} tokens ({prompt} in the messages, {requested} in the "
        "completion). Please reduce the length of the messages or completion."
    )
    return UpstreamError(400, message, type_="BadRequestError", code=400, param="max_tokens")


def output_too_long_counted_in_part(requested: int, window: int) -> UpstreamError:
    """A prompt that does not fit beside the output tokens asked for, refused as vLLM's
    renderer (0.18 on) refuses it: it counts the prompt only one token past the room they
    leave, ``at least`` so many; output tokens over the window, before any count."""
    if requested > window:
        message = (
            f"max_tokens={requested} cannot be greater than max_model_len={window}. Please "
            "request fewer output tokens."
        )
        return UpstreamError(400, message, type_="BadRequestError", code=400, param="max_tokens")
    counted = window - requested + 1
    message = (
        f"This model's maximum context length is {window} tokens. However, you requested "
        f"{requested} output tokens and your prompt contains at least {counted} input tokens, "
        f"for a total of at least {window + 1} tokens. Please reduce the length of the input "
        "prompt or the number of requested output tokens."
    )
    return UpstreamError(400, message, type_="BadRequestError", code=400, param="input_tokens")


def invalid_request(message: str, param: str | None = None) -> UpstreamError:
    return UpstreamError(400, message, param=param)


def invalid_api_key(provided: bool) -> UpstreamError:
    """The 401 an API-key-protected fake gives without the right bearer token."""
    message = (
        "Incorrect API key provided."
        if provided
        else "You didn't provide an API key. Send it as 'Authorization: Bearer KEY'."
    )
    return UpstreamError(401, message, code="invalid_api_key")


def not_found(method: str, path: str) -> UpstreamError:
    return UpstreamError(404, f"Invalid URL ({method} {path})", code="unknown_url")


def method_not_allowed(method: str, path: str) -> UpstreamError:
    return UpstreamError(405, f"Method {method} not allowed for {path}", code="method_not_allowed")


def require_str(body: dict[str, Any], key: str) -> str:
    """The required string ``key`` of a request body."""
    value = body.get(key)
    if not isinstance(value, str) or not value:
        raise invalid_request(f"Missing required parameter: '{key}'.", key)
    return value


def optional_positive_int(body: dict[str, Any], *keys: str) -> int | None:
    """The first of ``keys`` present and not null, which must be a positive integer."""
    for key in keys:
        value = body.get(key)
        if value is None:
            continue
        if not isinstance(value, int) or isinstance(value, bool) or value < 1:
            raise invalid_request(f"Invalid '{key}': expected an integer >= 1.", key)
        return value
    return None


def optional_top_logprobs(body: dict[str, Any]) -> int:
    """``top_logprobs``: absent is 0, else an integer from 0 to 20 (both wires' bound)."""
    value = body.get("top_logprobs")
    if value is None:
        return 0
    if not isinstance(value, int) or isinstance(value, bool) or not 0 <= value <= 20:
        raise invalid_request(
            "Invalid 'top_logprobs': expected an integer from 0 to 20.", "top_logprobs"
        )
    return value
