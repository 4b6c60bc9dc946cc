"""A response's gateway tools as a client reads them: every item and event the SDK reads,
each item done once, the limits, the texts a failed call gives the model, and approvals
answered in later requests."""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from dataclasses import replace
from typing import Any

from stateway.core import events as ev
from stateway.core.commands import CreateResponse
from stateway.core.errors import UpstreamError
from stateway.core.generation_settings import GenerationSettings
from stateway.core.inference import Finish, ToolCallDelta, UsageReport
from stateway.core.principal import Principal
from stateway.core.runs import CancelReason
from stateway.core.tools.ports import (
    McpServer,
    McpTool,
    SearchHit,
    SearchQuery,
    ToolError,
    ToolFailure,
)
from stateway.core.tools.toolset import ToolPolicy
from stateway.core.usage import Usage
from tests.core.fakes import FakeMcp, FakeSearch
from tests.core.tools.test_tool_loop import (
    ADD,
    BOOM_CONTENT,
    MCP_TOOL,
    Setup,
    add,
    answer,
    call,
    fake_mcp,
    kinds,
    seen_by_model,
    tools_round,
    user,
)
from tests.core.tools.wire import check_stream, is_id

ASK: dict[str, Any] = {"type": "mcp", "server_label": "docs", "require_approval": "always"}
SECOND: dict[str, Any] = {
    "type": "mcp",
    "server_label": "b",
    "server_url": "http://allowed.test/b",
    "require_approval": "never",
}


def approve(request_id: str, approve: bool = True) -> dict[str, Any]:
    return {"type": "mcp_approval_response", "approval_request_id": request_id, "approve": approve}


async def asked(
    *calls: ToolCallDelta, mcp: FakeMcp | None = None, tools: list[dict[str, Any]] | None = None
) -> tuple[Setup, Any, list[dict[str, Any]]]:
    """A first turn whose calls all wait for approval, and its approval requests in order
    (the model answers the next turn)."""
    setup = Setup([tools_round(*calls), answer("after")], mcp=mcp)
    first = await setup.create(tools or [ASK])
    return setup, first, [i for i in first.state.output if i["type"] == "mcp_approval_request"]


# -- items and events ------------------------------------------------------------------


async def test_an_mcp_rounds_items_and_events_are_what_the_sdk_reads() -> None:
    setup = Setup([tools_round(call("docs__add", {"a": 2, "b": 3})), answer("5")])
    run = await setup.create([MCP_TOOL])
    check_stream(run.events)
    listed, mcp_call, _ = run.state.output
    assert is_id(listed["id"], "mcpl")
    assert mcp_call == {
        "id": mcp_call["id"],
        "type": "mcp_call",
        "status": "completed",
        "server_label": "docs",
        "name": "add",
        "arguments": '{"a":2,"b":3}',
        "output": "5",
        "error": None,
        "approval_request_id": None,
    }


async def test_a_failed_call_keeps_its_item_shape_and_its_events_their_order() -> None:
    setup = Setup([tools_round(call("docs__boom", {})), answer()])
    run = await setup.create([MCP_TOOL])
    check_stream(run.events)
    failed = run.state.output[1]
    assert failed == {
        "id": failed["id"],
        "type": "mcp_call",
        "status": "failed",
        "server_label": "docs",
        "name": "boom",
        "arguments": "{}",
        "output": None,
        "error": {"type": "mcp_tool_execution_error", "content": BOOM_CONTENT},
        "approval_request_id": None,
    }


async def test_a_web_search_call_streams_and_ends_as_the_sdk_reads_it() -> None:
    hits = [SearchHit("Stateway", "https://stateway.test/docs", "A gateway.")]
    search = FakeSearch(hits)
    setup = Setup(
        [tools_round(call("web_search", {"query": " what is stateway "})), answer("ok")],
        search=search,
    )
    run = await setup.create([{"type": "web_search"}])
    check_stream(run.events)
    item = run.state.output[0]
    assert item == {
        "id": item["id"],
        "type": "web_search_call",
        "status": "completed",
        "action": {
            "type": "search",
            "query": "what is stateway",
            "sources": [
                {
                    "type": "url",
                    "url": "https://stateway.test/docs",
                    "title": "Stateway",
                    "snippet": "A gateway.",
                }
            ],
        },
    }
    assert search.queries == [SearchQuery("what is stateway")]


async def test_a_gateway_tool_search_streams_as_the_sdk_reads_it() -> None:
    weather = {"type": "function", "name": "get_weather", "defer_loading": True}
    setup = Setup([tools_round(call("tool_search", {"query": "weather"})), answer()])
    run = await setup.create([weather, {"type": "tool_search"}])
    check_stream(run.events)
    search, found, _ = run.state.output
    assert (search["call_id"], found["call_id"]) == (None, None)


# -- what a failed call tells the model --------------------------------------------------


async def test_a_search_without_a_query_is_not_sent_and_the_model_is_told() -> None:
    search = FakeSearch([])
    setup = Setup([tools_round(call("web_search", {"query": " "})), answer()], search=search)
    run = await setup.create([{"type": "web_search"}])
    item = run.state.output[0]
    error = "invalid_tool_input: A web search needs a non-empty 'query'."
    assert (item["status"], item["error"]) == ("failed", error)
    assert search.queries == []
    told = seen_by_model(setup.backend.requests[1])["output"]
    assert told == f"Error: {error}"


class LimitedSearch(FakeSearch):
    async def search(self, query: SearchQuery) -> list[SearchHit]:
        raise ToolFailure(ToolError.http(429, "fake rate limited the search (HTTP 429)"))


async def test_a_rate_limited_search_fails_by_that_name() -> None:
    """The item keeps the cause as Anthropic's code for it, where the message starts (as
    ``max_uses_exceeded``): what the Messages frontend shows, and what a replay keeps."""
    setup = Setup(
        [tools_round(call("web_search", {"query": "q"})), answer()], search=LimitedSearch([])
    )
    run = await setup.create([{"type": "web_search"}])
    assert run.state.output[0]["error"] == (
        "too_many_requests: fake rate limited the search (HTTP 429)"
    )


async def test_another_failed_search_keeps_its_message_as_it_is() -> None:
    search = FakeSearch([], fail=True)
    setup = Setup([tools_round(call("web_search", {"query": "q"})), answer()], search=search)
    run = await setup.create([{"type": "web_search"}])
    assert run.state.output[0]["error"] == "search provider 'fake' answered 503"


async def test_searches_past_max_uses_are_not_sent_and_fail_by_that_name() -> None:
    search = FakeSearch([SearchHit("A", "https://a.test/", "a")])
    calls = [call("web_search", {"query": q}, i) for i, q in enumerate(("one", "two", "three"))]
    setup = Setup([tools_round(*calls), answer()], search=search)
    run = await setup.create([{"type": "web_search", "max_uses": 2}])
    assert [q.query for q in search.queries] == ["one", "two"]
    statuses = [item["status"] for item in run.state.output[:3]]
    assert statuses == ["completed", "completed", "failed"]
    assert run.state.output[2]["error"] == (
        "max_uses_exceeded: this response may run at most 2 web searches."
    )


async def test_a_search_call_without_a_query_does_not_count_toward_max_uses() -> None:
    """``max_uses`` caps the searches performed (Anthropic's words): a call the gateway
    refuses for its arguments sends nothing, and leaves the response its searches."""
    search = FakeSearch([SearchHit("A", "https://a.test/", "a")])
    calls = [
        ToolCallDelta(0, "c0", "web_search", '{"query": "one"'),  # cut short: no JSON
        call("web_search", {"query": " "}, 1),
        call("web_search", {"query": "two"}, 2),
        call("web_search", {"query": "three"}, 3),
    ]
    setup = Setup([tools_round(*calls), answer()], search=search)
    run = await setup.create([{"type": "web_search", "max_uses": 1}])
    assert [q.query for q in search.queries] == ["two"]
    errors = [str(item.get("error")).partition(":")[0] for item in run.state.output[:4]]
    assert errors == ["invalid_tool_input", "invalid_tool_input", "None", "max_uses_exceeded"]


async def test_a_search_the_provider_failed_counts_toward_max_uses() -> None:
    """It was sent: ``max_uses`` also bounds what a response asks of the provider."""
    search = FakeSearch([], fail=True)
    calls = [call("web_search", {"query": q}, i) for i, q in enumerate(("one", "two"))]
    setup = Setup([tools_round(*calls), answer()], search=search)
    run = await setup.create([{"type": "web_search", "max_uses": 1}])
    assert [q.query for q in search.queries] == ["one"]
    assert str(run.state.output[1]["error"]).startswith("max_uses_exceeded: ")


async def test_a_search_past_max_tool_calls_keeps_the_query_the_model_wrote() -> None:
    """Not run, but shown (and sent back to the model on a later turn) as the search the
    model asked for, as a search past ``max_uses`` is."""
    search = FakeSearch([SearchHit("A", "https://a.test/", "a")])
    calls = [call("web_search", {"query": q}, i) for i, q in enumerate(("one", "two"))]
    setup = Setup([tools_round(*calls), answer()], search=search)
    run = await setup.create([{"type": "web_search"}], settings={"max_tool_calls": 1})
    assert [q.query for q in search.queries] == ["one"]
    refused = run.state.output[1]
    assert refused["status"] == "failed"
    assert refused["action"] == {"type": "search", "query": "two"}


async def test_a_declared_search_filters_its_hits_by_domain() -> None:
    search = FakeSearch([])
    setup = Setup([tools_round(call("web_search", {"query": "q"})), answer()], search=search)
    filters = {"allowed_domains": ["a.test"], "blocked_domains": ["b.test"]}
    await setup.create([{"type": "web_search", "filters": filters}])
    assert search.queries == [
        SearchQuery("q", allowed_domains=("a.test",), blocked_domains=("b.test",))
    ]


class BrokenSearch(FakeSearch):
    async def search(self, query: SearchQuery) -> list[SearchHit]:
        raise RuntimeError("a bug in the adapter")


async def test_a_search_adapter_that_breaks_fails_the_call_not_the_response() -> None:
    setup = Setup(
        [tools_round(call("web_search", {"query": "q"})), answer()], search=BrokenSearch([])
    )
    run = await setup.create([{"type": "web_search"}])
    assert run.state.status == "completed"
    assert run.state.output[0]["error"] == "The call to web search failed unexpectedly."


async def test_a_call_past_its_timeout_names_the_tool_and_the_limit() -> None:
    setup = Setup(
        [tools_round(call("docs__slow", {"seconds": 30})), answer()],
        policy=ToolPolicy(timeout=0.05),
    )
    run = await setup.create([MCP_TOOL])
    assert (
        run.state.output[1]["error"]["message"] == "The call to docs.slow timed out after 0.05 s."
    )


async def test_a_listing_that_breaks_names_the_server() -> None:
    setup = Setup([answer()], mcp=FakeMcp({}))  # listing 'docs' raises a KeyError
    run = await setup.create([MCP_TOOL])
    listed = run.state.output[0]
    assert listed["error"] == "The call to MCP server 'docs' failed unexpectedly."
    check_stream(run.events)


# -- limits ----------------------------------------------------------------------------


def tool(name: str) -> McpTool:
    return McpTool(name, {"type": "object"})


async def test_discovered_tools_share_one_budget_across_servers() -> None:
    mcp = FakeMcp({"docs": [tool("a"), tool("b"), tool("c")], "b": [tool("x"), tool("y")]})
    setup = Setup([answer()], mcp=mcp, policy=ToolPolicy(max_discovered_tools=3))
    run = await setup.create([MCP_TOOL, SECOND])
    assert [i.get("error") for i in run.state.output[:2]] == [None, None]  # 3 is allowed
    offered = [t["name"] for t in setup.backend.requests[0].tools]
    assert offered == ["docs__a", "docs__b", "docs__c"]


async def test_the_budget_counts_the_tools_offered_not_those_a_filter_held_back() -> None:
    mcp = FakeMcp({"docs": [tool("a"), tool("b"), tool("c")], "b": [tool("x"), tool("y")]})
    setup = Setup([answer()], mcp=mcp, policy=ToolPolicy(max_discovered_tools=3))
    run = await setup.create([{**MCP_TOOL, "allowed_tools": ["c"]}, SECOND])
    assert [[t["name"] for t in i["tools"]] for i in run.state.output[:2]] == [["c"], ["x", "y"]]
    offered = [t["name"] for t in setup.backend.requests[0].tools]
    assert offered == ["docs__c", "b__x", "b__y"]


async def test_max_tool_calls_counts_the_calls_of_every_round() -> None:
    one = tools_round(call("docs__add", {"a": 1, "b": 1}))
    setup = Setup([one, one, one, answer()])
    run = await setup.create([MCP_TOOL], settings={"max_tool_calls": 2})
    assert len(setup.mcp.calls) == 2
    assert setup.backend.requests[2].tools == []
    refused = [i for i in run.state.output if i["type"] == "mcp_call"][2]
    assert refused["status"] == "failed"


# -- items are closed once ---------------------------------------------------------------


async def test_a_response_failing_after_a_call_leaves_that_call_completed() -> None:
    setup = Setup([tools_round(call("docs__add", {"a": 1, "b": 1})), [UpstreamError("cut")]])
    run = await setup.create([MCP_TOOL])
    assert run.state.status == "failed"
    assert [i.get("status") for i in run.state.output[:2]] == [None, "completed"]
    assert run.state.output[0].get("error") is None
    check_stream(run.events)


async def test_an_approval_request_in_a_round_cut_short_is_done_once() -> None:
    cut = [call("docs__add", {"a": 1, "b": 1}), Finish("length"), UsageReport(Usage(1, 1))]
    setup = Setup([cut])
    run = await setup.create([ASK])
    assert run.state.status == "incomplete"
    request = run.state.output[-1]
    assert request["type"] == "mcp_approval_request"
    assert "status" not in request
    check_stream(run.events)


class HangingMcp(FakeMcp):
    """Lists nothing until cancelled."""

    def __init__(self) -> None:
        super().__init__({})
        self.listing = asyncio.Event()

    async def list_tools(self, server: McpServer) -> list[McpTool]:
        self.listing.set()
        await asyncio.Event().wait()
        raise AssertionError("unreachable")


async def test_a_response_cancelled_while_listing_fails_the_listing() -> None:
    mcp = HangingMcp()
    setup = Setup([answer()], mcp=mcp, policy=ToolPolicy(timeout=60))
    command = CreateResponse(
        model="m", input=[user()], settings=GenerationSettings(tools=[MCP_TOOL])
    )
    run = await setup.gateway.execute(Principal(), command)
    await asyncio.wait_for(mcp.listing.wait(), 5)
    run.cancel(CancelReason.CLIENT_GONE)
    await run.wait()
    listed = run.state.output[0]
    assert listed == {
        "id": listed["id"],
        "type": "mcp_list_tools",
        "server_label": "docs",
        "tools": [],
        "error": "The response ended before the tools were listed.",
    }
    assert kinds(run.events)[-3:-1] == ["mcp_list_tools.failed", "ItemDone:mcp_list_tools"]
    check_stream(run.events[:-1])  # the last: incomplete as client_disconnected, our own reason


async def test_each_tenant_uses_its_own_mcp_sessions() -> None:
    """Sessions are pooled by the server's ``pool_key``: a tenant's is never another's (a
    server may keep state per session: a page, a working directory)."""
    setup = Setup([tools_round(call("docs__add", {"a": 1, "b": 2})), answer()], mcp=fake_mcp())
    command = CreateResponse(
        model="m", input=[user()], settings=GenerationSettings(tools=[MCP_TOOL])
    )
    run = await setup.gateway.execute(Principal(tenant_id="acme"), command)
    await run.wait()
    assert [server.tenant for server in setup.mcp.listed] == ["acme"]
    assert [server.tenant for server in setup.mcp.called_servers] == ["acme"]
    other = replace(setup.mcp.listed[0], tenant="globex")
    assert other.pool_key != setup.mcp.listed[0].pool_key


async def test_a_server_whose_listing_failed_is_listed_again_on_the_next_turn() -> None:
    setup = Setup([answer(), answer()], mcp=fake_mcp(unreachable=frozenset({"docs"})))
    first = await setup.create([MCP_TOOL])
    setup.mcp.unreachable = frozenset()
    second = await setup.create([MCP_TOOL], previous_response_id=first.state.id)
    assert len(setup.mcp.listed) == 2
    assert second.state.output[0]["type"] == "mcp_list_tools"
    assert [t["name"] for t in setup.backend.requests[1].tools][:1] == ["docs__add"]


# -- approvals -------------------------------------------------------------------------


async def test_an_approved_call_streams_as_the_sdk_reads_it() -> None:
    setup, first, [request] = await asked(call("docs__add", {"a": 4, "b": 4}))
    second = await setup.create(
        [ASK], [approve(request["id"])], previous_response_id=first.state.id
    )
    check_stream(second.events)
    assert kinds(second.events)[2:9] == [
        "ItemAdded:mcp_call",
        "mcp_call.in_progress",
        "McpArgumentsDelta",
        "McpArgumentsDone",
        "mcp_call.completed",
        "ItemDone:mcp_call",
        "ItemAdded:message",
    ]
    added, delta = second.events[2], second.events[4]
    assert isinstance(added, ev.ItemAdded)
    assert isinstance(delta, ev.McpArgumentsDelta)
    assert (added.item["arguments"], delta.delta) == ("", '{"a":4,"b":4}')  # as hosted
    ran = second.state.output[0]
    assert (ran["arguments"], ran["output"]) == ('{"a":4,"b":4}', "8")


async def test_an_approval_resent_with_the_history_does_not_run_the_call_again() -> None:
    setup, first, [request] = await asked(call("docs__add", {"a": 1, "b": 2}))
    yes = approve(request["id"])
    second = await setup.create([ASK], [yes], previous_response_id=first.state.id)
    third = await setup.create([ASK], [yes, user("and?")], previous_response_id=second.state.id)
    assert len(setup.mcp.calls) == 1
    assert [i["type"] for i in third.state.output] == ["message"]


async def test_approvals_are_found_among_other_input_and_each_runs_once() -> None:
    calls = [call("docs__add", {"a": i, "b": 0}, index=i) for i in range(2)]
    setup, first, requests = await asked(*calls)
    ids = [r["id"] for r in requests]
    answers = [user("go"), approve(ids[0]), approve(ids[0]), approve(ids[1])]
    second = await setup.create([ASK], answers, previous_response_id=first.state.id)
    ran = [i for i in second.state.output if i["type"] == "mcp_call"]
    assert [i["approval_request_id"] for i in ran] == ids
    assert len(setup.mcp.calls) == 2


async def test_approved_calls_of_a_read_only_tool_run_at_once() -> None:
    calls = [call("docs__add", {"a": i, "b": 0}, index=i) for i in range(2)]
    setup, first, requests = await asked(*calls)
    yes = [approve(r["id"]) for r in requests]
    await setup.create([ASK], yes, previous_response_id=first.state.id)
    assert setup.mcp.most_at_once == 2


async def test_approved_calls_of_a_tool_not_marked_read_only_run_one_at_a_time() -> None:
    async def write(arguments: Mapping[str, Any]) -> str:
        return "written"

    mcp = FakeMcp({"docs": [McpTool("write", {"type": "object"})]}, {"write": write})
    calls = [call("docs__write", {}, index=i) for i in range(2)]
    setup, first, requests = await asked(*calls, mcp=mcp)
    yes = [approve(r["id"]) for r in requests]
    await setup.create([ASK], yes, previous_response_id=first.state.id)
    assert (len(mcp.calls), mcp.most_at_once) == (2, 1)


async def test_an_approval_runs_the_tool_it_names() -> None:
    setup, first, [request] = await asked(call("docs__boom", {}))
    await setup.create([ASK], [approve(request["id"])], previous_response_id=first.state.id)
    assert [name for _, name, _ in setup.mcp.calls] == ["boom"]


async def test_an_approved_call_without_arguments_runs_with_none() -> None:
    async def ping(arguments: Mapping[str, Any]) -> str:
        return f"pong {dict(arguments)}"

    mcp = FakeMcp({"docs": [McpTool("ping", {"type": "object"})]}, {"ping": ping})
    setup, first, [request] = await asked(ToolCallDelta(0, "up_0", "docs__ping", ""), mcp=mcp)
    assert request["arguments"] == ""
    second = await setup.create(
        [ASK], [approve(request["id"])], previous_response_id=first.state.id
    )
    assert second.state.output[0]["output"] == "pong {}"


async def test_an_approval_for_a_server_not_declared_again_fails_with_its_item_shape() -> None:
    remote = {"type": "mcp", "server_label": "remote", "server_url": "http://allowed.test/mcp"}
    setup, first, [request] = await asked(
        call("remote__add", {"a": 1, "b": 1}),
        mcp=FakeMcp({"remote": [ADD]}, {"add": add}),
        tools=[remote],
    )
    second = await setup.create([], [approve(request["id"])], previous_response_id=first.state.id)
    failed = second.state.output[0]
    assert failed == {
        "id": failed["id"],
        "type": "mcp_call",
        "status": "failed",
        "server_label": "remote",
        "name": "add",
        "arguments": '{"a":1,"b":1}',
        "output": None,
        "error": {
            "type": "mcp_protocol_error",
            "code": -32602,
            "message": "MCP server 'remote' is not declared in this request.",
        },
        "approval_request_id": request["id"],
    }


async def test_an_approval_for_a_tool_the_request_no_longer_offers_fails_without_running() -> None:
    setup, first, [request] = await asked(call("docs__boom", {}))
    narrowed = {**ASK, "allowed_tools": ["add"]}
    second = await setup.create(
        [narrowed], [approve(request["id"])], previous_response_id=first.state.id
    )
    assert setup.mcp.calls == []
    failed, _ = second.state.output
    assert (failed["type"], failed["status"], failed["name"]) == ("mcp_call", "failed", "boom")
    assert failed["error"] == {
        "type": "mcp_protocol_error",
        "code": -32602,
        "message": "MCP server 'docs' does not offer the tool 'boom' in this request.",
    }
    assert failed["approval_request_id"] == request["id"]
    check_stream(second.events)
