"""The apply_patch tool offered as a function: its calls, their outputs, the model's view."""

from __future__ import annotations

from typing import Any

import orjson
import pytest

from stateway.core import events as ev
from stateway.core.assembler import OutputAssembler
from stateway.core.inference import ToolCallDelta
from stateway.core.items import Item
from stateway.core.tools import client_hosted
from stateway.core.tools.catalog import Catalog
from stateway.core.tools.history import REWRITTEN_ITEM_TYPES, model_items

DIFF = "@@ def greet():\n-    print('Hi')\n+    print('Hello')\n"
CALL: Item = {
    "id": "apc_1",
    "type": "apply_patch_call",
    "call_id": "c1",
    "operation": {"type": "update_file", "path": "app.py", "diff": DIFF},
    "status": "completed",
}
OUTPUT: Item = {
    "id": "apco_1",
    "type": "apply_patch_call_output",
    "call_id": "c1",
    "status": "completed",
    "output": "Updated app.py",
}


def assemble(arguments: str) -> tuple[Item, list[ev.Event]]:
    output: list[Item] = []
    events: list[ev.Event] = []
    assembler = OutputAssembler(output, events.append, set(), Catalog([{"type": "apply_patch"}]))
    assembler.tool_call(ToolCallDelta(0, "call_9", "apply_patch", arguments[:5]))
    assembler.tool_call(ToolCallDelta(0, None, None, arguments[5:]))
    assembler.finish()
    [item] = output
    assert assembler.tool_calls == [item]
    return item, events


def test_the_model_is_offered_a_function_whose_arguments_are_the_operation() -> None:
    catalog = Catalog([{"type": "apply_patch"}])
    [function] = catalog.model_tools()
    assert function["name"] == "apply_patch"
    assert "V4A" in function["description"]
    parameters = function["parameters"]
    assert parameters["required"] == ["type", "path"]
    assert parameters["properties"]["type"]["enum"] == ["create_file", "update_file", "delete_file"]
    assert set(parameters["properties"]) == {"type", "path", "diff"}
    choice = {"type": "apply_patch"}
    assert catalog.model_choice(choice) == {"type": "function", "name": "apply_patch"}


def test_allowed_tools_name_it_by_its_type() -> None:
    catalog = Catalog([{"type": "function", "name": "f"}, {"type": "apply_patch"}])
    allowed = {"type": "allowed_tools", "mode": "auto", "tools": [{"type": "apply_patch"}]}
    assert catalog.model_choice(allowed) == "auto"
    assert [f["name"] for f in catalog.model_tools()] == ["apply_patch"]


def test_an_apply_patch_function_call_comes_out_as_an_apply_patch_call() -> None:
    arguments = orjson.dumps({"type": "update_file", "path": "app.py", "diff": DIFF}).decode()
    item, events = assemble(arguments)
    assert item["type"] == "apply_patch_call"
    assert item["id"].startswith("apc_")
    assert (item["call_id"], item["status"]) == ("call_9", "completed")
    assert item["operation"] == {"type": "update_file", "path": "app.py", "diff": DIFF}
    added, done = events  # no delta events: the operation is whole when the call ends
    assert isinstance(added, ev.ItemAdded)
    assert added.item["status"] == "in_progress"
    assert added.item["operation"] == {"type": "update_file", "path": "", "diff": ""}
    assert isinstance(done, ev.ItemDone)
    assert done.item == item


def test_a_delete_has_no_diff() -> None:
    item, _ = assemble('{"type": "delete_file", "path": "old.py", "diff": ""}')
    assert item["operation"] == {"type": "delete_file", "path": "old.py"}


@pytest.mark.parametrize(
    ("arguments", "operation"),
    [
        (  # the hosted item's shape, the operation nested
            '{"operation": {"type": "create_file", "path": "a.txt", "diff": "+hi"}}',
            {"type": "create_file", "path": "a.txt", "diff": "+hi"},
        ),
        (  # a type short of its suffix, a path under another name, the diff as lines
            '{"type": "create", "file_path": "a.txt", "diff": ["+a", "+b"]}',
            {"type": "create_file", "path": "a.txt", "diff": "+a\n+b"},
        ),
        (  # no such type, no path: still a call, for the client to refuse
            '{"type": "rename_file", "diff": "@@"}',
            {"type": "update_file", "path": "", "diff": "@@"},
        ),
        (  # a new file's text, its lines not marked as added
            '{"type": "create_file", "path": "a.txt", "diff": "x = 1\\n\\ny = 2\\n"}',
            {"type": "create_file", "path": "a.txt", "diff": "+x = 1\n+\n+y = 2\n+"},
        ),
        ('{"path": 3}', {"type": "update_file", "path": "3", "diff": ""}),
        ("[1, 2]", {"type": "update_file", "path": "", "diff": ""}),
        ("", {"type": "update_file", "path": "", "diff": ""}),
        (  # not JSON: a patch in the V4A envelope, its first file's section
            "*** Begin Patch\n*** Add File: new.py\n+x = 1\n*** End Patch",
            {"type": "create_file", "path": "new.py", "diff": "+x = 1"},
        ),
        (  # the envelope inside the diff
            '{"type": "update_file", "path": "a.py", "diff": "*** Begin Patch\\n'
            '*** Update File: a.py\\n@@\\n-a\\n+b\\n*** End of File\\n*** End Patch\\n"}',
            {"type": "update_file", "path": "a.py", "diff": "@@\n-a\n+b\n*** End of File"},
        ),
        (
            "\n*** Begin Patch\n*** Delete File: gone.py\n*** End Patch",
            {"type": "delete_file", "path": "gone.py"},
        ),
        ("just some text", {"type": "update_file", "path": "", "diff": "just some text"}),
    ],
)
def test_arguments_off_the_schema_still_give_an_operation(arguments: str, operation: Item) -> None:
    item = client_hosted.open_call("apply_patch", "c")
    client_hosted.close_call(item, arguments)
    assert item["operation"] == operation


def test_the_model_sees_the_pair_as_a_function_call_and_a_text_output() -> None:
    call, output = model_items([CALL, OUTPUT])
    assert (call["type"], call["name"], call["call_id"]) == ("function_call", "apply_patch", "c1")
    assert orjson.loads(call["arguments"]) == CALL["operation"]
    assert (output["type"], output["call_id"]) == ("function_call_output", "c1")
    assert output["output"] == "completed\nUpdated app.py"


@pytest.mark.parametrize(
    ("answer", "text"),
    [
        ({"status": "failed", "output": "no such file"}, "failed\nno such file"),
        ({"status": "failed", "output": None}, "failed"),
        ({"status": "completed"}, "completed"),
    ],
)
def test_an_output_tells_its_status(answer: dict[str, Any], text: str) -> None:
    outcome = {k: v for k, v in OUTPUT.items() if k not in ("status", "output")} | answer
    [_, output] = model_items([CALL, outcome])
    assert output["output"] == text


def test_an_upstream_that_speaks_them_natively_gets_them_as_they_are() -> None:
    assert model_items([CALL, OUTPUT], client_hosted.ITEM_TYPES) == [CALL, OUTPUT]
    assert client_hosted.ITEM_TYPES <= REWRITTEN_ITEM_TYPES
    assert {"apply_patch_call", "apply_patch_call_output"} <= client_hosted.ITEM_TYPES


ENVELOPE = (
    "*** Begin Patch\n"
    "*** Update File: app.py\n@@\n-a\n+b\n"
    "*** Add File: new.py\n+x = 1\n"
    "*** Delete File: old.py\n"
    "*** End Patch"
)
SPLIT = [
    {"type": "update_file", "path": "app.py", "diff": "@@\n-a\n+b"},
    {"type": "create_file", "path": "new.py", "diff": "+x = 1"},
    {"type": "delete_file", "path": "old.py"},
]


def assemble_all(arguments: str, used: set[str]) -> tuple[list[Item], list[ev.Event]]:
    output: list[Item] = []
    events: list[ev.Event] = []
    assembler = OutputAssembler(output, events.append, used, Catalog([{"type": "apply_patch"}]))
    assembler.tool_call(ToolCallDelta(0, "call_9", "apply_patch", arguments[:5]))
    assembler.tool_call(ToolCallDelta(0, None, None, arguments[5:]))
    assembler.finish()
    assert assembler.tool_calls == output
    return output, events


@pytest.mark.parametrize(
    "arguments",
    [ENVELOPE, orjson.dumps({"type": "update_file", "path": "app.py", "diff": ENVELOPE}).decode()],
)
def test_an_envelope_of_several_files_is_one_call_per_file(arguments: str) -> None:
    used: set[str] = set()
    output, events = assemble_all(arguments, used)
    assert [item["operation"] for item in output] == SPLIT
    assert all(item["type"] == "apply_patch_call" for item in output)
    assert all(item["status"] == "completed" for item in output)
    call_ids = [item["call_id"] for item in output]
    assert call_ids[0] == "call_9"  # the model's own, then ids of their own
    assert len(set(call_ids)) == 3
    assert set(call_ids) <= used
    assert len({item["id"] for item in output}) == 3
    kinds = [
        (type(event).__name__, event.output_index)
        for event in events
        if isinstance(event, ev.ItemAdded | ev.ItemDone)
    ]
    assert len(kinds) == len(events)  # no delta events
    assert kinds == [
        ("ItemAdded", 0),
        ("ItemDone", 0),
        ("ItemAdded", 1),
        ("ItemDone", 1),
        ("ItemAdded", 2),
        ("ItemDone", 2),
    ]
    done = [event.item for event in events if isinstance(event, ev.ItemDone)]
    assert done == output


def test_a_further_call_never_takes_an_id_already_used() -> None:
    used = {"call_9_2", "call_9_3"}
    output, _ = assemble_all(ENVELOPE, used)
    call_ids = [item["call_id"] for item in output]
    assert call_ids[0] == "call_9"
    assert len(set(call_ids)) == 3
    assert not set(call_ids[1:]) & {"call_9_2", "call_9_3"}


def test_the_model_sees_each_file_as_a_call_of_its_own() -> None:
    output, _ = assemble_all(ENVELOPE, set())
    answers = [
        {"type": "apply_patch_call_output", "call_id": item["call_id"], "status": "completed"}
        for item in output
    ]
    told = model_items([*output, *answers])
    calls = [item for item in told if item["type"] == "function_call"]
    assert [orjson.loads(call["arguments"]) for call in calls] == SPLIT
    assert [call["call_id"] for call in calls] == [item["call_id"] for item in output]
    outputs = [item for item in told if item["type"] == "function_call_output"]
    assert [item["call_id"] for item in outputs] == [item["call_id"] for item in output]
