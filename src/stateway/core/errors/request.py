"""What a request asks that cannot be served as asked: its body, its context, what it
names (a model, a response, a conversation), or a retry or turn that collides with
another."""

from __future__ import annotations

from typing import Final

from stateway.core.errors.gateway_error import GatewayError, InvalidRequest, NotFound


class UncarriedPart(InvalidRequest):
    """A content part of the request's input that the backend's upstream API cannot carry
    (``param`` names it): its ``part_type`` and the ``backend``'s name, by which a frontend
    words the refusal its own way."""

    code = "unsupported_content_type"

    def __init__(self, message: str, *, param: str, part_type: str, backend: str) -> None:
        super().__init__(message, param=param)
        self.part_type = part_type
        self.backend = backend


class NoSearchProvider(InvalidRequest):
    """A web search tool declared (``tools[N]``) where the gateway has no search provider.
    Its message offers the optional declaration only a Responses client can send: the
    other frontends, telling it by its class, word the refusal their own way."""

    code = "unsupported_tool_type"

    def __init__(self, tool_type: str, *, param: str) -> None:
        super().__init__(
            f"Tool type '{tool_type}' needs a web search provider, and none is configured: "
            "set STATEWAY_WEB_SEARCH_PROVIDER (searxng, brave or tavily), or send it with "
            "'external_web_access' to make it an optional hint.",
            param=param,
        )


class McpServerNotAllowed(InvalidRequest):
    """An MCP tool's ``server_url`` (``tools[N].server_url``) off the gateway's allow-list
    and no configured server's. Its message names the Responses API's field: a Messages
    client, whose connector sent the URL as ``mcp_servers[].url``, tells it by its class
    and words the refusal its own way (its ``url``, then :attr:`reason`)."""

    code = "mcp_server_not_allowed"
    reason: Final = (
        "its host is not on the gateway's allow-list (STATEWAY_MCP_ALLOWED_HOSTS), and no "
        "server is configured there."
    )

    def __init__(self, url: str, *, param: str) -> None:
        super().__init__(f"MCP server_url '{url}' is not allowed: {self.reason}", param=param)
        self.url = url


class BodyTimeout(InvalidRequest):
    """A request body that did not arrive within ``within`` seconds
    (``[server] request_body_timeout``): answered, then the connection is closed."""

    status = 408
    code = "request_timeout"

    def __init__(self, within: float) -> None:
        super().__init__(
            f"The request body did not arrive within {within:g} "
            f"{'second' if within == 1 else 'seconds'}.",
            headers={"Connection": "close"},
        )


class UnsupportedContentEncoding(InvalidRequest):
    """A request body sent in a content coding the gateway does not undo (``coding``,
    as the client named it), or in more of them than it undoes (``problem`` says so):
    answered with the ``Accept-Encoding`` it takes instead (``accepted``, as RFC 7694
    section 3 has it), and not retried: sent again, it is refused again."""

    status = 415
    code = "unsupported_content_encoding"

    def __init__(
        self, coding: str, accepted: tuple[str, ...], problem: str = "is not supported"
    ) -> None:
        super().__init__(
            f"The request body's Content-Encoding '{coding}' {problem}; send it "
            f"as {', '.join(accepted)} or uncompressed.",
            headers={"Accept-Encoding": ", ".join(accepted)},
            retryable=False,
        )


class UndecodableBody(InvalidRequest):
    """A request body that its ``Content-Encoding`` does not decode: corrupt, cut short,
    or with bytes past its end. Its code is a body that is no JSON's: nothing of it can
    be read."""

    code = "invalid_json"

    def __init__(self, coding: str, problem: str) -> None:
        super().__init__(
            f"The request body could not be decoded as its Content-Encoding "
            f"'{coding}' says: {problem}."
        )


class DuplicateItem(InvalidRequest):
    """An item (``param``: its ``id``) whose id another item of the request has, or, a
    conversation keeping it under that id, one of the conversation's items; worded as
    hosted words it."""

    code = "duplicate_item_id"

    def __init__(self, item_id: str, *, param: str) -> None:
        super().__init__(
            f"Duplicate item found with id {item_id}. Remove duplicate items from your input "
            "and try again.",
            param=param,
        )


class PreviousResponseNotFound(InvalidRequest):
    code = "previous_response_not_found"

    def __init__(self, response_id: str) -> None:
        super().__init__(
            f"Previous response with id '{response_id}' not found.",
            param="previous_response_id",
        )


TOOL_REFERENCE_UNRESOLVED: Final = "tool_reference_unresolved"
TOOL_NAME_CONFLICT: Final = "tool_name_conflict"
TOOL_CHANGE_CODES: Final = frozenset({TOOL_REFERENCE_UNRESOLVED, TOOL_NAME_CONFLICT})
"""The codes of a mid-conversation tool change's refusals (:mod:`stateway.core.tools.changes`),
which the Messages wire shows as ``error.details.error_code``, as Anthropic does: what the
``anthropic`` SDK picks its error class by."""


class ToolReferenceUnresolved(InvalidRequest):
    """A tool change (``param``: where it was asked) names a tool that is not defined at
    that point of the conversation: neither declared nor defined by an earlier change."""

    code = TOOL_REFERENCE_UNRESOLVED

    def __init__(self, name: str, *, param: str) -> None:
        super().__init__(
            f"{param}: the tool '{name}' is not defined at this position in the "
            "conversation: declare it in tools, or define it in an earlier tool_addition.",
            param=param,
        )


class ToolNameConflict(InvalidRequest):
    """A tool defined mid-conversation (``param``: its name) takes the name of a tool of
    another kind."""

    code = TOOL_NAME_CONFLICT

    def __init__(self, name: str, kind: str, *, param: str) -> None:
        super().__init__(
            f"{param}: the name '{name}' is already used by a {kind} tool; a tool defined "
            "in messages may replace a tool of its own kind only.",
            param=param,
        )


class ConfigRejected(InvalidRequest):
    """A configuration reload failed; the message says why. The generation in effect
    serves on."""

    code = "config_invalid"


class RequestTooLarge(GatewayError):
    status = 413
    type = "invalid_request_error"
    code = "request_too_large"


CONTEXT_LENGTH_EXCEEDED: Final = "context_length_exceeded"
"""The code of a context too long for the model, the gateway's estimate or an upstream's
refusal (what clients act on: Codex compacts)."""


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


class WindowFilled(InvalidRequest):
    """An answer that filled the model's context window before it ended, refused where the
    API has no other word for it (Responses: see
    :attr:`~stateway.core.generation_settings.GenerationSettings.window_filled_refused`). ``window``
    and ``prompt``: the window and the prompt's tokens when known, for the message."""

    code = CONTEXT_LENGTH_EXCEEDED

    def __init__(self, *, window: int | None, prompt: int | None) -> None:
        room = ""
        if window is not None and prompt is not None:
            room = f": the input ({prompt} tokens) left room for {window - prompt} output tokens"
        size = "" if window is None else f" of {window} tokens"
        super().__init__(
            f"The answer filled the model's context window{size} before it ended{room}. "
            "Shorten the input (compact the conversation) and try again.",
            param="input",
        )


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


class ResponseInProgress(InvalidRequest):
    code = "response_in_progress"

    def __init__(self, response_id: str) -> None:
        super().__init__(
            f"Response with id '{response_id}' is still in progress; continue from it once "
            "it has finished.",
            param="previous_response_id",
        )


class IdempotencyKeyReused(GatewayError):
    """A command id (``Idempotency-Key``, ``command_id``) came back with another request:
    a 409 the SDKs would retry, for ever refused (not :attr:`retryable`)."""

    status = 409
    type = "invalid_request_error"
    code = "idempotency_key_reused"
    retryable = False

    def __init__(self, param: str = "Idempotency-Key") -> None:
        super().__init__(
            "This idempotency key was already used with a different request; "
            "use a new key for a new request.",
            param=param,
        )


class RequestLoop(GatewayError):
    """A request the gateway sent upstream came back to it (its ``Via`` names this
    process: :mod:`stateway.core.hops`): a backend's URL points at the gateway. Refused
    before any route, so the loop stops at its first hop back; the sending gateway tells
    its client of an upstream failure holding this message."""

    status = 508
    type = "server_error"
    code = "loop_detected"
    retryable = False

    def __init__(self) -> None:
        super().__init__(
            "Request loop: the gateway sent this request to itself, as a backend's url "
            "points at this gateway itself, not at a model server; point it at the model "
            "server's base URL (vLLM's: http://HOST:8000/v1)."
        )
