"""A model server's failures, as its client is told them. They are classified by status
and structured code where the backends meet the upstream, never by message text (but an
upstream 429's ``type``, ``tokens`` or ``requests``, which only its words tell:
:func:`rate_limit_type`)."""

from __future__ import annotations

import re
from typing import Final

from stateway.core.errors.gateway_error import GatewayError
from stateway.core.errors.request import CONTEXT_LENGTH_EXCEEDED

IMAGE_INPUT_UNSUPPORTED: Final = "image_input_unsupported"
"""The code of an upstream's refusal of an image its model cannot take (a text-only model:
vLLM's ``... is not a multimodal model``)."""
INSUFFICIENT_QUOTA: Final = "insufficient_quota"
"""Hosted OpenAI's code of a 429 that is a quota used up (billing), not a rate."""
PROMPT_TOO_LONG: Final = "prompt is too long"
"""Anthropic's words for a context too long (its error has no code): what an Anthropic
upstream's refusal starts with, and what Claude Code looks for."""


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
    """The upstream's reply outgrew the backend's ``max_response_bytes``: as another
    candidate's would (no failover), so would the same request's again (not retryable)."""

    code = "upstream_response_too_large"
    retryable = False


class UpstreamRejected(UpstreamError):
    """The model server answered 4xx: the request itself was refused (too long, bad schema,
    rate limited). Its status and structured code are passed on."""

    status = 400
    type = "invalid_request_error"


class UpstreamContextTooLong(UpstreamRejected):
    """An upstream's refusal of a context too long that says by how much: the input
    ``tokens``, the output tokens ``requested`` (None: not said) and the ``window``;
    ``at_least``: ``tokens`` is only as far as the server counted (vLLM's renderer stops
    one token past the room the output leaves), not the prompt's own count."""

    code = CONTEXT_LENGTH_EXCEEDED

    def __init__(
        self,
        message: str,
        *,
        tokens: int,
        window: int,
        requested: int | None,
        at_least: bool = False,
    ) -> None:
        super().__init__(message, param="input")
        self.tokens = tokens
        self.window = window
        self.requested = requested
        self.at_least = at_least


class UpstreamOutputOverWindow(UpstreamRejected):
    """An upstream's refusal of more output tokens (``requested``) than the model's whole
    ``window`` holds, before it counted the prompt (vLLM's ``max_tokens=N cannot be greater
    than max_model_len=M``): the request's own, passed on as it came (not a context too
    long: nothing says the prompt is), but where its output may be fitted to the window
    (:mod:`stateway.core.rounds`). Its ``param`` is the request's output limit, named as
    the core names it (``max_output_tokens``; a Chat client's is the field it set it with:
    :mod:`stateway.protocols.chat.errors`), not as the Chat wire upstream named it."""

    def __init__(self, message: str, *, requested: int, window: int) -> None:
        super().__init__(message, status=400, code="upstream_rejected", param="max_output_tokens")
        self.requested = requested
        self.window = window


_TOKENS_RAN_OUT = re.compile(r"\btokens per (?:min|day)", re.IGNORECASE)
"""How a rate limit on tokens says so: hosted OpenAI's "on tokens per min (TPM)" and "on
tokens per day (TPD)" (Groq's alike), Anthropic's "input tokens per minute", the
gateway's own "on tokens per minute"."""


def rate_limit_type(code: str | None, message: str) -> str:
    """The OpenAI error type of an upstream's rate limit with ``code`` and ``message``, as
    hosted types its own: by what ran out (``tokens`` when its words say tokens, else
    ``requests``; a quota is its own type)."""
    if code == INSUFFICIENT_QUOTA:
        return code
    return "tokens" if _TOKENS_RAN_OUT.search(message) else "requests"
