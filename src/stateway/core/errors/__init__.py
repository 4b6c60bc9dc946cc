"""The one error tree of the gateway.

Every error a client can see is a :class:`GatewayError` carrying its HTTP status, the
OpenAI error ``type`` and ``code`` and, for request errors, the offending ``param``; one
the same request would meet again, though the SDKs retry its status, is not
``retryable`` (answered with ``x-should-retry: false``: marked "final" below).
Protocols render it in their own error shape; nothing classifies errors by message text
(but an upstream 429's ``type``, ``tokens`` or ``requests``, which only its words tell:
:func:`rate_limit_type`).

Import the tree from here. Its branches are kept one concept to a module:

- :mod:`.gateway_error`: the root and the kinds the others refine (``InvalidRequest``,
  ``NotFound``), and ``InternalError``;
- :mod:`.request`: what a request asks that cannot be served as asked (its body, its
  context, what it names, a retry or turn colliding with another);
- :mod:`.threads`: a Messages thread's refusals and their codes;
- :mod:`.access`: credentials, where they reach, the identity provider, rate limits;
- :mod:`.upstream`: a model server's failures (and :func:`rate_limit_type`);
- :mod:`.unavailable`: the gateway cannot serve now (its queue, its database, shutdown,
  a stopped process).

    GatewayError
    ├── InvalidRequest            400 invalid_request_error
    │   ├── BodyTimeout           408 code=request_timeout (the body did not arrive in time:
    │   │                             the connection is closed)
    │   ├── UnsupportedContentEncoding  415 code=unsupported_content_encoding (a body in a
    │   │                             coding not undone: Accept-Encoding names those that
    │   │                             are), final
    │   ├── UndecodableBody       400 code=invalid_json (a compressed body corrupt or cut)
    │   ├── ContextTooLong        400 code=context_length_exceeded (the gateway's own window
    │   │                             check: with the estimated tokens and the window)
    │   ├── WindowFilled          400 code=context_length_exceeded (an answer that filled the
    │   │                             window, where the API has no stop reason for it)
    │   ├── DuplicateItem         400 code=duplicate_item_id (an item id twice in a request,
    │   │                             or one its conversation holds)
    │   ├── PreviousResponseNotFound   400 code=previous_response_not_found
    │   ├── ResponseInProgress    400 code=response_in_progress
    │   ├── UncarriedPart         400 code=unsupported_content_type (a content part the
    │   │                             backend's upstream API cannot carry: its type, the
    │   │                             backend's name)
    │   ├── NoSearchProvider      400 code=unsupported_tool_type (a web search tool declared
    │   │                             where no search provider is configured: its type)
    │   ├── McpServerNotAllowed   400 code=mcp_server_not_allowed (an MCP server URL off
    │   │                             the allow-list and no configured server's: the URL)
    │   ├── ToolReferenceUnresolved, ToolNameConflict   400 (a mid-conversation tool
    │   │                             change naming no tool there, or another kind's name)
    │   ├── ThreadAlreadyContinued, ThreadContinueInFlight   400 (a Messages thread's)
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
    │   ├── ConversationNotFound  404 (also an unknown conversation named by a response)
    │   └── ThreadNotFound        404 code=thread_not_found
    ├── ConversationLocked        409 code=conversation_locked (another turn holds it)
    ├── IdempotencyKeyReused      409 code=idempotency_key_reused (the id named another
    │                                 request), final
    ├── RateLimited               429 type=requests|tokens code=rate_limit_exceeded, Retry-After
    │                                 (final past MAX_RETRY_WAIT, 120 s)
    ├── RequestLoop               508 code=loop_detected (a request the gateway sent came
    │                                 back: a backend's url points at it), final
    ├── UpstreamError             502 upstream_error (any upstream failure, status mapped;
    │   │                             final: its credentials refused, a redirect, a quota)
    │   ├── UpstreamTimeout       504
    │   ├── UpstreamUnavailable   502 (connect refused, DNS, ...); 503 when upstream said 503
    │   ├── UpstreamResponseTooLarge  502 code=upstream_response_too_large, final
    │   └── UpstreamRejected      4xx the model server refused the request itself
    │       ├── UpstreamContextTooLong  400 code=context_length_exceeded (saying by how much)
    │       └── UpstreamOutputOverWindow  400 output tokens asked beyond the whole window
    ├── Unavailable               503 server_error, the gateway's own: Retry-After: 1
    │   ├── Overloaded            code=overloaded (the gateway's own queue)
    │   ├── StorageError          code=storage_unavailable, Retry-After: 5 (an outage of
    │   │   │                         the database or Redis: OUTAGE_RETRY_AFTER)
    │   │   ├── StorageRejected   (the database refused the data itself: a constraint, a
    │   │   │                     value or row it cannot hold; sent again, refused again)
    │   │   └── StorageNotWritable    (the database answers, refuses every write; the
    │   │       │                     message names why, readiness fails until one lands)
    │   │       ├── StorageFull   code=storage_full (its disk, or its size limit)
    │   │       ├── StorageReadOnly   code=storage_read_only (a standby after a failover,
    │   │       │                     a SQLite file the gateway may not write)
    │   │       ├── StorageLocked     code=storage_unavailable (another process holds the
    │   │       │   │                 SQLite file's write lock past the busy timeout)
    │   │       │   └── StorageTableLocked  (another PostgreSQL session holds a table
    │   │       │                     the gateway writes locked against writes)
    │   │       └── StorageWriteFailed  code=storage_write_failed (the file system
    │   │                             refused a SQLite write: a disk quota, a file size limit)
    │   ├── IdentityUnavailable   code=identity_provider_unavailable (OIDC discovery or
    │   │                             JWKS unreachable; Retry-After: its refetch cooldown)
    │   ├── ServerShuttingDown    code=server_shutting_down
    │   └── ServerRestarted       code=server_restarted (its process judged stopped)
    └── InternalError             500 server_error (a gateway bug, logged; no details leak)
"""

from stateway.core.errors.access import (
    CredentialRevoked,
    Forbidden,
    IdentityUnavailable,
    RateLimited,
    Unauthorized,
)
from stateway.core.errors.gateway_error import (
    MAX_RETRY_WAIT,
    GatewayError,
    InternalError,
    InvalidRequest,
    NotFound,
)
from stateway.core.errors.request import (
    CONTEXT_LENGTH_EXCEEDED,
    TOOL_CHANGE_CODES,
    TOOL_NAME_CONFLICT,
    TOOL_REFERENCE_UNRESOLVED,
    BodyTimeout,
    ConfigRejected,
    ContextTooLong,
    ConversationLocked,
    ConversationNotFound,
    DuplicateItem,
    IdempotencyKeyReused,
    McpServerNotAllowed,
    ModelNotFound,
    NoSearchProvider,
    PreviousResponseNotFound,
    RequestLoop,
    RequestTooLarge,
    ResponseInProgress,
    ResponseNotFound,
    ToolNameConflict,
    ToolReferenceUnresolved,
    UncarriedPart,
    UndecodableBody,
    UnsupportedContentEncoding,
    WindowFilled,
)
from stateway.core.errors.threads import (
    THREAD_ALREADY_CONTINUED,
    THREAD_CODES,
    THREAD_CONTINUE_IN_FLIGHT,
    THREAD_NOT_FOUND,
    ThreadAlreadyContinued,
    ThreadContinueInFlight,
    ThreadNotFound,
)
from stateway.core.errors.unavailable import (
    Overloaded,
    ServerRestarted,
    ServerShuttingDown,
    StorageError,
    StorageFull,
    StorageLocked,
    StorageNotWritable,
    StorageReadOnly,
    StorageRejected,
    StorageTableLocked,
    StorageWriteFailed,
    Unavailable,
)
from stateway.core.errors.upstream import (
    IMAGE_INPUT_UNSUPPORTED,
    INSUFFICIENT_QUOTA,
    PROMPT_TOO_LONG,
    UpstreamContextTooLong,
    UpstreamError,
    UpstreamOutputOverWindow,
    UpstreamRejected,
    UpstreamResponseTooLarge,
    UpstreamTimeout,
    UpstreamUnavailable,
    rate_limit_type,
)

__all__ = [
    "CONTEXT_LENGTH_EXCEEDED",
    "IMAGE_INPUT_UNSUPPORTED",
    "INSUFFICIENT_QUOTA",
    "MAX_RETRY_WAIT",
    "PROMPT_TOO_LONG",
    "THREAD_ALREADY_CONTINUED",
    "THREAD_CODES",
    "THREAD_CONTINUE_IN_FLIGHT",
    "THREAD_NOT_FOUND",
    "TOOL_CHANGE_CODES",
    "TOOL_NAME_CONFLICT",
    "TOOL_REFERENCE_UNRESOLVED",
    "BodyTimeout",
    "ConfigRejected",
    "ContextTooLong",
    "ConversationLocked",
    "ConversationNotFound",
    "CredentialRevoked",
    "DuplicateItem",
    "Forbidden",
    "GatewayError",
    "IdempotencyKeyReused",
    "IdentityUnavailable",
    "InternalError",
    "InvalidRequest",
    "McpServerNotAllowed",
    "ModelNotFound",
    "NoSearchProvider",
    "NotFound",
    "Overloaded",
    "PreviousResponseNotFound",
    "RateLimited",
    "RequestLoop",
    "RequestTooLarge",
    "ResponseInProgress",
    "ResponseNotFound",
    "ServerRestarted",
    "ServerShuttingDown",
    "StorageError",
    "StorageFull",
    "StorageLocked",
    "StorageNotWritable",
    "StorageReadOnly",
    "StorageRejected",
    "StorageTableLocked",
    "StorageWriteFailed",
    "ThreadAlreadyContinued",
    "ThreadContinueInFlight",
    "ThreadNotFound",
    "ToolNameConflict",
    "ToolReferenceUnresolved",
    "Unauthorized",
    "Unavailable",
    "UncarriedPart",
    "UndecodableBody",
    "UnsupportedContentEncoding",
    "UpstreamContextTooLong",
    "UpstreamError",
    "UpstreamOutputOverWindow",
    "UpstreamRejected",
    "UpstreamResponseTooLarge",
    "UpstreamTimeout",
    "UpstreamUnavailable",
    "WindowFilled",
    "rate_limit_type",
]
