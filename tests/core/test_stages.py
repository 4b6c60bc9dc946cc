"""Feature stages: order, policies, re-validation, the shipped stages."""

from __future__ import annotations

from typing import Any

import orjson
import pytest

from stateway.core.commands import CountTokens, CreateResponse
from stateway.core.conversations.commands import CreateConversation
from stateway.core.errors import InvalidRequest
from stateway.core.gateway import Gateway
from stateway.core.generation_settings import GenerationSettings
from stateway.core.inference import Finish, TextDelta
from stateway.core.loop import Loop
from stateway.core.principal import Principal
from stateway.core.run_registry import RunRegistry
from stateway.core.stages.chain import Stage, StageChain, StageFailed, before_planning
from stateway.core.stages.context import POINTS, StageContext
from stateway.core.stages.shipped import ParamClamp, ToolFilter
from stateway.core.tools.toolset import ConfiguredServer, GatewayTools, ToolPolicy
from tests.core.conversation_fakes import MemoryConversations, TurnStore
from tests.core.fakes import MemoryStore, RoundsBackend
from tests.core.routing_fakes import Named, candidate, gateway, route, router
from tests.core.tools.test_tool_loop import DOCS, MCP_TOOL, answer, call, fake_mcp, tools_round

USER = {"type": "message", "role": "user", "content": [{"type": "input_text", "text": "hi"}]}
OK = [TextDelta("fine"), Finish("stop")]


class Recorder:
    def __init__(self, seen: list[str]) -> None:
        self.seen = seen

    def __getattr__(self, point: str) -> Any:
        if point not in POINTS:
            raise AttributeError(point)

        async def handle(context: StageContext) -> None:
            self.seen.append(context.point)

        return handle


class Breaking:
    """Fails at ``point`` by raising ``error`` (or by leaving a bad max_output_tokens)."""

    def __init__(self, point: str, error: Exception | None) -> None:
        self.point, self.error = point, error

    def __getattr__(self, point: str) -> Any:
        if point != self.point:
            raise AttributeError(point)

        def handle(context: StageContext) -> None:
            if self.error is not None:
                raise self.error
            assert context.command is not None
            context.command.settings.max_output_tokens = -1

        return handle


async def run_with(*stages: Stage, backend: Named | None = None, **settings: Any) -> Any:
    backend = backend or Named("a", OK)
    chain = StageChain(list(stages))
    assistant = route(candidate(backend), stages=chain)
    store = MemoryStore()
    command = CreateResponse("assistant", [USER], settings=GenerationSettings(**settings))
    run = await gateway(router(assistant), store).execute(Principal(), command)
    await run.wait()
    return run, backend, store


async def test_points_run_in_their_fixed_order() -> None:
    seen: list[str] = []
    run, _, _ = await run_with(Stage("rec", Recorder(seen)))
    assert run.state.status == "completed"
    assert seen == list(POINTS)  # one output item: one response_part


@pytest.mark.parametrize("error", [RuntimeError("boom"), None])
async def test_fail_open_skips_the_stage_and_undoes_its_mutation(error: Exception | None) -> None:
    breaking = Stage("b", Breaking("request_shaping", error), "open")
    run, backend, _ = await run_with(breaking, max_output_tokens=50)
    assert run.state.status == "completed"
    assert backend.requests[0].settings.max_output_tokens == 50


@pytest.mark.parametrize("error", [RuntimeError("boom"), None])
async def test_fail_closed_refuses_with_a_500_naming_the_stage(error: Exception | None) -> None:
    breaking = Stage("b", Breaking("request_shaping", error), "closed")
    with pytest.raises(StageFailed) as refused:
        await run_with(breaking)
    assert refused.value.status == 500
    assert "'b'" in refused.value.message


async def test_a_deliberate_refusal_is_answered_as_raised() -> None:
    refusal = InvalidRequest("Not today.", param="input", code="policy_refused")
    with pytest.raises(InvalidRequest) as refused:
        await run_with(Stage("gate", Breaking("submit_request", refusal)))
    assert refused.value.code == "policy_refused"


async def test_a_completion_gate_fails_the_response_before_it_is_stored() -> None:
    gate = Stage("gate", Breaking("completion_gate", RuntimeError("no")), "closed")
    run, _, store = await run_with(gate)
    assert run.state.status == "failed"
    assert run.state.error["code"] == "stage_failed"
    assert store.records[("default", run.id)].status == "failed"
    open_gate = Stage("gate", Breaking("completion_gate", RuntimeError("no")), "open")
    run, _, _ = await run_with(open_gate)
    assert run.state.status == "completed"


async def test_shipped_stages_filter_tools_and_clamp_tokens() -> None:
    tools = [
        {"type": "function", "name": "keep", "parameters": {"type": "object"}},
        {"type": "function", "name": "rm_rf", "parameters": {"type": "object"}},
    ]
    run, backend, _ = await run_with(
        Stage("tool_filter", ToolFilter(deny=["rm_rf"])),
        Stage("param_clamp", ParamClamp(max_output_tokens=100)),
        tools=tools,
        max_output_tokens=500,
    )
    [request] = backend.requests
    assert [t["name"] for t in request.tools] == ["keep"]
    assert request.settings.max_output_tokens == 100
    assert [t["name"] for t in run.state.settings.tools] == ["keep"]
    _, smaller, _ = await run_with(
        Stage("param_clamp", ParamClamp(max_output_tokens=100)), max_output_tokens=20
    )
    assert smaller.requests[0].settings.max_output_tokens == 20
    allow = ToolFilter(allow=["keep"])
    context = StageContext("tool_catalog_filter", "r", tools=[*tools, {"type": "web_search"}])
    allow.tool_catalog_filter(context)
    assert [t.get("name", t["type"]) for t in context.tools] == ["keep", "web_search"]
    with pytest.raises(ValueError, match="positive"):
        ParamClamp(max_output_tokens=0)


async def test_the_tool_filter_sees_earlier_turns_tools_but_they_stay_out_of_the_command() -> None:
    """Shown after the declared tools, the tools the context's items offer go on being
    offered from those items: one the stages leave as it was is no declaration of the
    request's; one they change is (their version of it)."""

    def named(name: str) -> dict[str, Any]:
        return {"type": "function", "name": name}

    class Rewrite:
        def tool_catalog_filter(self, context: StageContext) -> None:
            context.tools = [
                {**tool, "description": "x"} if tool["name"] == "changed" else tool
                for tool in context.tools
                if tool["name"] != "gone"
            ]

    keep = named("keep")
    command = CreateResponse("r", [USER], settings=GenerationSettings(tools=[keep]))
    earlier = [named("more"), named("changed"), named("gone")]
    chain = StageChain([Stage("rewrite", Rewrite())])
    shaped = await before_planning(chain, "r", command, first_turn=False, earlier=earlier)
    assert [tool["name"] for tool in shaped.tools] == ["keep", "more", "changed"]
    assert command.settings.tools == [keep, {**named("changed"), "description": "x"}]


async def test_an_earlier_turns_tool_a_stage_copies_unchanged_stays_out_of_the_command() -> None:
    """A stage may hand back copies of the tools it leaves (a policy service answering
    them as JSON, a deep copy): an earlier turn's tool it did not change is still no
    declaration of the request's, to echo and store."""

    class PolicyService:
        def tool_catalog_filter(self, context: StageContext) -> None:
            kept = [tool for tool in context.tools if tool["name"] != "gone"]
            context.tools = orjson.loads(orjson.dumps(kept))

    keep = {"type": "function", "name": "keep"}
    command = CreateResponse("r", [USER], settings=GenerationSettings(tools=[keep]))
    earlier = [{"type": "function", "name": "more"}, {"type": "function", "name": "gone"}]
    chain = StageChain([Stage("policy", PolicyService())])
    shaped = await before_planning(chain, "r", command, first_turn=False, earlier=earlier)
    assert [tool["name"] for tool in shaped.tools] == ["keep", "more"]
    assert command.settings.tools == [keep]


async def test_route_hints_put_a_backend_first_in_its_tier() -> None:
    class Hint:
        def route_hinting(self, context: StageContext) -> None:
            context.hints.append("b")

    a, b = Named("a", OK), Named("b", OK)
    chain = StageChain([Stage("hint", Hint())])
    assistant = route(candidate(a, weight=100), candidate(b), stages=chain)
    gw = gateway(router(assistant))
    for _ in range(5):
        run = await gw.execute(Principal(), CreateResponse("assistant", [USER]))
        await run.wait()
    assert len(b.requests) == 5
    assert a.requests == []


async def test_session_open_runs_on_the_first_turn_of_a_chain_or_conversation_only() -> None:
    opened: list[tuple[str, str | None]] = []

    class Opener:
        def session_open(self, context: StageContext) -> None:
            assert context.command is not None
            opened.append((context.route, context.command.conversation_id))

    conversations = MemoryConversations()
    store = TurnStore(conversations)
    backend = Named("a", OK)
    assistant = route(candidate(backend), stages=StageChain([Stage("open", Opener())]))
    gw = Gateway(store, router(assistant), Loop(store), RunRegistry(), conversations=conversations)

    async def turn(**fields: Any) -> str:
        run = await gw.execute(Principal(), CreateResponse("assistant", [USER], **fields))
        await run.wait()
        assert run.state.status == "completed"
        return run.id

    first = await turn()
    assert opened == [("assistant", None)]  # the route's name, as configured
    await turn(previous_response_id=first)
    assert len(opened) == 1
    empty = await gw.execute(Principal(), CreateConversation())
    await turn(conversation_id=empty.id)
    assert opened[1:] == [("assistant", empty.id)]
    await turn(conversation_id=empty.id)  # its second turn
    assert len(opened) == 2


async def test_each_round_hands_on_its_own_items_and_the_gate_sees_the_whole_response() -> None:
    """A gateway tool's round, then the answer: ``response_part`` is given each item a
    round produced, once (the tool listing comes before the rounds), and
    ``completion_gate`` the finished response; both are told their route's name."""
    parts: list[tuple[str, str]] = []
    gated: list[tuple[str, str, list[str]]] = []

    class Watcher:
        def response_part(self, context: StageContext) -> None:
            assert context.item is not None
            parts.append((context.route, context.item["type"]))

        def completion_gate(self, context: StageContext) -> None:
            state = context.state
            gated.append((context.route, state.status, [i["type"] for i in state.output]))

    backend = RoundsBackend([tools_round(call("docs__add", {"a": 1, "b": 2})), answer()])
    assistant = route(candidate(backend), stages=StageChain([Stage("watch", Watcher())]))
    store = MemoryStore()
    tools = GatewayTools(
        mcp=fake_mcp(), servers={"docs": ConfiguredServer(DOCS)}, policy=ToolPolicy(timeout=5)
    )
    loop = Loop(store, tools=tools)
    gw = Gateway(store, router(assistant), loop, RunRegistry())
    command = CreateResponse("assistant", [USER], settings=GenerationSettings(tools=[MCP_TOOL]))
    run = await gw.execute(Principal(), command)
    await run.wait()

    assert run.state.status == "completed"
    assert parts == [("assistant", "mcp_call"), ("assistant", "message")]
    assert gated == [("assistant", "completed", ["mcp_list_tools", "mcp_call", "message"])]


class Instructing:
    """Adds its own instructions at ``request_shaping``, as a policy prompt would; keeps
    whether each call was a count."""

    def __init__(self) -> None:
        self.counting: list[bool] = []

    def request_shaping(self, context: StageContext) -> None:
        assert context.command is not None
        context.command.instructions = "Never delete anything."
        self.counting.append(context.counting)


async def test_a_count_counts_what_the_stages_leave_as_a_run_is_sent_it() -> None:
    """``input_tokens`` / ``count_tokens``: the tools a stage withholds are not counted (an
    earlier turn's ``additional_tools`` item offering one, neither), and what it adds is."""
    backend = Named("a", OK)
    backend.carries_unknown_types = True  # speaks Responses: takes the additional_tools item
    instructing = Instructing()
    chain = StageChain(
        [Stage("tool_filter", ToolFilter(deny=["rm_rf"])), Stage("prompt", instructing)]
    )
    routing = router(route(candidate(backend), stages=chain))
    keep = {"type": "function", "name": "keep", "parameters": {"type": "object"}}
    rm_rf = {"type": "function", "name": "rm_rf", "parameters": {"type": "object"}}
    extra = {"type": "additional_tools", "role": "developer", "tools": [rm_rf]}
    settings = GenerationSettings(tools=[keep, rm_rf])
    count = CountTokens(CreateResponse("assistant", [extra, USER], store=False, settings=settings))
    await gateway(routing).execute(Principal(), count)
    [request] = backend.counted
    assert [tool["name"] for tool in request.tools] == ["keep"]
    assert "rm_rf" not in str(request.items)
    assert request.instructions == "Never delete anything."
    assert instructing.counting == [True]  # told, so that it may skip what a run has
    await gateway(routing).execute(Principal(), count.request)
    assert instructing.counting == [True, False]
