"""Tool and item types the gateway does not model: decided against the chosen backend."""

from __future__ import annotations

from typing import Any

import orjson
import pytest

from stateway.core.commands import CreateResponse
from stateway.core.context import build_context, shown, unshown_types
from stateway.core.errors import InvalidRequest
from stateway.core.tools.session import known_catalog, round_choice
from stateway.core.tools.toolset import GatewayTools
from stateway.protocols.responses.decode import decode_create
from tests.core.fakes import MemoryStore, ScriptedBackend

FUNCTION: dict[str, Any] = {"type": "function", "name": "f"}
IMAGE: dict[str, Any] = {"type": "image_generation", "size": "auto", "future": {"x": 1}}


class NativeBackend(ScriptedBackend):
    """A backend whose upstream speaks Responses natively."""

    name = "native"
    carries_unknown_types = True


def tools_of(*tools: dict[str, Any]) -> list[dict[str, Any]]:
    body = {"model": "m", "input": "x", "tools": list(tools)}
    return decode_create(orjson.dumps(body)).settings.tools


@pytest.mark.parametrize(
    "tool",
    [
        IMAGE,
        {"type": "code_interpreter", "container": {"type": "auto"}},
        {"type": "file_search", "vector_store_ids": ["vs_1"]},
        {"type": "computer_use_preview", "display_width": 1, "display_height": 1},
        {"type": "a_future_tool"},
    ],
)
def test_unknown_tool_types_are_decoded_as_sent(tool: dict[str, Any]) -> None:
    assert tools_of(FUNCTION, tool)[1] == tool


def test_a_shell_tool_claims_its_function_name() -> None:
    with pytest.raises(InvalidRequest) as caught:
        tools_of({"type": "function", "name": "shell"}, {"type": "shell"})
    assert (caught.value.param, caught.value.code) == ("tools[1].type", "duplicate_tool_name")


def test_a_chat_backend_offers_no_unknown_tool_and_echoes_it() -> None:
    """Its upstream has no place for one: the model is not offered it (``route`` gives it
    back, to be logged), and the response echoes and stores it as declared."""
    declared = tools_of(FUNCTION, IMAGE)
    toolset = GatewayTools().resolve(declared)
    assert toolset.route(ScriptedBackend([])) == [IMAGE]
    assert toolset.native == []
    assert [t["type"] for t in toolset.client] == ["function"]
    assert toolset.public == declared


def test_a_choice_of_an_unknown_tool_a_chat_backend_is_not_offered_goes_auto() -> None:
    """What a round would send: a request forcing such a tool alone is served by no such
    backend (``Needs.forced_native``, tests/core/test_route_planning.py)."""
    toolset = GatewayTools().resolve(tools_of(FUNCTION, IMAGE))
    toolset.route(ScriptedBackend([]))
    assert round_choice(toolset, known_catalog(toolset), {"type": "image_generation"}) == "auto"
    allowed = {"type": "allowed_tools", "mode": "required", "tools": [{"type": "image_generation"}]}
    catalog = known_catalog(toolset)
    assert round_choice(toolset, catalog, allowed) == "required"
    assert catalog.model_tools(choice="required") == []  # allows nothing the model is offered


def test_a_native_backend_gets_unknown_and_shell_tools_as_declared() -> None:
    shell = {"type": "shell", "environment": {"type": "local"}}
    toolset = GatewayTools().resolve(tools_of(FUNCTION, IMAGE, shell))
    toolset.route(NativeBackend([]))
    assert toolset.client == [FUNCTION | {"description": None, "parameters": None, "strict": None}]
    assert toolset.native == [IMAGE, shell]
    assert toolset.public[1:] == [IMAGE, shell]


def test_a_chat_backend_offers_shell_tools_as_functions() -> None:
    toolset = GatewayTools().resolve(tools_of({"type": "local_shell"}))
    toolset.route(ScriptedBackend([]))
    assert toolset.client == [{"type": "local_shell"}]
    assert toolset.native == []


def test_apply_patch_is_a_function_for_a_chat_backend_and_native_for_a_responses_one() -> None:
    declared = tools_of({"type": "apply_patch"})
    toolset = GatewayTools().resolve(declared)
    toolset.route(ScriptedBackend([]))
    assert (toolset.client, toolset.native) == ([{"type": "apply_patch"}], [])
    toolset = GatewayTools().resolve(declared)
    toolset.route(NativeBackend([]))
    assert (toolset.client, toolset.native) == ([], [{"type": "apply_patch"}])
    assert toolset.native_choice({"type": "apply_patch"}) == {"type": "apply_patch"}


def test_apply_patch_claims_its_function_name() -> None:
    """Codex declares a ``custom`` tool of that name: the two cannot both be offered."""
    with pytest.raises(InvalidRequest) as caught:
        tools_of({"type": "custom", "name": "apply_patch"}, {"type": "apply_patch"})
    assert (caught.value.param, caught.value.code) == ("tools[1].type", "duplicate_tool_name")


ODD = {"type": "future_item", "payload": [1]}


async def test_unknown_input_items_reach_a_native_backend_only() -> None:
    """Another backend's model is not shown them; the context keeps them (stored as sent)."""
    said = {"type": "message", "role": "user", "content": "hi"}
    command = CreateResponse(model="m", input=[ODD, said])
    context = await build_context(MemoryStore(), "t", command, NativeBackend([]))
    assert context == [ODD, said]
    assert shown(context, NativeBackend([])) == [ODD, said]
    assert await build_context(MemoryStore(), "t", command, ScriptedBackend([])) == [ODD, said]
    assert shown(context, ScriptedBackend([])) == [said]
    assert unshown_types(context, ScriptedBackend([])) == ["future_item"]
    assert unshown_types(context, NativeBackend([])) == []


SHELL_CALL = {"type": "shell_call", "call_id": "c1", "action": {"commands": ["ls"]}}
LOCAL_CALL = {"type": "local_shell_call", "call_id": "c2", "action": {"command": ["ls"]}}
PATCH_CALL = {
    "type": "apply_patch_call",
    "call_id": "c3",
    "operation": {"type": "delete_file", "path": "a.py"},
    "status": "completed",
}
PATCH_OUTPUT = {"type": "apply_patch_call_output", "call_id": "c3", "status": "failed"}


@pytest.mark.parametrize(
    "items",
    [
        [SHELL_CALL, {"type": "shell_call_output", "call_id": "c1", "output": []}],
        [LOCAL_CALL, {"type": "local_shell_call_output", "id": "c2", "output": "x"}],
        [LOCAL_CALL, {"type": "local_shell_call_output", "call_id": "c2", "output": "x"}],
        [PATCH_CALL, PATCH_OUTPUT],
    ],
)
async def test_shell_outputs_answer_their_calls(items: list[dict[str, Any]]) -> None:
    command = CreateResponse(model="m", input=items)
    assert await build_context(MemoryStore(), "t", command, NativeBackend([])) == items


@pytest.mark.parametrize(
    ("items", "code"),
    [
        ([SHELL_CALL], "tool_output_missing"),
        ([SHELL_CALL, {"type": "local_shell_call_output", "id": "c1", "output": "x"}], None),
        ([{"type": "shell_call_output", "call_id": "nope", "output": []}], None),
        ([PATCH_CALL], "tool_output_missing"),
        ([PATCH_CALL, {**PATCH_OUTPUT, "type": "shell_call_output", "output": []}], None),
        ([SHELL_CALL, {**PATCH_OUTPUT, "call_id": "c1"}], None),
        ([PATCH_OUTPUT], None),
    ],
)
async def test_shell_outputs_must_answer_a_call_of_their_kind(
    items: list[dict[str, Any]], code: str | None
) -> None:
    with pytest.raises(InvalidRequest) as caught:
        await build_context(
            MemoryStore(), "t", CreateResponse(model="m", input=items), NativeBackend([])
        )
    assert caught.value.code == (code or "tool_call_not_found")
    if code:
        call = items[0]
        assert f"{call['type'].replace('_', ' ')} {call['call_id']}" in caught.value.message


@pytest.mark.parametrize(
    ("item", "param"),
    [
        (
            {"type": "shell_call", "call_id": "c", "action": {"commands": "ls"}},
            "input[0].action.commands",
        ),
        ({"type": "shell_call", "call_id": "c"}, "input[0].action"),
        ({"type": "local_shell_call", "call_id": "c", "action": {}}, "input[0].action.command"),
        ({"type": "shell_call_output", "call_id": "c", "output": "x"}, "input[0].output"),
        ({"type": "local_shell_call_output", "output": "x"}, "input[0].id"),
        ({"type": "local_shell_call_output", "id": "c"}, "input[0].output"),
        ({"type": "apply_patch_call", "call_id": "c"}, "input[0].operation"),
        ({**PATCH_CALL, "operation": {"path": "a.py"}}, "input[0].operation.type"),
        (
            {**PATCH_CALL, "operation": {"type": "move_file", "path": "a.py"}},
            "input[0].operation.type",
        ),
        ({**PATCH_CALL, "operation": {"type": "delete_file"}}, "input[0].operation.path"),
        (
            {**PATCH_CALL, "operation": {"type": "create_file", "path": "a.py"}},
            "input[0].operation.diff",
        ),
        ({**PATCH_OUTPUT, "call_id": None}, "input[0].call_id"),
        ({**PATCH_OUTPUT, "status": "done"}, "input[0].status"),
        ({**PATCH_OUTPUT, "output": ["x"]}, "input[0].output"),
    ],
)
def test_bad_shell_items_are_named(item: dict[str, Any], param: str) -> None:
    with pytest.raises(InvalidRequest) as caught:
        decode_create(orjson.dumps({"model": "m", "input": [item]}))
    assert caught.value.param == param


def test_shell_items_get_ids_but_a_local_shell_output_keeps_its_own() -> None:
    items = [
        SHELL_CALL,
        {"type": "local_shell_call_output", "id": "c2", "output": "x"},
    ]
    decoded = decode_create(orjson.dumps({"model": "m", "input": items})).input
    assert decoded[0]["id"].startswith("sh_")
    assert decoded[0]["status"] == "completed"
    assert decoded[1]["id"] == "c2"


def test_apply_patch_items_get_ids_and_keep_their_status() -> None:
    items = [PATCH_CALL, PATCH_OUTPUT, {**PATCH_OUTPUT, "status": None, "call_id": "c4"}]
    call, output, unstated = decode_create(orjson.dumps({"model": "m", "input": items})).input
    assert call["id"].startswith("apc_")
    assert (output["id"].split("_")[0], output["status"]) == ("apco", "failed")
    assert unstated["status"] == "completed"


def test_a_tool_choice_naming_a_native_tool_is_kept_as_sent() -> None:
    toolset = GatewayTools().resolve(tools_of(IMAGE, {"type": "shell"}))
    toolset.route(NativeBackend([]))
    assert toolset.native_choice({"type": "image_generation"}) == {"type": "image_generation"}
    assert toolset.native_choice({"type": "shell"}) == {"type": "shell"}
    assert toolset.native_choice({"type": "code_interpreter"}) is None
    assert toolset.native_choice({"type": "function", "name": "f"}) is None
    assert toolset.native_choice("required") is None


def test_hosted_tool_choice_types_are_decoded() -> None:
    body = {
        "model": "m",
        "input": "x",
        "tools": [{"type": "image_generation"}],
        "tool_choice": {"type": "image_generation"},
    }
    assert decode_create(orjson.dumps(body)).settings.tool_choice == {"type": "image_generation"}
    with pytest.raises(InvalidRequest):
        decode_create(orjson.dumps({**body, "tool_choice": {"type": "bogus"}}))
    with pytest.raises(InvalidRequest, match="'image_generation' not found"):  # as hosted
        decode_create(orjson.dumps({**body, "tools": []}))
