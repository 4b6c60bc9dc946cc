"""Resource URIs are tenant-scoped: a principal reads its own tenant's objects only."""

from __future__ import annotations

import orjson
import pytest
from mcp.shared.exceptions import MCPError
from mcp_types import INTERNAL_ERROR, INVALID_PARAMS

from stateway.core.commands import CreateResponse
from stateway.core.errors import InternalError, InvalidRequest, StorageError
from stateway.core.gateway import Gateway
from stateway.core.inference import Finish, TextDelta
from stateway.core.loop import Loop
from stateway.core.principal import Principal
from stateway.core.routing import BackendEntry, Router
from stateway.core.run_registry import RunRegistry
from stateway.protocols.conversations.decode import decode_create_conversation
from stateway.protocols.conversations.encode import encode_conversation
from stateway.surfaces.mcp.resources import protocol_error, read, resource_of, resource_uri
from tests.core.conversation_fakes import MemoryConversations, TurnStore
from tests.core.fakes import MemoryStore, ScriptedBackend

ACME = Principal("acme")
GLOBEX = Principal("globex")


def user(text: str) -> dict[str, object]:
    return {"type": "message", "role": "user", "content": [{"type": "input_text", "text": text}]}


async def stored_response(gateway: Gateway, principal: Principal) -> str:
    run = await gateway.execute(principal, CreateResponse(model="m", input=[user("hi")]))
    await run.wait()
    return run.id


def build() -> Gateway:
    store = MemoryStore()
    backend = ScriptedBackend([TextDelta("a"), Finish("stop")])
    return Gateway(
        store, Router([BackendEntry(backend, {}, catch_all=True)]), Loop(store), RunRegistry()
    )


async def test_a_principal_reads_its_own_tenants_response() -> None:
    gateway = build()
    response_id = await stored_response(gateway, ACME)
    text = await read(gateway, ACME, resource_uri("acme", "responses", response_id))
    assert f'"id":"{response_id}"' in text


async def test_another_tenants_uri_is_not_found_even_for_an_existing_response() -> None:
    gateway = build()
    response_id = await stored_response(gateway, ACME)
    for uri in (
        resource_uri("acme", "responses", response_id),  # acme's, asked by globex
        resource_uri("globex", "responses", response_id),  # globex's name for acme's object
    ):
        with pytest.raises(MCPError) as caught:
            await read(gateway, GLOBEX, uri)
        assert caught.value.code == INVALID_PARAMS
        assert uri in caught.value.error.message
    # acme's own response under another tenant's name: not acme's URI of it.
    with pytest.raises(MCPError):
        await read(gateway, ACME, resource_uri("globex", "responses", response_id))


@pytest.mark.parametrize(
    "uri",
    [
        "stateway://acme/responses/",
        "stateway://acme/responses/a/b",
        "stateway://acme/files/x",
        "stateway://acme",
        "file:///acme/responses/x",
        "stateway:/acme/responses/x",
    ],
)
def test_malformed_uris_are_not_found(uri: str) -> None:
    with pytest.raises(MCPError) as caught:
        resource_of(ACME, uri)
    assert caught.value.code == INVALID_PARAMS
    assert caught.value.error.message == f"Resource not found: {uri}"
    assert caught.value.error.data == {"uri": uri}  # which one, for a client reading several


def test_uris_round_trip() -> None:
    uri = resource_uri("acme", "conversations", "conv_1")
    assert uri == "stateway://acme/conversations/conv_1"
    resource = resource_of(ACME, uri)
    assert (resource.tenant_id, resource.kind, resource.id) == ("acme", "conversations", "conv_1")


async def test_a_principal_reads_its_own_tenants_conversation() -> None:
    conversations = MemoryConversations()
    store = TurnStore(conversations)
    backend = ScriptedBackend([TextDelta("a"), Finish("stop")])
    router = Router([BackendEntry(backend, {}, catch_all=True)])
    gateway = Gateway(store, router, Loop(store), RunRegistry(), conversations=conversations)
    created = await gateway.execute(ACME, decode_create_conversation(b'{"metadata":{"a":"1"}}'))
    text = await read(gateway, ACME, resource_uri("acme", "conversations", created.id))
    assert orjson.loads(text) == encode_conversation(created)
    with pytest.raises(MCPError):
        await read(gateway, GLOBEX, resource_uri("globex", "conversations", created.id))


async def test_a_missing_conversation_is_not_found() -> None:
    gateway = build()  # serves no conversations: every one is a 404
    with pytest.raises(MCPError):
        await read(gateway, ACME, resource_uri("acme", "conversations", "conv_x"))


class UnreadableStore(MemoryStore):
    async def get(self, tenant_id: str, response_id: str) -> None:
        raise StorageError("The response store is unavailable.")


async def test_a_failing_store_is_an_internal_error_in_the_gateways_words() -> None:
    """Not the SDK's code 0 with the exception's text."""
    store = UnreadableStore()
    backend = ScriptedBackend([TextDelta("a"), Finish("stop")])
    router = Router([BackendEntry(backend, {}, catch_all=True)])
    gateway = Gateway(store, router, Loop(store), RunRegistry())
    uri = resource_uri("acme", "responses", "resp_1")
    with pytest.raises(MCPError) as caught:
        await read(gateway, ACME, uri)
    assert caught.value.code == INTERNAL_ERROR
    assert caught.value.error.message == "The response store is unavailable."
    assert caught.value.error.data == {"uri": uri, "code": "storage_unavailable"}


def test_a_refused_request_is_invalid_params() -> None:
    error = protocol_error("stateway://acme/responses/r", InvalidRequest("No."))
    assert (error.code, error.error.message) == (INVALID_PARAMS, "No.")


@pytest.mark.parametrize(("status", "code"), [(499, INVALID_PARAMS), (500, INTERNAL_ERROR)])
def test_the_gateway_failing_is_an_internal_error_from_500_on(status: int, code: int) -> None:
    """A 500 is the gateway's fault, not the caller's params (``InternalError``)."""
    failure = InternalError() if status == 500 else InvalidRequest("No.", status=status)
    assert protocol_error("stateway://acme/responses/r", failure).code == code
