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
