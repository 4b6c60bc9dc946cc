"""The OpenAI Agents SDK (``openai-agents``, pinned in the ``dev`` extra) as a client: agents
built with it run through the real gateway in front of the fake model, offline on loopback,
over both upstream API shapes. Function tools over rounds, streamed, with the chain kept on
the gateway (``auto_previous_response_id``); a handoff; a conversation session; a hosted
MCP tool (a real MCP server built with the ``mcp`` SDK) and its approval; a function a
tool search loads, which the SDK finds only by the shape hosted returns its calls in; and
the hosted ``apply_patch`` tool, whose patches the SDK applies to its files."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass
from typing import Any

import openai
import pytest
from agents import (
    Agent,
    ApplyPatchOperation,
    ApplyPatchResult,
    ApplyPatchTool,
    HostedMCPTool,
    OpenAIConversationsSession,
    OpenAIResponsesModel,
    RunConfig,
    Runner,
    RunResult,
    RunResultStreaming,
    ToolSearchTool,
    apply_diff,
    function_tool,
    set_tracing_disabled,
)
from openai import AsyncOpenAI

from stateway.launch import start_gateway
from tests.support.mcp_server import serve_mcp

set_tracing_disabled(True)  # the SDK would export traces to OpenAI: never, offline
NO_TRACES = RunConfig(tracing_disabled=True)


@dataclass
class Setup:
    url: str
    mcp_url: str
    api: str


@pytest.fixture(scope="module", params=["chat", "responses"])
def setup(
    request: pytest.FixtureRequest, fake_upstream: str, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Setup]:
    database = f"sqlite:///{tmp_path_factory.mktemp('agents') / 'stateway.db'}"
    args = ["--upstream", fake_upstream, "--upstream-api", request.param, "--database", database]
    with (
        serve_mcp() as server,
        start_gateway(args, env={"STATEWAY_MCP_ALLOWED_HOSTS": "127.0.0.1"}) as url,
    ):
        yield Setup(url, server.url, request.param)


@pytest.fixture
async def sdk(setup: Setup) -> AsyncIterator[AsyncOpenAI]:
    async with AsyncOpenAI(base_url=setup.url + "/v1", api_key="sk-test", max_retries=0) as sdk:
        yield sdk


def agent(sdk: AsyncOpenAI, **kwargs: Any) -> Agent[Any]:
    model = OpenAIResponsesModel(model="fake-model", openai_client=sdk)
    return Agent(
        name=kwargs.pop("name", "Assistant"), instructions="Be brief.", model=model, **kwargs
    )


looked_up: list[str] = []


@function_tool
def lookup(key: str) -> str:
    """The value of a key."""
    looked_up.append(key)
    return f"value-of-{key}"


@function_tool(defer_loading=True)
def get_weather(city: str) -> str:
    """Current weather for a city."""
    return f"sunny in {city}"


async def streamed(run: RunResultStreaming) -> list[str]:
    """Consume a streamed run; the names of its item events."""
    return [e.name async for e in run.stream_events() if e.type == "run_item_stream_event"]


async def test_function_tools_over_rounds_streamed_with_the_chain_on_the_gateway(
    sdk: AsyncOpenAI,
) -> None:
    looked_up.clear()
    assistant = agent(sdk, tools=[lookup])
    prompt = 'My name is Ada. [[tool:lookup:{"key":"k"}]][[rounds:2]]'
    run = Runner.run_streamed(
        assistant, prompt, run_config=NO_TRACES, auto_previous_response_id=True
    )
    names = await streamed(run)
    assert run.final_output == "Tool said: value-of-k"
    assert looked_up == ["k", "k"]
    assert names == ["tool_called", "tool_output"] * 2 + ["message_output_created"]
    assert run.last_response_id is not None
    later = await Runner.run(
        assistant, "[[echo]]", run_config=NO_TRACES, previous_response_id=run.last_response_id
    )
    transcript = str(later.final_output)
    assert transcript.count('assistant->lookup({"key":"k"})') == 2
    assert "assistant: Tool said: value-of-k" in transcript


async def test_a_handoff_hands_the_conversation_to_the_other_agent(sdk: AsyncOpenAI) -> None:
    billing = agent(sdk, name="Billing", handoff_description="Billing questions")
    triage = agent(sdk, name="Triage", handoffs=[billing])
    run = await Runner.run(
        triage, "Refund me [[tool:transfer_to_billing:{}]]", run_config=NO_TRACES
    )
    assert run.last_agent.name == "Billing"
    assert run.final_output == 'Tool said: {"assistant": "Billing"}'


async def test_a_conversation_session_keeps_the_history_on_the_gateway(sdk: AsyncOpenAI) -> None:
    session = OpenAIConversationsSession(openai_client=sdk)
    assistant = agent(sdk, tools=[lookup])
    await Runner.run(
        assistant, '[[tool:lookup:{"key":"a"}]]', session=session, run_config=NO_TRACES
    )
    later = await Runner.run(assistant, "[[echo]]", session=session, run_config=NO_TRACES)
    assert 'assistant->lookup({"key":"a"})' in str(later.final_output)
    kinds = [item.get("type") for item in await session.get_items()]
    assert kinds == ["message", "function_call", "function_call_output"] + ["message"] * 3
    await session.clear_session()


async def test_a_hosted_mcp_tool_runs_on_the_gateway_once_approved(
    sdk: AsyncOpenAI, setup: Setup
) -> None:
    mcp = HostedMCPTool(
        tool_config={
            "type": "mcp",
            "server_label": "calc",
            "server_url": setup.mcp_url,
            "require_approval": "always",
        }
    )
    assistant = agent(sdk, tools=[mcp])
    prompt = '[[tool:calc__add:{"a":2,"b":3}]]'
    asked = await Runner.run(assistant, prompt, run_config=NO_TRACES)
    [approval] = asked.interruptions
    assert approval.raw_item.name == "add"  # type: ignore[union-attr]
    state = asked.to_state()
    state.approve(approval)
    run = Runner.run_streamed(assistant, state, run_config=NO_TRACES)
    assert await streamed(run) == ["mcp_approval_response", "tool_called", "message_output_created"]
    assert run.final_output == "Tool said: 5"


@pytest.mark.parametrize("chained", [True, False])
async def test_a_function_a_tool_search_loads_is_found_when_the_model_calls_it(
    sdk: AsyncOpenAI, chained: bool
) -> None:
    """Hosted gives such a call the namespace of the function's own name, and the SDK finds
    a deferred function by that only (else: 'Tool get_weather not found in agent')."""
    assistant = agent(sdk, tools=[ToolSearchTool(), get_weather])
    found = await Runner.run(
        assistant, '[[tool:tool_search:{"query":"weather"}]]', run_config=NO_TRACES
    )
    assert found.final_output == "Tool said: Loaded tools: get_weather. They can be called now."
    call = '[[tool:get_weather:{"city":"Oslo"}]]'
    run: RunResult | RunResultStreaming
    if chained:
        run = Runner.run_streamed(
            assistant, call, run_config=NO_TRACES, previous_response_id=found.last_response_id
        )
        await streamed(run)
    else:  # the whole history resent, the calls as the gateway gave them
        history = [*found.to_input_list(), {"role": "user", "content": call}]
        run = await Runner.run(assistant, history, run_config=NO_TRACES)
        resent = [*run.to_input_list(), {"role": "user", "content": "[[echo]]"}]
        transcript = (await Runner.run(assistant, resent, run_config=NO_TRACES)).final_output
        assert 'assistant->get_weather({"city":"Oslo"})' in str(transcript)
    assert run.final_output == "Tool said: sunny in Oslo"


class Files:
    """An editor of files held in memory, which the SDK's ``ApplyPatchTool`` drives."""

    def __init__(self, **files: str) -> None:
        self.files = files

    def create_file(self, operation: ApplyPatchOperation) -> ApplyPatchResult:
        self.files[operation.path] = apply_diff("", operation.diff or "", "create")
        return ApplyPatchResult(output=f"Created {operation.path}")

    def update_file(self, operation: ApplyPatchOperation) -> ApplyPatchResult:
        self.files[operation.path] = apply_diff(self.files[operation.path], operation.diff or "")
        return ApplyPatchResult(output=f"Updated {operation.path}")

    def delete_file(self, operation: ApplyPatchOperation) -> ApplyPatchResult:
        del self.files[operation.path]
        return ApplyPatchResult(output=f"Deleted {operation.path}")


async def test_the_apply_patch_tool_edits_the_agents_files(sdk: AsyncOpenAI, setup: Setup) -> None:
    """Over a Chat upstream the model calls a function the gateway offers in the tool's
    place; over a Responses upstream, the tool itself (its call is the item)."""
    files = Files(**{"app.py": "def greet():\n    print('Hi')\n"})
    operation = {
        "type": "update_file",
        "path": "app.py",
        "diff": "@@ def greet():\n-    print('Hi')\n+    print('Hello')\n",
    }
    if setup.api == "chat":
        prompt = f"[[tool:apply_patch:{json.dumps(operation)}]]"
    else:
        call = {"type": "apply_patch_call", "call_id": "call_ap", "operation": operation}
        prompt = f"[[item:{json.dumps({**call, 'status': 'completed'})}]]"
    assistant = agent(sdk, tools=[ApplyPatchTool(editor=files)])
    run = await Runner.run(assistant, prompt, run_config=NO_TRACES)
    assert files.files == {"app.py": "def greet():\n    print('Hello')\n"}
    kinds = [item.type for item in run.new_items]
    assert kinds == ["tool_call_item", "tool_call_output_item", "message_output_item"]
    told = "completed\nUpdated app.py" if setup.api == "chat" else "Updated app.py"
    assert run.final_output == f"Tool said: {told}"


async def test_a_failing_model_server_reaches_the_agent_as_the_sdks_error(
    sdk: AsyncOpenAI,
) -> None:
    with pytest.raises(openai.NotFoundError) as caught:
        await Runner.run(agent(sdk), "[[error:404]]", run_config=NO_TRACES)
    assert caught.value.code == "model_not_found"
