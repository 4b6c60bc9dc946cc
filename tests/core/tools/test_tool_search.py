"""Tool search in the loop: deferred tools held back, the client's own search (its call goes
back, its output loads tools), the gateway's search (call and output inside the response,
the loop goes on), loaded tools offered on later turns, and the continuation checks."""

from __future__ import annotations

from typing import Any

import pytest

from stateway.core.errors import InvalidRequest
from stateway.core.inference import InferenceRequest
from stateway.core.principal import DEFAULT_TENANT
from stateway.core.tools.catalog import Catalog
from stateway.core.tools.context_offers import with_context_tools
from stateway.core.tools.history import model_items
from tests.core.tools.test_tool_loop import Setup, answer, call, kinds, tools_round, user

EXEC: dict[str, Any] = {"type": "function", "name": "exec_command", "parameters": {}}
WEATHER: dict[str, Any] = {
    "type": "function",
    "name": "get_weather",
    "description": "Current weather for a city.",
    "parameters": {"type": "object", "properties": {"city": {"type": "string"}}},
    "defer_loading": True,
}
CRM: dict[str, Any] = {
    "type": "namespace",
    "name": "crm",
    "description": "Customer records and orders.",
    "tools": [
        {
            "type": "function",
            "name": "list_orders",
            "description": "Open orders",
            "defer_loading": True,
        },
        {"type": "function", "name": "ping", "description": "Always offered"},
    ],
}
SERVER: dict[str, Any] = {"type": "tool_search"}
CLIENT: dict[str, Any] = {
    "type": "tool_search",
    "execution": "client",
    "description": "Find tools in the client's registry.",
    "parameters": {"type": "object", "properties": {"goal": {"type": "string"}}},
}


def offered(request: InferenceRequest) -> list[str]:
    return [tool["name"] for tool in request.tools]


def function(name: str, request: InferenceRequest) -> dict[str, Any]:
    return next(tool for tool in request.tools if tool["name"] == name)


# -- deferred tools ------------------------------------------------------------------


def test_deferred_tools_are_held_back_only_when_a_tool_search_is_declared() -> None:
    assert Catalog([EXEC, WEATHER, CRM], defer=True).model_tools() == [
        EXEC,
        {"type": "function", "name": "crm__ping", "description": "Always offered"},
    ]
    plain = [tool["name"] for tool in Catalog([EXEC, WEATHER, CRM]).model_tools()]
    assert plain == ["exec_command", "get_weather", "crm__list_orders", "crm__ping"]


def test_a_whole_namespace_may_be_deferred() -> None:
    crm = {**CRM, "defer_loading": True}
    catalog = Catalog([crm], defer=True)
    assert catalog.model_tools() == []
    assert [e.function["name"] for e in catalog.deferred()] == ["crm__list_orders", "crm__ping"]


def test_loading_offers_a_deferred_tool_once_and_keeps_the_rest() -> None:
    catalog = Catalog([EXEC, WEATHER], defer=True)
    assert catalog.load([WEATHER, EXEC]) == ["get_weather"]  # exec_command was offered already
    assert catalog.load([WEATHER]) == []
    assert catalog.deferred() == []
    loaded = catalog.entry("get_weather")
    assert loaded is not None
    assert loaded.function["parameters"] == WEATHER["parameters"]
    assert "defer_loading" not in loaded.function


def test_tools_of_earlier_search_outputs_join_the_declared_ones() -> None:
    output = {"type": "tool_search_output", "call_id": "c", "tools": [WEATHER, {"type": "mcp"}]}
    tools = with_context_tools([EXEC], [user(), output])
    assert tools == [EXEC, {k: v for k, v in WEATHER.items() if k != "defer_loading"}]


async def test_tool_choice_names_the_search_and_never_a_deferred_tool() -> None:
    setup = Setup([answer()])
    await setup.create([EXEC, WEATHER, SERVER], settings={"tool_choice": {"type": "tool_search"}})
    await setup.create(
        [EXEC, WEATHER, SERVER],
        settings={"tool_choice": {"type": "function", "name": "get_weather"}},
    )
    forced, deferred = setup.backend.requests
    assert forced.tool_choice == {"type": "function", "name": "tool_search"}
    assert deferred.tool_choice == "auto"


# -- the gateway searches --------------------------------------------------------------


async def test_a_gateway_search_loads_matching_tools_and_the_loop_goes_on() -> None:
    setup = Setup(
        [
            tools_round(call("tool_search", {"query": "weather in a city"})),
            tools_round(call("get_weather", {"city": "Oslo"})),
        ]
    )
    run = await setup.create([EXEC, WEATHER, CRM, SERVER])
    state = run.state
    assert state.status == "completed"
    search, found, weather = state.output
    assert search["type"] == "tool_search_call"
    assert search["execution"] == "server"
    assert search["status"] == "completed"
    assert search["arguments"] == {"query": "weather in a city"}
    assert search["id"].startswith("tsc_")
    assert found["type"] == "tool_search_output"
    assert found["execution"] == "server"
    # as hosted: a search the server ran has no call_id (the Vercel AI SDK takes a
    # tool_search_call with one for a client search, and sends it back so)
    assert (search["call_id"], found["call_id"]) == (None, None)
    assert found["tools"] == [WEATHER]
    assert (weather["type"], weather["name"]) == ("function_call", "get_weather")
    first, second = setup.backend.requests
    assert offered(first) == ["exec_command", "crm__ping", "tool_search"]
    listing = function("tool_search", first)["description"]
    assert "- get_weather: Current weather for a city." in listing
    assert "- crm (a group of tools): Customer records and orders." in listing
    assert offered(second) == ["exec_command", "get_weather", "crm__ping", "tool_search"]
    seen = model_items(second.items)[-2:]
    assert seen == [
        {
            "type": "function_call",
            "call_id": search["id"],
            "name": "tool_search",
            "arguments": '{"query":"weather in a city"}',
        },
        {
            "type": "function_call_output",
            "call_id": search["id"],
            "output": "Loaded tools: get_weather. They can be called now.",
        },
    ]
    assert kinds(run.events)[2:7] == [
        "ItemAdded:tool_search_call",
        "ItemDone:tool_search_call",
        "ItemAdded:tool_search_output",
        "ItemDone:tool_search_output",
        "ItemAdded:function_call",
    ]


async def test_a_deferred_functions_call_comes_in_the_namespace_of_its_own_name() -> None:
    """Hosted returns a call of a top-level function a search loaded with ``namespace`` set to
    the function's name (the OpenAI Agents SDK looks such a function up by that shape only);
    sent back, it is the call of that function."""
    setup = Setup(
        [
            tools_round(call("tool_search", {"query": "weather"})),
            tools_round(call("get_weather", {"city": "Oslo"}), call("exec_command", {}, 1)),
            answer(),
            answer(),
        ]
    )
    tools = [EXEC, WEATHER, CRM, SERVER]
    first = await setup.create(tools)
    weather, plain = first.state.output[2:]
    assert (weather["name"], weather["namespace"]) == ("get_weather", "get_weather")
    assert "namespace" not in plain  # offered from the start: no namespace
    outputs = [
        {"type": "function_call_output", "call_id": c["call_id"], "output": "ok"}
        for c in (weather, plain)
    ]
    await setup.create(tools, outputs, previous_response_id=first.state.id)
    await setup.create(tools, [user(), *first.state.output, *outputs])  # the history resent
    for request in setup.backend.requests[2:]:
        seen = model_items(request.items, names=request.names)
        calls = [i for i in seen if i["type"] == "function_call"]
        assert [(c["name"], "namespace" in c) for c in calls[1:]] == [
            ("get_weather", False),
            ("exec_command", False),
        ]


def test_a_namespace_named_as_its_member_keeps_its_flat_name() -> None:
    """The namespace-of-its-own-name shape is a top-level function's only when no declared
    namespace of that name has such a member."""
    crm = {**CRM, "tools": [{"type": "function", "name": "crm"}]}
    notes = {"type": "namespace", "name": "notes", "tools": [{"type": "custom", "name": "notes"}]}
    catalog = Catalog([crm, notes])
    assert [tool["name"] for tool in catalog.model_tools()] == ["crm__crm", "notes__notes"]
    sent = {"type": "function_call", "call_id": "c", "name": "crm", "namespace": "crm"}
    assert model_items([sent], names=catalog.names())[0]["name"] == "crm__crm"
    assert model_items([sent])[0]["name"] == "crm"
    custom = {"type": "custom_tool_call", "call_id": "d", "name": "notes", "namespace": "notes"}
    assert model_items([{**custom, "input": "x"}], names=catalog.names())[0]["name"] == (
        "notes__notes"
    )
    mcp = {  # beside the gateway's own items too
        "id": "mcp_1",
        "type": "mcp_call",
        "server_label": "docs",
        "name": "add",
        "arguments": "{}",
        "output": "2",
    }
    seen = model_items([mcp, sent], names=catalog.names())
    assert [i.get("name") for i in seen if i["type"] == "function_call"] == [
        "docs__add",
        "crm__crm",
    ]


async def test_what_a_gateway_search_loaded_stays_offered_on_later_turns() -> None:
    setup = Setup(
        [
            tools_round(call("tool_search", {"query": "orders"})),
            answer("found them"),
            answer("still here"),
        ]
    )
    tools = [EXEC, WEATHER, CRM, SERVER]
    first = await setup.create(tools)
    found = first.state.output[1]
    assert found["tools"] == [
        {
            "type": "namespace",
            "name": "crm",
            "description": "Customer records and orders.",
            "tools": [CRM["tools"][0]],
        }
    ]
    await setup.create(tools, [user("again")], previous_response_id=first.state.id)
    later = setup.backend.requests[-1]
    assert "crm__list_orders" in offered(later)
    assert "get_weather" not in offered(later)
    listing = function("tool_search", later)["description"]
    assert "get_weather" in listing
    assert "crm" not in listing  # nothing of it is deferred any more


async def test_a_search_loads_the_best_matches_first_up_to_its_limit() -> None:
    orders = {**WEATHER, "name": "order_weather", "description": "Orders of weather reports."}
    setup = Setup(
        [tools_round(call("tool_search", {"query": "orders weather", "limit": 1})), answer()]
    )
    run = await setup.create([EXEC, WEATHER, CRM, orders, SERVER])
    found = run.state.output[1]
    assert [t["name"] for t in found["tools"]] == ["order_weather"]  # both words in its name
    setup = Setup([tools_round(call("tool_search", {"query": "orders weather"})), answer()])
    run = await setup.create([EXEC, WEATHER, CRM, orders, SERVER])
    found = run.state.output[1]
    names = [t["name"] for t in found["tools"]]
    assert names == ["get_weather", "crm", "order_weather"]  # declaration order, all of them


@pytest.mark.parametrize(
    ("arguments", "status", "told"),
    [
        ({"query": "spreadsheets"}, "completed", "No tools matched the search."),
        (
            {"nothing": 1},
            "incomplete",
            "The tool search did not complete: A tool search needs a non-empty 'query'.",
        ),
    ],
)
async def test_a_search_that_finds_nothing_or_fails_loads_nothing(
    arguments: object, status: str, told: str
) -> None:
    setup = Setup([tools_round(call("tool_search", arguments)), answer()])
    run = await setup.create([EXEC, WEATHER, SERVER])
    search, found, _ = run.state.output
    assert (search["status"], found["status"], found["tools"]) == (status, status, [])
    second = setup.backend.requests[1]
    assert "get_weather" not in offered(second)
    assert model_items(second.items)[-1]["output"] == told


async def test_searches_count_against_max_tool_calls() -> None:
    setup = Setup([tools_round(call("tool_search", {"query": "weather"})), answer()])
    run = await setup.create([EXEC, WEATHER, SERVER], settings={"max_tool_calls": 0})
    search, found, _ = run.state.output
    assert search["status"] == found["status"] == "incomplete"
    assert found["error"] == "The response reached its max_tool_calls limit; this call was not run."
    assert "error" not in search
    assert "tool_search" not in offered(setup.backend.requests[1])


async def test_a_search_cut_short_is_left_out_of_what_the_model_sees_later() -> None:
    setup = Setup([tools_round(call("tool_search", {"query": "weather"}))], max_rounds=1)
    run = await setup.create([EXEC, WEATHER, SERVER])
    assert run.state.status == "incomplete"
    assert [i["type"] for i in run.state.output] == ["tool_search_call", "tool_search_output"]
    pair = model_items([user(), *run.state.output])
    assert [i["type"] for i in pair] == ["message", "function_call", "function_call_output"]
    orphan = {**run.state.output[0], "call_id": "other"}
    assert model_items([user(), orphan]) == [user()]


# -- the client searches ---------------------------------------------------------------


async def test_a_client_search_goes_back_to_the_client_and_its_output_loads_tools() -> None:
    setup = Setup(
        [
            tools_round(call("tool_search", {"goal": "weather"})),
            tools_round(call("get_weather", {"city": "Oslo"})),
            answer(),
        ]
    )
    tools = [EXEC, WEATHER, CLIENT]
    first = await setup.create(tools)
    [search] = first.state.output
    assert first.state.status == "completed"
    assert search["type"] == "tool_search_call"
    assert search["execution"] == "client"
    assert search["status"] == "completed"
    assert search["arguments"] == {"goal": "weather"}
    [request] = setup.backend.requests
    assert offered(request) == ["exec_command", "tool_search"]
    declared = function("tool_search", request)
    assert declared["parameters"] == CLIENT["parameters"]
    assert declared["description"].startswith("Find tools in the client's registry.")
    assert "get_weather" in declared["description"]

    lookup = {"type": "function", "name": "lookup", "description": "From the registry"}
    loaded = {
        "type": "tool_search_output",
        "call_id": search["call_id"],
        "execution": "client",
        "tools": [WEATHER, lookup],
    }
    second = await setup.create(tools, [loaded], previous_response_id=first.state.id)
    assert second.state.status == "completed"
    assert second.state.output[0]["name"] == "get_weather"
    request = setup.backend.requests[1]
    assert offered(request) == ["exec_command", "get_weather", "lookup", "tool_search"]
    assert model_items(request.items)[-2:] == [
        {
            "type": "function_call",
            "call_id": search["call_id"],
            "name": "tool_search",
            "arguments": '{"goal":"weather"}',
        },
        {
            "type": "function_call_output",
            "call_id": search["call_id"],
            "output": "Loaded tools: get_weather, lookup. They can be called now.",
        },
    ]
    stored = await setup.store.load_context(DEFAULT_TENANT, second.state.id)
    assert stored is not None
    assert loaded in stored.items  # kept as sent

    done = {"type": "function_call_output", "call_id": second.state.output[0]["call_id"]}
    await setup.create(tools, [{**done, "output": "sunny"}], previous_response_id=second.state.id)
    assert offered(setup.backend.requests[2]) == offered(request)


async def test_a_client_resending_its_whole_history_loads_the_same_tools() -> None:
    setup = Setup([answer()])
    history = [
        user(),
        {"type": "tool_search_call", "call_id": "ts1", "execution": "client", "arguments": {}},
        {"type": "tool_search_output", "call_id": "ts1", "execution": "client", "tools": [WEATHER]},
    ]
    run = await setup.create([EXEC, CLIENT], history)
    assert run.state.status == "completed"
    assert offered(setup.backend.requests[0]) == ["exec_command", "get_weather", "tool_search"]


@pytest.mark.parametrize(
    ("items", "param", "code", "message"),
    [
        (
            [{"type": "tool_search_output", "call_id": "nope", "tools": []}],
            "input[0].call_id",
            "tool_call_not_found",
            "No tool call found for tool search output with call_id nope.",
        ),
        (
            [{"type": "tool_search_call", "call_id": "ts1", "arguments": {}}, user()],
            "input",
            "tool_output_missing",
            "No tool output found for tool search call ts1.",
        ),
        (
            [
                {"type": "function_call", "call_id": "f1", "name": "f", "arguments": "{}"},
                {"type": "tool_search_output", "call_id": "f1", "tools": []},
            ],
            "input[1].call_id",
            "tool_call_not_found",
            "No tool call found for tool search output with call_id f1.",
        ),
    ],
)
async def test_search_outputs_must_answer_a_client_search(
    items: list[dict[str, Any]], param: str, code: str, message: str
) -> None:
    setup = Setup([answer()])
    with pytest.raises(InvalidRequest) as caught:
        await setup.create([EXEC, CLIENT], items)
    assert (caught.value.param, caught.value.code, caught.value.message) == (param, code, message)


async def test_the_gateways_own_search_items_need_no_answer_when_resent() -> None:
    setup = Setup([answer()])
    history = [
        user(),
        {"type": "tool_search_call", "call_id": None, "execution": "server", "arguments": {}},
        {"type": "tool_search_output", "call_id": None, "execution": "server", "tools": [WEATHER]},
    ]
    run = await setup.create([EXEC, SERVER], history)
    assert run.state.status == "completed"
    request = setup.backend.requests[0]
    assert "get_weather" in offered(request)
    assert [i["type"] for i in model_items(request.items)] == [
        "message",
        "function_call",
        "function_call_output",
    ]


async def test_deferred_tools_without_a_tool_search_are_offered() -> None:
    setup = Setup([answer()])
    await setup.create([EXEC, WEATHER])
    assert offered(setup.backend.requests[0]) == ["exec_command", "get_weather"]
