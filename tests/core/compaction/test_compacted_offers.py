"""The tools a compaction leaves offered: those the compacted context still holds. A tool
search's output is summarized away with everything before the compaction item, so the
tools it loaded are held back again (searchable again), in the rounds after the
compaction as on later turns; an ``additional_tools`` item is kept, and so are its tools."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import orjson

from stateway.core.commands import CreateResponse
from stateway.core.gateway import Gateway
from stateway.core.generation_settings import GenerationSettings
from stateway.core.inference import Delta, Finish, InferenceRequest, ToolCallDelta, UsageReport
from stateway.core.loop import Loop
from stateway.core.principal import Principal
from stateway.core.routing import BackendEntry, Router
from stateway.core.run_registry import RunRegistry
from stateway.core.tools.ports import McpServer, McpTool
from stateway.core.tools.session import ToolSession
from stateway.core.tools.toolset import ConfiguredServer, GatewayTools, Toolset
from stateway.core.usage import Usage
from tests.core.compaction.test_between_rounds import (
    ANSWER,
    DOCS,
    SEALER,
    SUMMARY,
    THRESHOLD,
    build,
    calling,
    is_summary_call,
    user,
)
from tests.core.fakes import FakeMcp, MemoryStore, RoundsBackend
from tests.core.tools.test_tool_search import WEATHER

SEARCH: dict[str, Any] = {"type": "tool_search"}
TOOLS = [DOCS, WEATHER, SEARCH]


def searching() -> list[Delta]:
    arguments = orjson.dumps({"query": "weather in a city"}).decode()
    return [
        ToolCallDelta(0, "up_s", "tool_search", arguments),
        UsageReport(Usage(10, 1)),
        Finish("tool_calls"),
    ]


def command(threshold: int, **fields: Any) -> CreateResponse:
    entries = [{"type": "compaction", "compact_threshold": threshold}]
    settings = GenerationSettings(tools=TOOLS, context_management=entries)
    return CreateResponse("m", fields.pop("input", [user("read a")]), settings=settings, **fields)


def offered(request: InferenceRequest) -> list[str]:
    return [tool["name"] for tool in request.tools]


def listing(request: InferenceRequest) -> str:
    return str(next(t for t in request.tools if t["name"] == "tool_search")["description"])


def rounds(backend: RoundsBackend) -> list[InferenceRequest]:
    """The requests of the model's rounds (not the summary's)."""
    return [request for request in backend.requests if not is_summary_call(request)]


async def test_tools_a_search_loaded_before_a_compaction_between_rounds_are_held_back() -> None:
    backend = RoundsBackend([searching(), calling(), SUMMARY, ANSWER, ANSWER])
    gateway = build(backend)
    run = await gateway.execute(Principal(), command(THRESHOLD))
    await run.wait()
    types = [item["type"] for item in run.state.output]
    assert types[-3:] == ["mcp_call", "compaction", "message"], run.state.error
    searched, loaded, after = rounds(backend)
    assert "get_weather" not in offered(searched)
    assert "get_weather" in offered(loaded)
    assert "get_weather" not in offered(after)  # its search is summarized away
    assert offered(after) == ["tool_search", "docs__read"]  # the gateway's tools stay
    assert "- get_weather: Current weather for a city." in listing(after)  # searchable again

    later = await gateway.execute(
        Principal(), command(10**6, input=[user("again")], previous_response_id=run.state.id)
    )
    await later.wait()
    assert offered(backend.requests[-1]) == offered(after)  # as a later turn is offered
    assert listing(backend.requests[-1]) == listing(after)


async def test_a_deferred_servers_tools_a_search_loaded_are_held_back_after_a_compaction() -> None:
    """As a deferred function's: in the rounds after the compaction as on later turns."""
    arguments = orjson.dumps({"query": "read"}).decode()
    search = [ToolCallDelta(0, "up_s", "tool_search", arguments), Finish("tool_calls")]
    backend = RoundsBackend([search, calling(), SUMMARY, ANSWER, ANSWER])
    gateway = build(backend)
    settings = GenerationSettings(
        tools=[{**DOCS, "defer_loading": True}, SEARCH],
        context_management=[{"type": "compaction", "compact_threshold": THRESHOLD}],
    )
    run = await gateway.execute(Principal(), CreateResponse("m", [user("a")], settings=settings))
    await run.wait()
    types = [item["type"] for item in run.state.output]
    assert types[-3:] == ["mcp_call", "compaction", "message"], run.state.error
    searched, loaded, after = rounds(backend)
    assert offered(searched) == offered(after) == ["tool_search"]
    assert offered(loaded) == ["tool_search", "docs__read"]
    assert "- docs (the tools of an MCP server)" in listing(after)  # searchable again

    again = replace(settings, context_management=[])
    later = await gateway.execute(
        Principal(),
        CreateResponse("m", [user("b")], settings=again, previous_response_id=run.state.id),
    )
    await later.wait()
    assert offered(backend.requests[-1]) == offered(after)
    assert listing(backend.requests[-1]) == listing(after)


async def test_tools_loaded_on_earlier_turns_are_held_back_once_a_response_compacts_first() -> None:
    backend = RoundsBackend([searching(), ANSWER, SUMMARY, ANSWER])
    gateway = build(backend)
    first = await gateway.execute(Principal(), command(10**6))
    await first.wait()
    assert "get_weather" in offered(backend.requests[-1])

    second = await gateway.execute(
        Principal(), command(1, input=[user("again")], previous_response_id=first.state.id)
    )
    await second.wait()
    assert [item["type"] for item in second.state.output][-2:] == ["compaction", "message"]
    assert "get_weather" not in offered(backend.requests[-1])
    assert "- get_weather: Current weather for a city." in listing(backend.requests[-1])


async def test_tools_of_an_additional_tools_item_stay_offered_after_a_compaction() -> None:
    extra = {"type": "function", "name": "ping", "parameters": {"type": "object"}}
    added = {"type": "additional_tools", "role": "developer", "tools": [extra]}
    backend = RoundsBackend([calling(), SUMMARY, ANSWER])
    run = await build(backend).execute(
        Principal(), command(THRESHOLD, input=[added, user("read a")])
    )
    await run.wait()
    assert run.state.output[-2]["type"] == "compaction"
    assert "ping" in offered(backend.requests[-1])


def test_a_gateway_tool_offered_apart_keeps_its_name_and_shows_what_is_searchable_now() -> None:
    own = {"type": "function", "name": "tool_search", "parameters": {"type": "object"}}
    searched = {"type": "tool_search_output", "call_id": None, "execution": "server"}
    context = [user("hi"), {**searched, "tools": [WEATHER]}]
    session = ToolSession(
        GatewayTools(),
        Toolset([], [own, WEATHER], tool_search=SEARCH),
        [],
        [].append,
        context=context,
    )
    before = session.catalog.model_tools()
    assert [t["name"] for t in before] == ["tool_search", "get_weather", "gateway_tool_search"]

    session.compacted([user("hi")])

    after = session.catalog.model_tools()
    assert [t["name"] for t in after] == ["tool_search", "gateway_tool_search"]
    listing = after[1]["description"]
    assert "- get_weather: Current weather for a city." in listing
    assert "get_weather" not in before[2]["description"]
    assert [e.tool["name"] for e in session.catalog.deferred()] == ["get_weather"]


async def test_choosing_a_tool_held_back_by_a_first_round_compaction_sends_auto() -> None:
    """The first round's listing of an MCP server crosses the threshold: the response
    compacts before that round, and a ``tool_choice`` naming a tool a search loaded
    earlier, summarized away, falls back to ``auto`` as it would have at the start (the
    upstream refuses a choice of a tool it is not offered)."""
    wordy = McpTool("read", {"type": "object"}, "Read a file. " + "x" * 8000, {})
    backend = RoundsBackend([searching(), ANSWER, SUMMARY, ANSWER])
    tools = GatewayTools(
        mcp=FakeMcp({"docs": [wordy]}),
        servers={"docs": ConfiguredServer(McpServer("docs", "http://docs.test/mcp"))},
    )
    store = MemoryStore()
    loop = Loop(store, tools=tools, sealer=SEALER)
    router = Router([BackendEntry(backend, {}, catch_all=True)])
    gateway = Gateway(store, router, loop, RunRegistry(), sealer=SEALER)
    unlisted = GenerationSettings(tools=[WEATHER, SEARCH])  # the server joins later
    first = await gateway.execute(Principal(), CreateResponse("m", [user("hi")], settings=unlisted))
    await first.wait()
    assert "get_weather" in offered(backend.requests[-1])

    entries = [{"type": "compaction", "compact_threshold": THRESHOLD}]
    forced = {"type": "function", "name": "get_weather"}
    settings = GenerationSettings(tools=TOOLS, context_management=entries, tool_choice=forced)
    second = await gateway.execute(
        Principal(),
        CreateResponse(
            "m", [user("again")], settings=settings, previous_response_id=first.state.id
        ),
    )
    await second.wait()
    types = [item["type"] for item in second.state.output]
    assert types == ["mcp_list_tools", "compaction", "message"], second.state.error
    last = backend.requests[-1]
    assert "get_weather" not in offered(last)
    assert last.tool_choice == "auto"
