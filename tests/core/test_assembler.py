from stateway.core import events as ev
from stateway.core.assembler import OutputAssembler
from stateway.core.inference import ToolCallDelta
from stateway.core.items import Item
from stateway.core.tools.catalog import Catalog

NAMESPACE = {"type": "namespace", "name": "ns", "tools": [{"type": "function", "name": "spawn"}]}


def test_a_namespace_member_call_comes_out_public() -> None:
    output: list[Item] = []
    events: list[ev.Event] = []
    assembler = OutputAssembler(output, events.append, set(), Catalog([NAMESPACE]))
    assembler.tool_call(ToolCallDelta(0, "call_1", "ns__spawn", '{"a"'))
    assembler.tool_call(ToolCallDelta(0, None, None, ": 1}"))
    assembler.finish()
    [item] = output
    assert (item["name"], item["namespace"], item["arguments"]) == ("spawn", "ns", '{"a": 1}')
    added = next(e for e in events if isinstance(e, ev.ItemAdded))
    done = next(e for e in events if isinstance(e, ev.ItemDone))
    assert added.item["name"] == done.item["name"] == "spawn"
    assert done.item["namespace"] == "ns"


def test_a_custom_call_comes_out_whole_with_its_input_events() -> None:
    output: list[Item] = []
    events: list[ev.Event] = []
    custom = {"type": "custom", "name": "exec"}
    catalog = Catalog([{"type": "namespace", "name": "functions", "tools": [custom]}])
    assembler = OutputAssembler(output, events.append, set(), catalog)
    assembler.tool_call(ToolCallDelta(0, "call_1", "functions__exec", '{"input": "ls'))
    assembler.tool_call(ToolCallDelta(0, None, None, ' -la"}'))
    assembler.finish()
    [item] = output
    assert item["type"] == "custom_tool_call"
    assert item["id"].startswith("ctc_")
    assert (item["name"], item["namespace"], item["input"]) == ("exec", "functions", "ls -la")
    assert "arguments" not in item
    kinds = [type(event).__name__ for event in events]
    assert kinds == ["ItemAdded", "CustomInputDelta", "CustomInputDone", "ItemDone"]
    assert events[1] == ev.CustomInputDelta(0, item["id"], "ls -la")
    assert events[2] == ev.CustomInputDone(0, item["id"], "ls -la")
