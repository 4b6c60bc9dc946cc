"""Tool search over MCP servers declared ``defer_loading: true``: the server's tools held
back (the search's description names the server), a gateway search loading some of them,
what it loaded offered on later turns, a client's search output loading a server's tools,
and the flag meaning nothing without a ``tool_search`` tool."""

from __future__ import annotations

from typing import Any

from stateway.core.inference import InferenceRequest
from stateway.core.tools.catalog import Catalog
from stateway.core.tools.history import model_items
from stateway.core.tools.mcp import entries
from stateway.core.tools.mcp_binding import Approval, McpBinding
from stateway.core.tools.search_output import loaded_mcp
from stateway.core.tools.search_syntax import searched_text
from tests.core.tools.test_tool_loop import (
    ADD,
    BOOM,
    DOCS,
    MCP_TOOL,
    SLOW,
    Setup,
    answer,
    call,
    tools_round,
    user,
)

DEFERRED: dict[str, Any] = {
    **MCP_TOOL,
    "defer_loading": True,
    "server_description": "Arithmetic and slow jobs.",
}
SERVER: dict[str, Any] = {"type": "tool_search"}
CLIENT: dict[str, Any] = {"type": "tool_search", "execution": "client"}


def offered(request: InferenceRequest) -> list[str]:
    return [tool["name"] for tool in request.tools]


def search_description(request: InferenceRequest) -> str:
    return str(next(t for t in request.tools if t["name"] == "tool_search")["description"])


async def test_a_gateway_search_loads_the_tools_it_finds_of_a_deferred_server() -> None:
    setup = Setup(
        [
            tools_round(call("tool_search", {"query": "add"})),
            tools_round(call("docs__add", {"a": 2, "b": 3})),
            answer("5"),
        ]
    )
    run = await setup.create([DEFERRED, SERVER])
    state = run.state
    assert state.status == "completed"
    kinds = [item["type"] for item in state.output]
    assert kinds == [
        "mcp_list_tools",
        "tool_search_call",
        "tool_search_output",
        "mcp_call",
        "message",
    ]
    listed, _, found, added, _ = state.output
    assert [tool["name"] for tool in listed["tools"]] == ["add", "slow", "boom"]
    assert found["tools"] == [{"type": "mcp", "server_label": "docs", "allowed_tools": ["add"]}]
    assert (added["status"], added["output"]) == ("completed", "5")
    first, second, third = setup.backend.requests
    assert offered(first) == ["tool_search"]  # the server's tools held back
    listed_once = "- docs (the tools of an MCP server): Arithmetic and slow jobs."
    assert search_description(first).count(listed_once) == 1  # once, not once a tool
    assert offered(second) == ["tool_search", "docs__add"]
    assert model_items(second.items)[-1]["output"] == (
        "Loaded tools: docs__add. They can be called now."
    )
    assert offered(third) == offered(second)


async def test_a_search_finds_a_servers_tools_by_its_label_and_description() -> None:
    setup = Setup([tools_round(call("tool_search", {"query": "arithmetic", "limit": 2})), answer()])
    run = await setup.create([DEFERRED, SERVER])
    found = run.state.output[2]
    # each tool of the server is described with the server's description: the first two load
    assert found["tools"] == [
        {"type": "mcp", "server_label": "docs", "allowed_tools": ["add", "slow"]}
    ]
    assert offered(setup.backend.requests[1]) == ["tool_search", "docs__add", "docs__slow"]


async def test_what_a_search_loaded_of_a_server_stays_offered_on_later_turns() -> None:
    setup = Setup([tools_round(call("tool_search", {"query": "sleeps"})), answer(), answer()])
    first = await setup.create([DEFERRED, SERVER])
    assert first.state.output[2]["tools"][0]["allowed_tools"] == ["slow"]
    await setup.create([DEFERRED, SERVER], [user("again")], previous_response_id=first.state.id)
    later = setup.backend.requests[-1]
    assert offered(later) == ["tool_search", "docs__slow"]
    assert "- docs (the tools of an MCP server)" in search_description(later)  # add, boom


async def test_a_clients_search_output_naming_a_server_loads_its_tools() -> None:
    setup = Setup([tools_round(call("tool_search", {"query": "math"})), answer()])
    first = await setup.create([DEFERRED, CLIENT])
    [listed, search] = first.state.output
    assert listed["type"] == "mcp_list_tools"
    assert (search["type"], search["execution"]) == ("tool_search_call", "client")
    assert offered(setup.backend.requests[0]) == ["tool_search"]
    output = {
        "type": "tool_search_output",
        "call_id": search["call_id"],
        "execution": "client",
        "tools": [{"type": "mcp", "server_label": "docs"}],  # every tool of the server
    }
    second = await setup.create([DEFERRED, CLIENT], [output], previous_response_id=first.state.id)
    assert second.state.status == "completed"
    request = setup.backend.requests[1]
    assert offered(request) == ["tool_search", "docs__add", "docs__slow", "docs__boom"]
    assert model_items(request.items)[-1]["output"] == (
        "Loaded tools: the tools of the MCP server 'docs'. They can be called now."
    )
    assert "docs" not in search_description(request)  # nothing of it is deferred any more


async def test_defer_loading_without_a_tool_search_offers_the_servers_tools() -> None:
    setup = Setup([answer()])
    await setup.create([DEFERRED])
    assert offered(setup.backend.requests[0]) == ["docs__add", "docs__slow", "docs__boom"]


async def test_a_server_not_deferred_beside_a_tool_search_is_offered() -> None:
    setup = Setup([answer()])
    await setup.create([MCP_TOOL, SERVER])
    request = setup.backend.requests[0]
    assert offered(request) == ["tool_search", "docs__add", "docs__slow", "docs__boom"]
    assert "docs" not in search_description(request)


def test_search_outputs_name_the_loaded_tools_of_each_server_once() -> None:
    tools = [
        {"type": "mcp"},  # names no server
        "junk",
        {"type": "mcp", "server_label": "a", "allowed_tools": ["x", "y"]},
        {"type": "mcp", "server_label": "a", "allowed_tools": {"tool_names": ["y", "z"]}},
        {"type": "mcp", "server_label": "b", "allowed_tools": ["x"]},
        {"type": "mcp", "server_label": "b"},  # all of b's
        {"type": "mcp", "server_label": "b", "allowed_tools": ["w"]},  # still all
        {"type": "function", "name": "f"},
        {"type": "mcp", "server_label": "c", "allowed_tools": ["v"]},
    ]
    assert loaded_mcp(tools) == {"a": ("x", "y", "z"), "b": None, "c": ("v",)}


def test_loading_a_servers_tools_offers_only_its_deferred_ones() -> None:
    binding = McpBinding(DOCS, None, False, Approval(False), deferred=True)
    other = McpBinding(DOCS.__class__("other", "http://other.test"), None, False, Approval(False))
    catalog = Catalog([])
    for entry in [
        *entries(binding, [ADD, SLOW, BOOM], defer=True),
        *entries(other, [ADD], defer=True),
    ]:
        catalog.add(entry)
    assert [tool["name"] for tool in catalog.model_tools()] == ["other__add"]
    assert catalog.load_mcp([{"type": "mcp", "server_label": "other"}]) == []
    assert catalog.load_mcp(
        [{"type": "mcp", "server_label": "docs", "allowed_tools": ["boom"]}]
    ) == ["docs__boom"]
    assert catalog.load_mcp([{"type": "mcp", "server_label": "docs"}]) == [
        "docs__add",
        "docs__slow",
    ]
    assert [e.function["name"] for e in catalog.deferred()] == []


def test_a_search_outputs_read_only_filter_loads_only_the_servers_read_only_tools() -> None:
    """``allowed_tools`` as a filter: its ``read_only`` narrows what it loads, as it
    narrows what a declared server offers (``add`` is the read-only one)."""
    binding = McpBinding(DOCS, None, False, Approval(False), deferred=True)
    catalog = Catalog([])
    for entry in entries(binding, [ADD, SLOW, BOOM], defer=True):
        catalog.add(entry)
    named = {"tool_names": ["slow", "add"], "read_only": True}
    assert catalog.load_mcp([{**MCP_TOOL, "allowed_tools": named}]) == ["docs__add"]
    assert catalog.load_mcp([{**MCP_TOOL, "allowed_tools": {"read_only": True}}]) == []
    also = [
        {**MCP_TOOL, "allowed_tools": {"read_only": True}},
        {**MCP_TOOL, "allowed_tools": ["boom"]},
    ]
    assert catalog.load_mcp(also) == ["docs__boom"]
    assert [e.name for e in catalog.deferred()] == ["slow"]


def test_a_pattern_search_reads_a_servers_tool_by_its_flat_name_and_its_functions_text() -> None:
    binding = McpBinding(DOCS, None, False, Approval(False), "Arithmetic.", deferred=True)
    [add] = entries(binding, [ADD], defer=True)
    assert add.deferred
    name, rest = searched_text(add, {})
    assert name == "docs__add"
    assert rest.split("\n") == ["Add", "", "MCP server 'docs': Arithmetic.", "a", "b"]


async def test_a_choice_of_a_deferred_server_or_its_tool_is_sent_as_auto() -> None:
    """As hosted, a choice cannot force what is not offered (the Agents SDK's docs: a
    deferred-only tool cannot be targeted): a forced server with nothing of it offered
    would be ``required`` with no tool to call."""
    setup = Setup([answer(), answer()])
    server = {"type": "mcp", "server_label": "docs"}
    await setup.create([DEFERRED, SERVER], settings={"tool_choice": server})
    await setup.create([DEFERRED, SERVER], settings={"tool_choice": {**server, "name": "add"}})
    first, second = setup.backend.requests
    assert (first.tool_choice, offered(first)) == ("auto", ["tool_search"])
    assert (second.tool_choice, offered(second)) == ("auto", ["tool_search"])


async def test_a_search_loads_a_deferred_function_and_a_servers_tool_together() -> None:
    """The search's description lists a deferred namespace beside the server, and one
    search may load a function and a server's tool, both told to the model."""
    crm = {
        "type": "namespace",
        "name": "crm",
        "description": "Customer records.",
        "defer_loading": True,
        "tools": [{"type": "function", "name": "add_note", "description": "Add a note"}],
    }
    setup = Setup([tools_round(call("tool_search", {"query": "add"})), answer()])
    run = await setup.create([crm, DEFERRED, SERVER])
    found = run.state.output[2]
    assert [tool["type"] for tool in found["tools"]] == ["namespace", "mcp"]
    first, second = setup.backend.requests
    description = search_description(first)
    assert "- crm (a group of tools): Customer records." in description
    assert "- docs (the tools of an MCP server): Arithmetic and slow jobs." in description
    assert offered(second) == ["crm__add_note", "tool_search", "docs__add"]
    assert model_items(second.items)[-1]["output"] == (
        "Loaded tools: crm__add_note, docs__add. They can be called now."
    )


async def test_a_search_names_a_servers_tool_by_the_name_it_is_offered_by() -> None:
    """The client's function ``docs__add`` holds that name, so the server's ``add`` is
    offered apart, as ``gateway_docs__add``: the search's output tells the model that name,
    not the client's function's."""
    mine = {"type": "function", "name": "docs__add", "parameters": {"type": "object"}}
    setup = Setup([tools_round(call("tool_search", {"query": "add"})), answer()])
    await setup.create([mine, DEFERRED, SERVER])
    second = setup.backend.requests[1]
    assert offered(second) == ["docs__add", "tool_search", "gateway_docs__add"]
    assert model_items(second.items, names=second.names)[-1]["output"] == (
        "Loaded tools: gateway_docs__add. They can be called now."
    )


async def test_a_search_loads_nothing_of_a_deferred_server_its_allowed_tools_leave_out() -> None:
    """Neither the gateway's search nor a client's output naming the others loads a tool
    ``allowed_tools`` leaves out; the model's call of one fails without running."""
    narrowed = {**DEFERRED, "allowed_tools": ["add"]}
    searching = tools_round(call("tool_search", {"query": "fails sleeps add"}))
    setup = Setup([searching, answer(), tools_round(call("docs__boom", {})), answer()])
    run = await setup.create([narrowed, SERVER])
    assert run.state.output[2]["tools"] == [
        {"type": "mcp", "server_label": "docs", "allowed_tools": ["add"]}
    ]
    everything = {"type": "mcp", "server_label": "docs", "allowed_tools": ["boom", "slow"]}
    call_item = {"type": "tool_search_call", "call_id": "c", "execution": "client"}
    output = {"type": "tool_search_output", "call_id": "c", "execution": "client"}
    later = [{**call_item, "arguments": {}}, {**output, "tools": [everything]}]
    second = await setup.create([narrowed, CLIENT], later, previous_response_id=run.state.id)
    assert offered(setup.backend.requests[-1]) == ["tool_search", "docs__add"]
    failed = second.state.output[0]
    assert (failed["type"], failed["name"], failed["status"]) == ("mcp_call", "boom", "failed")
    assert setup.mcp.calls == []


async def test_a_loaded_tool_of_a_deferred_server_asks_approval_and_runs_once_approved() -> None:
    setup = Setup(
        [
            tools_round(call("tool_search", {"query": "add"})),
            tools_round(call("docs__add", {"a": 1, "b": 2})),
            answer("3"),
        ]
    )
    asking = {**DEFERRED, "require_approval": "always"}
    first = await setup.create([asking, SERVER])
    request = first.state.output[-1]
    assert request["type"] == "mcp_approval_request"
    assert setup.mcp.calls == []
    approve = {"type": "mcp_approval_response", "approval_request_id": request["id"]}
    second = await setup.create(
        [asking, SERVER], [{**approve, "approve": True}], previous_response_id=first.state.id
    )
    ran = second.state.output[0]
    assert (ran["type"], ran["status"], ran["output"]) == ("mcp_call", "completed", "3")


async def test_a_call_of_a_deferred_servers_tool_no_search_loaded_fails_without_running() -> None:
    """The model was never offered it (as hosted, a deferred tool cannot be called before a
    search loads it): the call fails, asking for no approval, and the model is told to
    search first."""
    setup = Setup([tools_round(call("docs__add", {"a": 1, "b": 2})), answer()])
    run = await setup.create([{**DEFERRED, "require_approval": "always"}, SERVER])
    assert setup.mcp.calls == []
    failed = run.state.output[1]
    assert (failed["type"], failed["name"], failed["status"]) == ("mcp_call", "add", "failed")
    told = model_items(setup.backend.requests[-1].items)[-1]["output"]
    assert "is not loaded: load it with the tool search first." in told
