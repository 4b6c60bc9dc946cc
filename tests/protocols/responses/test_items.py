"""Input items of the Responses wire: what each modelled shape requires, and the ids and
statuses the decoder gives what it accepts."""

from __future__ import annotations

from typing import Any

import pytest

from stateway.core.errors import InvalidRequest
from stateway.protocols.responses.items import decode_items

SHELL_ACTION = {"commands": ["ls"]}
DELETE = {"type": "delete_file", "path": "a.py"}
UPDATE = {"type": "update_file", "path": "a.py", "diff": "@@\n-a\n+b"}


@pytest.mark.parametrize(
    ("item", "param", "code"),
    [
        ({"content": "x"}, "input[0].type", "missing_required_parameter"),
        ({"type": 3}, "input[0].type", "invalid_type"),
        (
            {"type": "function_call", "call_id": "c", "arguments": "{}"},
            "input[0].name",
            "missing_required_parameter",
        ),
        (
            {"type": "function_call", "call_id": "c", "name": "f"},
            "input[0].arguments",
            "missing_required_parameter",
        ),
        (
            {"type": "custom_tool_call", "name": "f", "input": ""},
            "input[0].call_id",
            "missing_required_parameter",
        ),
        (
            {"type": "custom_tool_call", "call_id": "c", "input": ""},
            "input[0].name",
            "missing_required_parameter",
        ),
        (
            {"type": "custom_tool_call_output", "output": "r"},
            "input[0].call_id",
            "missing_required_parameter",
        ),
        (
            {"type": "function_call_output", "call_id": "c", "output": 3},
            "input[0].output",
            "invalid_type",
        ),
        ({"type": "reasoning", "summary": "x"}, "input[0].summary", "invalid_type"),
        (
            {"type": "shell_call", "action": SHELL_ACTION},
            "input[0].call_id",
            "missing_required_parameter",
        ),
        (
            {"type": "shell_call_output", "output": []},
            "input[0].call_id",
            "missing_required_parameter",
        ),
        (
            {"type": "apply_patch_call", "operation": DELETE},
            "input[0].call_id",
            "missing_required_parameter",
        ),
        (
            {"type": "apply_patch_call", "call_id": "c"},
            "input[0].operation",
            "missing_required_parameter",
        ),
        (
            {"type": "apply_patch_call", "call_id": "c", "operation": "rm a.py"},
            "input[0].operation",
            "invalid_type",
        ),
        (
            {"type": "apply_patch_call", "call_id": "c", "operation": {"path": "a.py"}},
            "input[0].operation.type",
            "missing_required_parameter",
        ),
        (
            {"type": "apply_patch_call", "call_id": "c", "operation": {**DELETE, "type": "move"}},
            "input[0].operation.type",
            "invalid_value",
        ),
        (
            {"type": "apply_patch_call", "call_id": "c", "operation": {"type": "delete_file"}},
            "input[0].operation.path",
            "missing_required_parameter",
        ),
        (
            {"type": "apply_patch_call", "call_id": "c", "operation": {**UPDATE, "diff": None}},
            "input[0].operation.diff",
            "missing_required_parameter",
        ),
        (
            {"type": "apply_patch_call_output", "status": "completed"},
            "input[0].call_id",
            "missing_required_parameter",
        ),
        (
            {"type": "apply_patch_call_output", "call_id": "c", "status": "done"},
            "input[0].status",
            "invalid_value",
        ),
        (
            {"type": "apply_patch_call_output", "call_id": "c", "status": "failed", "output": 1},
            "input[0].output",
            "invalid_type",
        ),
    ],
)
def test_item_refusals_name_the_field_and_code(item: dict[str, Any], param: str, code: str) -> None:
    with pytest.raises(InvalidRequest) as caught:
        decode_items([item])
    assert (caught.value.status, caught.value.param, caught.value.code) == (400, param, code)


def part(**fields: Any) -> dict[str, Any]:
    return {"type": "message", "role": "user", "content": [fields]}


@pytest.mark.parametrize(
    ("item", "param", "code", "message"),
    [
        (
            {"content": "x"},
            "input[0].type",
            "missing_required_parameter",
            "Every input item needs a string 'type'.",
        ),
        (
            {"type": "apply_patch_call", "call_id": "c", "operation": "rm a.py"},
            "input[0].operation",
            "invalid_type",
            "Invalid type for 'input[0].operation': expected an object, but got a string instead.",
        ),
        (
            {"type": "apply_patch_call", "call_id": "c", "operation": {**DELETE, "type": "move"}},
            "input[0].operation.type",
            "invalid_value",
            "Invalid value: 'move'. Supported values are: 'create_file', 'update_file', and "
            "'delete_file'.",
        ),
        (
            {"type": "apply_patch_call_output", "call_id": "c", "status": "done"},
            "input[0].status",
            "invalid_value",
            "Invalid value: 'done'. Supported values are: 'completed' and 'failed'.",
        ),
        (
            {"type": "additional_tools", "role": "user", "tools": []},
            "input[0].role",
            "invalid_value",
            "An 'additional_tools' item needs the role 'developer'.",
        ),
        (
            {"type": "additional_tools", "role": "developer"},
            "input[0].tools",
            "missing_required_parameter",
            "An 'additional_tools' item needs a list of 'tools'.",
        ),
        (
            {"type": "additional_tools", "role": "developer", "tools": "x"},
            "input[0].tools",
            "invalid_type",
            "An 'additional_tools' item needs a list of 'tools'.",
        ),
        (
            {"type": "message", "role": "user", "content": 3},
            "input[0].content",
            "invalid_type",
            "'content' must be a string or a list of content parts.",
        ),
        (
            {"type": "message", "role": "x", "content": "a"},
            "input[0].role",
            "invalid_value",
            "Invalid value: 'x'. Supported values are: 'assistant', 'system', 'developer', "
            "and 'user'.",
        ),
        (
            {"type": "message", "role": "user", "content": [3]},
            "input[0].content[0]",
            "invalid_type",
            "Each content part must be an object.",
        ),
        (
            part(type="audio"),
            "input[0].content[0].type",
            "invalid_value",
            "Invalid content part type: 'audio'.",
        ),
        (
            part(type="input_image", image_url="file-1"),
            "input[0].content[0].image_url",
            "invalid_value",
            "'image_url' must be an http(s) URL or a data URL; file ids are not supported.",
        ),
        (
            part(type="input_image", image_url="http://x.test/a.png", detail="huge"),
            "input[0].content[0].detail",
            "invalid_value",
            "Invalid value: 'huge'. Supported values are: 'low', 'high', 'auto', and 'original'.",
        ),
        (
            part(type="input_image", image_url="http://x.test/a.png", detail=5),
            "input[0].content[0].detail",
            "invalid_type",
            "Invalid type for 'input[0].content[0].detail': expected one of 'low', 'high', "
            "'auto', or 'original', but got an integer instead.",
        ),
        (
            part(type="input_file"),
            "input[0].content[0].file_data",
            "missing_required_parameter",
            "An 'input_file' part needs 'file_data' or 'file_url'; file ids are not supported.",
        ),
        (
            {"type": "reasoning", "summary": "x"},
            "input[0].summary",
            "invalid_type",
            "'summary' must be a list.",
        ),
        (
            {"type": "reasoning", "summary": [3]},
            "input[0].summary[0]",
            "invalid_type",
            "Each part must be an object.",
        ),
        (
            {"type": "reasoning", "summary": [], "encrypted_content": 3},
            "input[0].encrypted_content",
            "invalid_type",
            "Invalid type for 'input[0].encrypted_content': expected a string.",
        ),
        (
            {"type": "reasoning", "summary": [], "content": "x"},
            "input[0].content",
            "invalid_type",
            "Invalid type for 'input[0].content': expected a list, but got a string instead.",
        ),
        (
            {"type": "function_call_output", "call_id": "c", "output": {}},
            "input[0].output",
            "invalid_type",
            "'output' must be a string or a list of content parts.",
        ),
        (
            {"type": "mcp_approval_response", "approval_request_id": "a", "approve": "yes"},
            "input[0].approve",
            "invalid_type",
            "Invalid type for 'input[0].approve': expected a boolean, but got a string instead.",
        ),
        (
            {
                "type": "mcp_approval_response",
                "approval_request_id": "a",
                "approve": False,
                "reason": ["no"],
            },
            "input[0].reason",
            "invalid_type",
            "Invalid type for 'input[0].reason': expected a string, but got an array instead.",
        ),
        (
            {"type": "shell_call_output", "call_id": "c", "output": "x"},
            "input[0].output",
            "invalid_type",
            "Invalid type for 'input[0].output': expected a list, but got a string instead.",
        ),
        (
            {"type": "shell_call", "call_id": "c", "action": "x"},
            "input[0].action",
            "invalid_type",
            "Invalid type for 'input[0].action': expected an object, but got a string instead.",
        ),
        (
            {"type": "shell_call", "call_id": "c", "action": {"commands": "ls"}},
            "input[0].action.commands",
            "invalid_type",
            "Invalid type for 'input[0].action.commands': expected a list of strings, but got "
            "a string instead.",
        ),
        (
            {"type": "tool_search_call", "execution": "x", "arguments": {}},
            "input[0].execution",
            "invalid_value",
            "Invalid value: 'x'. Supported values are: 'client' and 'server'.",
        ),
        (
            {"type": "tool_search_call", "call_id": "", "arguments": {}},
            "input[0].call_id",
            "invalid_value",
            "'input[0].call_id' must not be empty.",
        ),
        (
            {"type": "tool_search_output", "call_id": "c"},
            "input[0].tools",
            "missing_required_parameter",
            "A 'tool_search_output' item needs a list of 'tools' (the tools to load).",
        ),
        (
            {"type": "tool_search_output", "call_id": "c", "tools": "x"},
            "input[0].tools",
            "invalid_type",
            "A 'tool_search_output' item needs a list of 'tools' (the tools to load).",
        ),
    ],
)
def test_item_refusals_are_worded_whole(
    item: dict[str, Any], param: str, code: str, message: str
) -> None:
    with pytest.raises(InvalidRequest) as caught:
        decode_items([item])
    assert (caught.value.param, caught.value.code, caught.value.message) == (param, code, message)


def test_a_compaction_trigger_anywhere_but_last_is_refused_and_a_duplicate_id_named() -> None:
    user = {"type": "message", "role": "user", "content": "x"}
    with pytest.raises(InvalidRequest) as caught:
        decode_items([user, {"type": "compaction_trigger"}, user])
    assert (caught.value.param, caught.value.code) == ("input[1].type", "invalid_value")
    assert caught.value.message == "A 'compaction_trigger' item must be the last input item."
    with pytest.raises(InvalidRequest) as caught:
        decode_items([{**user, "id": "m"}, {**user, "id": "m"}])
    assert (caught.value.param, caught.value.code) == ("input[1].id", "duplicate_item_id")
    assert caught.value.message == (
        "Duplicate item found with id m. Remove duplicate items from your input and try again."
    )


@pytest.mark.parametrize(
    ("item", "prefix"),
    [
        ({"type": "shell_call_output", "call_id": "c", "output": []}, "sho_"),
        ({"type": "apply_patch_call", "call_id": "c", "operation": DELETE}, "apc_"),
        ({"type": "apply_patch_call", "call_id": "c", "operation": UPDATE}, "apc_"),
        ({"type": "mcp_approval_response", "approval_request_id": "r", "approve": True}, "mcpa_"),
        (
            {
                "type": "mcp_approval_response",
                "approval_request_id": "r",
                "approve": False,
                "id": "",
            },
            "mcpa_",
        ),
    ],
)
def test_accepted_items_without_an_id_get_one(item: dict[str, Any], prefix: str) -> None:
    [decoded] = decode_items([item])
    assert decoded["id"].startswith(prefix)
    assert {k: v for k, v in decoded.items() if k not in ("id", "status")} == {
        k: v for k, v in item.items() if k != "id"
    }


@pytest.mark.parametrize(
    "item",
    [
        {"type": "additional_tools", "role": "developer", "tools": []},
        {"type": "compaction_trigger"},
        {"type": "configuration_update", "reasoning": {"effort": "low"}},
        {"type": "image_generation_call", "status": "completed", "result": None},
        {"type": "a_future_type", "id": 7},
    ],
)
def test_items_of_every_type_get_an_id_when_they_have_none(item: dict[str, Any]) -> None:
    """Ids are the cursors of item pages (the SDK's auto-pager goes on from the last item's
    id, and stops at an item without one): an item of a type the gateway does not model
    gets an ``item_`` id too, and is otherwise kept as sent."""
    [decoded] = decode_items([item])
    assert decoded["id"].startswith("item_")
    assert {k: v for k, v in decoded.items() if k != "id"} == {
        k: v for k, v in item.items() if k != "id"
    }
    labelled = {**item, "id": "given"}
    assert decode_items([labelled]) == [labelled]


def test_a_modelled_item_kept_as_sent_gets_the_id_of_its_type() -> None:
    """An ``mcp_list_tools`` is read by the gateway but kept as sent: its id is its type's
    (``mcpl_``), as the gateway's own listing would have, not ``item_``."""
    [decoded] = decode_items([{"type": "mcp_list_tools", "server_label": "s", "tools": []}])
    assert decoded["id"].startswith("mcpl_")


@pytest.mark.parametrize("kind", ["computer_call_output", "program_output"])
def test_an_unmodelled_output_is_completed_without_a_status(kind: str) -> None:
    """The SDK's item of these types has a ``status`` (hosted fills it in when it lists
    them), which their input may leave out."""
    [decoded] = decode_items([{"type": kind, "call_id": "c"}])
    assert decoded["status"] == "completed"
    [kept] = decode_items([{"type": kind, "call_id": "c", "status": "incomplete"}])
    assert kept["status"] == "incomplete"


def test_a_client_id_is_kept() -> None:
    item = {
        "type": "mcp_approval_response",
        "approval_request_id": "r",
        "approve": True,
        "id": "a1",
    }
    assert decode_items([item]) == [item]
    output = {"type": "shell_call_output", "call_id": "c", "output": [], "id": "o1"}
    assert decode_items([output]) == [{**output, "status": "completed"}]


def test_an_apply_patch_output_keeps_its_status_and_is_completed_without_one() -> None:
    """Its ``status`` says whether the patch applied (the model is told it): kept as sent,
    ``completed`` when the client sent none, as the decoder gives every modelled item."""
    failed = {"type": "apply_patch_call_output", "call_id": "c", "status": "failed", "output": ""}
    [decoded] = decode_items([failed])
    assert decoded["id"].startswith("apco_")
    assert {k: v for k, v in decoded.items() if k != "id"} == failed
    [bare] = decode_items([{"type": "apply_patch_call_output", "call_id": "c"}])
    assert bare["status"] == "completed"


@pytest.mark.parametrize("reference", [{"id": "msg_1"}, {"type": None, "id": "msg_1"}])
def test_an_item_reference_may_leave_out_its_type(reference: dict[str, Any]) -> None:
    """The API's ``ItemReference.type`` is optional and nullable: an item of an ``id``
    alone (no ``role``: that would be a message) references a stored item."""
    assert decode_items([reference]) == [{"type": "item_reference", "id": "msg_1"}]


def test_an_image_states_its_detail_as_every_image_read_back_does() -> None:
    """The SDK's ``ResponseInputImage.detail`` is required: an image stored without it is
    read back (``input_items.list``) as another type. ``auto`` is the API's default."""
    url = "data:image/png;base64,AA=="

    def image(**detail: Any) -> dict[str, Any]:
        message = {"role": "user", "content": [{"type": "input_image", "image_url": url, **detail}]}
        [decoded] = decode_items([message])
        part: dict[str, Any] = decoded["content"][0]
        return part

    assert image()["detail"] == "auto"
    assert image(detail="original")["detail"] == "original"
    with pytest.raises(InvalidRequest) as caught:
        image(detail="ultra")
    assert (caught.value.param, caught.value.code) == (
        "input[0].content[0].detail",
        "invalid_value",
    )


@pytest.mark.parametrize("kind", ["function_call_output", "custom_tool_call_output"])
def test_an_image_in_a_tool_output_states_its_detail_too(kind: str) -> None:
    """A tool output's image is read back as the SDK's ``ResponseInputImage`` as well:
    without ``detail`` the listed item is of no type the SDK knows."""
    url = "data:image/png;base64,AA=="
    output = [
        {"type": "input_text", "text": "shot"},
        {"type": "input_image", "image_url": url},
        {"type": "input_image", "image_url": url, "detail": "low"},
        {"type": "future_part", "x": 1},
    ]
    [decoded] = decode_items([{"type": kind, "call_id": "c", "output": output}])
    assert decoded["output"] == [
        output[0],
        {**output[1], "detail": "auto"},
        output[2],
        output[3],
    ]


@pytest.mark.parametrize("ttl", [None, "30m", "12h"])
def test_a_prompt_cache_breakpoint_stays_on_every_part_that_may_have_one(ttl: str | None) -> None:
    """``input_text``, ``input_image`` and ``input_file`` (a message's, a tool output's)
    keep it as sent, for the upstream: a Responses one reads it, an Anthropic one is sent
    a mark there."""
    mark = {"mode": "explicit"} if ttl is None else {"mode": "explicit", "ttl": ttl}
    parts = [
        {"type": "input_text", "text": "t", "prompt_cache_breakpoint": mark},
        {"type": "input_image", "image_url": "https://x/i.png", "prompt_cache_breakpoint": mark},
        {"type": "input_file", "file_url": "https://x/d.pdf", "prompt_cache_breakpoint": mark},
        {"type": "input_file", "file_url": "https://x/e.pdf", "prompt_cache_breakpoint": None},
    ]
    message, output = decode_items(
        [
            {"role": "user", "content": parts},
            {"type": "function_call_output", "call_id": "c", "output": parts},
        ]
    )
    for decoded in (message["content"], output["output"]):
        assert [part["prompt_cache_breakpoint"] for part in decoded] == [mark, mark, mark, None]
