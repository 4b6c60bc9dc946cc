"""A function tool a route's ``tool_filter`` stage withholds (declared, or offered by the
items of earlier turns: ``additional_tools``, a tool search's output), called by the model
anyway (a server without grammar-constrained calls writes any name it saw), through the
real process over each upstream API shape: no frontend's client ever gets that call (it
would run it); the model is told the tool is not available, in a round the client does
not see, and answers."""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
from anthropic import Anthropic
from openai import OpenAI

from tests.e2e.configured import RunningGateway
from tests.e2e.routing import fake_requests, routed_gateway

ARGS = {"path": "/"}
REFUSED = "Tool said: Error: the tool 'rm_rf' is not available; this call was not run."


def _config(upstream: str) -> str:
    text = ""
    for api in ("chat", "responses", "anthropic"):
        text += f'[[backends]]\nname = "{api}"\nurl = "{upstream}"\napi = "{api}"\n'
    for api in ("chat", "responses", "anthropic"):
        text += (
            f'[[routes]]\nname = "guarded-{api}"\n'
            f'[[routes.candidates]]\nbackend = "{api}"\nmodel = "m-{api}"\n'
            '[[routes.stages]]\nname = "tool_filter"\noptions = { deny = ["rm_rf"] }\n'
        )
    return text


@pytest.fixture(scope="module")
def guarded(
    fake_upstream: str, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[RunningGateway]:
    with routed_gateway(tmp_path_factory.mktemp("withheld"), _config(fake_upstream)) as gateway:
        yield gateway


@pytest.fixture(params=["chat", "responses", "anthropic"])
def route(request: pytest.FixtureRequest) -> str:
    """The guarded route over an upstream of this API shape."""
    return f"guarded-{request.param}"


@pytest.fixture
def sdk(guarded: RunningGateway) -> Iterator[OpenAI]:
    with OpenAI(base_url=guarded.url + "/v1", api_key="x", max_retries=0) as client:
        yield client


@pytest.fixture
def claude(guarded: RunningGateway) -> Iterator[Anthropic]:
    with Anthropic(base_url=guarded.url, api_key="x", max_retries=0) as client:
        yield client


def _function(name: str) -> dict[str, Any]:
    return {"type": "function", "name": name, "parameters": {"type": "object", "properties": {}}}


def _prompt(mark: str, *names: str) -> str:
    calls = "".join(f"[[tool:{name}:{json.dumps(ARGS)}]]" for name in names)
    return f"{mark} clean up {calls}"


def _refusal_round(upstream: str, mark: str) -> dict[str, Any]:
    """The second request the model got: the one answering its call of ``rm_rf``."""
    first, second = fake_requests(upstream, mark)
    assert "rm_rf" not in json.dumps(first["body"].get("tools"))  # never offered
    return second


@pytest.mark.parametrize("stream", [False, True])
def test_a_responses_client_never_gets_a_withheld_call(
    sdk: OpenAI, route: str, stream: bool, fake_upstream: str
) -> None:
    mark = uuid.uuid4().hex[:12]
    tools: Any = [_function("keep"), _function("rm_rf")]
    if stream:
        with sdk.responses.stream(model=route, input=_prompt(mark, "rm_rf"), tools=tools) as events:
            seen = list(events)
            answer = events.get_final_response()
        items = [e.item.type for e in seen if e.type.startswith("response.output_item.")]
        assert items == ["message", "message"]  # added, done
        assert not any(e.type.startswith("response.function_call") for e in seen)
    else:
        answer = sdk.responses.create(model=route, input=_prompt(mark, "rm_rf"), tools=tools)
    assert answer.status == "completed"
    assert [item.type for item in answer.output] == ["message"]
    assert answer.output_text == REFUSED
    assert sdk.responses.retrieve(answer.id).output_text == REFUSED  # stored as answered
    assert "rm_rf" in json.dumps(_refusal_round(fake_upstream, mark)["body"])


def test_a_responses_client_gets_its_other_calls_of_the_round(
    sdk: OpenAI, route: str, fake_upstream: str
) -> None:
    mark = uuid.uuid4().hex[:12]
    tools: Any = [_function("keep"), _function("rm_rf")]
    answer = sdk.responses.create(model=route, input=_prompt(mark, "rm_rf", "keep"), tools=tools)
    assert [(item.type, getattr(item, "name", None)) for item in answer.output] == [
        ("function_call", "keep")
    ]
    assert len(fake_requests(fake_upstream, mark)) == 1  # the client answers the rest


def _chat_tool(name: str) -> dict[str, Any]:
    return {"type": "function", "function": {"name": name, "parameters": {"type": "object"}}}


@pytest.mark.parametrize("stream", [False, True])
def test_a_chat_client_never_gets_a_withheld_call(
    sdk: OpenAI, route: str, stream: bool, fake_upstream: str
) -> None:
    mark = uuid.uuid4().hex[:12]
    request: dict[str, Any] = {
        "model": route,
        "messages": [{"role": "user", "content": _prompt(mark, "rm_rf")}],
        "tools": [_chat_tool("keep"), _chat_tool("rm_rf")],
    }
    if stream:
        chunks = list(sdk.chat.completions.create(**request, stream=True))
        assert not any(c.choices[0].delta.tool_calls for c in chunks if c.choices)
        text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
        finish = [c.choices[0].finish_reason for c in chunks if c.choices][-1]
    else:
        completion = sdk.chat.completions.create(**request)
        assert completion.choices[0].message.tool_calls is None
        text = completion.choices[0].message.content or ""
        finish = completion.choices[0].finish_reason
    assert (text, finish) == (REFUSED, "stop")
    assert "rm_rf" in json.dumps(_refusal_round(fake_upstream, mark)["body"])


@pytest.mark.parametrize("stream", [False, True])
def test_a_messages_client_never_gets_a_withheld_call(
    claude: Anthropic, route: str, stream: bool, fake_upstream: str
) -> None:
    mark = uuid.uuid4().hex[:12]
    schema: dict[str, Any] = {"type": "object", "properties": {}}
    request: dict[str, Any] = {
        "model": route,
        "max_tokens": 1024,
        "messages": [{"role": "user", "content": _prompt(mark, "rm_rf")}],
        "tools": [
            {"name": "keep", "input_schema": schema},
            {"name": "rm_rf", "input_schema": schema},
        ],
    }
    if stream:
        with claude.messages.stream(**request) as events:
            seen = list(events)
            message = events.get_final_message()
        blocks = [e.content_block.type for e in seen if e.type == "content_block_start"]
        assert blocks == ["text"]
        assert not any(e.type == "input_json" for e in seen)
    else:
        message = claude.messages.create(**request)
    assert [block.type for block in message.content] == ["text"]
    assert message.content[0].text == REFUSED  # type: ignore[union-attr]
    assert message.stop_reason == "end_turn"
    assert "rm_rf" in json.dumps(_refusal_round(fake_upstream, mark)["body"])


def _offered_in(request: dict[str, Any]) -> str:
    """The tools an upstream request offered, as JSON (each wire's shape)."""
    return json.dumps(request["body"].get("tools"))


def test_a_tool_an_earlier_turn_s_additional_tools_offer_is_withheld_too(
    sdk: OpenAI, route: str, fake_upstream: str
) -> None:
    """The stages see the tools earlier turns' ``additional_tools`` items offer: withheld
    there, ``rm_rf`` is neither offered in a later turn nor its call the client's."""
    mark = uuid.uuid4().hex[:12]
    extra: Any = {"type": "additional_tools", "role": "developer", "tools": [_function("rm_rf")]}
    tools: Any = [_function("keep")]
    first = sdk.responses.create(
        model=route, input=[extra, {"role": "user", "content": f"{mark} hi"}], tools=tools
    )
    assert first.status == "completed"
    [asked] = fake_requests(fake_upstream, mark)  # nor offered in the turn that brings it
    assert "rm_rf" not in _offered_in(asked)
    assert [tool.name for tool in first.tools] == ["keep"]  # type: ignore[union-attr]
    later = uuid.uuid4().hex[:12]
    answer = sdk.responses.create(
        model=route, previous_response_id=first.id, input=_prompt(later, "rm_rf"), tools=tools
    )
    assert [item.type for item in answer.output] == ["message"]
    assert answer.output_text == REFUSED
    asked, refused = fake_requests(fake_upstream, later)
    assert "rm_rf" not in _offered_in(asked)
    assert "keep" in _offered_in(asked)
    assert "rm_rf" in json.dumps(refused["body"])


def test_a_tool_a_client_s_tool_search_loads_is_withheld_too(
    sdk: OpenAI, route: str, fake_upstream: str
) -> None:
    """A client's tool search (as Codex runs its own) answering with a withheld tool loads
    nothing the stages withheld: in the request that brings its answer or any later one."""
    tools: Any = [_function("keep"), {"type": "tool_search", "execution": "client"}]
    search = f'{uuid.uuid4().hex[:12]} [[tool:tool_search:{{"query":"files"}}]]'
    first = sdk.responses.create(model=route, input=search, tools=tools)
    [searched] = first.output
    assert searched.type == "tool_search_call"
    mark = uuid.uuid4().hex[:12]
    loaded = {
        "type": "tool_search_output",
        "call_id": searched.call_id,
        "execution": "client",
        "tools": [_function("rm_rf"), {**_function("lookup"), "description": mark}],
    }
    second = sdk.responses.create(
        model=route, previous_response_id=first.id, input=[loaded], tools=tools
    )
    assert second.status == "completed"  # nor is the model told the search loaded it
    assert second.output_text == "Tool said: Loaded tools: lookup. They can be called now."
    [asked] = fake_requests(fake_upstream, mark)
    assert "rm_rf" not in _offered_in(asked)
    assert "lookup" in _offered_in(asked)  # what the stage left of the search is loaded
    [kept] = sdk.responses.input_items.list(second.id).data  # stored as sent
    assert [tool.name for tool in kept.tools] == ["rm_rf", "lookup"]  # type: ignore[union-attr]
    later = uuid.uuid4().hex[:12]
    third = sdk.responses.create(
        model=route, previous_response_id=second.id, input=_prompt(later, "rm_rf"), tools=tools
    )
    assert [item.type for item in third.output] == ["message"]
    assert third.output_text == REFUSED
    asked, _ = fake_requests(fake_upstream, later)
    assert "rm_rf" not in _offered_in(asked)
    assert "lookup" in _offered_in(asked)


NATIVE_CALLS: dict[str, dict[str, Any]] = {
    "shell": {"type": "shell_call", "call_id": "call_sh", "action": {"commands": ["rm -rf /"]}},
    "local_shell": {
        "type": "local_shell_call",
        "call_id": "call_lsh",
        "action": {"type": "exec", "command": ["rm", "-rf", "/"]},
    },
    "apply_patch": {
        "type": "apply_patch_call",
        "call_id": "call_ap",
        "operation": {"type": "delete_file", "path": "main.py"},
    },
    "computer": {"type": "computer_call", "call_id": "call_cu", "action": {"type": "click"}},
    "rm_rf": {"type": "custom_tool_call", "call_id": "call_ct", "name": "rm_rf", "input": "/"},
}
"""A Responses upstream's whole call items, each of a tool the request has but the stages
withheld (``rm_rf``) or does not have at all (the others): the client would run each."""


def _native(mark: str, tool: str) -> str:
    return f"{mark} clean up [[item:{json.dumps({**NATIVE_CALLS[tool], 'status': 'completed'})}]]"


def _not_available(tool: str) -> str:
    return f"Tool said: Error: the tool '{tool}' is not available; this call was not run."


@pytest.mark.parametrize("stream", [False, True])
@pytest.mark.parametrize("tool", sorted(NATIVE_CALLS))
def test_a_responses_upstream_s_call_of_a_tool_not_offered_never_reaches_the_client(
    sdk: OpenAI, tool: str, stream: bool, fake_upstream: str
) -> None:
    mark = uuid.uuid4().hex[:12]
    tools: Any = [_function("keep"), _function("rm_rf")]
    request: dict[str, Any] = {"model": "guarded-responses", "input": _native(mark, tool)}
    if stream:
        with sdk.responses.stream(**request, tools=tools) as events:
            seen = list(events)
            answer = events.get_final_response()
        items = [e.item.type for e in seen if e.type.startswith("response.output_item.")]
        assert items == ["message", "message"]  # added, done
    else:
        answer = sdk.responses.create(**request, tools=tools)
    assert [item.type for item in answer.output] == ["message"]
    assert answer.output_text == _not_available(tool)
    first, second = fake_requests(fake_upstream, mark)
    assert "rm_rf" not in _offered_in(first)
    assert NATIVE_CALLS[tool]["call_id"] in json.dumps(second["body"]["input"])


def test_a_withheld_custom_call_streamed_in_pieces_shows_none_of_them(
    sdk: OpenAI, fake_upstream: str
) -> None:
    """Begun, its input streamed, then whole: none of it is shown, and it is answered."""
    mark = uuid.uuid4().hex[:12]
    tools: Any = [_function("keep"), _function("rm_rf")]
    prompt = "[[pieces]]" + _native(mark, "rm_rf")
    with sdk.responses.stream(model="guarded-responses", input=prompt, tools=tools) as events:
        seen = list(events)
        answer = events.get_final_response()
    assert not [e for e in seen if e.type.startswith("response.custom_tool_call_input")]
    items = [e.item.type for e in seen if e.type.startswith("response.output_item.")]
    assert items == ["message", "message"]
    assert answer.output_text == _not_available("rm_rf")


def test_a_chat_or_messages_client_never_gets_a_native_call_of_a_tool_not_offered(
    sdk: OpenAI, claude: Anthropic
) -> None:
    mark = uuid.uuid4().hex[:12]
    completion = sdk.chat.completions.create(
        model="guarded-responses",
        messages=[{"role": "user", "content": _native(mark, "shell")}],
        tools=[_chat_tool("keep")],
    )
    assert completion.choices[0].message.tool_calls is None
    assert completion.choices[0].message.content == _not_available("shell")
    message = claude.messages.create(
        model="guarded-responses",
        max_tokens=1024,
        messages=[{"role": "user", "content": _native(mark, "apply_patch")}],
    )
    assert [block.type for block in message.content] == ["text"]
    assert message.content[0].text == _not_available("apply_patch")  # type: ignore[union-attr]


def test_a_native_call_of_a_tool_offered_reaches_the_client(sdk: OpenAI) -> None:
    shell: Any = {"type": "shell", "environment": {"type": "local"}}
    answer = sdk.responses.create(
        model="guarded-responses", input=_native(uuid.uuid4().hex[:12], "shell"), tools=[shell]
    )
    assert [item.type for item in answer.output] == ["shell_call"]


def test_a_count_counts_no_tool_the_stages_withhold(
    sdk: OpenAI, claude: Anthropic, fake_upstream: str
) -> None:
    """``count_tokens`` and ``/v1/responses/input_tokens`` run the route's stages as a run
    does: the upstream is asked to count only what the model would be offered."""
    mark = uuid.uuid4().hex[:12]
    schema: dict[str, Any] = {"type": "object", "properties": {}}
    claude.messages.count_tokens(
        model="guarded-anthropic",
        messages=[{"role": "user", "content": f"{mark} hi"}],
        tools=[{"name": "keep", "input_schema": schema}, {"name": "rm_rf", "input_schema": schema}],
    )
    sdk.responses.input_tokens.count(
        model="guarded-anthropic",
        input=f"{mark} hi",
        tools=[_function("keep"), _function("rm_rf")],  # type: ignore[list-item]
    )
    counts = fake_requests(fake_upstream, mark)
    assert len(counts) == 2
    assert [[tool["name"] for tool in asked["body"]["tools"]] for asked in counts] == [["keep"]] * 2


UPSTREAM_APPROVAL = {
    "type": "mcp_approval_request",
    "id": "mcpr_up",
    "server_label": "deepwiki",
    "name": "ask_question",
    "arguments": '{"repoName":"x"}',
}
"""Hosted's request to approve a call of an ``mcp`` tool: one the gateway never sent it."""


@pytest.mark.parametrize("stream", [False, True])
def test_a_responses_upstream_s_own_approval_request_never_reaches_the_client(
    sdk: OpenAI, stream: bool, fake_upstream: str
) -> None:
    """An approval the client could give would run nothing here (the server is none it
    declared through the gateway) nor reach the upstream: the model is told the tool is
    not available, in a round the client does not see, and answers."""
    mark = uuid.uuid4().hex[:12]
    request: dict[str, Any] = {
        "model": "guarded-responses",
        "input": f"{mark} look it up [[item:{json.dumps(UPSTREAM_APPROVAL)}]]",
        "tools": [_function("keep")],
    }
    if stream:
        with sdk.responses.stream(**request) as events:
            seen = list(events)
            answer = events.get_final_response()
        assert "mcpr_up" not in repr(seen)
    else:
        answer = sdk.responses.create(**request)
    assert [item.type for item in answer.output] == ["message"]
    assert answer.output_text == _not_available("deepwiki__ask_question")
    first, second = fake_requests(fake_upstream, mark)
    assert '"mcp"' not in _offered_in(first)
    assert [(i["type"], i.get("call_id")) for i in second["body"]["input"][-2:]] == [
        ("function_call", "mcpr_up"),
        ("function_call_output", "mcpr_up"),
    ]
