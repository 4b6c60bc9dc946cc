"""A failed ``mcp_call``'s ``error``: for each way a call fails, the object the ``openai`` SDK
reads (strictly) and the text the model is told, on this turn and on later ones; the plain
string stored before errors were objects still reads."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Mapping
from typing import Any

import orjson
import pytest
from openai.types.responses.mcp_tool_call_error import (
    HTTPError,
    McpProtocolError,
    McpToolExecutionError,
)
from openai.types.responses.response_output_item import McpCall

from stateway.core.inference import ToolCallDelta
from stateway.core.tools.history import model_items
from stateway.core.tools.ports import McpTool, ToolError, ToolFailure
from stateway.core.tools.toolset import ToolPolicy
from tests.core.fakes import FakeMcp
from tests.core.tools.test_tool_loop import (
    MCP_TOOL,
    Setup,
    answer,
    call,
    kinds,
    seen_by_model,
    tools_round,
    user,
)
from tests.core.tools.wire import check_stream, sdk_item

Answer = Callable[[Mapping[str, Any]], Awaitable[str]]
IMAGE = {"type": "image", "data": "iVBORw0KGgo=", "mimeType": "image/png"}
CONTENT = [{"type": "text", "text": "the disk is full"}, IMAGE]
UNKNOWN = "MCP server 'docs' returned an error: Unknown tool: t"
REFUSED = "MCP server 'docs' refused the credentials (HTTP 401)"


def failing(failure: BaseException) -> Answer:
    async def answer(arguments: Mapping[str, Any]) -> str:
        raise failure

    return answer


async def hanging(arguments: Mapping[str, Any]) -> str:
    await asyncio.Event().wait()
    raise AssertionError("unreachable")


def setup_with(answer_with: Answer, *rounds: Any) -> Setup:
    """One tool ``t`` answering with ``answer_with``; a hanging one times out at 0.05 s."""
    mcp = FakeMcp({"docs": [McpTool("t", {"type": "object"})]}, {"t": answer_with})
    turns = list(rounds) or [tools_round(call("docs__t", {})), answer()]
    timeout = 0.05 if answer_with is hanging else 10
    return Setup(turns, mcp=mcp, policy=ToolPolicy(timeout=timeout))


CASES: list[tuple[str, Answer, dict[str, Any], str]] = [
    (
        "the tool reported an error",
        failing(ToolFailure(ToolError.execution(CONTENT, "the disk is full"))),
        {"type": "mcp_tool_execution_error", "content": CONTENT},
        "the disk is full\n" + orjson.dumps(IMAGE).decode(),
    ),
    (
        "the tool reported an error without content",
        failing(ToolFailure(ToolError.execution([], "the tool reported an error"))),
        {"type": "mcp_tool_execution_error", "content": []},
        "the tool reported an error",
    ),
    (
        "a JSON-RPC error",
        failing(ToolFailure(ToolError.protocol(-32602, UNKNOWN))),
        {"type": "mcp_protocol_error", "code": -32602, "message": UNKNOWN},
        UNKNOWN,
    ),
    (
        "an HTTP error status",
        failing(ToolFailure(ToolError.http(401, REFUSED))),
        {"type": "http_error", "code": 401, "message": REFUSED},
        REFUSED,
    ),
    (
        "a failure with only a message",
        failing(ToolFailure("it broke")),
        {"type": "mcp_protocol_error", "code": -32603, "message": "it broke"},
        "it broke",
    ),
    (
        "a bug in the adapter",
        failing(RuntimeError("a bug")),
        {
            "type": "mcp_protocol_error",
            "code": -32603,
            "message": "The call to docs.t failed unexpectedly.",
        },
        "The call to docs.t failed unexpectedly.",
    ),
    (
        "a timeout",
        hanging,
        {
            "type": "mcp_protocol_error",
            "code": -32001,
            "message": "The call to docs.t timed out after 0.05 s.",
        },
        "The call to docs.t timed out after 0.05 s.",
    ),
]
SDK_TYPES = {
    "mcp_tool_execution_error": McpToolExecutionError,
    "mcp_protocol_error": McpProtocolError,
    "http_error": HTTPError,
}


@pytest.mark.parametrize(
    ("answer_with", "error", "told"),
    [case[1:] for case in CASES],
    ids=[case[0] for case in CASES],
)
async def test_each_failure_is_the_error_object_the_sdk_reads_and_the_model_is_told(
    answer_with: Answer, error: dict[str, Any], told: str
) -> None:
    setup = setup_with(answer_with)
    run = await setup.create([MCP_TOOL])
    assert run.state.status == "completed"
    failed = run.state.output[1]
    assert (failed["status"], failed["output"], failed["error"]) == ("failed", None, error)
    read = sdk_item(failed)
    assert isinstance(read, McpCall)
    assert isinstance(read.error, SDK_TYPES[error["type"]])
    assert "mcp_call.failed" in kinds(run.events)
    check_stream(run.events)
    assert seen_by_model(setup.backend.requests[1])["output"] == f"Error: {told}"


async def test_bad_arguments_are_invalid_params_and_the_call_is_not_sent() -> None:
    bad = tools_round(ToolCallDelta(0, "up_0", "docs__t", "[1]"))
    setup = setup_with(failing(AssertionError("not called")), bad, answer())
    run = await setup.create([MCP_TOOL])
    failed = run.state.output[1]
    assert failed["error"] == {
        "type": "mcp_protocol_error",
        "code": -32602,
        "message": "The arguments must be a JSON object.",
    }
    assert setup.mcp.calls == []
    check_stream(run.events)


async def test_calls_past_max_tool_calls_are_refused_by_the_gateway() -> None:
    async def fine(arguments: Mapping[str, Any]) -> str:
        return "ok"

    two = tools_round(call("docs__t", {}), call("docs__t", {}, index=1))
    setup = setup_with(fine, two, answer())
    run = await setup.create([MCP_TOOL], settings={"max_tool_calls": 1})
    ran, refused = run.state.output[1:3]
    assert (ran["status"], refused["status"]) == ("completed", "failed")
    assert refused["error"] == {
        "type": "mcp_protocol_error",
        "code": -32010,
        "message": "The response reached its max_tool_calls limit; this call was not run.",
    }
    assert isinstance(sdk_item(refused).error, McpProtocolError)
    check_stream(run.events)


# -- later turns ---------------------------------------------------------------------------


def told_about(items: list[dict[str, Any]], call_id: str) -> str:
    [output] = [
        i
        for i in model_items(items)
        if i["type"] == "function_call_output" and i["call_id"] == call_id
    ]
    return str(output["output"])


async def test_a_later_turn_tells_the_model_what_it_was_told() -> None:
    answer_with = failing(ToolFailure(ToolError.execution(CONTENT, "the disk is full")))
    setup = setup_with(answer_with, tools_round(call("docs__t", {})), answer(), answer())
    first = await setup.create([MCP_TOOL])
    await setup.create([MCP_TOOL], [user("and?")], previous_response_id=first.state.id)
    call_id = first.state.output[1]["id"]
    then = told_about(setup.backend.requests[1].items, call_id)
    assert told_about(setup.backend.requests[2].items, call_id) == then
    assert then.startswith("Error: the disk is full\n")


async def test_a_stored_error_in_the_old_plain_string_form_still_reads() -> None:
    """Responses stored before errors were objects carry the message as a string."""
    setup = setup_with(
        failing(ToolFailure(ToolError.protocol(-32602, UNKNOWN))),
        tools_round(call("docs__t", {})),
        answer(),
        answer(),
    )
    first = await setup.create([MCP_TOOL])
    record = setup.store.records[(first.state.tenant_id, first.state.id)]
    old = {**record.output_items[1], "error": "boom went the tool"}
    record.output_items = [record.output_items[0], old, *record.output_items[2:]]
    second = await setup.create([MCP_TOOL], [user("and?")], previous_response_id=first.state.id)
    assert second.state.status == "completed"
    told = told_about(setup.backend.requests[2].items, old["id"])
    assert told == "Error: boom went the tool"


@pytest.mark.parametrize(
    ("error", "told"),
    [
        ({"type": "http_error", "code": 404, "message": "gone"}, "Error: gone"),
        ({"type": "mcp_tool_execution_error", "content": CONTENT[:1]}, "Error: the disk is full"),
        ("a string, as sent before", "Error: a string, as sent before"),
    ],
)
async def test_a_failed_call_a_client_sends_back_is_told_to_the_model(
    error: object, told: str
) -> None:
    sent = {
        "id": "mcp_sent",
        "type": "mcp_call",
        "status": "failed",
        "server_label": "docs",
        "name": "t",
        "arguments": "{}",
        "output": None,
        "error": error,
    }
    setup = setup_with(failing(AssertionError("not called")), answer())
    run = await setup.create([MCP_TOOL], [user(), sent, user("and?")])
    assert run.state.status == "completed"
    assert told_about(setup.backend.requests[0].items, "mcp_sent") == told
