"""The MCP surface end to end: the official ``mcp`` SDK client, in both protocol
generations it negotiates, against the real ``stateway serve`` and fake upstream."""

from __future__ import annotations

import asyncio
import uuid
import warnings
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager
from typing import Any

import httpx2
import mcp_types as types
import orjson
import pytest
from mcp import Client, MCPError
from mcp.client.session import IncomingMessage

from stateway.launch import start_gateway
from stateway.surfaces.mcp.limits import MAX_TENANT_SESSIONS
from tests.e2e.test_upstream_mapping import upstream_requests

MODEL = "fake-model"
MODES = ["legacy", "auto"]
SLOW = "[[slow:40]] [[words:25]]"


@pytest.fixture(scope="module")
def gateway(fake_upstream: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    database = f"sqlite:///{tmp_path_factory.mktemp('db') / 'stateway.db'}"
    with start_gateway(["--upstream", fake_upstream, "--database", database]) as url:
        yield url


@asynccontextmanager
async def connected(gateway: str, mode: str, on_message: Any = None) -> AsyncIterator[Client]:
    async with Client(gateway + "/mcp", mode=mode, message_handler=on_message) as client:
        yield client


def response_uri(response_id: str) -> str:
    return f"stateway://default/responses/{response_id}"


@pytest.mark.parametrize("mode", MODES)
async def test_the_tools_are_listed_in_both_protocol_generations(gateway: str, mode: str) -> None:
    async with connected(gateway, mode) as client:
        expected = "2025-11-25" if mode == "legacy" else "2026-07-28"
        assert client.protocol_version == expected
        tools = {tool.name: tool for tool in (await client.list_tools()).tools}
    assert {
        "create_response",
        "get_response",
        "cancel_response",
        "list_input_items",
        "create_conversation",
        "add_conversation_items",
    } <= set(tools)
    schema = tools["create_response"].input_schema
    assert {"model", "input", "previous_response_id", "background", "command_id"} <= set(
        schema["properties"]
    )


@pytest.mark.parametrize("mode", MODES)
async def test_a_created_response_is_the_result_and_its_resource(gateway: str, mode: str) -> None:
    async with connected(gateway, mode) as client:
        created = await client.call_tool(
            "create_response", {"model": MODEL, "input": "hello [[words:4]]"}
        )
        assert not created.is_error
        response = created.structured_content
        assert (response["object"], response["status"]) == ("response", "completed")
        [text, link] = created.content
        assert isinstance(text, types.TextContent)
        assert orjson.loads(text.text) == response
        assert isinstance(link, types.ResourceLink)
        assert link.uri == response_uri(response["id"])

        read = await client.read_resource(response_uri(response["id"]))
        [content] = read.contents
        assert isinstance(content, types.TextResourceContents)
        assert content.uri == response_uri(response["id"])
        assert orjson.loads(content.text)["id"] == response["id"]

        again = await client.call_tool("get_response", {"response_id": response["id"]})
        assert again.structured_content == response
        items = await client.call_tool("list_input_items", {"response_id": response["id"]})
        assert items.structured_content["data"][0]["type"] == "message"


async def test_a_subscription_sees_a_background_response_run_and_end_legacy(
    gateway: str,
) -> None:
    updates: asyncio.Queue[str] = asyncio.Queue()

    async def on_message(message: IncomingMessage) -> None:
        if isinstance(message, types.ResourceUpdatedNotification):
            updates.put_nowait(message.params.uri)

    async with connected(gateway, "legacy", on_message) as client:
        created = await client.call_tool(
            "create_response", {"model": MODEL, "input": SLOW, "background": True}
        )
        response = created.structured_content
        assert response["status"] in ("queued", "in_progress")
        uri = response_uri(response["id"])
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # deprecated as of 2026-07-28, current here
            await client.subscribe_resource(uri)

        seen = 0
        while True:
            assert await updates.get() == uri
            seen += 1
            read = await client.read_resource(uri)
            status = orjson.loads(read.contents[0].text)["status"]  # type: ignore[union-attr]
            if status == "completed":
                break
        assert seen >= 2  # while it ran, and when it ended


async def test_a_listen_stream_sees_a_background_response_run_and_end(gateway: str) -> None:
    async with connected(gateway, "auto") as client:
        created = await client.call_tool(
            "create_response", {"model": MODEL, "input": SLOW, "background": True}
        )
        uri = response_uri(created.structured_content["id"])
        seen = 0
        async with client.listen(resource_subscriptions=[uri]) as subscription:
            async for event in subscription:
                assert event.uri == uri  # type: ignore[union-attr]
                seen += 1
                read = await client.read_resource(uri)
                text = read.contents[0].text  # type: ignore[union-attr]
                if orjson.loads(text)["status"] == "completed":
                    break
        assert seen >= 2


@pytest.mark.parametrize("mode", MODES)
async def test_another_tenants_or_an_unknown_resource_is_not_found(gateway: str, mode: str) -> None:
    async with connected(gateway, mode) as client:
        created = await client.call_tool("create_response", {"model": MODEL, "input": "hi"})
        response_id = created.structured_content["id"]
        for uri in (
            f"stateway://acme/responses/{response_id}",
            "stateway://default/responses/resp_unknown",
            f"stateway://default/widgets/{response_id}",
            "https://example.invalid/x",
        ):
            with pytest.raises(MCPError) as caught:
                await client.read_resource(uri)
            assert caught.value.code == types.INVALID_PARAMS
            assert uri in caught.value.error.message


@pytest.mark.parametrize("mode", MODES)
async def test_a_retried_create_with_a_command_id_runs_once(
    gateway: str, fake_upstream: str, mode: str
) -> None:
    marker = uuid.uuid4().hex
    arguments = {"model": MODEL, "input": f"{marker} [[slow:20]] [[words:5]]", "command_id": marker}
    async with connected(gateway, mode) as client:
        results = await asyncio.gather(
            *(client.call_tool("create_response", arguments) for _ in range(5))
        )
        later = await client.call_tool("create_response", arguments)
        reused = await client.call_tool("create_response", {**arguments, "input": "something else"})
    answers = [r.structured_content for r in [*results, later]]
    assert all(a == answers[0] for a in answers)
    assert answers[0]["status"] == "completed"
    assert sum(marker in str(r["body"]) for r in upstream_requests(fake_upstream)) == 1
    assert reused.is_error
    assert reused.structured_content["error"]["code"] == "idempotency_key_reused"
    assert reused.structured_content["error"]["param"] == "command_id"


@pytest.mark.parametrize("mode", MODES)
async def test_bad_calls_get_errors_naming_the_problem(gateway: str, mode: str) -> None:
    async with connected(gateway, mode) as client:
        missing = await client.call_tool("create_response", {"input": "hi"})
        assert missing.is_error
        assert "model" in missing.structured_content["error"]["message"]
        unknown = await client.call_tool(
            "create_response",
            {"model": MODEL, "input": "hi", "previous_response_id": "resp_missing"},
        )
        assert unknown.is_error
        assert unknown.structured_content["error"]["code"] == "previous_response_not_found"
        extra = await client.call_tool("get_response", {"response_id": "r", "bogus": 1})
        assert extra.is_error
        assert "bogus" in extra.structured_content["error"]["message"]
        coerced = await client.call_tool(
            "create_response", {"model": MODEL, "input": "hi", "background": "yes"}
        )
        assert coerced.is_error, "a string is not the schema's boolean"
        assert coerced.structured_content["error"]["code"] == "invalid_arguments"
        assert coerced.structured_content["error"]["param"] == "background"
        assert "background" in coerced.structured_content["error"]["message"]
        floated = await client.call_tool("list_input_items", {"response_id": "r", "limit": 5.5})
        assert floated.is_error, "5.5 is not the schema's integer"
        assert "limit" in floated.structured_content["error"]["message"]
        whole = await client.call_tool("list_input_items", {"response_id": "r", "limit": 5.0})
        assert whole.structured_content["error"]["code"] == "not_found", "5.0 is an integer"
        with pytest.raises(MCPError) as caught:
            await client.call_tool("no_such_tool", {})
        assert "no_such_tool" in caught.value.error.message
        still = await client.call_tool("create_response", {"model": MODEL, "input": "ok"})
        assert not still.is_error  # the session stays usable


async def test_conversations_through_tools(gateway: str) -> None:
    async with connected(gateway, "auto") as client:
        created = await client.call_tool("create_conversation", {"metadata": {"a": "1"}})
        conversation = created.structured_content
        assert conversation["object"] == "conversation"
        cid = conversation["id"]
        [link] = [c for c in created.content if isinstance(c, types.ResourceLink)]
        assert link.uri == f"stateway://default/conversations/{cid}"
        item = {"type": "message", "role": "user", "content": "remember 42"}
        added = await client.call_tool(
            "add_conversation_items", {"conversation_id": cid, "items": [item]}
        )
        item_id = added.structured_content["data"][0]["id"]
        turn = await client.call_tool(
            "create_response", {"model": MODEL, "input": "and now?", "conversation": cid}
        )
        assert turn.structured_content["status"] == "completed"
        listed = await client.call_tool("list_conversation_items", {"conversation_id": cid})
        assert len(listed.structured_content["data"]) == 3  # the item, the turn's in and out
        got = await client.call_tool(
            "get_conversation_item", {"conversation_id": cid, "item_id": item_id}
        )
        assert got.structured_content["id"] == item_id
        read = await client.read_resource(f"stateway://default/conversations/{cid}")
        assert orjson.loads(read.contents[0].text)["id"] == cid  # type: ignore[union-attr]
        updated = await client.call_tool(
            "update_conversation", {"conversation_id": cid, "metadata": {"b": "2"}}
        )
        assert updated.structured_content["metadata"] == {"b": "2"}
        dropped = await client.call_tool(
            "delete_conversation_item", {"conversation_id": cid, "item_id": item_id}
        )
        assert dropped.structured_content["id"] == cid
        deleted = await client.call_tool("delete_conversation", {"conversation_id": cid})
        assert deleted.structured_content["deleted"] is True
        gone = await client.call_tool("get_conversation", {"conversation_id": cid})
        assert gone.is_error


async def test_a_background_response_is_cancelled_and_deleted_through_tools(gateway: str) -> None:
    async with connected(gateway, "auto") as client:
        created = await client.call_tool(
            "create_response", {"model": MODEL, "input": SLOW, "background": True}
        )
        response_id = created.structured_content["id"]
        cancelled = await client.call_tool("cancel_response", {"response_id": response_id})
        assert cancelled.structured_content["status"] == "cancelled"
        deleted = await client.call_tool("delete_response", {"response_id": response_id})
        assert deleted.structured_content == {
            "id": response_id,
            "object": "response.deleted",
            "deleted": True,
        }
        with pytest.raises(MCPError):
            await client.read_resource(response_uri(response_id))


async def test_without_auth_sessions_are_bounded_by_the_process_alone(gateway: str) -> None:
    """Every caller is the default tenant: no tenant's share (``test_tenant_shares.py``)
    keeps it below the process's limit."""
    opened: list[str] = []
    async with httpx2.AsyncClient(timeout=30) as http:
        try:
            for _ in range(MAX_TENANT_SESSIONS + 1):
                answer = await http.post(gateway + "/mcp", json=INITIALIZE, headers=ACCEPT)
                assert answer.status_code == 200, answer.text
                opened.append(answer.headers["mcp-session-id"])
        finally:
            for session in opened:
                ending = {**ACCEPT, "mcp-session-id": session}
                await http.delete(gateway + "/mcp", headers=ending | PROTOCOL)


ACCEPT = {"accept": "application/json, text/event-stream"}
PROTOCOL = {"mcp-protocol-version": "2025-11-25"}
INITIALIZE = {
    "jsonrpc": "2.0",
    "id": 1,
    "method": "initialize",
    "params": {
        "protocolVersion": "2025-11-25",
        "capabilities": {},
        "clientInfo": {"name": "mcp-surface-test", "version": "1"},
    },
}
