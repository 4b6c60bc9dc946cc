"""The loop with gateway-owned tools: rounds, MCP discovery and calls, approvals, web
search, limits and failures, against in-memory MCP and search fakes."""

from __future__ import annotations

import asyncio
import re
from collections.abc import Mapping
from typing import Any

import orjson
import pytest

from stateway.core import events as ev
from stateway.core.commands import CreateResponse, GetResponse
from stateway.core.errors import InvalidRequest, UpstreamError
from stateway.core.gateway import Gateway
from stateway.core.generation_settings import GenerationSettings
from stateway.core.inference import (
    Delta,
    Finish,
    InferenceRequest,
    ReasoningDelta,
    ReasoningSignature,
    TextDelta,
    ToolCallDelta,
    UsageReport,
)
from stateway.core.loop import Loop
from stateway.core.principal import Principal
from stateway.core.routing import BackendEntry, Router
from stateway.core.run_registry import RunRegistry
from stateway.core.runs import CancelReason
from stateway.core.tools.history import model_items
from stateway.core.tools.model_names import model_name
from stateway.core.tools.ports import McpServer, McpTool, SearchHit, ToolError, ToolFailure
from stateway.core.tools.toolset import ConfiguredServer, GatewayTools, ToolPolicy
from stateway.core.usage import Usage
from stateway.sealing import AesGcmSealer
from tests.core.fakes import FakeMcp, FakeSearch, MemoryStore, RoundsBackend
from tests.core.tools.wire import is_id

ADD = McpTool(
    "add", {"type": "object", "properties": {"a": {}, "b": {}}}, "Add", {"readOnlyHint": True}
)
SLOW = McpTool("slow", {"type": "object"}, "Sleeps")
DOTTED = McpTool("read.all", {"type": "object"}, "Reads")
BOOM = McpTool("boom", {"type": "object"}, "Fails")
DOCS = McpServer("docs", "http://docs.test/mcp")
MCP_TOOL: dict[str, Any] = {"type": "mcp", "server_label": "docs", "require_approval": "never"}


async def add(arguments: Mapping[str, Any]) -> str:
    return str(arguments["a"] + arguments["b"])


async def slow(arguments: Mapping[str, Any]) -> str:
    await asyncio.sleep(arguments.get("seconds", 10))
    return "slept"


BOOM_CONTENT = [{"type": "text", "text": "boom went the tool"}]


async def boom(arguments: Mapping[str, Any]) -> str:
    """A tool that ran and reported an error (``isError``)."""
    raise ToolFailure(ToolError.execution(BOOM_CONTENT, "boom went the tool"))


def fake_mcp(**kwargs: Any) -> FakeMcp:
    return FakeMcp({"docs": [ADD, SLOW, BOOM]}, {"add": add, "slow": slow, "boom": boom}, **kwargs)


def call(name: str, arguments: object, index: int = 0, call_id: str | None = None) -> ToolCallDelta:
    return ToolCallDelta(index, call_id or f"up_{index}", name, orjson.dumps(arguments).decode())


def answer(text: str = "done") -> list[Delta]:
    return [TextDelta(text), Finish("stop"), UsageReport(Usage(5, 1))]


def tools_round(*calls: ToolCallDelta) -> list[Delta]:
    return [*calls, Finish("tool_calls"), UsageReport(Usage(3, 2))]


def user(text: str = "hi") -> dict[str, Any]:
    return {"type": "message", "role": "user", "content": [{"type": "input_text", "text": text}]}


class Setup:
    def __init__(
        self,
        rounds: list[list[Delta]],
        *,
        mcp: FakeMcp | None = None,
        search: FakeSearch | None = None,
        policy: ToolPolicy | None = None,
        max_rounds: int = 8,
        sealer: AesGcmSealer | None = None,
    ) -> None:
        self.backend = RoundsBackend(rounds)  # type: ignore[arg-type]
        self.store = MemoryStore()
        self.mcp = mcp if mcp is not None else fake_mcp()
        tools = GatewayTools(
            mcp=self.mcp,
            search=search,
            servers={"docs": ConfiguredServer(DOCS)},
            url_allowed=lambda url: url.startswith("http://allowed.test"),
            policy=policy or ToolPolicy(timeout=0.5),
        )
        router = Router([BackendEntry(self.backend, {}, catch_all=True)])
        self.gateway = Gateway(
            self.store,
            router,
            Loop(self.store, max_rounds, tools=tools, sealer=sealer),
            RunRegistry(),
        )

    async def create(
        self,
        tools: list[dict[str, Any]],
        input_items: list[dict[str, Any]] | None = None,
        **fields: Any,
    ) -> Any:
        settings = GenerationSettings(tools=tools, **fields.pop("settings", {}))
        command = CreateResponse(
            model="m", input=input_items or [user()], settings=settings, **fields
        )
        run = await self.gateway.execute(Principal(), command)
        await run.wait()
        return run


def seen_by_model(request: InferenceRequest) -> dict[str, Any]:
    """The last item of a round's context as the model saw it."""
    return model_items(request.items)[-1]


def kinds(events: list[ev.Event]) -> list[str]:
    out = []
    for event in events:
        if isinstance(event, ev.ToolProgress):
            out.append(event.kind.removeprefix("response."))
        elif isinstance(event, ev.ItemAdded | ev.ItemDone):
            out.append(f"{type(event).__name__}:{event.item['type']}")
        else:
            out.append(type(event).__name__)
    return out


async def test_reasoning_sealed_for_the_client_reaches_the_next_round_without_its_seal() -> None:
    """With ``include: ["reasoning.encrypted_content"]`` (every Messages request) the
    gateway seals reasoning for the client; the round after a gateway tool sends the
    reasoning's text, never that seal, which an upstream would refuse as a signature."""
    thought: list[Delta] = [
        ReasoningDelta("plan"),
        *tools_round(call("docs__add", {"a": 1, "b": 2})),
    ]
    setup = Setup([thought, answer("3")], sealer=AesGcmSealer(bytes(range(32))))
    run = await setup.create([MCP_TOOL], settings={"include": ["reasoning.encrypted_content"]})
    assert run.state.status == "completed"
    [reasoning] = [i for i in run.state.output if i["type"] == "reasoning"]
    assert reasoning["encrypted_content"].startswith("sw1.")  # the client gets it sealed
    _, second = setup.backend.requests
    [sent] = [i for i in second.items if i["type"] == "reasoning"]
    assert "encrypted_content" not in sent
    assert sent["content"] == [{"type": "reasoning_text", "text": "plan"}]


async def test_an_upstreams_seal_reaches_the_next_round_as_the_upstream_made_it() -> None:
    """Without any ``include``, an Anthropic signature is sealed over for the client; the
    round after a gateway tool sends the signature itself, which the upstream checks."""
    thought: list[Delta] = [
        ReasoningDelta("plan"),
        ReasoningSignature("EqQBsig"),
        *tools_round(call("docs__add", {"a": 1, "b": 2})),
    ]
    setup = Setup([thought, answer("3")], sealer=AesGcmSealer(bytes(range(32))))
    run = await setup.create([MCP_TOOL])
    assert run.state.status == "completed"
    [reasoning] = [i for i in run.state.output if i["type"] == "reasoning"]
    assert reasoning["encrypted_content"].startswith("sw1.")
    _, second = setup.backend.requests
    [sent] = [i for i in second.items if i["type"] == "reasoning"]
    assert sent["encrypted_content"] == "EqQBsig"
    assert sent["content"] == [{"type": "reasoning_text", "text": "plan"}]


async def test_the_prompt_usage_shown_first_is_the_first_rounds() -> None:
    """Each round's upstream counts its prompt before any output (Anthropic's
    ``message_start``): the response's prompt usage, shown when it starts, is the first
    round's, and its usage sums each round's final report."""
    first: list[Delta] = [
        UsageReport(Usage(3, 1)),
        *tools_round(call("docs__add", {"a": 1, "b": 2})),
    ]
    setup = Setup([first, [UsageReport(Usage(6, 1)), *answer()]])
    run = await setup.create([MCP_TOOL])
    assert run.state.status == "completed"
    assert run.state.prompt_usage == Usage(3, 1)
    assert run.state.usage == Usage(8, 3)
    assert run.state.iterations == []  # each round's own usage: shown after a compaction only


async def test_an_mcp_call_runs_inside_the_response_and_the_model_answers_with_its_result() -> None:
    setup = Setup([tools_round(call("docs__add", {"a": 2, "b": 3})), answer("5 it is")])
    run = await setup.create([MCP_TOOL])
    state = run.state
    assert state.status == "completed"
    assert [i["type"] for i in state.output] == ["mcp_list_tools", "mcp_call", "message"]
    listed, mcp_call, _ = state.output
    assert [t["name"] for t in listed["tools"]] == ["add", "slow", "boom"]
    assert mcp_call["status"] == "completed"
    assert mcp_call["output"] == "5"
    assert mcp_call["error"] is None
    assert mcp_call["name"] == "add"
    assert mcp_call["server_label"] == "docs"
    assert state.usage == Usage(8, 3)  # summed over both rounds
    first, second = setup.backend.requests
    assert [t["name"] for t in first.tools] == ["docs__add", "docs__slow", "docs__boom"]
    seen = model_items(second.items)[-2:]  # what the model saw of the call: the canonical pair
    assert seen[0]["type"] == "function_call"
    assert seen[0]["name"] == "docs__add"
    assert seen[1] == {"type": "function_call_output", "call_id": seen[0]["call_id"], "output": "5"}
    assert kinds(run.events) == [
        "ResponseCreated",
        "ResponseInProgress",
        "ItemAdded:mcp_list_tools",
        "mcp_list_tools.in_progress",
        "mcp_list_tools.completed",
        "ItemDone:mcp_list_tools",
        "ItemAdded:mcp_call",
        "mcp_call.in_progress",
        "McpArgumentsDelta",
        "McpArgumentsDone",
        "mcp_call.completed",
        "ItemDone:mcp_call",
        "ItemAdded:message",
        "PartAdded",
        "TextDelta",
        "TextDone",
        "PartDone",
        "ItemDone:message",
        "ResponseFinished",
    ]
    indexes = [e.output_index for e in run.events if isinstance(e, ev.ItemAdded)]
    assert indexes == [0, 1, 2]  # continuous across rounds


async def test_a_failing_tool_becomes_a_failed_output_the_model_sees() -> None:
    setup = Setup([tools_round(call("docs__boom", {})), answer()])
    run = await setup.create([MCP_TOOL])
    mcp_call = run.state.output[1]
    assert run.state.status == "completed"
    assert mcp_call["status"] == "failed"
    assert mcp_call["error"] == {"type": "mcp_tool_execution_error", "content": BOOM_CONTENT}
    assert "mcp_call.failed" in kinds(run.events)
    assert seen_by_model(setup.backend.requests[1])["output"] == "Error: boom went the tool"


async def test_a_call_past_its_timeout_fails_and_the_response_goes_on() -> None:
    setup = Setup(
        [tools_round(call("docs__slow", {"seconds": 30})), answer()],
        policy=ToolPolicy(timeout=0.05),
    )
    run = await setup.create([MCP_TOOL])
    assert run.state.status == "completed"
    assert run.state.output[1]["error"] == {
        "type": "mcp_protocol_error",
        "code": -32001,
        "message": "The call to docs.slow timed out after 0.05 s.",
    }


async def test_the_round_limit_ends_incomplete_without_a_dangling_call() -> None:
    setup = Setup([tools_round(call("docs__add", {"a": 1, "b": 1}))], max_rounds=3)
    run = await setup.create([MCP_TOOL])
    state = run.state
    assert state.status == "incomplete"
    assert state.incomplete_reason == "max_rounds"
    calls = [i for i in state.output if i["type"] == "mcp_call"]
    assert len(calls) == 3
    assert all(c["status"] == "completed" for c in calls)
    assert len(setup.backend.requests) == 3


async def test_a_steered_run_stops_before_its_next_round_with_every_call_answered() -> None:
    setup = Setup(
        [tools_round(call("docs__slow", {"seconds": 0.2})), answer()],
        policy=ToolPolicy(timeout=5),
    )
    command = CreateResponse(
        model="m", input=[user()], settings=GenerationSettings(tools=[MCP_TOOL])
    )
    run = await setup.gateway.execute(Principal(), command)
    await asyncio.wait_for(setup.mcp.called.wait(), 5)
    run.steered = True  # steering input arrived while its tool runs
    await run.wait()
    state = run.state
    assert state.status == "incomplete"
    assert state.incomplete_reason == "steered"
    assert [i["type"] for i in state.output] == ["mcp_list_tools", "mcp_call"]
    assert state.output[1]["status"] == "completed"
    assert state.output[1]["output"] == "slept"
    assert len(setup.backend.requests) == 1  # no round after the boundary
    assert setup.store.records["default", run.id].status == "incomplete"
    assert run.events[-1] == ev.ResponseFinished(state)


async def test_a_steered_run_whose_round_answers_completes() -> None:
    setup = Setup([answer("all done")])
    command = CreateResponse(
        model="m", input=[user()], settings=GenerationSettings(tools=[MCP_TOOL])
    )
    run = await setup.gateway.execute(Principal(), command)
    run.steered = True  # no boundary comes before its answer
    await run.wait()
    assert run.state.status == "completed"
    assert run.state.incomplete_reason is None


async def test_a_mixed_round_runs_the_gateway_call_and_returns_the_client_call() -> None:
    client_tool = {"type": "function", "name": "local", "parameters": {"type": "object"}}
    setup = Setup(
        [tools_round(call("docs__add", {"a": 1, "b": 2}), call("local", {}, index=1)), answer()]
    )
    run = await setup.create([MCP_TOOL, client_tool])
    state = run.state
    assert state.status == "completed"
    assert [i["type"] for i in state.output] == ["mcp_list_tools", "mcp_call", "function_call"]
    assert state.output[1]["output"] == "3"
    assert len(setup.backend.requests) == 1


async def test_a_forced_tool_is_forced_in_the_first_round_only() -> None:
    setup = Setup([tools_round(call("docs__add", {"a": 1, "b": 2})), answer()])
    await setup.create(
        [MCP_TOOL], settings={"tool_choice": {"type": "mcp", "server_label": "docs", "name": "add"}}
    )
    first, second = setup.backend.requests
    assert first.tool_choice == {"type": "function", "name": "docs__add"}
    assert second.tool_choice == "auto"


async def test_a_server_named_alone_is_forced_in_the_first_round_with_only_its_tools() -> None:
    """``tool_choice`` naming an MCP server without a tool: the first round must call one
    of that server's tools, and is offered only those; later rounds are offered all."""
    function = {"type": "function", "name": "other", "parameters": {"type": "object"}}
    setup = Setup([tools_round(call("docs__add", {"a": 1, "b": 2})), answer()])
    choice = {"type": "mcp", "server_label": "docs"}
    await setup.create([MCP_TOOL, function], settings={"tool_choice": choice})
    first, second = setup.backend.requests
    assert (first.tool_choice, second.tool_choice) == ("required", "auto")
    assert [t["name"] for t in first.tools] == ["docs__add", "docs__slow", "docs__boom"]
    assert [t["name"] for t in second.tools] == [
        "other",
        "docs__add",
        "docs__slow",
        "docs__boom",
    ]


async def test_max_tool_calls_refuses_calls_past_the_limit_and_stops_offering_gateway_tools() -> (
    None
):
    rounds = [
        tools_round(
            call("docs__add", {"a": 1, "b": 1}), call("docs__add", {"a": 2, "b": 2}, index=1)
        ),
        answer(),
    ]
    setup = Setup(rounds)
    run = await setup.create([MCP_TOOL], settings={"max_tool_calls": 1})
    first, second = [i for i in run.state.output if i["type"] == "mcp_call"]
    assert first["status"] == "completed"
    assert second["status"] == "failed"
    assert second["error"] == {
        "type": "mcp_protocol_error",
        "code": -32010,
        "message": "The response reached its max_tool_calls limit; this call was not run.",
    }
    assert len(setup.mcp.calls) == 1
    assert setup.backend.requests[1].tools == []


async def test_calls_of_a_round_run_concurrently_under_the_permit_limit() -> None:
    calls = [call("docs__add", {"a": i, "b": 0}, index=i) for i in range(6)]
    setup = Setup([tools_round(*calls), answer()], policy=ToolPolicy(max_concurrent_calls=2))
    run = await setup.create([MCP_TOOL])
    assert run.state.status == "completed"
    assert setup.mcp.most_at_once == 2


async def test_a_tool_not_marked_parallel_safe_never_runs_twice_at_once() -> None:
    async def quick(arguments: Mapping[str, Any]) -> str:
        return "ok"

    mcp = FakeMcp({"docs": [McpTool("write", {"type": "object"})]}, {"write": quick})
    calls = [call("docs__write", {}, index=i) for i in range(3)]
    setup = Setup([tools_round(*calls), answer()], mcp=mcp)
    await setup.create([MCP_TOOL])
    assert mcp.most_at_once == 1
    assert len(mcp.calls) == 3


async def test_parallel_tool_calls_false_runs_one_call_at_a_time() -> None:
    calls = [call("docs__add", {"a": i, "b": 0}, index=i) for i in range(3)]
    setup = Setup([tools_round(*calls), answer()])
    await setup.create([MCP_TOOL], settings={"parallel_tool_calls": False})
    assert setup.mcp.most_at_once == 1


async def test_an_unreachable_server_fails_its_listing_and_the_response_goes_on() -> None:
    setup = Setup([answer("no tools then")], mcp=fake_mcp(unreachable=frozenset({"docs"})))
    run = await setup.create([MCP_TOOL])
    listed = run.state.output[0]
    assert run.state.status == "completed"
    assert listed["type"] == "mcp_list_tools"
    assert "unreachable" in listed["error"]
    assert "mcp_list_tools.failed" in kinds(run.events)
    assert setup.backend.requests[0].tools == []


@pytest.mark.parametrize(
    ("allowed", "offered"),
    [
        (["add", "boom", "missing"], ["add", "boom"]),
        ({"tool_names": ["slow", "boom"]}, ["slow", "boom"]),
        ({"read_only": True}, ["add"]),  # only ADD is marked readOnlyHint
        ({"tool_names": ["add", "slow"], "read_only": True}, ["add"]),
        ({"tool_names": ["slow"], "read_only": True}, []),
        ([], []),
    ],
)
async def test_allowed_tools_filters_what_the_model_is_offered_and_the_listing_shows(
    allowed: Any, offered: list[str]
) -> None:
    """As hosted, the ``mcp_list_tools`` item shows only the tools the filter lets
    through, the same ones the model is offered (``allowed_tools`` as a list, or as
    ``{"tool_names", "read_only"}``)."""
    setup = Setup([answer()])
    run = await setup.create([{**MCP_TOOL, "allowed_tools": allowed}])
    listed = run.state.output[0]
    assert [t["name"] for t in listed["tools"]] == offered
    assert re.fullmatch(r"mcpl_f_[0-9a-f]{16}_[0-9a-f]{48}", listed["id"])  # under a filter
    assert [t["name"] for t in setup.backend.requests[0].tools] == [f"docs__{n}" for n in offered]


def offered_names(setup: Setup) -> list[str]:
    return [t["name"] for t in setup.backend.requests[-1].tools]


async def test_a_later_turn_with_a_wider_filter_lists_again_and_can_call_what_was_held_back() -> (
    None
):
    """The first turn's listing shows only ``add``; a later turn allowing every tool may
    offer ones no earlier item showed, so it lists the server again and shows them in a
    new ``mcp_list_tools`` item, and the model can call them."""
    setup = Setup([answer(), tools_round(call("docs__slow", {"seconds": 0})), answer("slept")])
    first = await setup.create([{**MCP_TOOL, "allowed_tools": ["add"]}])
    assert [t["name"] for t in first.state.output[0]["tools"]] == ["add"]
    second = await setup.create([MCP_TOOL], previous_response_id=first.state.id)
    assert len(setup.mcp.listed) == 2
    listed, slept, _ = second.state.output
    assert listed["type"] == "mcp_list_tools"
    assert [t["name"] for t in listed["tools"]] == ["add", "slow", "boom"]
    assert is_id(listed["id"], "mcpl")  # made under no filter
    assert (slept["type"], slept["name"], slept["status"]) == ("mcp_call", "slow", "completed")
    assert offered_names(setup) == ["docs__add", "docs__slow", "docs__boom"]


@pytest.mark.parametrize(
    "later",
    [
        {"tool_names": ["add", "boom"]},  # names one the listing held back
        {"read_only": True},  # names none: may offer any read-only tool
    ],
)
async def test_a_later_filter_that_may_offer_what_a_filtered_listing_held_back_lists_again(
    later: dict[str, Any],
) -> None:
    setup = Setup([answer(), answer()])
    first = await setup.create([{**MCP_TOOL, "allowed_tools": ["add"]}])
    second = await setup.create(
        [{**MCP_TOOL, "allowed_tools": later}], previous_response_id=first.state.id
    )
    assert len(setup.mcp.listed) == 2
    listed = second.state.output[0]
    offered = [n for n in ["add", "boom"] if n in later.get("tool_names", ["add"])]
    assert [t["name"] for t in listed["tools"]] == offered
    assert offered_names(setup) == [f"docs__{n}" for n in offered]


@pytest.mark.parametrize(
    ("earlier", "later", "offered"),
    [
        (["add", "slow"], ["add", "slow"], ["add", "slow"]),  # the same filter
        (["add", "slow"], ["slow"], ["slow"]),  # a narrower one
        (["add", "slow"], {"tool_names": ["add", "slow"], "read_only": True}, ["add"]),
        (None, ["boom"], ["boom"]),  # an unfiltered listing shows every tool
        (None, {"read_only": True}, ["add"]),
        (None, None, ["add", "slow", "boom"]),
    ],
)
async def test_a_later_turn_whose_tools_a_listing_shows_reuses_it_without_a_new_item(
    earlier: Any, later: Any, offered: list[str]
) -> None:
    setup = Setup([answer(), answer()])
    first = await setup.create([{**MCP_TOOL, "allowed_tools": earlier}])
    second = await setup.create(
        [{**MCP_TOOL, "allowed_tools": later}], previous_response_id=first.state.id
    )
    assert len(setup.mcp.listed) == 1
    assert [i["type"] for i in second.state.output] == ["message"]
    assert offered_names(setup) == [f"docs__{n}" for n in offered]


@pytest.mark.parametrize(
    "allowed",
    [
        {"read_only": True},  # names no tool
        ["add", "gone"],  # names one the server does not have
        {"tool_names": ["gone"]},
    ],
)
async def test_a_later_turn_under_the_same_filter_reuses_its_listing(allowed: Any) -> None:
    """A filter no listing can show in full (it names no tool, or one the server lacks)
    is listed once per chain all the same: the same filter offers what its listing
    showed."""
    setup = Setup([answer(), answer(), answer()])
    first = await setup.create([{**MCP_TOOL, "allowed_tools": allowed}])
    second = await setup.create(
        [{**MCP_TOOL, "allowed_tools": allowed}], previous_response_id=first.state.id
    )
    shown = [t["name"] for t in first.state.output[0]["tools"]]
    assert len(setup.mcp.listed) == 1
    assert [i["type"] for i in second.state.output] == ["message"]
    assert offered_names(setup) == [f"docs__{n}" for n in shown]


async def test_a_later_turn_reuses_the_last_listing_of_the_chain() -> None:
    """Narrowed, widened (listed again), narrowed again: the third turn reuses the second
    turn's unfiltered listing."""
    setup = Setup([answer(), answer(), answer()])
    narrow = {**MCP_TOOL, "allowed_tools": ["add"]}
    first = await setup.create([narrow])
    second = await setup.create([MCP_TOOL], previous_response_id=first.state.id)
    third = await setup.create(
        [{**MCP_TOOL, "allowed_tools": ["boom"]}], previous_response_id=second.state.id
    )
    assert len(setup.mcp.listed) == 2
    assert [i["type"] for i in third.state.output] == ["message"]
    assert offered_names(setup) == ["docs__boom"]


async def test_a_wider_turn_whose_listing_fails_offers_what_the_chain_showed() -> None:
    setup = Setup([answer(), answer()])
    first = await setup.create([{**MCP_TOOL, "allowed_tools": ["add"]}])
    setup.mcp.unreachable = frozenset({"docs"})
    second = await setup.create([MCP_TOOL], previous_response_id=first.state.id)
    assert "unreachable" in second.state.output[0]["error"]
    assert offered_names(setup) == ["docs__add"]


async def test_a_later_turn_reuses_the_chains_listing_instead_of_listing_again() -> None:
    setup = Setup([tools_round(call("docs__add", {"a": 1, "b": 1})), answer(), answer("again")])
    first = await setup.create([MCP_TOOL])
    second = await setup.create([MCP_TOOL], previous_response_id=first.state.id)
    assert len(setup.mcp.listed) == 1
    assert [i["type"] for i in second.state.output] == ["message"]
    assert [t["name"] for t in setup.backend.requests[-1].tools][:1] == ["docs__add"]


async def test_an_approval_stops_the_turn_and_an_approving_answer_runs_the_call() -> None:
    setup = Setup([tools_round(call("docs__add", {"a": 4, "b": 4})), answer("eight")])
    ask = {"type": "mcp", "server_label": "docs", "require_approval": "always"}
    first = await setup.create([ask])
    request = first.state.output[-1]
    assert first.state.status == "completed"
    assert request["type"] == "mcp_approval_request"
    assert request["arguments"] == '{"a":4,"b":4}'
    assert setup.mcp.calls == []
    approve = {
        "type": "mcp_approval_response",
        "approval_request_id": request["id"],
        "approve": True,
    }
    second = await setup.create([ask], [approve], previous_response_id=first.state.id)
    mcp_call, message = second.state.output
    assert mcp_call["type"] == "mcp_call"
    assert mcp_call["approval_request_id"] == request["id"]
    assert mcp_call["output"] == "8"
    assert message["content"][0]["text"] == "eight"
    seen = model_items(setup.backend.requests[-1].items)
    call_item = next(i for i in seen if i["type"] == "function_call")
    output = next(i for i in seen if i["type"] == "function_call_output")
    assert call_item["call_id"] == output["call_id"] == request["id"]


async def test_a_streamed_approving_answer_is_announced_once_its_row_is_written() -> None:
    """The approved call runs before the first round, the response announced before it:
    only once the in-progress row is in the store."""
    setup = Setup([tools_round(call("docs__add", {"a": 4, "b": 4})), answer("eight")])
    ask = {"type": "mcp", "server_label": "docs", "require_approval": "always"}
    first = await setup.create([ask])
    request = first.state.output[-1]
    announced: list[tuple[str, int]] = []  # each save, and the events emitted before it

    def saved(record: Any) -> None:
        run = setup.gateway.runs.get(record.id)
        announced.append((record.status, -1 if run is None else len(run.events)))

    setup.store.on_save = saved
    approve = {"type": "mcp_approval_response", "approval_request_id": request["id"]}
    second = await setup.create(
        [ask], [{**approve, "approve": True}], previous_response_id=first.state.id, stream=True
    )
    assert [i["type"] for i in second.state.output] == ["mcp_call", "message"]
    assert announced[0] == ("in_progress", 0)


async def test_a_response_read_while_its_approved_call_runs_shows_that_call() -> None:
    """The approved call runs before the first round: a read of the response meanwhile
    shows it, in progress."""
    rounds = [tools_round(call("docs__slow", {"seconds": 10})), answer()]
    setup = Setup(rounds, policy=ToolPolicy(timeout=30))
    ask = {"type": "mcp", "server_label": "docs", "require_approval": "always"}
    first = await setup.create([ask])
    request = first.state.output[-1]
    approve = {"type": "mcp_approval_response", "approval_request_id": request["id"]}
    command = CreateResponse(
        model="m",
        input=[{**approve, "approve": True}],
        previous_response_id=first.state.id,
        stream=True,
        settings=GenerationSettings(tools=[ask]),
    )
    run = await setup.gateway.execute(Principal(), command)
    await setup.mcp.called.wait()
    live = await setup.gateway.execute(Principal(), GetResponse(run.id))
    assert [(i["type"], i["status"]) for i in live.output] == [("mcp_call", "in_progress")]
    run.cancel()
    await run.wait()


async def test_a_denied_call_is_not_run_and_the_model_is_told() -> None:
    mcp = FakeMcp({"remote": [ADD]}, {"add": add})
    setup = Setup([tools_round(call("remote__add", {"a": 4, "b": 4})), answer("no")], mcp=mcp)
    ask = {"type": "mcp", "server_label": "remote", "server_url": "http://allowed.test/mcp"}
    # a server the request names itself needs approval unless it says otherwise (as hosted)
    first = await setup.create([ask])
    request = first.state.output[-1]
    deny = {"type": "mcp_approval_response", "approval_request_id": request["id"], "approve": False}
    await setup.create([ask], [deny], previous_response_id=first.state.id)
    assert setup.mcp.calls == []
    assert (
        seen_by_model(setup.backend.requests[-1])["output"]
        == "The user declined to run this tool call."
    )


async def test_a_denial_stands_when_a_later_turn_approves_the_same_request() -> None:
    mcp = FakeMcp({"remote": [ADD]}, {"add": add})
    setup = Setup(
        [tools_round(call("remote__add", {"a": 4, "b": 4})), answer("no"), answer("still no")],
        mcp=mcp,
    )
    ask = {"type": "mcp", "server_label": "remote", "server_url": "http://allowed.test/mcp"}
    first = await setup.create([ask])
    request_id = first.state.output[-1]["id"]
    answer_to = {"type": "mcp_approval_response", "approval_request_id": request_id}
    denied = await setup.create(
        [ask], [{**answer_to, "approve": False}], previous_response_id=first.state.id
    )
    again = await setup.create(
        [ask], [{**answer_to, "approve": True}], previous_response_id=denied.state.id
    )
    assert setup.mcp.calls == []
    assert [i["type"] for i in again.state.output] == ["message"]
    told = [i for i in model_items(setup.backend.requests[-1].items) if "output" in i]
    assert [i["output"] for i in told] == ["The user declined to run this tool call."]


async def test_web_search_emits_its_call_with_sources_and_cites_them() -> None:
    hits = [SearchHit("Stateway", "https://stateway.test/docs", "A gateway.")]
    search = FakeSearch(hits)
    setup = Setup(
        [
            tools_round(call("web_search", {"query": "what is stateway"})),
            answer("See https://stateway.test/docs."),
        ],
        search=search,
    )
    run = await setup.create(
        [{"type": "web_search", "filters": {"allowed_domains": ["stateway.test"]}}]
    )
    ws, message = run.state.output
    assert ws["type"] == "web_search_call"
    assert ws["status"] == "completed"
    assert ws["action"]["query"] == "what is stateway"
    assert ws["action"]["sources"][0]["url"] == "https://stateway.test/docs"
    assert search.queries[0].allowed_domains == ("stateway.test",)
    [citation] = message["content"][0]["annotations"]
    assert citation["type"] == "url_citation"
    assert citation["url"] == "https://stateway.test/docs"
    text = message["content"][0]["text"]
    assert text[citation["start_index"] : citation["end_index"]] == citation["url"]
    assert kinds(run.events)[2:6] == [
        "ItemAdded:web_search_call",
        "web_search_call.in_progress",
        "web_search_call.searching",
        "web_search_call.completed",
    ]
    assert "A gateway." in seen_by_model(setup.backend.requests[1])["output"]


async def test_each_citation_is_announced_in_order_before_its_text_is_done() -> None:
    """One ``AnnotationAdded`` per annotation of the message's text part, numbered as
    the part holds them, after its last delta and before its ``TextDone``."""
    hits = [SearchHit("A", "https://a.test/x", "a"), SearchHit("B", "https://b.test/y", "b")]
    text = "See https://b.test/y, then https://a.test/x."
    setup = Setup(
        [tools_round(call("web_search", {"query": "q"})), answer(text)], search=FakeSearch(hits)
    )
    run = await setup.create([{"type": "web_search"}])
    message = run.state.output[1]
    annotations = message["content"][0]["annotations"]
    assert [a["url"] for a in annotations] == ["https://b.test/y", "https://a.test/x"]
    added = [e for e in run.events if isinstance(e, ev.AnnotationAdded)]
    assert added == [
        ev.AnnotationAdded(1, 0, message["id"], at, annotation)
        for at, annotation in enumerate(annotations)
    ]
    done = run.events.index(ev.TextDone(1, 0, message["id"], text, None))
    last_delta = max(i for i, e in enumerate(run.events) if isinstance(e, ev.TextDelta))
    assert all(last_delta < run.events.index(e) < done for e in added)


async def test_the_answer_after_a_mixed_round_cites_its_search() -> None:
    """The search ran in the response that returned the client's call; the client's
    output continues that turn, and the answer naming a hit cites it as if one response
    had done both. A search of an earlier turn is not cited."""
    hits = [SearchHit("Stateway", "https://stateway.test/docs", "A gateway.")]
    client_tool = {"type": "function", "name": "local", "parameters": {"type": "object"}}
    tools = [{"type": "web_search"}, client_tool]
    named = "See https://stateway.test/docs."
    setup = Setup(
        [
            tools_round(call("web_search", {"query": "q"}), call("local", {}, index=1)),
            answer(named),
            answer(named),
        ],
        search=FakeSearch(hits),
    )
    first = await setup.create(tools)
    local = first.state.output[1]
    output = {"type": "function_call_output", "call_id": local["call_id"], "output": "ok"}
    second = await setup.create(tools, [output], previous_response_id=first.state.id)
    [message] = second.state.output
    [citation] = message["content"][0]["annotations"]
    assert citation["url"] == "https://stateway.test/docs"
    third = await setup.create(tools, [user("again")], previous_response_id=second.state.id)
    assert third.state.output[0]["content"][0]["annotations"] == []


async def test_a_failed_search_is_a_failed_call_the_model_sees() -> None:
    setup = Setup(
        [tools_round(call("web_search", {"query": "q"})), answer()],
        search=FakeSearch([], fail=True),
    )
    run = await setup.create([{"type": "web_search"}])
    assert run.state.output[0]["status"] == "failed"
    assert "503" in seen_by_model(setup.backend.requests[1])["output"]


async def test_a_cancelled_response_closes_its_running_calls_as_incomplete() -> None:
    setup = Setup(
        [tools_round(call("docs__slow", {"seconds": 30})), answer()], policy=ToolPolicy(timeout=60)
    )
    command = CreateResponse(
        model="m", input=[user()], settings=GenerationSettings(tools=[MCP_TOOL])
    )
    run = await setup.gateway.execute(Principal(), command)
    await asyncio.wait_for(setup.mcp.called.wait(), 5)
    run.cancel(CancelReason.CLIENT_GONE)
    await run.wait()
    mcp_call = run.state.output[1]
    assert mcp_call["status"] == "incomplete"
    done = [e for e in run.events if isinstance(e, ev.ItemDone) and e.item["type"] == "mcp_call"]
    assert len(done) == 1


@pytest.mark.parametrize(
    ("tool", "param", "code"),
    [
        (
            {"type": "mcp", "server_label": "other", "server_url": "http://10.0.0.1/mcp"},
            "tools[0].server_url",
            "mcp_server_not_allowed",
        ),
        ({"type": "mcp", "server_label": "nope"}, "tools[0].server_label", "invalid_value"),
        ({"type": "web_search"}, "tools[0].type", "unsupported_tool_type"),
    ],
)
async def test_gateway_tools_it_cannot_run_are_refused_before_the_run(
    tool: dict[str, Any], param: str, code: str
) -> None:
    setup = Setup([answer()])
    with pytest.raises(InvalidRequest) as caught:
        await setup.create([tool])
    assert (caught.value.param, caught.value.code) == (param, code)
    assert setup.backend.requests == []


async def test_an_allowed_url_is_used_with_its_headers_which_are_never_stored_or_echoed() -> None:
    setup = Setup([answer()], mcp=FakeMcp({"remote": [ADD]}, {"add": add}))
    tool = {
        "type": "mcp",
        "server_label": "remote",
        "server_url": "http://allowed.test/mcp",
        "headers": {"Authorization": "Bearer secret"},
    }
    run = await setup.create([tool])
    [server] = setup.mcp.listed
    assert server.headers == (("Authorization", "Bearer secret"),)
    assert "headers" not in run.state.settings.tools[0]
    [record] = setup.store.records.values()
    assert b"secret" not in orjson.dumps(record.body)


async def test_a_web_search_hint_without_a_provider_is_neither_offered_nor_echoed() -> None:
    setup = Setup([answer()])
    run = await setup.create([{"type": "web_search", "external_web_access": False}])
    assert run.state.settings.tools == []
    assert setup.backend.requests[0].tools == []


async def test_more_mcp_servers_than_allowed_are_refused() -> None:
    setup = Setup([answer()], policy=ToolPolicy(max_mcp_servers=1))
    second = {"type": "mcp", "server_label": "b", "server_url": "http://allowed.test/b"}
    with pytest.raises(InvalidRequest) as caught:
        await setup.create([MCP_TOOL, second])
    assert caught.value.code == "too_many_tools"


async def test_a_server_listing_more_tools_than_allowed_fails_its_listing() -> None:
    setup = Setup([answer()], policy=ToolPolicy(max_discovered_tools=2))
    run = await setup.create([MCP_TOOL])
    listed = run.state.output[0]
    assert "at most 2" in listed["error"]
    assert setup.backend.requests[0].tools == []


async def test_a_bad_arguments_string_is_a_failed_call_not_a_failed_response() -> None:
    broken = ToolCallDelta(0, "up_0", "docs__add", '{"a": 1,')
    setup = Setup([tools_round(broken), answer()])
    run = await setup.create([MCP_TOOL])
    assert run.state.status == "completed"
    assert run.state.output[1]["error"] == {
        "type": "mcp_protocol_error",
        "code": -32602,
        "message": "The arguments are not valid JSON.",
    }
    assert setup.mcp.calls == []


async def test_an_approval_for_a_server_not_declared_again_fails_that_call() -> None:
    mcp = FakeMcp({"remote": [ADD]}, {"add": add})
    setup = Setup([tools_round(call("remote__add", {"a": 1, "b": 1})), answer()], mcp=mcp)
    ask = {"type": "mcp", "server_label": "remote", "server_url": "http://allowed.test/mcp"}
    first = await setup.create([ask])
    request = first.state.output[-1]
    approve = {
        "type": "mcp_approval_response",
        "approval_request_id": request["id"],
        "approve": True,
    }
    second = await setup.create([], [approve], previous_response_id=first.state.id)
    failed = second.state.output[0]
    assert failed["type"] == "mcp_call"
    assert failed["status"] == "failed"
    assert failed["error"]["code"] == -32602
    assert "not declared in this request" in failed["error"]["message"]
    assert mcp.calls == []


async def unoffered(label: str, tool: McpTool, called: str) -> tuple[Setup, Any]:
    """A request declaring ``label``'s server, which lists ``add`` and ``tool``, with
    only ``add`` allowed; the model calls ``called`` (``tool``'s name as it knows it)."""
    mcp = FakeMcp({label: [ADD, tool] if tool is not ADD else [ADD]}, {"add": add})
    setup = Setup([tools_round(call(called, {"a": 1, "b": 2})), answer("sorry")], mcp=mcp)
    ask = {
        "type": "mcp",
        "server_label": label,
        "server_url": "http://allowed.test/mcp",
        "require_approval": "never",
        "allowed_tools": ["other"] if tool is ADD else ["add"],
    }
    return setup, await setup.create([ask])


@pytest.mark.parametrize(
    ("label", "tool", "called"),
    [
        ("remote", ADD, "remote__add"),
        # a label with a space and a dotted name: both respelled in the name called
        ("my files", DOTTED, model_name("read.all", "my files")),
    ],
)
async def test_a_declared_server_s_tool_not_offered_fails_instead_of_going_to_the_client(
    label: str, tool: McpTool, called: str
) -> None:
    """The model calls a tool of a declared server that this request does not offer (not
    in its ``allowed_tools``, or unlisted): the call fails without running under the
    tool's own name, the model is told why, and the client gets no ``function_call`` it
    never declared."""
    setup, run = await unoffered(label, tool, called)
    assert setup.mcp.calls == []
    failed = next(i for i in run.state.output if i["type"] == "mcp_call")
    assert (failed["server_label"], failed["name"], failed["status"]) == (
        label,
        tool.name,
        "failed",
    )
    assert f"does not offer the tool '{tool.name}'" in failed["error"]["message"]
    assert not [i for i in run.state.output if i["type"] == "function_call"]
    assert run.state.output[-1]["type"] == "message"
    assert "does not offer" in seen_by_model(setup.backend.requests[-1])["output"]


async def test_a_tool_not_offered_beside_a_client_function_of_its_name_is_known_apart() -> None:
    """The client's function ``docs__boom`` holds that name, so the server ``docs``'s tool
    ``boom`` (listed, not allowed) is the model's ``gateway_docs__boom``, as its earlier
    calls are shown: a call of that fails as the tool's, and one of ``docs__boom`` is the
    client's."""
    mine = {"type": "function", "name": "docs__boom", "parameters": {"type": "object"}}
    narrowed = {**MCP_TOOL, "allowed_tools": ["add"]}
    calls = [call("gateway_docs__boom", {}), call("docs__boom", {"x": 1}, index=1)]
    setup = Setup([tools_round(*calls), answer()])
    run = await setup.create([mine, narrowed])
    assert setup.mcp.calls == []
    failed, client_call = (i for i in run.state.output if i["type"] != "mcp_list_tools")
    assert (failed["type"], failed["name"], failed["status"]) == ("mcp_call", "boom", "failed")
    assert "does not offer the tool 'boom'" in failed["error"]["message"]
    assert (client_call["type"], client_call["name"]) == ("function_call", "docs__boom")


@pytest.mark.parametrize("called_by", ["mcp_call", "mcp_approval_request"])
async def test_a_tool_an_earlier_turn_called_but_no_longer_listed_fails_by_its_own_name(
    called_by: str,
) -> None:
    """The model calls again a tool an earlier turn called (or asked approval for) that
    the server no longer lists: the call fails under the tool's own name (known from the
    earlier item; the name the model calls is respelled and cannot be read back), never
    reaching the client as a function it did not declare. A server the request does not
    declare is not the gateway's: its name goes to the client as any other."""
    called = model_name("read.all", "my files")
    undeclared = model_name("x.y", "elsewhere")  # a server this request does not declare
    mcp = FakeMcp({"my files": [ADD]}, {"add": add})
    rounds = [tools_round(call(called, {}), call(undeclared, {}, 1)), answer("sorry")]
    setup = Setup(rounds, mcp=mcp)
    ask = {
        "type": "mcp",
        "server_label": "my files",
        "server_url": "http://allowed.test/mcp",
        "require_approval": "never",
    }
    earlier = {
        "type": called_by,
        "id": "mcp_earlier",
        "server_label": "my files",
        "name": "read.all",
        "arguments": "{}",
    }
    other = {**earlier, "id": "mcp_other", "server_label": "elsewhere", "name": "x.y"}
    run = await setup.create([ask], [user(), other, earlier, user()])
    assert setup.mcp.calls == []
    [failed] = [i for i in run.state.output if i["type"] == "mcp_call"]
    assert (failed["server_label"], failed["name"], failed["status"]) == (
        "my files",
        "read.all",
        "failed",
    )
    calls = [i["name"] for i in run.state.output if i["type"] == "function_call"]
    assert calls == [undeclared], "only the undeclared server's name is the client's"


async def test_a_later_round_shows_a_gateway_call_by_the_name_the_model_called() -> None:
    """The client's function ``docs__add`` holds that name, so the server's ``add`` is the
    model's ``gateway_docs__add``: the next round shows the model its call under that
    name (as every backend renders the context, with the round's names), not as a call
    of the client's function."""
    mine = {"type": "function", "name": "docs__add", "parameters": {"type": "object"}}
    setup = Setup([tools_round(call("gateway_docs__add", {"a": 1, "b": 2})), answer()])
    run = await setup.create([mine, MCP_TOOL])
    assert [i["type"] for i in run.state.output] == ["mcp_list_tools", "mcp_call", "message"]
    second = setup.backend.requests[1]
    made, result = model_items(second.items, names=second.names)[-2:]
    assert (made["name"], result["output"]) == ("gateway_docs__add", "3")


async def test_a_round_failing_after_a_gateway_calls_round_fails_the_response_shown() -> None:
    """The first round's call ran and was shown; the second round fails before any output.
    The client has been shown output, so it is answered the failed response (with that
    output), not the error alone."""
    rounds = [tools_round(call("docs__add", {"a": 1, "b": 2})), [UpstreamError("cut")]]
    setup = Setup(rounds)  # type: ignore[arg-type]
    run = await setup.create([MCP_TOOL])
    assert run.state.status == "failed"
    assert [i["type"] for i in run.state.output] == ["mcp_list_tools", "mcp_call"]
    assert run.error is None


@pytest.mark.parametrize("stream", [False, True])
async def test_a_hidden_round_failing_after_a_gateway_call_ran_is_told_not_to_retry(
    stream: bool,
) -> None:
    """A Chat or Messages client, shown nothing of the gateway's call, is answered the
    error alone; the SDK would retry that 502, making the call (its side effects) again:
    the answer says not to (``x-should-retry: false``)."""
    rounds = [tools_round(call("docs__slow", {"seconds": 0})), [UpstreamError("cut")]]
    setup = Setup(rounds)  # type: ignore[arg-type]
    run = await setup.create([MCP_TOOL], hidden_rounds=True, stream=stream)
    assert run.state.status == "failed"
    assert len(setup.mcp.calls) == 1
    assert (run.error.status, run.error.retryable) == (502, False)
    assert run.error.headers == {"x-should-retry": "false"}


async def test_a_hidden_round_failing_after_a_read_only_call_may_be_retried() -> None:
    """The server marks the tool read-only (``readOnlyHint``): calling it again changes
    nothing."""
    rounds = [tools_round(call("docs__add", {"a": 1, "b": 2})), [UpstreamError("cut")]]
    setup = Setup(rounds)  # type: ignore[arg-type]
    run = await setup.create([MCP_TOOL], hidden_rounds=True)
    assert len(setup.mcp.calls) == 1
    assert run.error.retryable


async def test_a_hidden_round_failing_before_any_gateway_call_ran_may_be_retried() -> None:
    """Tools listed (no call ran yet): the same request sent again repeats nothing."""
    setup = Setup([[UpstreamError("down")]])  # type: ignore[list-item]
    run = await setup.create([MCP_TOOL], hidden_rounds=True)
    assert run.error.retryable
    assert "x-should-retry" not in run.error.headers


async def test_a_response_not_stored_after_a_gateway_call_ran_is_told_not_to_retry() -> None:
    """Its final save failed: the client is answered 503 in its place, which the SDK
    would retry, running the call again."""
    setup = Setup([tools_round(call("docs__slow", {"seconds": 0})), answer()])
    setup.store.fail_final = True
    run = await setup.create([MCP_TOOL])
    assert (run.error.code, run.error.status) == ("storage_unavailable", 503)
    assert run.error.headers == {"x-should-retry": "false"}


async def test_approved_calls_count_toward_max_tool_calls() -> None:
    two = tools_round(call("docs__add", {"a": 1, "b": 1}), call("docs__add", {"a": 2, "b": 2}, 1))
    setup = Setup([two, answer("done")])
    ask = {"type": "mcp", "server_label": "docs", "require_approval": "always"}
    first = await setup.create([ask], settings={"max_tool_calls": 1})
    requests = [i for i in first.state.output if i["type"] == "mcp_approval_request"]
    assert len(requests) == 2
    approvals = [
        {"type": "mcp_approval_response", "approval_request_id": r["id"], "approve": True}
        for r in requests
    ]
    second = await setup.create(
        [ask], approvals, previous_response_id=first.state.id, settings={"max_tool_calls": 1}
    )
    ran, refused = [i for i in second.state.output if i["type"] == "mcp_call"]
    assert (ran["status"], ran["output"]) == ("completed", "2")
    assert refused["status"] == "failed"
    assert "max_tool_calls" in refused["error"]["message"]
    assert len(setup.mcp.calls) == 1


async def test_an_output_over_max_output_bytes_fails_the_call_and_the_model_is_told() -> None:
    async def long_text(arguments: Mapping[str, Any]) -> str:
        return "é" * arguments["n"]  # two bytes each

    mcp = FakeMcp({"docs": [ADD]}, {"add": long_text})
    setup = Setup(
        [
            tools_round(call("docs__add", {"n": 512}), call("docs__add", {"n": 513}, 1)),
            answer(),
        ],
        mcp=mcp,
        policy=ToolPolicy(max_output_bytes=1024),
    )
    run = await setup.create([MCP_TOOL])
    kept, refused = [i for i in run.state.output if i["type"] == "mcp_call"]
    assert kept["output"] == "é" * 512, "1024 bytes: at the cap, kept"
    assert refused["status"] == "failed"
    assert refused["output"] is None
    assert refused["error"]["code"] == -32010
    assert refused["error"]["message"].startswith(
        "MCP server 'docs' answered the call of 'add' with 1026 bytes of output; at most 1024"
    )
    assert "1026 bytes" in seen_by_model(setup.backend.requests[-1])["output"]


async def test_an_error_result_over_max_output_bytes_fails_by_its_size_too() -> None:
    """A tool's ``isError`` result is as much the server's answer as an output: past the
    cap, its content is neither stored, echoed nor read by the model."""

    async def long_error(arguments: Mapping[str, Any]) -> str:
        text = "é" * arguments["n"]  # two bytes each
        raise ToolFailure(ToolError.execution([{"type": "text", "text": text}], text))

    mcp = FakeMcp({"docs": [ADD]}, {"add": long_error})
    setup = Setup(
        [
            tools_round(call("docs__add", {"n": 512}), call("docs__add", {"n": 513}, 1)),
            answer(),
        ],
        mcp=mcp,
        policy=ToolPolicy(max_output_bytes=1024),
    )
    run = await setup.create([MCP_TOOL])
    kept, refused = [i for i in run.state.output if i["type"] == "mcp_call"]
    assert kept["error"] == {
        "type": "mcp_tool_execution_error",
        "content": [{"type": "text", "text": "é" * 512}],
    }, "1024 bytes: at the cap, kept"
    assert refused["status"] == "failed"
    assert refused["error"]["type"] == "mcp_protocol_error"
    assert refused["error"]["code"] == -32010
    assert refused["error"]["message"].startswith(
        "MCP server 'docs' answered the call of 'add' with an error of 1026 bytes; at most 1024"
    )
    assert "é" * 513 not in orjson.dumps(run.state.output).decode()
    assert "1026 bytes" in seen_by_model(setup.backend.requests[-1])["output"]


async def test_an_allowed_tools_choice_narrows_every_round_and_forces_only_the_first() -> None:
    setup = Setup([tools_round(call("docs__add", {"a": 1, "b": 2})), answer("3")])
    function = {"type": "function", "name": "other", "parameters": {"type": "object"}}
    choice = {
        "type": "allowed_tools",
        "mode": "required",
        "tools": [{"type": "mcp", "server_label": "docs", "name": "add"}],
    }
    run = await setup.create([MCP_TOOL, function], settings={"tool_choice": choice})

    assert run.state.status == "completed"
    first, second = setup.backend.requests
    assert [t["name"] for t in first.tools] == ["docs__add"]
    assert [t["name"] for t in second.tools] == ["docs__add"]
    assert (first.tool_choice, second.tool_choice) == ("required", "auto")


async def test_a_failed_round_announces_no_gateway_call_it_never_announced() -> None:
    """Parallel calls interleaved: the gateway's call is held while the client's is
    written, and the upstream fails. The held call was never announced (``ItemAdded``),
    so the failure does not announce it done either: every done event has its added one
    before it, at its own output index."""
    client_tool = {"type": "function", "name": "local", "parameters": {"type": "object"}}
    cut = [
        ToolCallDelta(0, "up_0", "local", '{"a"'),
        call("docs__add", {"a": 1, "b": 2}, index=1),
        UpstreamError("cut"),
    ]
    setup = Setup([cut])  # type: ignore[list-item]
    run = await setup.create([MCP_TOOL, client_tool])

    assert run.state.status == "failed"
    added = {e.output_index for e in run.events if isinstance(e, ev.ItemAdded)}
    done = [e.output_index for e in run.events if isinstance(e, ev.ItemDone)]
    assert set(done) <= added, kinds(run.events)
    progress = {e.output_index for e in run.events if isinstance(e, ev.ToolProgress)}
    assert progress <= added
    cut_off = run.state.output[1:]
    assert [i["type"] for i in cut_off] == ["function_call", "mcp_call"]
    assert {i["status"] for i in cut_off} == {"incomplete"}
