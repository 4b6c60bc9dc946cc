"""Remote MCP tools end to end: the real gateway runs a real MCP server's tools (built with
the ``mcp`` SDK, on loopback) inside responses, in front of the fake model, driven by the
``openai`` SDK, over both upstream API shapes."""

from __future__ import annotations

import asyncio
import contextlib
import json
import re
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import openai
import pytest
from openai import AsyncOpenAI, OpenAI
from openai.types.responses.mcp_tool_call_error import McpProtocolError, McpToolExecutionError

from stateway.core.tools.model_names import model_name
from stateway.launch import start_gateway
from tests.core.tools.wire import EVENTS, sdk_item
from tests.e2e.test_passthrough_tools import last_upstream_body
from tests.support.mcp_server import (
    TOOLS,
    RunningMcpServer,
    hanging_server,
    serve_mcp,
    serve_misbehaving,
    unreachable_url,
)

LOCAL: dict[str, Any] = {"type": "mcp", "server_label": "local", "require_approval": "never"}
GUARDED_SECRET = "operator-secret-0451"
"""The configured server ``guarded``'s credential: the gateway's, never a tenant's to read."""


@dataclass
class Setup:
    sdk: OpenAI
    server: RunningMcpServer


@pytest.fixture(scope="module", params=["chat", "responses"])
def setup(
    request: pytest.FixtureRequest, fake_upstream: str, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Setup]:
    directory = tmp_path_factory.mktemp("mcp-gateway")
    with serve_mcp() as server:
        config = directory / "stateway.toml"
        config.write_text(
            f'[mcp_servers.local]\nurl = "{server.url}"\n'
            f'[mcp_servers.guarded]\nurl = "{server.url}"\n'
            f'headers = {{ Authorization = "Bearer {GUARDED_SECRET}" }}\n'
        )
        database = f"sqlite:///{directory / 'stateway.db'}"
        args = ["--config", str(config), "--upstream", fake_upstream]
        args += ["--upstream-api", request.param, "--database", database]
        env = {
            "STATEWAY_MCP_ALLOWED_HOSTS": "127.0.0.1",
            "STATEWAY_TOOL_TIMEOUT_S": "8",  # a first listing (4 pages) on a busy, loaded machine
            "STATEWAY_MAX_CONCURRENT_TOOL_CALLS": "2",
            "STATEWAY_MAX_TOOL_ROUNDS": "4",
        }
        with (
            start_gateway(args, env=env) as url,
            OpenAI(base_url=url + "/v1", api_key="sk-test", max_retries=0) as sdk,
        ):
            yield Setup(sdk, server)


def tool(name: str, arguments: dict[str, Any], label: str = "local") -> str:
    return tool_call(f"{label}__{name}", arguments)


def tool_call(function: str, arguments: dict[str, Any]) -> str:
    return f"[[tool:{function}:{json.dumps(arguments, separators=(',', ':'))}]]"


def output_as_sent(sdk: OpenAI, **request: Any) -> list[dict[str, Any]]:
    """A response's output items as the gateway sent them, each read strictly as the SDK's
    type (the SDK itself builds its models without checking them)."""
    body = sdk.responses.with_raw_response.create(**request).http_response.json()
    for item in body["output"]:
        sdk_item(item)
    return list(body["output"])


def test_a_tool_runs_inside_the_response_and_the_model_answers_with_its_result(
    setup: Setup,
) -> None:
    response = setup.sdk.responses.create(
        model="m", input=tool("add", {"a": 2, "b": 3}), tools=[LOCAL]
    )
    assert response.status == "completed"
    listed, call, message = response.output
    assert listed.type == "mcp_list_tools"
    assert listed.error is None, listed.error
    assert "add" in [t.name for t in listed.tools]
    assert call.type == "mcp_call"
    assert (call.server_label, call.name, call.output, call.error) == ("local", "add", "5", None)
    assert json.loads(call.arguments) == {"a": 2, "b": 3}
    assert message.type == "message"
    assert response.output_text == "Tool said: 5"
    assert response.usage is not None
    assert response.usage.output_tokens > 0


def test_a_tool_name_strict_model_apis_refuse_is_offered_respelled(
    setup: Setup, fake_upstream: str
) -> None:
    """MCP allows ``files.read``; OpenAI's function names are ``[A-Za-z0-9_-]{1,64}``.
    The model is offered (and calls) a respelling, in this turn and the next; the client
    sees the tool's own name."""
    offered = model_name("files.read", "local")
    assert offered != "local__files.read"
    first = setup.sdk.responses.create(
        model="m", input=tool_call(offered, {"path": "/a"}), tools=[LOCAL]
    )
    call = first.output[1]
    assert call.type == "mcp_call"
    assert (call.name, call.output) == ("files.read", "contents of /a")
    second = setup.sdk.responses.create(
        model="m", input="[[echo]]", tools=[LOCAL], previous_response_id=first.id
    )
    assert second.status == "completed"
    sent = last_upstream_body(fake_upstream)
    names = [tool.get("name") or tool["function"]["name"] for tool in sent["tools"]]
    assert offered in names
    assert all(re.fullmatch(r"[A-Za-z0-9_-]{1,64}", name) for name in names), names
    assert offered in json.dumps(sent["input"] if "input" in sent else sent["messages"])


def test_several_rounds_run_in_one_response_with_usage_summed(setup: Setup) -> None:
    one = setup.sdk.responses.create(model="m", input=tool("add", {"a": 1, "b": 1}), tools=[LOCAL])
    three = setup.sdk.responses.create(
        model="m", input=tool("add", {"a": 1, "b": 1}) + "[[rounds:3]]", tools=[LOCAL]
    )
    assert three.status == "completed"
    assert [i.type for i in three.output] == [
        "mcp_list_tools",
        "mcp_call",
        "mcp_call",
        "mcp_call",
        "message",
    ]
    assert one.usage is not None
    assert three.usage is not None
    assert three.usage.input_tokens > one.usage.input_tokens


def test_the_round_limit_ends_incomplete_with_every_call_finished(setup: Setup) -> None:
    response = setup.sdk.responses.create(
        model="m", input=tool("add", {"a": 1, "b": 1}) + "[[rounds:20]]", tools=[LOCAL]
    )
    assert response.status == "incomplete"
    assert response.incomplete_details is not None
    assert response.incomplete_details.reason == "max_rounds"
    calls = [i for i in response.output if i.type == "mcp_call"]
    assert len(calls) == 4
    assert all(c.status == "completed" for c in calls)


def model_turns(sent: dict[str, Any]) -> list[tuple[str, Any]]:
    """The turns of an upstream request after its first user message: each assistant
    message with the ids of its calls and each tool result with its call's (Chat), or each
    item with its call id (Responses, whose items are flat)."""
    if "messages" in sent:
        turns = [
            (m["role"], [c["id"] for c in m.get("tool_calls") or ()] or m.get("tool_call_id"))
            for m in sent["messages"]
        ]
    else:
        turns = [(i.get("type") or i["role"], i.get("call_id")) for i in sent["input"]]
    return turns[1:]


@pytest.mark.parametrize("client_first", [True, False])
def test_a_mixed_round_runs_the_mcp_call_and_returns_the_client_call(
    setup: Setup, fake_upstream: str, client_first: bool
) -> None:
    """The client call's output comes after the MCP call it was made with: when the client
    call came first the model is shown one turn of both calls, then both results. Made
    second, it reads as the next turn (nothing in the items tells the two apart; see
    ``test_a_client_call_after_an_mcp_call_reaches_the_model_as_the_next_turn``)."""
    mine = {"type": "function", "name": "lookup", "parameters": {"type": "object"}}
    calls = [tool("add", {"a": 2, "b": 2}), '[[tool:lookup:{"k":1}]]']
    first = setup.sdk.responses.create(
        model="m", input="".join(calls[::-1] if client_first else calls), tools=[LOCAL, mine]
    )
    assert first.status == "completed"
    types = ["function_call", "mcp_call"] if client_first else ["mcp_call", "function_call"]
    assert [i.type for i in first.output] == ["mcp_list_tools", *types]
    [client_call] = [i for i in first.output if i.type == "function_call"]
    [mcp_call] = [i for i in first.output if i.type == "mcp_call"]
    assert mcp_call.output == "4"
    second = setup.sdk.responses.create(
        model="m",
        previous_response_id=first.id,
        input=[{"type": "function_call_output", "call_id": client_call.call_id, "output": "k=1"}],
        tools=[LOCAL, mine],
    )
    assert [i.type for i in second.output] == ["message"]  # listed once per chain
    if client_first:
        assert second.output_text == "Tool said: k=1\nTool said: 4"
        sent = last_upstream_body(fake_upstream)
        if "messages" in sent:
            ids = [client_call.call_id, mcp_call.id]
            assert model_turns(sent) == [("assistant", ids), ("tool", ids[0]), ("tool", ids[1])]
    else:
        assert second.output_text == "Tool said: k=1"


def test_a_client_call_after_an_mcp_call_reaches_the_model_as_the_next_turn(
    setup: Setup, fake_upstream: str
) -> None:
    """Nothing between the two calls marks a round apart: the client call is the model's
    next turn, made with the MCP result in hand (as the round after it was sent it), never
    a parallel call of the same turn."""
    mine = {"type": "function", "name": "lookup", "parameters": {"type": "object"}}
    mcp = {"type": "mcp_call", "id": "mcp_1", "server_label": "local", "name": "add"}
    history: list[Any] = [
        {"role": "user", "content": "add, then look it up"},
        {**mcp, "arguments": '{"a":2,"b":2}', "output": "4", "status": "completed"},
        {"type": "function_call", "call_id": "c_1", "name": "lookup", "arguments": "{}"},
        {"type": "function_call_output", "call_id": "c_1", "output": "k=1"},
    ]
    setup.sdk.responses.create(model="m", input=history, tools=[LOCAL, mine])
    sent = last_upstream_body(fake_upstream)
    if "messages" in sent:
        expected = [("assistant", ["mcp_1"]), ("tool", "mcp_1")]
        expected += [("assistant", ["c_1"]), ("tool", "c_1")]
    else:
        expected = [("function_call", "mcp_1"), ("function_call_output", "mcp_1")]
        expected += [("function_call", "c_1"), ("function_call_output", "c_1")]
    assert model_turns(sent) == expected


def test_a_client_call_after_an_approved_call_reaches_the_model_after_its_result(
    setup: Setup, fake_upstream: str
) -> None:
    """The approved call ran before the response's first round, whose client call the
    model made with its result in hand; the result answers the call where the client
    approved it, before the client's next message."""
    asked = {"type": "mcp", "server_label": "direct", "server_url": setup.server.url}
    mine = {"type": "function", "name": "lookup", "parameters": {"type": "object"}}
    first = setup.sdk.responses.create(
        model="m", input='[[tool:direct__echo:{"text":"hi"}]]', tools=[asked, mine]
    )
    request = first.output[-1]
    assert request.type == "mcp_approval_request"
    approve = {"type": "mcp_approval_response", "approval_request_id": request.id, "approve": True}
    second = setup.sdk.responses.create(
        model="m",
        previous_response_id=first.id,
        input=[approve, {"role": "user", "content": '[[tool:lookup:{"k":1}]]'}],
        tools=[asked, mine],
    )
    assert [i.type for i in second.output] == ["mcp_call", "function_call"]
    client_call = second.output[1]
    assert client_call.type == "function_call"
    third = setup.sdk.responses.create(
        model="m",
        previous_response_id=second.id,
        input=[{"type": "function_call_output", "call_id": client_call.call_id, "output": "k=1"}],
        tools=[asked, mine],
    )
    assert third.output_text == "Tool said: k=1"
    sent = last_upstream_body(fake_upstream)
    ids = (request.id, client_call.call_id)
    if "messages" in sent:
        expected = [("assistant", [ids[0]]), ("tool", ids[0]), ("user", None)]
        expected += [("assistant", [ids[1]]), ("tool", ids[1])]
    else:
        expected = [("function_call", ids[0]), ("function_call_output", ids[0]), ("message", None)]
        expected += [("function_call", ids[1]), ("function_call_output", ids[1])]
    assert model_turns(sent) == expected


def test_a_missing_client_output_is_refused_naming_the_call(setup: Setup) -> None:
    mine = {"type": "function", "name": "lookup", "parameters": {"type": "object"}}
    first = setup.sdk.responses.create(
        model="m", input='[[tool:lookup:{"k":1}]]', tools=[LOCAL, mine]
    )
    with pytest.raises(openai.BadRequestError) as caught:
        setup.sdk.responses.create(model="m", previous_response_id=first.id, input="and?")
    assert caught.value.code == "tool_output_missing"
    assert first.output[-1].call_id in caught.value.message


def test_approval_stops_the_turn_and_the_answer_decides(setup: Setup) -> None:
    asked = {"type": "mcp", "server_label": "direct", "server_url": setup.server.url}
    first = setup.sdk.responses.create(
        model="m", input='[[tool:direct__echo:{"text":"hi"}]]', tools=[asked]
    )
    request = first.output[-1]
    assert request.type == "mcp_approval_request"
    assert (request.server_label, request.name) == ("direct", "echo")
    started = setup.server.stats.calls_started
    approved = setup.sdk.responses.create(
        model="m",
        previous_response_id=first.id,
        input=[
            {"type": "mcp_approval_response", "approval_request_id": request.id, "approve": True}
        ],
        tools=[asked],
    )
    call, message = approved.output
    assert call.type == "mcp_call"
    assert call.approval_request_id == request.id
    assert call.output == "hi"
    assert message.content[0].text == "Tool said: hi"
    assert setup.server.stats.calls_started == started + 1
    denied = setup.sdk.responses.create(
        model="m",
        previous_response_id=first.id,
        input=[
            {
                "type": "mcp_approval_response",
                "approval_request_id": request.id,
                "approve": False,
                "reason": "not on a Friday",
            }
        ],
        tools=[asked],
    )
    assert [i.type for i in denied.output] == ["message"]
    assert "declined" in denied.output_text
    assert "Their reason: not on a Friday" in denied.output_text
    assert setup.server.stats.calls_started == started + 1


@pytest.mark.parametrize(
    ("rule", "asked", "ran"),
    [
        ({"never": {"read_only": True}}, ["echo"], ["add"]),
        ({"always": {"read_only": True}, "never": {"tool_names": ["echo"]}}, ["add"], ["echo"]),
        ({"never": {"tool_names": ["add", "echo"], "read_only": True}}, ["echo"], ["add"]),
    ],
)
def test_require_approval_filters_by_read_only_as_hosted(
    setup: Setup, rule: dict[str, Any], asked: list[str], ran: list[str]
) -> None:
    """As the SDK's ``McpToolApprovalFilter`` has it: ``always`` and ``never`` are tool
    filters (``tool_names``, ``read_only``: tools the server marks ``readOnlyHint``), each
    criterion given narrowing what they match."""
    direct = {"type": "mcp", "server_label": "direct", "server_url": setup.server.url}
    calls = tool("add", {"a": 1, "b": 2}, "direct") + tool("echo", {"text": "hi"}, "direct")
    output = output_as_sent(
        setup.sdk, model="m", input=calls, tools=[{**direct, "require_approval": rule}]
    )
    assert [i["name"] for i in output if i["type"] == "mcp_approval_request"] == asked
    assert [i["name"] for i in output if i["type"] == "mcp_call"] == ran


def test_an_approved_call_streams_its_arguments_as_hosted_does(setup: Setup) -> None:
    """As hosted: the approved call's item is added with no arguments, which then come
    whole in one delta before their done, so a client that appends the deltas to the
    added item has them (and has them once)."""
    asked = {"type": "mcp", "server_label": "direct", "server_url": setup.server.url}
    first = setup.sdk.responses.create(
        model="m", input='[[tool:direct__echo:{"text":"hi"}]]', tools=[asked]
    )
    request = first.output[-1]
    assert request.type == "mcp_approval_request"
    approve = {"type": "mcp_approval_response", "approval_request_id": request.id, "approve": True}
    with setup.sdk.responses.stream(
        model="m", previous_response_id=first.id, input=[approve], tools=[asked]
    ) as stream:
        events = list(stream)
        final = stream.get_final_response()
    call = final.output[0]
    assert (call.type, call.approval_request_id) == ("mcp_call", request.id)
    mine = [e for e in events if getattr(e, "output_index", None) == 0]
    assert [e.type for e in mine] == [
        "response.output_item.added",
        "response.mcp_call.in_progress",
        "response.mcp_call_arguments.delta",
        "response.mcp_call_arguments.done",
        "response.mcp_call.completed",
        "response.output_item.done",
    ]
    added, _, delta, done, _, item_done = mine
    assert added.item.arguments + delta.delta == done.arguments == request.arguments
    assert item_done.item.arguments == call.arguments == request.arguments
    assert final.output_text == "Tool said: hi"


def test_tool_errors_and_timeouts_are_failed_calls_the_model_sees(setup: Setup) -> None:
    response = setup.sdk.responses.create(
        model="m",
        input=tool("fail", {"message": "no such row"}) + tool("sleep", {"seconds": 10}),
        tools=[LOCAL],
    )
    assert response.status == "completed"
    failed, slow = [i for i in response.output if i.type == "mcp_call"]
    assert isinstance(failed.error, McpToolExecutionError)
    assert failed.error.content == [{"type": "text", "text": "no such row"}]
    assert isinstance(slow.error, McpProtocolError)
    assert slow.error.code == -32001
    assert slow.error.message == "The call to local.sleep timed out after 8 s."
    # the fake model answers the results the context ends with: the last call's
    assert response.output_text == "Tool said: Error: The call to local.sleep timed out after 8 s."
    stored = output_as_sent(
        setup.sdk, model="m", input=tool("fail", {"message": "x"}), tools=[LOCAL]
    )
    assert stored[1]["error"] == {
        "type": "mcp_tool_execution_error",
        "content": [{"type": "text", "text": "x"}],
    }


@pytest.mark.parametrize(
    ("arguments", "error"),
    [
        (
            {"status": 401},
            {
                "type": "http_error",
                "code": 401,
                "message": "MCP server 'own' refused the credentials (HTTP 401)",
            },
        ),
        (
            {"status": 404},
            {"type": "http_error", "code": 404, "message": "MCP server 'own' answered HTTP 404"},
        ),
        (
            {"code": -32602, "message": "no such table"},
            {
                "type": "mcp_protocol_error",
                "code": -32602,
                "message": "MCP server 'own' returned an error: no such table",
            },
        ),
    ],
)
def test_a_call_the_server_refuses_carries_its_status_or_code(
    setup: Setup, arguments: dict[str, Any], error: dict[str, Any]
) -> None:
    with serve_mcp() as server:  # its sessions may be retired: not the shared server's
        own = {"type": "mcp", "server_label": "own", "server_url": server.url}
        request = {"model": "m", "input": tool("refuse", arguments, "own")}
        output = output_as_sent(setup.sdk, **request, tools=[{**own, "require_approval": "never"}])
    listed, failed, message = output
    assert (listed["type"], failed["status"], failed["error"]) == (
        "mcp_list_tools",
        "failed",
        error,
    )
    assert message["content"][0]["text"] == f"Tool said: Error: {error['message']}"


def test_a_failed_calls_stream_is_what_the_sdk_reads(setup: Setup) -> None:
    with setup.sdk.responses.with_streaming_response.create(
        model="m", input=tool("fail", {"message": "no"}), tools=[LOCAL], stream=True
    ) as raw:
        events = [json.loads(line[6:]) for line in raw.iter_lines() if line.startswith("data: ")]
    for event in events:
        EVENTS.validate_python(event, strict=True)
    kinds = [e["type"] for e in events]
    assert "response.mcp_call.failed" in kinds
    [done] = [
        e["item"]
        for e in events
        if e["type"] == "response.output_item.done" and e["item"]["type"] == "mcp_call"
    ]
    assert done["error"] == {
        "type": "mcp_tool_execution_error",
        "content": [{"type": "text", "text": "no"}],
    }
    final = events[-1]["response"]["output"][1]
    assert final == done


@pytest.mark.parametrize(
    "error",
    [
        {"type": "http_error", "code": 503, "message": "down for maintenance"},
        "down for maintenance",  # the form responses had before errors were objects
    ],
)
def test_a_failed_call_a_client_sends_back_is_accepted_and_told(
    setup: Setup, error: object
) -> None:
    sent: dict[str, Any] = {
        "id": "mcp_sent",
        "type": "mcp_call",
        "server_label": "local",
        "name": "add",
        "arguments": '{"a":1,"b":1}',
        "status": "failed",
        "error": error,
    }
    response = setup.sdk.responses.create(
        model="m",
        input=[
            {"role": "user", "content": "add them"},
            sent,
            {"role": "user", "content": "[[echo]]"},
        ],
        tools=[LOCAL],
    )
    assert "tool[mcp_sent]: Error: down for maintenance" in response.output_text.splitlines()


def test_mcp_items_sent_back_trimmed_are_filled_from_the_stored_ones_by_id(
    setup: Setup, fake_upstream: str
) -> None:
    """Pydantic AI resends a stored response's MCP items by their id without what the
    API keeps (``output: null``, ``tools: []``), without ``previous_response_id``: the
    model gets the call's result, and is offered the listed tools, as hosted fills them."""
    first = setup.sdk.responses.create(
        model="m", input=tool("add", {"a": 2, "b": 3}), tools=[LOCAL]
    )
    listed, call, _ = (item.model_dump() for item in first.output)
    assert (call["output"], listed["tools"] != []) == ("5", True)
    listings = setup.server.stats.listings
    response = setup.sdk.responses.create(
        model="m",
        input=[
            {"role": "user", "content": "add them"},
            {**listed, "tools": []},
            {**call, "output": None},
            {"role": "user", "content": "[[echo]]"},
        ],
        tools=[LOCAL],
    )
    assert f"tool[{call['id']}]: 5" in response.output_text.splitlines()
    sent = last_upstream_body(fake_upstream)
    offered = sent.get("tools", [])  # none at all for an empty listing taken as it came
    names = [tool.get("name") or tool["function"]["name"] for tool in offered]
    assert "local__add" in names
    assert setup.server.stats.listings == listings  # the stored listing stands for it


@pytest.mark.parametrize("kind", ["unreachable", "hanging", "malformed"])
def test_a_server_that_cannot_be_listed_fails_its_listing_not_the_response(
    setup: Setup, kind: str
) -> None:
    with _bad_server(kind) as url:
        bad = {"type": "mcp", "server_label": "bad", "server_url": url, "require_approval": "never"}
        response = setup.sdk.responses.create(model="m", input="hello", tools=[bad])
    assert response.status == "completed"
    listed, message = response.output
    assert listed.type == "mcp_list_tools"
    assert listed.error
    assert "'bad'" in listed.error
    assert message.type == "message"


def _bad_server(kind: str) -> Any:
    if kind == "hanging":
        return hanging_server()
    if kind == "malformed":
        return serve_misbehaving(body=b"<html>not mcp</html>", content_type="text/html")
    from contextlib import nullcontext

    return nullcontext(unreachable_url())


def test_calls_of_a_round_overlap_up_to_the_permit_limit(setup: Setup) -> None:
    setup.server.stats.most_at_once = 0
    calls = "".join(tool("read_slowly", {"seconds": 0.3}) for _ in range(4))
    response = setup.sdk.responses.create(model="m", input=calls, tools=[LOCAL])
    assert [i.status for i in response.output if i.type == "mcp_call"] == ["completed"] * 4
    assert setup.server.stats.most_at_once == 2


@pytest.mark.parametrize("stream", [True, False])
async def test_a_client_that_leaves_during_a_call_stops_it_on_the_server(
    setup: Setup, stream: bool
) -> None:
    """The client leaving while the gateway runs an MCP call ends the call on the MCP
    server too (the gateway's ``notifications/cancelled``), not only in the gateway."""
    stats = setup.server.stats
    sdk = AsyncOpenAI(base_url=str(setup.sdk.base_url), api_key="sk-test", max_retries=0)
    calls = tool("read_slowly", {"seconds": 60})

    async def ask() -> None:
        answer: Any = await sdk.responses.create(
            model="m", input=calls, tools=[LOCAL], stream=stream
        )
        if stream:
            async for _ in answer:
                pass

    asking = asyncio.create_task(ask())
    assert await asyncio.to_thread(stats.wait_for, lambda s: s.running == 1)
    asking.cancel()
    with contextlib.suppress(asyncio.CancelledError):
        await asking
    assert await asyncio.to_thread(stats.wait_for, lambda s: s.running == 0, 5.0)
    await sdk.close()


def test_one_continuous_stream_across_rounds_and_the_same_final_response(setup: Setup) -> None:
    with setup.sdk.responses.stream(
        model="m", input=tool("add", {"a": 1, "b": 2}) + "[[rounds:2]]", tools=[LOCAL]
    ) as stream:
        events = list(stream)
        final = stream.get_final_response()
    assert [e.sequence_number for e in events] == list(range(len(events)))
    kinds = [e.type for e in events]
    assert kinds.count("response.created") == 1
    assert kinds[-1] == "response.completed"
    call_events = [  # argument deltas come one per upstream chunk: count them once
        k
        for i, k in enumerate(kinds)
        if k.startswith(("response.mcp_call", "response.mcp_list_tools"))
        and not (i and kinds[i - 1] == k == "response.mcp_call_arguments.delta")
    ]
    assert call_events[:2] == [
        "response.mcp_list_tools.in_progress",
        "response.mcp_list_tools.completed",
    ]
    assert (
        call_events[2:]
        == [
            "response.mcp_call.in_progress",
            "response.mcp_call_arguments.delta",
            "response.mcp_call_arguments.done",
            "response.mcp_call.completed",
        ]
        * 2
    )
    added = [e.output_index for e in events if e.type == "response.output_item.added"]
    assert added == list(range(len(final.output)))
    stored = setup.sdk.responses.retrieve(final.id)
    assert [i.id for i in stored.output] == [i.id for i in final.output]
    assert [c.output for c in stored.output if c.type == "mcp_call"] == ["3", "3"]
    assert stored.output_text == final.output_text == "Tool said: 3"


def offered_names(sent: dict[str, Any]) -> list[str]:
    return [tool.get("name") or tool["function"]["name"] for tool in sent["tools"]]


def test_a_choice_of_a_server_forces_one_of_its_tools_in_the_first_round(
    setup: Setup, fake_upstream: str
) -> None:
    """As hosted, ``{"type": "mcp", "server_label": ...}`` forces a tool of that server: the
    first round offers only its tools, forced (not another server's nor the client's);
    the rounds after it offer every tool again, unforced."""
    other = {**LOCAL, "server_label": "other", "server_url": setup.server.url}
    mine = {"type": "function", "name": "lookup", "parameters": {"type": "object"}}
    choice = {"type": "mcp", "server_label": "other"}
    tools = [LOCAL, other, mine]
    setup.sdk.responses.create(model="m", input="hello", tools=tools, tool_choice=choice)
    first = last_upstream_body(fake_upstream)
    assert first["tool_choice"] == "required"
    assert offered_names(first) == [model_name(t.name, "other") for t in TOOLS]
    setup.sdk.responses.create(
        model="m", input=tool("add", {"a": 1, "b": 1}, "other"), tools=tools, tool_choice=choice
    )
    second_round = last_upstream_body(fake_upstream)
    assert second_round.get("tool_choice", "auto") == "auto"
    assert {"lookup", "local__add", "other__add"} <= set(offered_names(second_round))


def test_sessions_are_pooled_across_requests_and_chains_are_not_listed_again(
    setup: Setup,
) -> None:
    stats = setup.server.stats
    first = setup.sdk.responses.create(
        model="m", input=tool("add", {"a": 1, "b": 1}), tools=[LOCAL]
    )
    listings = stats.listings
    setup.sdk.responses.create(
        model="m", previous_response_id=first.id, input="again", tools=[LOCAL]
    )
    setup.sdk.responses.create(model="m", input=tool("add", {"a": 2, "b": 2}), tools=[LOCAL])
    assert stats.listings > listings  # a new chain lists again...
    listings_after_chain = stats.listings
    pages = -(-len(TOOLS) // 3)  # the test server lists three tools a page
    assert listings_after_chain - listings == pages  # ...(every page), the continuation did not
    # Whatever the tests before did, one session served the configured server.
    assert stats.initializations <= 2  # the configured server and the approval test's URL


@pytest.mark.parametrize(
    ("allowed", "shown"),
    [
        (["echo", "add", "missing"], ["add", "echo"]),  # in the server's order
        ({"tool_names": ["add", "echo", "sleep"], "read_only": True}, ["add"]),
        ({"read_only": True}, ["add", "read_slowly"]),
    ],
)
def test_the_listing_shows_only_the_tools_allowed_tools_lets_through(
    setup: Setup, allowed: Any, shown: list[str]
) -> None:
    """As hosted: the ``mcp_list_tools`` item shows the tools the model is offered, not
    every tool the server lists (``allowed_tools`` as a list, or a filter object)."""
    ask = {**LOCAL, "allowed_tools": allowed}
    listed, _ = output_as_sent(setup.sdk, model="m", input="hello", tools=[ask])
    assert listed["type"] == "mcp_list_tools"
    assert [t["name"] for t in listed["tools"]] == shown


def test_a_chain_lists_again_only_when_a_turn_may_offer_what_its_listing_held_back(
    setup: Setup,
) -> None:
    """Turn one allows ``add``; turn two also ``echo``, which no listing showed: the server
    is asked again, a new listing shows both, and the model calls ``echo``. Turn three
    allows only ``echo``: turn two's listing shows it, so nothing is listed."""
    stats = setup.server.stats
    pages = -(-len(TOOLS) // 3)  # the test server lists three tools a page
    before = stats.listings
    first = setup.sdk.responses.create(
        model="m", input="hello", tools=[{**LOCAL, "allowed_tools": ["add"]}]
    )
    assert [t.name for t in first.output[0].tools] == ["add"]
    second = setup.sdk.responses.create(
        model="m",
        input=tool("echo", {"text": "held back"}),
        tools=[{**LOCAL, "allowed_tools": ["add", "echo"]}],
        previous_response_id=first.id,
    )
    assert stats.listings - before == 2 * pages
    listed, call, _ = second.output
    assert listed.type == "mcp_list_tools"
    assert [t.name for t in listed.tools] == ["add", "echo"]
    assert call.type == "mcp_call"
    assert (call.name, call.output, call.error) == ("echo", "held back", None)
    third = setup.sdk.responses.create(
        model="m",
        input=tool("echo", {"text": "again"}),
        tools=[{**LOCAL, "allowed_tools": ["echo"]}],
        previous_response_id=second.id,
    )
    assert stats.listings - before == 2 * pages
    assert [i.type for i in third.output] == ["mcp_call", "message"]
    assert third.output_text == "Tool said: again"


def test_a_server_url_naming_an_sse_server_is_spoken_to_over_sse(setup: Setup) -> None:
    """As hosted: a request cannot say which transport its server speaks, and an SSE
    server (which answers the Streamable HTTP handshake 405) works too."""
    sse = {"type": "mcp", "server_label": "old", "server_url": setup.server.sse_url}
    response = setup.sdk.responses.create(
        model="m",
        input=tool("add", {"a": 2, "b": 3}, "old"),
        tools=[dict(sse, require_approval="never")],
    )
    listed, call, _ = response.output
    assert listed.type == "mcp_list_tools"
    assert listed.error is None, listed.error
    assert call.type == "mcp_call"
    assert (call.output, call.error) == ("5", None)


def test_credentials_are_used_and_never_stored_or_echoed(setup: Setup) -> None:
    direct = {
        "type": "mcp",
        "server_label": "creds",
        "server_url": setup.server.url,
        "headers": {"Authorization": "Bearer hush-hush"},
        "require_approval": "never",
    }
    response = setup.sdk.responses.create(
        model="m", input="[[tool:creds__whoami:{}]]", tools=[direct]
    )
    call = response.output[1]
    assert call.output == "Bearer hush-hush"
    for shown in (response, setup.sdk.responses.retrieve(response.id)):
        assert "hush-hush" not in shown.model_dump_json(exclude={"output"})
        assert shown.tools[0].model_dump().get("headers") is None


def test_a_server_url_carrying_credentials_is_refused_without_quoting_them(setup: Setup) -> None:
    """A URL's ``user:password@`` would be stored and echoed with the response's tools (and
    sent as HTTP Basic): credentials belong in ``authorization`` or ``headers``, which are
    never kept. The 400 names the field and not what it held."""
    host = setup.server.url.split("//", 1)[1]
    leaky = {
        "type": "mcp",
        "server_label": "creds",
        "server_url": f"http://alice:pa55-w0rd-hush@{host}",
        "require_approval": "never",
    }
    with pytest.raises(openai.BadRequestError) as caught:
        setup.sdk.responses.create(model="m", input="[[tool:creds__whoami:{}]]", tools=[leaky])
    assert caught.value.code == "invalid_value"
    assert caught.value.param == "tools[0].server_url"
    assert "'authorization' or 'headers'" in caught.value.message
    assert "pa55-w0rd-hush" not in caught.value.response.text


def test_a_configured_servers_credential_echoed_in_an_error_result_is_masked(
    setup: Setup,
) -> None:
    """A configured server's headers are the gateway's: a server echoing them back in an
    error result reaches neither the client, nor the stored response, nor the model."""
    guarded = {"type": "mcp", "server_label": "guarded", "require_approval": "never"}
    response = setup.sdk.responses.create(
        model="m",
        input=tool("fail", {"message": "you sent {authorization}"}, "guarded"),
        tools=[guarded],
    )
    call = response.output[1]
    assert call.type == "mcp_call"
    assert isinstance(call.error, McpToolExecutionError)
    assert [part["text"] for part in call.error.content] == ["you sent ***"]
    stored = setup.sdk.responses.retrieve(response.id)
    transcript = setup.sdk.responses.create(
        model="m",
        previous_response_id=response.id,
        input=[{"role": "user", "content": "[[echo]]"}],
        tools=[guarded],
    )
    for shown in (response, stored, transcript):
        assert GUARDED_SECRET not in shown.model_dump_json()


def test_a_server_url_off_the_allow_list_is_refused(setup: Setup) -> None:
    other = {"type": "mcp", "server_label": "x", "server_url": "http://10.1.2.3/mcp"}
    with pytest.raises(openai.BadRequestError) as caught:
        setup.sdk.responses.create(model="m", input="hi", tools=[other])
    assert caught.value.code == "mcp_server_not_allowed"
    assert caught.value.param == "tools[0].server_url"


MINE: dict[str, Any] = {
    "type": "function",
    "name": "local__add",
    "description": "The client's own add.",
    "parameters": {"type": "object", "properties": {"terms": {"type": "string"}}},
}
"""A client's function named as the server ``local``'s tool ``add`` is offered to the model,
which hosted takes beside the server (its tools are the server's, apart from the
functions)."""


def test_a_client_function_named_as_an_mcp_tool_is_offered_beside_it(setup: Setup) -> None:
    both = tool_call("gateway_local__add", {"a": 2, "b": 3}) + tool_call(
        "local__add", {"terms": "x"}
    )
    first = setup.sdk.responses.create(model="m", input=both, tools=[LOCAL, MINE])
    listed, ran, mine = first.output
    assert listed.type == "mcp_list_tools"
    assert ran.type == "mcp_call"
    assert (ran.server_label, ran.name, ran.output, ran.error) == ("local", "add", "5", None)
    assert mine.type == "function_call"
    assert (mine.name, mine.arguments) == ("local__add", '{"terms":"x"}')
    second = setup.sdk.responses.create(
        model="m",
        previous_response_id=first.id,
        input=[
            {"type": "function_call_output", "call_id": mine.call_id, "output": "mine"},
            {"role": "user", "content": "[[echo]]"},
        ],
        tools=[LOCAL, MINE],
    )
    transcript = second.output_text  # each call under the name it is offered by
    assert 'assistant->gateway_local__add({"a":2,"b":3})' in transcript
    assert 'assistant->local__add({"terms":"x"})' in transcript


def test_a_deferred_servers_tools_wait_for_a_tool_search_to_load_them(
    setup: Setup, fake_upstream: str
) -> None:
    """``defer_loading`` on an ``mcp`` tool with a ``tool_search`` tool (the OpenAI Agents
    SDK's ``HostedMCPTool`` beside its ``ToolSearchTool``): the model is offered only the
    search, which names the server; the search loads the tool it finds, which is called."""
    deferred = {**LOCAL, "defer_loading": True, "server_description": "Arithmetic."}
    prompt = '[[tool:tool_search:{"query":"add integers"}]] [[then:local__add:{"a":2,"b":3}]]'
    response = setup.sdk.responses.create(
        model="m",
        input=prompt,
        tools=[deferred, {"type": "tool_search"}],  # type: ignore[list-item]
    )
    assert response.status == "completed"
    assert [item.type for item in response.output] == [
        "mcp_list_tools",
        "tool_search_call",
        "tool_search_output",
        "mcp_call",
        "message",
    ]
    found, call = response.output[2], response.output[3]
    assert found.type == "tool_search_output"
    assert [tool.model_dump(exclude_none=True) for tool in found.tools] == [
        {"type": "mcp", "server_label": "local", "allowed_tools": ["add"]}
    ]
    assert call.type == "mcp_call"
    assert (call.name, call.output) == ("add", "5")
    assert response.tools[0].defer_loading is True  # type: ignore[union-attr]
    with urllib.request.urlopen(fake_upstream.removesuffix("/v1") + "/_fake/requests") as reply:
        first, second, third = [r["body"] for r in json.loads(reply.read())["data"][-3:]]
    assert offered_names(first) == ["tool_search"]
    described = first["tools"][0].get("description") or first["tools"][0]["function"]["description"]
    assert "- local (the tools of an MCP server): Arithmetic." in described
    assert offered_names(second) == offered_names(third) == ["tool_search", "local__add"]
