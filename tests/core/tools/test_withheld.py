"""Calls of tools the stages withheld: never output or announced, answered unseen, and
the model's next round told the tool is not available."""

from __future__ import annotations

import logging
from typing import Any

import orjson
import pytest

from stateway.core import events as ev
from stateway.core.assembler import OutputAssembler
from stateway.core.commands import CreateResponse
from stateway.core.generation_settings import GenerationSettings
from stateway.core.inference import Finish, OutputItem, TextDelta, ToolCallDelta, UsageReport
from stateway.core.items import Item
from stateway.core.principal import Principal
from stateway.core.stages.chain import Stage, StageChain
from stateway.core.stages.context import StageContext
from stateway.core.stages.shipped import ToolFilter
from stateway.core.tools.session import ToolSession
from stateway.core.tools.toolset import GatewayTools, Toolset, WebSearchBinding
from stateway.core.tools.withheld import (
    NOT_AVAILABLE,
    WITHHELD,
    WithheldCalls,
    unoffered,
    withheld_names,
)
from stateway.core.usage import Usage
from tests.core.fakes import MemoryStore, RoundsBackend
from tests.core.routing_fakes import candidate, gateway, route, router
from tests.core.test_telemetry import Recording
from tests.core.tools.test_tool_loop import answer, call, tools_round, user


def function(name: str) -> Item:
    return {"type": "function", "name": name, "parameters": {"type": "object"}}


KEEP, RM_RF = function("keep"), function("rm_rf")
REFUSAL = NOT_AVAILABLE.format(name="rm_rf")


def test_withheld_names_are_the_model_visible_names_no_offered_tool_has() -> None:
    namespace = {"type": "namespace", "name": "fs", "tools": [function("wipe"), function("ls")]}
    custom = {"type": "custom", "name": "exec"}
    declared = [KEEP, RM_RF, namespace, custom, {"type": "web_search"}]
    trimmed = {**namespace, "tools": [function("ls")]}
    assert withheld_names(declared, [KEEP, trimmed]) == {"rm_rf", "fs__wipe", "exec"}
    described = {**RM_RF, "description": "rewritten by a stage"}  # another dict, same name
    assert withheld_names(declared, [KEEP, described, namespace, custom]) == frozenset()


def test_answered_calls_are_woven_where_the_model_made_them() -> None:
    calls = WithheldCalls(frozenset({"rm_rf"}))
    first, second = ({"type": "message", "id": n} for n in ("m0", "m1"))
    assert calls.woven([first]) == [first]
    refused = {"type": "function_call", "call_id": "c1", "name": "rm_rf", "arguments": "{}"}
    calls.answer(1, refused)
    output = {"type": "function_call_output", "call_id": "c1", "output": REFUSAL}
    assert calls.woven([first]) == [first, refused, output]
    assert calls.woven([first, second]) == [first, refused, output, second]


def test_the_operator_is_told_of_each_withheld_call(caplog: pytest.LogCaptureFixture) -> None:
    telemetry = Recording()
    calls = WithheldCalls(frozenset({"rm_rf"}), telemetry)
    refused = {"type": "function_call", "call_id": "c1", "name": "rm_rf", "arguments": "{}"}
    with caplog.at_level(logging.WARNING, logger="stateway.core.tools.withheld"):
        calls.answer(0, refused)
        calls.answer(0, {**refused, "call_id": "c2"})
    assert telemetry.tools == [(WITHHELD, "error"), (WITHHELD, "error")]
    assert [record.getMessage() for record in caplog.records] == [
        "the model called 'rm_rf', a tool the route's stages withheld: not run"
    ] * 2


def assembler(**toolset: Any) -> tuple[OutputAssembler, ToolSession, list[Item], list[ev.Event]]:
    output: list[Item] = []
    events: list[ev.Event] = []
    tools = Toolset([], [KEEP], withheld=frozenset({"rm_rf"}), **toolset)
    session = ToolSession(GatewayTools(), tools, output, events.append)
    return OutputAssembler(output, events.append, set(), tools=session), session, output, events


def test_a_withheld_call_is_neither_output_nor_announced_and_is_answered() -> None:
    assembled, session, output, events = assembler()
    assembled.text("Cleaning up.")
    assembled.tool_call(ToolCallDelta(0, "up_0", "rm_rf", '{"path"'))
    assert assembled.output_so_far() == output  # nothing of it while it is written
    assembled.tool_call(ToolCallDelta(0, None, None, ': "/"}'))
    assembled.tool_call(ToolCallDelta(1, "up_1", "keep", "{}"))
    assembled.finish()
    assert [(item["type"], item.get("name")) for item in output] == [
        ("message", None),
        ("function_call", "keep"),
    ]
    assert [e.output_index for e in events if isinstance(e, ev.ItemAdded)] == [0, 1]
    assert not any("rm_rf" in repr(event) for event in events)
    assert assembled.refused == 1
    assert assembled.tool_calls == [output[1]]
    refused = {"type": "function_call", "call_id": "up_0", "name": "rm_rf"}
    answered = {"type": "function_call_output", "call_id": "up_0", "output": REFUSAL}
    assert session.withheld.woven(output) == [
        output[0],
        {**refused, "arguments": '{"path": "/"}'},
        answered,
        output[1],
    ]


def test_a_withheld_call_held_behind_another_is_answered_in_its_place() -> None:
    """A Chat upstream interleaving two calls' fragments: the withheld one, held while the
    client's is written, is written (unseen) after it."""
    assembled, session, output, events = assembler()
    assembled.tool_call(ToolCallDelta(0, "up_0", "keep", "{"))
    assembled.tool_call(ToolCallDelta(1, "up_1", "rm_rf", "{"))
    assembled.tool_call(ToolCallDelta(0, None, None, "}"))
    assembled.tool_call(ToolCallDelta(1, None, None, "}"))
    assembled.finish()
    assert [item["name"] for item in output] == ["keep"]
    assert assembled.refused == 1
    assert [item.get("name") for item in session.withheld.woven(output)] == [
        "keep",
        "rm_rf",
        None,
    ]
    assert not any("rm_rf" in repr(event) for event in events)


def test_a_withheld_call_cut_short_is_not_answered() -> None:
    assembled, session, output, _ = assembler()
    assembled.tool_call(ToolCallDelta(0, "up_0", "rm_rf", '{"pa'))
    assembled.finish("incomplete")
    assert (output, assembled.refused, session.withheld.woven(output)) == ([], 0, [])


def test_a_gateway_tool_offered_by_a_withheld_name_is_the_gateway_s() -> None:
    """The client's ``web_search`` function withheld, the gateway's web search is offered by
    that name: a call of it is the gateway's to run."""
    search = WebSearchBinding({"type": "web_search"})
    output: list[Item] = []
    tools = Toolset([], [], web_search=search, withheld=frozenset({"web_search"}))
    session = ToolSession(GatewayTools(), tools, output, [].append)
    assembled = OutputAssembler(output, [].append, set(), tools=session)
    assembled.tool_call(ToolCallDelta(0, "up_0", "web_search", '{"query": "x"}'))
    assembled.finish()
    assert [item["type"] for item in output] == ["web_search_call"]
    assert (len(assembled.gateway_calls), assembled.refused) == (1, 0)


def test_a_call_shown_nameless_is_never_given_a_withheld_name() -> None:
    assembled, _, output, _ = assembler()
    assembled.tool_call(ToolCallDelta(0, "up_0", None, "{"))
    assembled.tool_call(ToolCallDelta(0, None, "rm_rf", "}"))
    assembled.finish()
    assert [(item["name"], item["arguments"]) for item in output] == [("", "{}")]


async def run_guarded(rounds: list[list[Any]], **settings: Any) -> tuple[Any, RoundsBackend]:
    backend = RoundsBackend(rounds)
    backend.name = "a"
    stages = StageChain([Stage("tool_filter", ToolFilter(deny=["rm_rf"]))])
    guarded = route(candidate(backend), stages=stages)  # type: ignore[arg-type]
    tools = GenerationSettings(tools=[KEEP, RM_RF], **settings)
    command = CreateResponse("assistant", [user()], settings=tools)
    run = await gateway(router(guarded)).execute(Principal(), command)
    await run.wait()
    return run, backend


async def test_the_model_is_told_in_a_round_the_client_does_not_see() -> None:
    refused = call("rm_rf", {"path": "/"})
    run, backend = await run_guarded([[TextDelta("On it."), *tools_round(refused)], answer()])
    state = run.state
    assert state.status == "completed"
    assert [(i["type"], i["content"][0]["text"]) for i in state.output] == [
        ("message", "On it."),
        ("message", "done"),
    ]
    assert not any("rm_rf" in repr(event) for event in run.events)
    first, second = backend.requests
    assert [t["name"] for t in first.tools] == ["keep"]
    assert second.items[1:] == [
        state.output[0],
        {"type": "function_call", "call_id": "up_0", "name": "rm_rf", "arguments": '{"path":"/"}'},
        {"type": "function_call_output", "call_id": "up_0", "output": REFUSAL},
    ]
    assert state.usage.output_tokens == 3  # both rounds


async def test_a_round_with_the_client_s_calls_goes_back_without_the_withheld_one() -> None:
    round_ = tools_round(call("rm_rf", {}), call("keep", {}, index=1))
    run, backend = await run_guarded([round_, answer()])
    assert run.state.status == "completed"
    assert [item["name"] for item in run.state.output] == ["keep"]
    assert len(backend.requests) == 1


async def test_a_model_that_insists_ends_at_its_rounds_with_nothing_shown() -> None:
    run, backend = await run_guarded([tools_round(call("rm_rf", {}))])
    state = run.state
    assert (state.status, state.incomplete_reason, state.output) == (
        "incomplete",
        "max_rounds",
        [],
    )
    assert len(backend.requests) == 8
    assert len(backend.requests[-1].items) == 1 + 2 * 7  # each call answered in turn


def test_the_context_offers_no_withheld_tool_and_no_search_says_it_loaded_one() -> None:
    namespace = {"type": "namespace", "name": "fs", "tools": [function("wipe"), function("ls")]}
    extra = {"type": "additional_tools", "role": "developer", "tools": [RM_RF, KEEP]}
    found = {"type": "tool_search_output", "call_id": "s1", "tools": [namespace, RM_RF]}
    context = [user(), extra, found]
    view = unoffered(context, frozenset({"rm_rf", "fs__wipe"}))
    assert view[0] is context[0]
    assert view[1] == {**extra, "tools": [KEEP]}
    assert view[2] == {**found, "tools": [{**namespace, "tools": [function("ls")]}]}
    assert found["tools"] == [namespace, RM_RF]  # what is stored stays as it came
    assert unoffered([found], frozenset({"rm_rf", "fs__wipe", "fs__ls"}))[0]["tools"] == []


async def test_the_stages_see_the_tools_of_earlier_turns_and_withhold_them_there_too() -> None:
    """An earlier turn's ``additional_tools`` offered ``rm_rf``: the stages are shown it
    beside the declared tools, and once withheld it is offered in no later turn, its
    call answered unseen; what they leave of those tools is offered, never echoed."""
    shown: list[list[str]] = []

    class Seeing:
        def tool_catalog_filter(self, context: StageContext) -> None:
            shown.append([tool["name"] for tool in context.tools])

    backend = RoundsBackend([answer(), tools_round(call("rm_rf", {})), answer()])
    backend.name = "a"
    stages = StageChain([Stage("see", Seeing()), Stage("deny", ToolFilter(deny=["rm_rf"]))])
    guarded = route(candidate(backend), stages=stages)  # type: ignore[arg-type]
    guarded_gateway = gateway(router(guarded), MemoryStore())
    extra = {"type": "additional_tools", "role": "developer", "tools": [RM_RF, function("more")]}
    first = await guarded_gateway.execute(
        Principal(),
        CreateResponse("assistant", [extra, user()], settings=GenerationSettings(tools=[KEEP])),
    )
    await first.wait()
    second = await guarded_gateway.execute(
        Principal(),
        CreateResponse(
            "assistant",
            [user("again")],
            settings=GenerationSettings(tools=[KEEP]),
            previous_response_id=first.id,
        ),
    )
    await second.wait()
    assert shown == [["keep", "rm_rf", "more"]] * 2
    offered = [[tool["name"] for tool in request.tools] for request in backend.requests]
    assert offered == [["keep", "more"]] * 3
    state = second.state
    assert [tool["name"] for tool in state.settings.tools] == ["keep"]  # the echo: its own
    assert [(item["type"], item["content"][0]["text"]) for item in state.output] == [
        ("message", "done")
    ]
    assert backend.requests[2].items[-1] == {
        "type": "function_call_output",
        "call_id": "up_0",
        "output": REFUSAL,
    }


SHELL_CALL = {"type": "shell_call", "call_id": "up_sh", "action": {"commands": ["rm -rf /"]}}
NATIVE_CALLS = {
    "shell": SHELL_CALL,
    "local_shell": {
        "type": "local_shell_call",
        "call_id": "up_lsh",
        "action": {"type": "exec", "command": ["rm", "-rf", "/"]},
    },
    "apply_patch": {
        "type": "apply_patch_call",
        "call_id": "up_ap",
        "operation": {"type": "delete_file", "path": "main.py"},
    },
    "computer": {"type": "computer_call", "call_id": "up_cu", "action": {"type": "click"}},
    "rm_rf": {"type": "custom_tool_call", "call_id": "up_ct", "name": "rm_rf", "input": "/"},
    "gone": {"type": "custom_tool_call", "call_id": "up_ct", "name": "gone", "input": "/"},
    "teleport": {"type": "teleport_call", "call_id": "up_tp", "to": "mars"},
    "gone_fn": {"type": "function_call", "call_id": "up_fc", "name": "gone_fn", "arguments": "[1]"},
    "crm__gone": {
        "type": "custom_tool_call",
        "call_id": "up_ns",
        "namespace": "crm",
        "name": "gone",
        "input": "/",
    },
}
SHOWN_AS = {
    "shell": {"commands": ["rm -rf /"]},
    "local_shell": {"command": ["rm", "-rf", "/"]},
    "apply_patch": {"type": "delete_file", "path": "main.py"},
    "computer": {"action": {"type": "click"}},
    "rm_rf": {"input": "/"},
    "gone": {"input": "/"},
    "teleport": {"to": "mars"},
    "gone_fn": [1],
    "crm__gone": {"input": "/"},
}
"""The arguments of the function call the model is shown it made, by what it asked."""


@pytest.mark.parametrize("name", sorted(NATIVE_CALLS))
def test_a_responses_upstream_s_call_of_a_tool_not_offered_is_answered_unseen(
    name: str, caplog: pytest.LogCaptureFixture
) -> None:
    """A whole call item (a ``shell_call`` and the other kinds, a whole ``function_call``)
    of a tool withheld, or never offered at all: the client would run it; the model is
    answered instead, as for a function call, under the name it would have called the tool
    by (a namespace's member by its flattened name), with the arguments it gave."""
    telemetry = Recording()
    output: list[Item] = []
    events: list[ev.Event] = []
    tools = Toolset([], [KEEP], withheld=frozenset({"rm_rf"}))
    session = ToolSession(GatewayTools(), tools, output, events.append, telemetry)
    assembled = OutputAssembler(output, events.append, set(), tools=session)
    assembled.text("Cleaning up.")
    with caplog.at_level(logging.WARNING, logger="stateway.core.tools.withheld"):
        assembled.item(NATIVE_CALLS[name])
    assembled.finish()
    assert [item["type"] for item in output] == ["message"]
    assert not any("up_" in repr(event) for event in events)
    assert (assembled.refused, assembled.tool_calls) == (1, [])
    assert telemetry.tools == [(WITHHELD, "error")]
    assert name in caplog.records[0].getMessage()
    [_, called, answered] = session.withheld.woven(output)
    assert (called["type"], called["name"]) == ("function_call", name)
    assert called["call_id"] == NATIVE_CALLS[name]["call_id"]  # the model's own call
    assert orjson.loads(called["arguments"]) == SHOWN_AS[name]
    assert answered == {
        "type": "function_call_output",
        "call_id": called["call_id"],
        "output": NOT_AVAILABLE.format(name=name),
    }


def test_a_native_call_of_a_tool_sent_as_declared_is_the_client_s() -> None:
    """Offered this round (the shell tool to an upstream that speaks Responses, a computer
    use tool by a variant of its type, a custom tool by its name): the client's call."""
    custom = {"type": "custom", "name": "exec"}
    native = [{"type": "shell", "environment": {"type": "local"}}, {"type": "computer_use_preview"}]
    output: list[Item] = []
    tools = Toolset([], [KEEP, custom], native=native, withheld=frozenset({"rm_rf"}))
    session = ToolSession(GatewayTools(), tools, output, [].append)
    assembled = OutputAssembler(output, [].append, set(), tools=session)
    computer = {"type": "computer_call", "call_id": "up_cu", "action": {"type": "click"}}
    exec_call = {"type": "custom_tool_call", "call_id": "up_ct", "name": "exec", "input": "ls"}
    image = {"type": "image_generation_call", "status": "completed", "result": "x"}
    searched = {"type": "tool_search_call", "call_id": "up_ts", "execution": "server"}
    found = {"type": "tool_search_output", "call_id": "up_ts", "tools": []}
    for item in (SHELL_CALL, computer, exec_call, image, searched, found):
        assembled.item(item)
    assembled.finish()
    assert [item["type"] for item in output] == [
        "shell_call",
        "computer_call",
        "custom_tool_call",
        "image_generation_call",
        "tool_search_call",
        "tool_search_output",  # a call_id, but no call: the search's result
    ]
    assert assembled.refused == 0


async def test_a_native_call_not_offered_gets_a_round_of_its_own() -> None:
    """Through a run: the model is asked again, told the tool is not available, and the
    client sees only the answer."""
    refused = [OutputItem(SHELL_CALL), Finish("stop"), UsageReport(Usage(3, 2))]
    run, backend = await run_guarded([refused, answer()])
    state = run.state
    assert state.status == "completed"
    assert [(i["type"], i["content"][0]["text"]) for i in state.output] == [("message", "done")]
    assert not any("up_sh" in repr(event) for event in run.events)
    _, second = backend.requests
    assert [(i["type"], i.get("name")) for i in second.items[1:]] == [
        ("function_call", "shell"),
        ("function_call_output", None),
    ]


@pytest.mark.parametrize(
    ("declared", "refused"),
    [
        ([{"type": "computer_use_preview"}], True),  # another native tool offers no shell
        ([{"type": "shell", "environment": {"type": "local"}}], False),
        ([{"type": "shell_extra"}, {"type": "computer"}], False),  # a variant of its type
    ],
)
def test_a_native_call_is_the_client_s_only_by_its_own_tool_s_type(
    declared: list[Item], refused: bool
) -> None:
    """A ``shell_call`` is the client's when a tool of the ``shell`` type (or a variant
    of it) was sent, not because some other native tool was."""
    tools = Toolset([], [KEEP], native=declared)
    session = ToolSession(GatewayTools(), tools, [], [].append)
    assert (
        session.withheld.refused_item(SHELL_CALL, session.catalog, declared) is not None
    ) is refused


UPSTREAM_APPROVAL = {
    "type": "mcp_approval_request",
    "id": "mcpr_up",
    "server_label": "deepwiki",
    "name": "ask_question",
    "arguments": '{"repoName":"x"}',
}
"""What a hosted upstream asks of an ``mcp`` tool it was given elsewhere (the gateway never
sends it one: it runs a client's MCP servers itself)."""


def test_an_upstream_s_own_approval_request_is_answered_unseen() -> None:
    """The client cannot approve it into anything the gateway could run (nor the upstream:
    no approval goes back to it), so it never reaches the client: the model is answered as
    for a call of a tool not offered, shown the function call of that server's tool."""
    output: list[Item] = []
    events: list[ev.Event] = []
    session = ToolSession(GatewayTools(), Toolset([], [KEEP]), output, events.append)
    assembled = OutputAssembler(output, events.append, set(), tools=session)
    assembled.item(UPSTREAM_APPROVAL)
    assembled.finish()
    assert output == []
    assert not any("mcpr_up" in repr(event) for event in events)
    assert (assembled.refused, assembled.tool_calls) == (1, [])
    [called, answered] = session.withheld.woven(output)
    assert called == {
        "type": "function_call",
        "call_id": "mcpr_up",
        "name": "deepwiki__ask_question",
        "arguments": '{"repoName":"x"}',
    }
    assert answered["output"] == NOT_AVAILABLE.format(name="deepwiki__ask_question")


async def test_an_upstream_s_approval_request_gets_a_round_of_its_own() -> None:
    asked = [OutputItem(UPSTREAM_APPROVAL), Finish("stop"), UsageReport(Usage(3, 2))]
    run, backend = await run_guarded([asked, answer()])
    assert run.state.status == "completed"
    assert [i["type"] for i in run.state.output] == ["message"]
    assert not any("mcpr_up" in repr(event) for event in run.events)
    _, second = backend.requests
    assert [(i["type"], i.get("call_id")) for i in second.items[1:]] == [
        ("function_call", "mcpr_up"),
        ("function_call_output", "mcpr_up"),
    ]
