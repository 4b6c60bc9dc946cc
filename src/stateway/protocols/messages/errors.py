"""Errors in Anthropic's shape: ``{"type": "error", "error": {"type", "message"}}``,
typed by HTTP status as Anthropic types them.

=======  ==========================================================================
status   ``error.type``
=======  ==========================================================================
401      ``authentication_error``
402      ``billing_error`` (an upstream's)
403      ``permission_error``
404      ``not_found_error``
409      ``conflict_error``
413      ``request_too_large``
429      ``rate_limit_error``
503      ``overloaded_error`` (the gateway's queue is full, or the upstream overloaded),
         answered with Anthropic's status for it, 529 (the SDK's ``OverloadedError``);
         another 503 (storage or the identity provider down, shutting down) ``api_error``
504      ``timeout_error`` (the upstream did not answer in time)
other    ``invalid_request_error`` below 500, ``api_error`` from 500
=======  ==========================================================================

A request body that did not arrive in time (the gateway's ``request_body_timeout``, 408
on the OpenAI routes) is answered as hosted answers it: a 400 ``invalid_request_error``
with ``error.details.error_code`` ``request_body_timeout`` (the SDK's
``BetaRequestBodyTimeoutError``, not retried), the connection closed all the same.

A thread's refusals (:mod:`stateway.core.threads`) carry their code as
``error.details.error_code`` (``thread_not_found``, ``thread_already_continued``,
``thread_continue_in_flight``), by which the ``anthropic`` SDK raises its
``ThreadNotFoundError`` and the others.

A stream cut after its first event ends with an ``error`` event of type
``overloaded_error`` (an overloaded upstream or gateway) or ``api_error`` (any other
failure, the gateway's own 503s among them: shutting down, as before a stream), but for a
context too long (an ``invalid_request_error``, worded as before a stream). A context too
long for the model (``context_length_exceeded``) is worded as Anthropic words it
(``prompt is too long: N tokens > M maximum``), which Claude Code compacts on; one that
says the prompt fits but not with the output tokens asked for (an upstream's, when the
request asked again for the window's room is refused too), as Anthropic words that
(``input length and `max_tokens` exceed context limit: X + Y > Z``), on which Claude Code
asks again for fewer output tokens; a refusal of output tokens beyond the whole window
(vLLM's, when the gateway could not count the prompt to ask again for the room), as
Anthropic words a ``max_tokens`` over a model's most (``max_tokens: N > M, which is the
maximum allowed number of output tokens for this model``), on which Claude Code asks
again for M. A thinking
block's signature the gateway sealed that does not open (the core's
``invalid_encrypted_content``) is worded as Anthropic words an invalid signature, naming
the block (``messages.1.content.0: Invalid `signature` in `thinking` block``, its path
found by :mod:`.signatures`), or ``messages`` when the request holds no such block.

A mid-conversation tool change naming no tool defined at its point, or defining one under
the name of a tool of another kind, carries ``tool_reference_unresolved`` or
``tool_name_conflict`` the same way (the SDK's ``ToolReferenceUnresolvedError``,
``ToolNameConflictError``).

A web search server tool declared where the gateway has no search provider (the core's
:class:`~stateway.core.errors.NoSearchProvider`) is named as the Messages client declared
it, with what to configure (the core's words offer a declaration only the Responses API
has).

An MCP connector server whose URL is off the gateway's allow-list (the core's
:class:`~stateway.core.errors.McpServerNotAllowed`) is named as the client sent it,
``mcp_servers`` and its URL (the core's words name the Responses API's ``server_url``).

A compaction's errors (:data:`COMPACTION_CODES`: a misplaced or ambiguous block, one whose
signature does not verify or whose content differs from it, nothing to summarize, an
unfinished turn) carry their code as ``error.details.error_code``, as Anthropic's do: the
SDK raises its class for that code (``CompactionBlockMisplacedError``, ...).
"""

from __future__ import annotations

from typing import Any, Final

from stateway.core.compaction.sealed import CONTENT_MISMATCH, INVALID_CODE, SIGNATURE_INVALID
from stateway.core.errors import (
    CONTEXT_LENGTH_EXCEEDED,
    PROMPT_TOO_LONG,
    THREAD_CODES,
    TOOL_CHANGE_CODES,
    BodyTimeout,
    ContextTooLong,
    GatewayError,
    InvalidRequest,
    McpServerNotAllowed,
    NoSearchProvider,
    UpstreamContextTooLong,
    UpstreamOutputOverWindow,
    UpstreamUnavailable,
)

_TYPES: Final = {
    401: "authentication_error",
    402: "billing_error",
    403: "permission_error",
    404: "not_found_error",
    409: "conflict_error",
    413: "request_too_large",
    429: "rate_limit_error",
    503: "overloaded_error",
    504: "timeout_error",
    529: "overloaded_error",
}
_OVERLOADED_CODES: Final = frozenset({"overloaded", "upstream_overloaded"})
MISPLACED: Final = "compaction_block_misplaced"
AMBIGUOUS: Final = "compaction_block_ambiguous"
NOTHING_TO_SUMMARIZE: Final = "compaction_nothing_to_summarize"
INCOMPLETE_TURN: Final = "compaction_incomplete_turn"
COMPACTION_CODES: Final = frozenset(
    {
        MISPLACED,
        AMBIGUOUS,
        NOTHING_TO_SUMMARIZE,
        INCOMPLETE_TURN,
        SIGNATURE_INVALID,
        CONTENT_MISMATCH,
    }
)
"""Error codes answered with ``error.details.error_code`` (:mod:`.compaction`'s, and the
core's for a compaction block's signature)."""


BODY_TIMEOUT: Final = "request_body_timeout"
"""Anthropic's ``error_code`` of a request body that did not arrive in time."""
OVERLOADED_STATUS: Final = 529
"""Anthropic's HTTP status of an ``overloaded_error``."""


def is_overloaded(code: object, status: object) -> bool:
    """Whether an error with this code and HTTP status is an ``overloaded_error``, before
    a stream (:func:`encode_error`) and in one (:func:`stream_error`) alike: the gateway's
    queue full or an upstream overloaded (``overloaded``, ``upstream_overloaded``), an
    Anthropic 529, or a 503 of an unavailable upstream. The gateway's own 503s (shutting
    down, a restarted run, storage or the identity provider down) are not; nor is a 4xx
    whatever its code (answered 529, a request that can never succeed would be retried)."""
    if status == OVERLOADED_STATUS:
        return True
    if code in _OVERLOADED_CODES:
        return not (isinstance(status, int) and status < 500)
    return status == 503 and code == UpstreamUnavailable.code


def answer_status(error: GatewayError, body: dict[str, Any]) -> int:
    """The HTTP status of ``error`` answered as ``body`` (:func:`encode_error`)."""
    if body["error"]["type"] == "overloaded_error":
        return OVERLOADED_STATUS
    if isinstance(error, BodyTimeout):
        return 400
    return error.status


def error_type(status: int) -> str:
    return _TYPES.get(status, "api_error" if status >= 500 else "invalid_request_error")


_INVALID_SIGNATURE: Final = (
    "Invalid `signature` in `thinking` block: it was not made by this gateway for this "
    "organization, or it was altered."
)


_OVER_WINDOW: Final = (
    "max_tokens: {e.requested} > {e.window}, which is the maximum allowed number of output "
    "tokens for this model"
)
"""Anthropic's words for a ``max_tokens`` over a model's most, which Claude Code asks
again at (the model's window: vLLM takes no more output tokens than that)."""


_NO_SEARCH_PROVIDER: Final = (
    "tools: the web_search server tool needs a web search provider, and this gateway has "
    "none configured: set STATEWAY_WEB_SEARCH_PROVIDER (searxng, brave or tavily) where it "
    "runs, or leave the tool out."
)


_COMPACTION_WORDS: Final = {
    SIGNATURE_INVALID: "messages: Invalid `signature` in `compaction` block: it was not made "
    "by this gateway for this organization, or it was altered.",
    CONTENT_MISMATCH: "messages: the `content` of the `compaction` block differs from the "
    "summary its `signature` records; send the block back as it was returned.",
}
"""The core's words for a compaction item's seal, as a Messages client sent it: a block."""


def encode_error(error: GatewayError) -> dict[str, Any]:
    if isinstance(error, BodyTimeout):
        return error_body("invalid_request_error", error.message, {"error_code": BODY_TIMEOUT})
    if error.code in THREAD_CODES | TOOL_CHANGE_CODES:  # the SDK's error class, by code
        body = error_body(error_type(error.status), error.message)
        body["error"]["details"] = {"error_code": error.code}
        return body
    if isinstance(error, NoSearchProvider):  # the only web search tool a request may have
        return error_body("invalid_request_error", _NO_SEARCH_PROVIDER)
    if isinstance(error, McpServerNotAllowed):  # sent as mcp_servers[].url
        message = f"mcp_servers: the MCP server URL '{error.url}' is not allowed: "
        return error_body("invalid_request_error", message + error.reason)
    if isinstance(error, InvalidRequest) and error.code == INVALID_CODE:
        return error_body("invalid_request_error", f"{_signed(error.param)}: {_INVALID_SIGNATURE}")
    if isinstance(error, InvalidRequest) and error.code in COMPACTION_CODES:
        message = _COMPACTION_WORDS.get(error.code, error.message)
        return error_body("invalid_request_error", message, {"error_code": error.code})
    if error.code == CONTEXT_LENGTH_EXCEEDED:
        return error_body("invalid_request_error", _too_long(error))
    if isinstance(error, UpstreamOutputOverWindow):
        return error_body("invalid_request_error", _OVER_WINDOW.format(e=error))
    if is_overloaded(error.code, error.status):
        return error_body("overloaded_error", error.message)
    if error.status == 503:
        return error_body("api_error", error.message)  # storage, identity, shutting down
    return error_body(error_type(error.status), error.message)


def _signed(param: str | None) -> str:
    """The block a seal that does not open came in (``messages.N.content.M``,
    :mod:`.signatures`), or ``messages`` when no block of the request is named."""
    return param if param is not None and param.startswith("messages.") else "messages"


def _too_long(error: GatewayError) -> str:
    """A context too long, in Anthropic's words, first: the text clients (Claude Code)
    look for before they compact. The gateway's own window check has the numbers
    Anthropic gives; an Anthropic upstream's refusal is its own words; another upstream's
    follow the phrase."""
    if isinstance(error, ContextTooLong | UpstreamContextTooLong):
        if error.requested is not None and error.tokens < error.window:
            return (
                f"input length and `max_tokens` exceed context limit: {error.tokens} + "
                f"{error.requested} > {error.window}, decrease input length or `max_tokens` "
                "and try again"
            )
        return f"{PROMPT_TOO_LONG}: {error.tokens} tokens > {error.window} maximum"
    return _too_long_words(error.message)


def _too_long_words(message: str) -> str:
    """A context refusal's message with Anthropic's phrase first: an Anthropic upstream's
    own words from it, another's after it."""
    if PROMPT_TOO_LONG in message:
        return message[message.index(PROMPT_TOO_LONG) :]
    return f"{PROMPT_TOO_LONG}: {message}"


def error_body(kind: str, message: str, details: dict[str, Any] | None = None) -> dict[str, Any]:
    """``details``: what names the cause for the SDK (``{"error_code": ...}``), from which
    it picks the error's class."""
    error: dict[str, Any] = {"type": kind, "message": message}
    if details is not None:
        error["details"] = details
    return {"type": "error", "error": error}


def stream_error(error: dict[str, Any] | None) -> dict[str, Any]:
    """The ``error`` event ending a stream, from a failed response's ``error``: typed as
    :func:`encode_error` types the error before a stream, which a stored error names only
    by its code and status (:func:`is_overloaded`); a context too long (an upstream that
    refused it once the status line had gone out: llama.cpp checks a prompt when a slot
    frees) as before a stream, Anthropic's phrase first, which Claude Code compacts on;
    any other is an ``api_error``."""
    error = error or {}
    overloaded = is_overloaded(error.get("code"), error.get("status"))
    message = str(error.get("message") or "The response failed.")
    if error.get("code") == CONTEXT_LENGTH_EXCEEDED:  # refused once the stream had opened
        return error_body("invalid_request_error", _too_long_words(message))
    return error_body("overloaded_error" if overloaded else "api_error", message)


def field_error(param: str, problem: str, code: str = "invalid_value") -> InvalidRequest:
    """A 400 about one field, as Anthropic words it: its path, then the problem
    (``messages.2.content.0.tool_use_id: unexpected tool_use_id ...``)."""
    return InvalidRequest(f"{param}: {problem}", param=param, code=code)
