"""The tools as a ``tools/call`` runs them (``ToolCalls.answer``), over an in-memory
gateway with conversations and background runs: each tool's command, the object it
answers, the link to that object's resource, and how a call fails. The MCP wire
(``test_server.py``) and the e2e suite drive some of them; this pins what each one
sends and answers without a server."""

from __future__ import annotations

import asyncio
from typing import Any

import orjson
import pytest
from mcp.shared.exceptions import MCPError
from mcp_types import (
    INVALID_PARAMS,
    CallToolRequestParams,
    CallToolResult,
    ResourceLink,
    TextContent,
)

from stateway.coordination.memory import MemoryCommandResults
from stateway.core.errors import UpstreamError
from stateway.core.gateway import Gateway
from stateway.core.inference import Finish, TextDelta
from stateway.core.loop import Loop
from stateway.core.principal import Principal
from stateway.core.routing import BackendEntry, Router
from stateway.core.run_registry import RunRegistry
from stateway.protocols.responses.stream import encode_event_json
from stateway.surfaces.mcp.tool_calls import ToolCalls
from tests.core.conversation_fakes import MemoryConversations, TurnStore
from tests.core.fakes import ScriptedBackend

ACME = Principal("acme")


def tools_over(
    backend: ScriptedBackend, max_input_items: int | None = None, **store_options: Any
) -> ToolCalls:
    """``store_options``: the ``MemoryStore``'s."""
    conversations = MemoryConversations()
    store = TurnStore(conversations, **store_options)
    gateway = Gateway(
        store,
        Router([BackendEntry(backend, {}, catch_all=True)]),
        Loop(store),
        RunRegistry(),
        conversations=conversations,
        encoder=encode_event_json,
        results=MemoryCommandResults(),
    )
    return ToolCalls(gateway, max_input_items)


def answering() -> ScriptedBackend:
    return ScriptedBackend([TextDelta("hello"), Finish("stop")])


async def call(calls: ToolCalls, name: str, **arguments: Any) -> CallToolResult:
    return await calls.answer(CallToolRequestParams(name=name, arguments=arguments), ACME)


async def ok(calls: ToolCalls, name: str, **arguments: Any) -> dict[str, Any]:
    result = await call(calls, name, **arguments)
    assert not result.is_error, result.structured_content
    assert result.structured_content is not None
    return result.structured_content


def error_of(result: CallToolResult) -> dict[str, Any]:
    assert result.is_error
    assert result.structured_content is not None
    error: dict[str, Any] = result.structured_content["error"]
    return error


def link_of(result: CallToolResult) -> ResourceLink | None:
    links = [c for c in result.content if isinstance(c, ResourceLink)]
    assert len(links) <= 1
    return links[0] if links else None


def user(text: str) -> dict[str, Any]:
    return {"type": "message", "role": "user", "content": text}


async def test_a_response_is_created_with_what_the_call_names() -> None:
    calls = tools_over(answering())
    first = await ok(calls, "create_response", model="m", input="hi")
    second = await call(
        calls,
        "create_response",
        model="m",
        input=[user("and now?")],
        instructions="Be brief.",
        previous_response_id=first["id"],
    )
    response = second.structured_content
    assert response is not None
    assert response["status"] == "completed"
    assert response["instructions"] == "Be brief."
    assert response["previous_response_id"] == first["id"]
    assert response["background"] is False
    link = link_of(second)
    assert link is not None
    assert link.uri == f"stateway://acme/responses/{response['id']}"
    assert link.name == response["id"]
    assert link.mime_type == "application/json"


async def test_a_response_in_a_conversation_is_its_turn() -> None:
    calls = tools_over(answering())
    conversation = await ok(calls, "create_conversation")
    response = await ok(
        calls, "create_response", model="m", input="hi", conversation=conversation["id"]
    )
    assert response["conversation"] == {"id": conversation["id"]}
    items = await ok(calls, "list_conversation_items", conversation_id=conversation["id"])
    assert len(items["data"]) == 2  # the turn's input and output


async def test_a_background_response_is_answered_queued_and_runs_on() -> None:
    gate = asyncio.Event()
    backend = ScriptedBackend([TextDelta("hello"), Finish("stop")], gate=gate)
    calls = tools_over(backend)
    queued = ok(calls, "create_response", model="m", input="hi", background=True)
    response = await asyncio.wait_for(queued, 5)  # not once it ended: it waits for the gate
    assert response["background"] is True
    assert (response["status"], response["output"]) == ("queued", [])  # as first announced
    response_id = response["id"]

    cancelled = await ok(calls, "cancel_response", response_id=response_id)
    assert cancelled["id"] == response_id
    assert cancelled["status"] == "cancelled"
    got = await ok(calls, "get_response", response_id=response_id)
    assert got["status"] == "cancelled"

    deleted = await call(calls, "delete_response", response_id=response_id)
    assert deleted.structured_content == {
        "id": response_id,
        "object": "response.deleted",
        "deleted": True,
    }
    assert link_of(deleted) is None  # no resource to read any more
    gone = await call(calls, "get_response", response_id=response_id)
    assert error_of(gone)["code"] == "not_found"


async def test_a_failed_run_is_an_error_result_in_the_openai_shape() -> None:
    backend = ScriptedBackend([UpstreamError("the model server fell over", status=502)])
    result = await call(tools_over(backend), "create_response", model="m", input="hi")
    assert error_of(result) == {
        "message": "the model server fell over",
        "type": "upstream_error",
        "param": None,
        "code": "upstream_error",
    }
    assert link_of(result) is None


async def test_a_background_response_that_could_not_be_stored_is_an_error_result() -> None:
    """Not a queued response nobody can read, follow or cancel."""
    backend = ScriptedBackend([TextDelta("hello"), Finish("stop")], gate=asyncio.Event())
    calls = tools_over(backend, fail_save=True)
    queued = call(calls, "create_response", model="m", input="hi", background=True)
    result = await asyncio.wait_for(queued, 5)
    assert error_of(result)["type"] == "server_error"
    assert link_of(result) is None


async def test_a_results_text_is_its_json_for_hosts_reading_text() -> None:
    calls = tools_over(answering())
    created = await call(calls, "create_conversation", metadata={"a": "1"})
    failed = await call(calls, "get_conversation", conversation_id="conv_x")
    for result in (created, failed):
        [text] = [c for c in result.content if isinstance(c, TextContent)]
        assert orjson.loads(text.text) == result.structured_content


async def test_a_conversation_is_created_changed_and_deleted() -> None:
    calls = tools_over(answering())
    created = await call(
        calls, "create_conversation", items=[user("remember 42")], metadata={"a": "1"}
    )
    conversation = created.structured_content
    assert conversation is not None
    cid = conversation["id"]
    assert conversation["object"] == "conversation"
    assert conversation["metadata"] == {"a": "1"}
    link = link_of(created)
    assert link is not None
    assert link.uri == f"stateway://acme/conversations/{cid}"

    added = await ok(
        calls, "add_conversation_items", conversation_id=cid, items=[user("b"), user("c")]
    )
    assert added["object"] == "list"
    assert [item["content"][0]["text"] for item in added["data"]] == ["b", "c"]
    [first_id, second_id, third_id] = [
        item["id"]
        for item in (await ok(calls, "list_conversation_items", conversation_id=cid, order="asc"))[
            "data"
        ]
    ]
    got = await ok(calls, "get_conversation", conversation_id=cid)
    assert got["id"] == cid
    item = await ok(calls, "get_conversation_item", conversation_id=cid, item_id=second_id)
    assert item["id"] == second_id
    assert item["content"][0]["text"] == "b"

    updated = await ok(calls, "update_conversation", conversation_id=cid, metadata={"b": "2"})
    assert updated["metadata"] == {"b": "2"}
    dropped = await ok(calls, "delete_conversation_item", conversation_id=cid, item_id=second_id)
    assert dropped["object"] == "conversation"
    assert dropped["id"] == cid
    left = await ok(calls, "list_conversation_items", conversation_id=cid, order="asc")
    assert [item["id"] for item in left["data"]] == [first_id, third_id]

    deleted = await ok(calls, "delete_conversation", conversation_id=cid)
    assert deleted == {"id": cid, "object": "conversation.deleted", "deleted": True}
    gone = await call(calls, "get_conversation", conversation_id=cid)
    assert error_of(gone)["code"] == "not_found"


async def test_a_conversations_items_are_paged_as_the_route_pages_them() -> None:
    calls = tools_over(answering())
    items = [user(str(n)) for n in range(4)]
    cid = (await ok(calls, "create_conversation", items=items))["id"]

    def texts(page: dict[str, Any]) -> list[str]:
        return [item["content"][0]["text"] for item in page["data"]]

    newest = await ok(calls, "list_conversation_items", conversation_id=cid, limit=2)
    assert texts(newest) == ["3", "2"]  # desc by default
    assert newest["has_more"] is True
    after = newest["last_id"]
    rest = await ok(calls, "list_conversation_items", conversation_id=cid, after=after, limit=2)
    assert texts(rest) == ["1", "0"]
    oldest = await ok(calls, "list_conversation_items", conversation_id=cid, order="asc", limit=3)
    assert texts(oldest) == ["0", "1", "2"]


async def test_a_responses_input_items_are_paged_as_the_route_pages_them() -> None:
    calls = tools_over(answering())
    input_items = [user(str(n)) for n in range(3)]
    response_id = (await ok(calls, "create_response", model="m", input=input_items))["id"]

    def texts(page: dict[str, Any]) -> list[str]:
        return [item["content"][0]["text"] for item in page["data"]]

    newest = await ok(calls, "list_input_items", response_id=response_id, limit=2)
    assert newest["object"] == "list"
    assert texts(newest) == ["2", "1"]
    assert newest["has_more"] is True
    rest = await ok(calls, "list_input_items", response_id=response_id, after=newest["last_id"])
    assert texts(rest) == ["0"]
    oldest = await ok(calls, "list_input_items", response_id=response_id, order="asc", limit=2)
    assert texts(oldest) == ["0", "1"]


async def test_an_unknown_tool_is_invalid_params() -> None:
    with pytest.raises(MCPError) as caught:
        await call(tools_over(answering()), "drop_tables")
    assert caught.value.code == INVALID_PARAMS
    assert "drop_tables" in caught.value.error.message


async def test_arguments_the_tools_input_refuses_are_an_error_result_naming_them() -> None:
    result = await call(tools_over(answering()), "get_response", response_id="")
    error = error_of(result)
    assert error == {
        "message": error["message"],
        "type": "invalid_request_error",
        "param": "response_id",
        "code": "invalid_arguments",
    }
    assert error["message"].startswith("Invalid arguments for get_response: response_id: ")


async def test_input_items_are_counted_for_the_tool_taking_them_only() -> None:
    """``[server] max_input_items`` bounds ``create_response``'s ``input``, as the route's;
    another tool's items are the Conversations decoder's to bound."""
    calls = tools_over(answering(), max_input_items=2)
    refused = await call(
        calls, "create_response", model="m", input=[user("a"), user("b"), user("c")]
    )
    assert error_of(refused)["param"] == "input"
    assert not (
        await call(calls, "create_response", model="m", input=[user("a"), user("b")])
    ).is_error
    created = await call(calls, "create_conversation", items=[user("a"), user("b"), user("c")])
    assert not created.is_error


async def test_a_retry_under_a_command_id_gets_the_first_result() -> None:
    """The same arguments (their objects' keys in any order) are the same call; other
    arguments under that id are refused naming ``command_id``, and run nothing."""
    calls = tools_over(answering())
    first = await ok(
        calls, "create_conversation", metadata={"a": "1", "b": "2"}, command_id="cmd-1"
    )
    again = await ok(
        calls, "create_conversation", metadata={"b": "2", "a": "1"}, command_id="cmd-1"
    )
    assert again == first

    other = await call(calls, "create_conversation", metadata={"a": "2"}, command_id="cmd-1")
    assert error_of(other)["param"] == "command_id"
    assert error_of(other)["type"] == "invalid_request_error"
    # Another tool with the same arguments under that id is another call, too.
    backend = ScriptedBackend([TextDelta("hello"), Finish("stop")], gate=asyncio.Event())
    calls = tools_over(backend)
    queued = ok(calls, "create_response", model="m", input="hi", background=True)
    response_id = (await asyncio.wait_for(queued, 5))["id"]
    cancelled = await ok(calls, "cancel_response", response_id=response_id, command_id="cmd-2")
    assert cancelled["status"] == "cancelled"
    deleted = await call(calls, "delete_response", response_id=response_id, command_id="cmd-2")
    assert error_of(deleted)["param"] == "command_id"


async def test_a_detached_call_cancelled_at_shutdown_leaves_no_error_behind() -> None:
    """Its outcome retrieved as it ends (cancelled: nothing to retrieve), so the loop
    reports nothing about it."""
    gate = asyncio.Event()
    backend = ScriptedBackend([TextDelta("hello"), Finish("stop")], gate=gate)
    calls = tools_over(backend)
    loop = asyncio.get_running_loop()
    reported: list[dict[str, Any]] = []
    loop.set_exception_handler(lambda _, context: reported.append(context))
    try:
        calling = asyncio.create_task(
            call(calls, "create_response", model="m", input="hi", command_id="cmd-1")
        )
        await asyncio.wait_for(backend.started.wait(), 5)
        [work] = calls._detached
        calls.cancel()
        await asyncio.wait([work], timeout=5)
        calling.cancel()
        await asyncio.wait([calling], timeout=5)
        await asyncio.sleep(0)  # the done callbacks run
    finally:
        loop.set_exception_handler(None)
    assert work.cancelled()
    assert calls._detached == set()
    assert reported == []


async def test_a_number_no_json_body_may_hold_is_an_error_result_naming_the_tool() -> None:
    result = await call(tools_over(answering()), "list_input_items", response_id="r", limit=1e400)
    assert error_of(result) == {
        "message": "Invalid arguments for list_input_items: a number is NaN, infinite or "
        "beyond the range of a 64-bit float.",
        "type": "invalid_request_error",
        "param": None,
        "code": "invalid_arguments",
    }
