"""The shell tools offered as functions: their calls, their outputs, the model's view."""

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

SHELL_CALL: Item = {
    "id": "sh_1",
    "type": "shell_call",
    "call_id": "c1",
    "action": {"commands": ["ls"], "timeout_ms": 5},
    "status": "completed",
}
SHELL_OUTPUT: Item = {
    "type": "shell_call_output",
    "call_id": "c1",
    "output": [
        {"stdout": "a.txt", "stderr": "warn", "outcome": {"type": "exit", "exit_code": 2}},
        {"stdout": "", "stderr": "", "outcome": {"type": "timeout"}},
    ],
}
LOCAL_CALL: Item = {
    "id": "lsh_1",
    "type": "local_shell_call",
    "call_id": "c2",
    "action": {"type": "exec", "command": ["pwd"], "env": {}},
    "status": "completed",
}
LOCAL_OUTPUT: Item = {"type": "local_shell_call_output", "id": "c2", "output": "/tmp"}


def assemble(tool: Item, name: str, arguments: str) -> tuple[Item, list[ev.Event]]:
    output: list[Item] = []
    events: list[ev.Event] = []
    assembler = OutputAssembler(output, events.append, set(), Catalog([tool]))
    assembler.tool_call(ToolCallDelta(0, "call_9", name, arguments[:5]))
    assembler.tool_call(ToolCallDelta(0, None, None, arguments[5:]))
    assembler.finish()
    [item] = output
    assert assembler.tool_calls == [item]
    return item, events


def test_the_model_is_offered_a_function_named_for_the_tool() -> None:
    catalog = Catalog(
        [{"type": "shell", "environment": {"type": "local"}}, {"type": "local_shell"}]
    )
    functions = catalog.model_tools()
    assert [f["name"] for f in functions] == ["shell", "local_shell"]
    assert functions[0]["parameters"]["required"] == ["commands"]
    assert functions[1]["parameters"]["required"] == ["command"]
    assert catalog.model_choice({"type": "shell"}) == {"type": "function", "name": "shell"}


def test_a_shell_function_call_comes_out_as_a_shell_call() -> None:
    arguments = '{"commands": ["ls", "pwd"], "timeout_ms": 100, "max_output_length": 9}'
    item, events = assemble({"type": "shell"}, "shell", arguments)
    assert item["type"] == "shell_call"
    assert item["id"].startswith("sh_")
    assert (item["call_id"], item["status"]) == ("call_9", "completed")
    assert item["action"] == {"commands": ["ls", "pwd"], "timeout_ms": 100, "max_output_length": 9}
    added, done = events
    assert isinstance(added, ev.ItemAdded)
    assert added.item["action"] == {"commands": []}
    assert isinstance(done, ev.ItemDone)
    assert done.item == item


def test_a_local_shell_function_call_comes_out_as_a_local_shell_call() -> None:
    arguments = '{"command": ["ls"], "env": {"A": "1"}, "working_directory": "/w"}'
    item, _ = assemble({"type": "local_shell"}, "local_shell", arguments)
    assert item["type"] == "local_shell_call"
    assert item["action"] == {
        "type": "exec",
        "command": ["ls"],
        "env": {"A": "1"},
        "working_directory": "/w",
    }


@pytest.mark.parametrize(
    ("arguments", "commands"),
    [("ls -la", ["ls -la"]), ('{"commands": "ls"}', ["ls"]), ("{}", []), ("", [])],
)
def test_arguments_off_the_schema_still_give_commands(arguments: str, commands: list[str]) -> None:
    item = client_hosted.open_call("shell", "c")
    client_hosted.close_call(item, arguments)
    assert item["action"] == {"commands": commands}


def test_the_model_sees_shell_pairs_as_function_calls_and_text_outputs() -> None:
    seen = model_items([SHELL_CALL, SHELL_OUTPUT, LOCAL_CALL, LOCAL_OUTPUT])
    assert [i["type"] for i in seen] == ["function_call", "function_call_output"] * 2
    call, output, local_call, local_output = seen
    assert call["name"] == "shell"
    assert orjson.loads(call["arguments"]) == {"commands": ["ls"], "timeout_ms": 5}
    assert output["call_id"] == "c1"
    assert output["output"] == "exit code: 2\nstdout:\na.txt\nstderr:\nwarn\ntimed out"
    assert local_call["name"] == "local_shell"
    assert orjson.loads(local_call["arguments"]) == {"command": ["pwd"], "env": {}}
    assert (local_output["call_id"], local_output["output"]) == ("c2", "/tmp")


def test_an_exit_without_its_code_is_told_as_its_output_alone() -> None:
    chunk = {"stdout": "hi", "stderr": "", "outcome": {"type": "exit", "exit_code": None}}
    [_, output] = model_items([SHELL_CALL, {**SHELL_OUTPUT, "output": [chunk]}])
    assert output["output"] == "stdout:\nhi"


def test_an_upstream_that_speaks_them_natively_gets_them_as_they_are() -> None:
    items: list[dict[str, Any]] = [SHELL_CALL, SHELL_OUTPUT]
    assert model_items(items, client_hosted.ITEM_TYPES) == items
    assert client_hosted.ITEM_TYPES <= REWRITTEN_ITEM_TYPES


def test_a_local_shell_output_names_its_call_by_id_or_call_id() -> None:
    assert client_hosted.output_call_id(LOCAL_OUTPUT) == "c2"
    assert client_hosted.output_call_id({**LOCAL_OUTPUT, "call_id": "c3"}) == "c3"
    assert client_hosted.output_call_id(SHELL_OUTPUT) == "c1"
