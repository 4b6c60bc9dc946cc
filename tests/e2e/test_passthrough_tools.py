"""Tool and item types the gateway does not model, the shell tools, and guided decoding,
through the real gateway, the ``openai`` SDK and the fake model (whose request log shows
what was sent upstream)."""

from __future__ import annotations

import json
import urllib.request
from collections.abc import Iterator
from typing import Any

import openai
import pytest
from openai import OpenAI

from stateway.launch import start_gateway
from tests.e2e.configured import RunningGateway, configured_gateway
from tests.e2e.test_upstream_mapping import clear

MODEL = "fake-model"
IMAGE_TOOL: dict[str, Any] = {"type": "image_generation", "quality": "low", "size": "1024x1024"}
FUNCTION_TOOL: dict[str, Any] = {
    "type": "function",
    "name": "lookup",
    "parameters": {"type": "object", "properties": {}},
}
IMAGE_CALL: dict[str, Any] = {
    "type": "image_generation_call",
    "status": "completed",
    "result": "aGk=",
}


CHAT_UPSTREAMS = pytest.mark.parametrize(
    "gateway",
    ["sqlite-chat", pytest.param("postgres-chat", marks=pytest.mark.postgres)],
    indirect=True,
)
"""The gateways of the suite's matrix over a Chat upstream, for what only one has."""
RESPONSES_UPSTREAMS = pytest.mark.parametrize(
    "gateway",
    ["sqlite-responses", pytest.param("postgres-responses", marks=pytest.mark.postgres)],
    indirect=True,
)
"""The gateways of the suite's matrix over a Responses upstream, for what only one gives."""


@pytest.fixture
def api(request: pytest.FixtureRequest, gateway: str) -> str:
    """``chat`` or ``responses``: the upstream API shape of this run's gateway."""
    return str(request.node.callspec.params["gateway"]).split("-")[1]


def last_upstream_body(fake_upstream: str) -> dict[str, Any]:
    with urllib.request.urlopen(fake_upstream.removesuffix("/v1") + "/_fake/requests") as reply:
        body: dict[str, Any] = json.loads(reply.read())["data"][-1]["body"]
    return body


def test_an_unknown_tool_type_is_carried_to_a_responses_upstream_only(
    client: OpenAI, api: str, fake_upstream: str
) -> None:
    """A Chat upstream's model is not offered it (its API has no place for it), as Codex
    declares hosted tools whatever serves it: the response still echoes and stores it."""
    directive = f"draw [[item:{json.dumps(IMAGE_CALL)}]]"
    if api == "chat":
        tools: Any = [IMAGE_TOOL, FUNCTION_TOOL]
        answer = client.responses.create(model=MODEL, input="draw", tools=tools)
        assert answer.status == "completed"
        assert answer.output_text == "Hello! You said: draw"
        sent = last_upstream_body(fake_upstream)
        assert [t["function"]["name"] for t in sent["tools"]] == ["lookup"]
        assert sent["tool_choice"] == "auto"
        assert [t.type for t in answer.tools] == ["image_generation", "function"]
        assert answer.tools[0].model_dump(exclude_none=True) == IMAGE_TOOL
        stored = client.responses.retrieve(answer.id)
        assert [t.type for t in stored.tools] == ["image_generation", "function"]
        return
    with client.responses.stream(
        model=MODEL,
        input=directive,
        tools=[IMAGE_TOOL],  # type: ignore[list-item]
        tool_choice={"type": "image_generation"},
    ) as stream:
        events = list(stream)
        final = stream.get_final_response()
    sent = last_upstream_body(fake_upstream)
    assert sent["tools"] == [IMAGE_TOOL]
    assert sent["tool_choice"] == {"type": "image_generation"}
    [item] = final.output
    assert item.type == "image_generation_call"
    assert item.result == "aGk="  # type: ignore[union-attr]
    kinds = [(e.type, getattr(e, "item", None)) for e in events]
    added = [i for k, i in kinds if k == "response.output_item.added"]
    done = [i for k, i in kinds if k == "response.output_item.done"]
    assert len(added) == 1
    assert done[0].type == "image_generation_call"
    # announced as being made, as hosted and the Open Responses spec have it, then done
    # as it came
    assert (added[0].status, done[0].status) == ("in_progress", "completed")
    assert final.tools[0].type == "image_generation"
    stored = client.responses.retrieve(final.id)
    assert stored.output[0].type == "image_generation_call"


@RESPONSES_UPSTREAMS
def test_a_responses_upstreams_annotations_reach_the_client(client: OpenAI) -> None:
    """A Responses upstream's annotations (its hosted tools' citations: a file search's
    ``file_citation``, a container file's) are kept on the answer's text, streamed as the
    Open Responses stream has them (one ``response.output_text.annotation.added`` each,
    before the text is done) and stored (a Chat upstream gives none)."""
    filed = {"type": "file_citation", "file_id": "file_1", "filename": "notes.txt", "index": 0}
    cite = {"type": "url_citation", "url": "https://a.test", "title": "A", "start_index": 4}
    cite["end_index"] = 8
    message = {
        "type": "message",
        "role": "assistant",
        "status": "completed",
        "content": [{"type": "output_text", "text": "See [1].", "annotations": [filed, cite]}],
    }
    directive = f"[[item:{json.dumps(message)}]]"
    with client.responses.stream(model=MODEL, input=directive) as stream:
        events = list(stream)
        final = stream.get_final_response()
    [item] = final.output
    assert item.type == "message"
    [part] = item.content
    assert part.type == "output_text"
    assert [a.model_dump() for a in part.annotations] == [filed, cite]
    added = [e for e in events if e.type == "response.output_text.annotation.added"]
    announced = [(e.annotation_index, e.annotation and e.annotation.model_dump()) for e in added]
    assert announced == [(0, filed), (1, cite)]
    kinds = [e.type for e in events]
    assert all(events.index(e) < kinds.index("response.output_text.done") for e in added)
    stored = client.responses.retrieve(final.id).output[0]
    assert stored.type == "message"
    assert [a.model_dump() for a in stored.content[0].annotations] == [filed, cite]  # type: ignore[union-attr]
    again = client.responses.create(model=MODEL, input=directive)
    assert again.output[0].content[0].annotations == part.annotations  # type: ignore[union-attr]


def test_an_unknown_input_item_type_is_carried_to_a_responses_upstream_only(
    client: OpenAI, api: str, fake_upstream: str
) -> None:
    """A Chat upstream's model is not shown it; it is kept (listed, and in the chain a
    later turn continues, as a session switched from hosted OpenAI resends one)."""
    odd = {"type": "future_item", "id": "fi_1", "payload": {"x": [1, 2]}}
    items: Any = [odd, {"role": "user", "content": "hi"}]
    response = client.responses.create(model=MODEL, input=items)
    assert response.status == "completed"
    sent = last_upstream_body(fake_upstream)
    if api == "responses":
        assert sent["input"][0] == odd
        return
    assert sent["messages"] == [{"role": "user", "content": [{"type": "text", "text": "hi"}]}]
    listed = client.responses.input_items.list(response.id, order="asc").data
    assert listed[0].model_dump(exclude_none=True) == odd
    drawn: Any = [{**IMAGE_CALL, "id": "ig_1"}, {"role": "user", "content": "and now?"}]
    later = client.responses.create(model=MODEL, previous_response_id=response.id, input=drawn)
    assert later.output_text == "Hello! You said: and now?"
    told = last_upstream_body(fake_upstream)["messages"]
    assert [m["role"] for m in told] == ["user", "assistant", "user"]
    assert "ig_1" not in json.dumps(told)
    listed = client.responses.input_items.list(later.id, order="asc").data
    assert listed[0].model_dump()["type"] == "image_generation_call"


@CHAT_UPSTREAMS
def test_input_a_chat_upstream_s_model_is_not_shown_at_all_is_nothing_to_respond_to(
    client: OpenAI, fake_upstream: str
) -> None:
    """Its items all of types the gateway does not model, without instructions: the model
    would be sent no message; the gateway says so, naming the types, and sends nothing."""
    before = len(upstream_log(fake_upstream))
    odd: Any = [{"type": "future_item", "id": "fi_1"}, IMAGE_CALL]
    with pytest.raises(openai.BadRequestError) as caught:
        client.responses.create(model=MODEL, input=odd)
    error = caught.value.body
    assert isinstance(error, dict)
    assert (error["code"], error["param"]) == ("missing_required_parameter", "input")
    assert "'future_item'" in error["message"]
    assert "'image_generation_call'" in error["message"]
    assert len(upstream_log(fake_upstream)) == before
    told = client.responses.create(model=MODEL, input=odd, instructions="Be brief.")
    assert told.status == "completed"


def upstream_log(fake_upstream: str) -> list[dict[str, Any]]:
    with urllib.request.urlopen(fake_upstream.removesuffix("/v1") + "/_fake/requests") as reply:
        logged: list[dict[str, Any]] = json.loads(reply.read())["data"]
    return logged


def test_a_shell_call_round_trip(client: OpenAI, api: str, fake_upstream: str) -> None:
    tool: Any = {"type": "shell", "environment": {"type": "local"}}
    action = {"commands": ["ls -la", "pwd"], "timeout_ms": 1000}
    if api == "chat":
        directive = f"[[tool:shell:{json.dumps(action)}]]"
    else:  # a Responses upstream calls the tool natively
        call = {
            "type": "shell_call",
            "call_id": "call_sh1",
            "action": action,
            "status": "completed",
        }
        directive = f"[[item:{json.dumps(call)}]]"
    first = client.responses.create(model=MODEL, input=directive, tools=[tool])
    sent = last_upstream_body(fake_upstream)
    if api == "chat":
        assert [t["function"]["name"] for t in sent["tools"]] == ["shell"]
    else:
        assert sent["tools"] == [tool]
    [call_item] = first.output
    assert call_item.type == "shell_call"
    assert call_item.action.commands == ["ls -la", "pwd"]  # type: ignore[union-attr]
    assert call_item.action.timeout_ms == 1000  # type: ignore[union-attr]
    output: Any = {
        "type": "shell_call_output",
        "call_id": call_item.call_id,  # type: ignore[union-attr]
        "output": [{"stdout": "a.txt", "stderr": "", "outcome": {"type": "exit", "exit_code": 0}}],
    }
    second = client.responses.create(
        model=MODEL, previous_response_id=first.id, input=[output], tools=[tool]
    )
    assert second.status == "completed"
    sent = last_upstream_body(fake_upstream)
    if api == "chat":
        assert sent["messages"][-1]["role"] == "tool"
        assert "a.txt" in sent["messages"][-1]["content"]
        assert "exit code: 0" in sent["messages"][-1]["content"]
    else:
        assert [i["type"] for i in sent["input"][-2:]] == ["shell_call", "shell_call_output"]


@CHAT_UPSTREAMS
def test_a_shell_output_without_an_exit_code_is_told_without_one(
    client: OpenAI, fake_upstream: str
) -> None:
    """The Agents SDK sends ``exit_code: null`` when its executor reports none: the model
    is told the output, not Python's ``None`` as an exit code (a Responses upstream gets
    shell outputs as they are)."""
    tool: Any = {"type": "shell", "environment": {"type": "local"}}
    first = client.responses.create(
        model=MODEL, input='[[tool:shell:{"commands": ["echo hi"]}]]', tools=[tool]
    )
    [call] = first.output
    assert call.type == "shell_call"
    unknown_exit = {"type": "exit", "exit_code": None}
    output: Any = {
        "type": "shell_call_output",
        "call_id": call.call_id,
        "output": [{"stdout": "hi\n", "stderr": "", "outcome": unknown_exit}],
    }
    second = client.responses.create(
        model=MODEL, previous_response_id=first.id, input=[output], tools=[tool]
    )
    assert second.status == "completed"
    told = last_upstream_body(fake_upstream)["messages"][-1]
    assert (told["role"], told["content"]) == ("tool", "stdout:\nhi\n")


@CHAT_UPSTREAMS
def test_a_local_shell_output_answers_its_call_by_id(client: OpenAI) -> None:
    """Over a Chat upstream (a Responses upstream calls local_shell natively, as in the
    shell test)."""
    first = client.responses.create(
        model=MODEL,
        input='[[tool:local_shell:{"command": ["ls"], "working_directory": "/tmp"}]]',
        tools=[{"type": "local_shell"}],
    )
    [call] = first.output
    assert call.type == "local_shell_call"
    assert call.action.command == ["ls"]
    assert call.action.env == {}
    assert call.action.working_directory == "/tmp"  # type: ignore[union-attr]
    answer: Any = {"type": "local_shell_call_output", "id": call.call_id, "output": "a.txt"}  # type: ignore[union-attr]
    second = client.responses.create(
        model=MODEL, previous_response_id=first.id, input=[answer], tools=[{"type": "local_shell"}]
    )
    assert second.output_text == "Tool said: a.txt"
    with pytest.raises(openai.BadRequestError) as caught:  # unanswered: refused before sending
        client.responses.create(
            model=MODEL,
            previous_response_id=first.id,
            input="next",
            tools=[{"type": "local_shell"}],
        )
    assert isinstance(caught.value.body, dict)
    assert caught.value.body["code"] == "tool_output_missing"


PATCH = "@@ def greet():\n-    print('Hi')\n+    print('Hello')\n"
PATCH_OPERATION = {"type": "update_file", "path": "app.py", "diff": PATCH}


def patch_directive(api: str) -> str:
    """The fake model's apply_patch call: a function call over Chat and Messages, the
    item itself over Responses (whose upstream has the tool natively)."""
    if api != "responses":
        return f"[[tool:apply_patch:{json.dumps(PATCH_OPERATION)}]]"
    call = {"type": "apply_patch_call", "call_id": "call_ap1", "operation": PATCH_OPERATION}
    return f"[[item:{json.dumps({**call, 'status': 'completed'})}]]"


def test_an_apply_patch_call_round_trip(client: OpenAI, api: str, fake_upstream: str) -> None:
    """Streamed as hosted streams it (added, then done; no delta events), answered by an
    ``apply_patch_call_output`` that later turns show the model as the call's output."""
    with client.responses.stream(
        model=MODEL, input=patch_directive(api), tools=[{"type": "apply_patch"}]
    ) as stream:
        events = [e.type for e in stream if e.type.startswith("response.output_item")]
        first = stream.get_final_response()
    sent = last_upstream_body(fake_upstream)
    if api == "chat":
        [offered] = sent["tools"]
        assert offered["function"]["name"] == "apply_patch"
        assert offered["function"]["parameters"]["required"] == ["type", "path"]
    else:
        assert sent["tools"] == [{"type": "apply_patch"}]
    assert events == ["response.output_item.added", "response.output_item.done"]
    [call] = first.output
    assert call.type == "apply_patch_call"
    assert call.operation.type == "update_file"
    assert (call.operation.path, call.operation.diff) == ("app.py", PATCH)
    assert call.status == "completed"
    assert client.responses.retrieve(first.id).output[0].type == "apply_patch_call"
    answer: Any = {
        "type": "apply_patch_call_output",
        "call_id": call.call_id,
        "status": "failed",
        "output": "context not found",
    }
    second = client.responses.create(
        model=MODEL, previous_response_id=first.id, input=[answer], tools=[{"type": "apply_patch"}]
    )
    told_text = "failed\ncontext not found" if api == "chat" else "context not found"
    assert second.output_text == f"Tool said: {told_text}"
    sent = last_upstream_body(fake_upstream)
    if api == "chat":
        told = sent["messages"][-2]["tool_calls"][0]["function"]
        assert (told["name"], json.loads(told["arguments"])) == ("apply_patch", PATCH_OPERATION)
    else:
        kinds = [i["type"] for i in sent["input"][-2:]]
        assert kinds == ["apply_patch_call", "apply_patch_call_output"]
    with pytest.raises(openai.BadRequestError) as caught:  # it answers no pending call
        client.responses.create(
            model=MODEL, previous_response_id=second.id, input=[answer], tools=[]
        )
    assert isinstance(caught.value.body, dict)
    assert caught.value.body["code"] == "tool_call_not_found"


@CHAT_UPSTREAMS
def test_an_apply_patch_of_several_files_is_a_call_per_file(
    client: OpenAI, fake_upstream: str
) -> None:
    """A model that writes one call for a V4A envelope of two files: two calls, each
    streamed, answered, and shown to the model as a call of its own."""
    envelope = (
        "*** Begin Patch\n*** Update File: app.py\n" + PATCH + "*** Add File: new.py\n+x = 1\n"
        "*** End Patch"
    )
    arguments = {"type": "update_file", "path": "app.py", "diff": envelope}
    tools: Any = [{"type": "apply_patch"}]
    with client.responses.stream(
        model=MODEL, input=f"[[tool:apply_patch:{json.dumps(arguments)}]]", tools=tools
    ) as stream:
        events = [e.type for e in stream if e.type.startswith("response.output_item")]
        first = stream.get_final_response()
    assert events == ["response.output_item.added", "response.output_item.done"] * 2
    calls: list[Any] = first.output
    assert [c.type for c in calls] == ["apply_patch_call", "apply_patch_call"]
    assert [(c.operation.type, c.operation.path) for c in calls] == [
        ("update_file", "app.py"),
        ("create_file", "new.py"),
    ]
    assert (calls[0].operation.diff, calls[1].operation.diff) == (PATCH.rstrip("\n"), "+x = 1")
    assert calls[0].call_id != calls[1].call_id
    stored = client.responses.retrieve(first.id).output
    assert [c.call_id for c in stored] == [c.call_id for c in calls]  # type: ignore[union-attr]
    answers: Any = [
        {"type": "apply_patch_call_output", "call_id": c.call_id, "status": "completed"}
        for c in calls
    ]
    client.responses.create(model=MODEL, previous_response_id=first.id, input=answers, tools=tools)
    messages = last_upstream_body(fake_upstream)["messages"]
    told = messages[-3]["tool_calls"]
    assert [t["id"] for t in told] == [c.call_id for c in calls]
    assert [json.loads(t["function"]["arguments"])["path"] for t in told] == ["app.py", "new.py"]
    assert [(m["role"], m["tool_call_id"]) for m in messages[-2:]] == [
        ("tool", c.call_id) for c in calls
    ]


def test_an_apply_patch_call_over_an_anthropic_upstream(
    anthropic_gateway: RunningGateway, fake_upstream: str
) -> None:
    with (
        OpenAI(base_url=anthropic_gateway.url + "/v1", api_key="k", max_retries=0) as sdk,
    ):
        tools: Any = [{"type": "apply_patch"}]
        first = sdk.responses.create(model=MODEL, input=patch_directive("anthropic"), tools=tools)
        [call] = first.output
        assert call.type == "apply_patch_call"
        assert call.operation.path == "app.py"
        answer: Any = {"type": "apply_patch_call_output", "call_id": call.call_id}
        second = sdk.responses.create(
            model=MODEL,
            previous_response_id=first.id,
            input=[{**answer, "status": "completed", "output": "Updated app.py"}],
            tools=tools,
        )
        assert second.output_text == "Tool said: completed\nUpdated app.py"
        sent = last_upstream_body(fake_upstream)
        [offered] = sent["tools"]
        assert offered["name"] == "apply_patch"
        blocks = [
            b for m in sent["messages"] if isinstance(m["content"], list) for b in m["content"]
        ]
        [use] = [b for b in blocks if b["type"] == "tool_use"]
        assert (use["name"], use["input"]) == ("apply_patch", PATCH_OPERATION)


def test_unknown_tool_and_item_types_are_kept_from_an_anthropic_upstream(
    anthropic_gateway: RunningGateway, fake_upstream: str
) -> None:
    """As from a Chat upstream: the Messages API has no place for them, so its model is
    not shown them, and the response echoes the tool all the same."""
    odd = {"type": "future_item", "id": "fi_1", "payload": {"x": [1, 2]}}
    with (
        OpenAI(base_url=anthropic_gateway.url + "/v1", api_key="k", max_retries=0) as sdk,
    ):
        items: Any = [odd, {"role": "user", "content": "draw"}]
        tools: Any = [IMAGE_TOOL, FUNCTION_TOOL]
        answer = sdk.responses.create(model=MODEL, input=items, tools=tools)
        sent = last_upstream_body(fake_upstream)
    assert answer.output_text == "Hello! You said: draw"
    assert [t.type for t in answer.tools] == ["image_generation", "function"]
    assert [t["name"] for t in sent["tools"]] == ["lookup"]
    assert sent["messages"] == [{"role": "user", "content": [{"type": "text", "text": "draw"}]}]


FORCING_IMAGES: Any = [
    "required",
    {"type": "image_generation"},
    {"type": "allowed_tools", "mode": "required", "tools": [{"type": "image_generation"}]},
]
"""Tool choices a model offered no ``image_generation`` tool cannot meet (beside it alone)."""


def test_a_choice_forcing_an_unknown_tool_type_is_refused_for_a_chat_upstream(
    client: OpenAI, api: str, fake_upstream: str
) -> None:
    """A Chat upstream's model is not offered the tool: forcing a call of it is a 400 on
    ``tool_choice`` saying why, before anything goes upstream, where an upstream speaking
    Responses is sent it (as hosted refuses a choice forcing a tool it is not given)."""
    tools: Any = [IMAGE_TOOL]
    for choice in FORCING_IMAGES:
        if api == "responses":
            answer = client.responses.create(
                model=MODEL, input="draw", tools=tools, tool_choice=choice
            )
            assert answer.status == "completed"
            continue
        clear(fake_upstream)
        with pytest.raises(openai.BadRequestError) as refused:
            client.responses.create(model=MODEL, input="draw", tools=tools, tool_choice=choice)
        error = refused.value.body
        assert isinstance(error, dict)
        assert (error["type"], error["param"]) == ("invalid_request_error", "tool_choice")
        assert error["code"] == "unsupported_capability"
        assert "'image_generation'" in error["message"]
        assert upstream_calls(fake_upstream) == 0
    calls_too: Any = [IMAGE_TOOL, FUNCTION_TOOL]  # required: the function is forced
    answer = client.responses.create(
        model=MODEL, input="draw", tools=calls_too, tool_choice="required"
    )
    assert answer.status == "completed"


def test_a_choice_forcing_an_unknown_tool_type_is_refused_for_an_anthropic_upstream(
    anthropic_gateway: RunningGateway, fake_upstream: str
) -> None:
    """As for a Chat upstream: the Messages API has no place for the tool either; the
    refusal is the Responses client's (the only protocol declaring such a tool)."""
    with (
        OpenAI(base_url=anthropic_gateway.url + "/v1", api_key="k", max_retries=0) as sdk,
    ):
        clear(fake_upstream)
        for choice in FORCING_IMAGES:
            with pytest.raises(openai.BadRequestError) as refused:
                sdk.responses.create(
                    model=MODEL, input="draw", tools=[IMAGE_TOOL], tool_choice=choice
                )
            assert refused.value.param == "tool_choice"
            assert refused.value.code == "unsupported_capability"
        assert upstream_calls(fake_upstream) == 0


def upstream_calls(fake_upstream: str) -> int:
    """How many requests the fake upstream was sent since it was last cleared."""
    with urllib.request.urlopen(fake_upstream.removesuffix("/v1") + "/_fake/requests") as reply:
        return len(json.loads(reply.read())["data"])


GRAMMAR_TOOL: Any = {
    "type": "custom",
    "name": "apply_patch",
    "description": "Apply a patch",
    "format": {"type": "grammar", "syntax": "lark", "definition": "start: /[A-Za-z!: ]+/"},
}


@pytest.fixture(scope="module")
def guided(
    fake_upstream: str, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[RunningGateway]:
    backend = {"url": fake_upstream, "api": "chat", "guided_decoding": "vllm"}
    with configured_gateway(tmp_path_factory.mktemp("guided"), backend) as gateway:
        yield gateway


def test_a_forced_grammar_tool_is_guided_by_structured_outputs(
    guided: RunningGateway, fake_upstream: str
) -> None:
    with OpenAI(base_url=guided.url + "/v1", api_key="sk-test", max_retries=0) as sdk:
        forced = sdk.responses.create(
            model=MODEL,
            input="patch it",
            tools=[GRAMMAR_TOOL],
            tool_choice={"type": "custom", "name": "apply_patch"},
        )
        sent = last_upstream_body(fake_upstream)
        assert sent["structured_outputs"] == {"grammar": "start: /[A-Za-z!: ]+/"}
        assert "tools" not in sent
        assert "tool_choice" not in sent
        assert "apply_patch" in sent["messages"][0]["content"]
        [call] = forced.output
        assert call.type == "custom_tool_call"
        assert call.input == "Hello! You said: patch it"  # type: ignore[union-attr]
        unforced = sdk.responses.create(model=MODEL, input="hi", tools=[GRAMMAR_TOOL])
        sent = last_upstream_body(fake_upstream)
        assert "structured_outputs" not in sent
        assert sent["tools"]
        assert unforced.output[0].type == "message"
        with sdk.responses.stream(
            model=MODEL,
            input="patch it",
            tools=[GRAMMAR_TOOL],
            tool_choice={"type": "custom", "name": "apply_patch"},
        ) as stream:
            deltas = [e.delta for e in stream if e.type == "response.custom_tool_call_input.delta"]
        assert deltas == ["Hello! ", "You ", "said: ", "patch ", "it"]  # as the reply came


@pytest.fixture(scope="module")
def over_responses(
    fake_upstream: str, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[OpenAI]:
    """A client of a gateway over the fake's Responses wire (which alone renders
    ``[[item]]``)."""
    database = f"sqlite:///{tmp_path_factory.mktemp('whole') / 'stateway.db'}"
    args = ["--upstream", fake_upstream, "--upstream-api", "responses", "--database", database]
    with start_gateway(args) as url, OpenAI(base_url=url + "/v1", api_key="k") as sdk:
        yield sdk


@pytest.mark.parametrize("stream", [False, True])
def test_a_responses_upstream_s_whole_items_and_message_phases_are_kept(
    over_responses: OpenAI, stream: bool
) -> None:
    """Items the upstream gives only whole (on ``output_item.done``, no deltas), a
    reasoning summary as its only text (as OpenAI's reasoning models give it), and the
    ``phase`` of its messages come through streamed as they do unstreamed."""
    client = over_responses
    summary = [{"type": "summary_text", "text": "Plan"}, {"type": "summary_text", "text": "Go"}]
    reasoning = {"type": "reasoning", "summary": summary, "content": []}
    message = {
        "type": "message",
        "role": "assistant",
        "status": "completed",
        "phase": "final_answer",
        "content": [{"type": "output_text", "text": "whole", "annotations": []}],
    }
    directive = f"[[item:{json.dumps(reasoning)}]] [[item:{json.dumps(message)}]]"
    if stream:
        with client.responses.stream(model=MODEL, input=directive) as events:
            response = events.get_final_response()
    else:
        response = client.responses.create(model=MODEL, input=directive)
    kept_reasoning, kept_message = response.output
    assert kept_reasoning.type == "reasoning"
    assert kept_reasoning.content is not None
    assert [part.text for part in kept_reasoning.content] == ["Plan\n\nGo"]
    assert kept_message.type == "message"
    assert kept_message.phase == "final_answer"
    assert response.output_text == "whole"
    assert client.responses.retrieve(response.id).output_text == "whole"
