"""MCP resources: stored responses and conversations, by tenant-scoped URI.

``stateway://{tenant}/responses/{id}`` and ``stateway://{tenant}/conversations/{id}``.
A URI is served only to a caller of its tenant: any other tenant's URI, and any URI that
is not one of these, reads as not found (a JSON-RPC error), exactly like an unknown id.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Final, Literal

import orjson
from mcp.shared.exceptions import MCPError
from mcp_types import INTERNAL_ERROR, INVALID_PARAMS, ResourceLink, ResourceTemplate

from stateway.core.commands import GetResponse
from stateway.core.conversations.commands import GetConversation
from stateway.core.errors import GatewayError, NotFound
from stateway.core.gateway import Gateway
from stateway.core.principal import Principal
from stateway.protocols.conversations.encode import encode_conversation
from stateway.protocols.responses.encode import encode_response

SCHEME: Final = "stateway://"
Kind = Literal["responses", "conversations"]
MIME_TYPE: Final = "application/json"

TEMPLATES: Final = [
    ResourceTemplate(
        name="response",
        uri_template=SCHEME + "{tenant}/responses/{id}",
        description="A stored response (the Responses API object); subscribe to follow a "
        "background response until it ends.",
        mime_type=MIME_TYPE,
    ),
    ResourceTemplate(
        name="conversation",
        uri_template=SCHEME + "{tenant}/conversations/{id}",
        description="A conversation (the Conversations API object).",
        mime_type=MIME_TYPE,
    ),
]


@dataclass(frozen=True, slots=True)
class Resource:
    uri: str
    tenant_id: str
    kind: Kind
    id: str


def resource_uri(tenant_id: str, kind: Kind, object_id: str) -> str:
    return f"{SCHEME}{tenant_id}/{kind}/{object_id}"


def link_of(principal: Principal, result: dict[str, Any]) -> ResourceLink | None:
    """A link to the resource a tool's result is (a response, a conversation): the URI
    to read or subscribe to, which names the caller's tenant (a client need not know it)."""
    kind: Kind
    match result:
        case {"object": "response", "id": str(object_id)}:
            kind = "responses"
        case {"object": "conversation", "id": str(object_id)}:
            kind = "conversations"
        case _:
            return None
    uri = resource_uri(principal.tenant_id, kind, object_id)
    return ResourceLink(name=object_id, uri=uri, mime_type=MIME_TYPE)


def resource_of(principal: Principal, uri: str) -> Resource:
    """The resource ``uri`` names, when ``principal`` may see it; else not found."""
    tenant, _, rest = uri.removeprefix(SCHEME).partition("/")
    kind, _, object_id = rest.partition("/")
    if (
        not uri.startswith(SCHEME)
        or tenant != principal.tenant_id
        or kind not in ("responses", "conversations")
        or not object_id
        or "/" in object_id
    ):
        raise not_found(uri)
    return Resource(uri, tenant, kind, object_id)  # type: ignore[arg-type]


async def read(gateway: Gateway, principal: Principal, uri: str) -> str:
    """The resource's JSON (the object its REST route answers with)."""
    resource = resource_of(principal, uri)
    body: dict[str, Any]
    try:
        if resource.kind == "responses":
            body = encode_response(await gateway.execute(principal, GetResponse(resource.id)))
        else:
            command = GetConversation(resource.id)
            body = encode_conversation(await gateway.execute(principal, command))
    except GatewayError as exc:
        raise protocol_error(uri, exc) from None
    return orjson.dumps(body).decode()


def not_found(uri: str) -> MCPError:
    return MCPError(INVALID_PARAMS, f"Resource not found: {uri}", {"uri": uri})


def protocol_error(uri: str, error: GatewayError) -> MCPError:
    """``error`` met while serving ``uri``, as a JSON-RPC error: not found, a request the
    gateway refuses (invalid params), or the gateway failing (internal error, with its
    client-facing message and code; the SDK would send any other exception as code 0
    with its text)."""
    if isinstance(error, NotFound):
        return not_found(uri)
    code = INVALID_PARAMS if error.status < 500 else INTERNAL_ERROR
    return MCPError(code, error.message, {"uri": uri, "code": error.code})
