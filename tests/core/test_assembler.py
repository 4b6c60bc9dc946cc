import pytest

from stateway.core import events as ev
from stateway.core.assembler import OutputAssembler
from stateway.core.compaction.reasoning_output import ReasoningOutput
from stateway.core.inference import ToolCallDelta
from stateway.core.items import Item
from stateway.core.open_item import OpenItem
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
    assert ev.ArgumentsDone(0, item["id"], "spawn", '{"a": 1}') in events  # named publicly
    assert assembler.tool_calls == [item]


def test_a_custom_call_streams_its_input_as_its_arguments_come() -> None:
    output: list[Item] = []
    events: list[ev.Event] = []
    custom = {"type": "custom", "name": "exec"}
    catalog = Catalog([{"type": "namespace", "name": "functions", "tools": [custom]}])
    assembler = OutputAssembler(output, events.append, set(), catalog)
    assembler.tool_call(ToolCallDelta(0, "call_1", "functions__exec", '{"input": "ls'))
    assert assembler.output_so_far()[0]["input"] == "ls"  # what a reader sees of it so far
    assembler.tool_call(ToolCallDelta(0, None, None, ' -la"}'))
    assembler.finish()
    [item] = output
    assert item["type"] == "custom_tool_call"
    assert item["id"].startswith("ctc_")
    assert (item["name"], item["namespace"], item["input"]) == ("exec", "functions", "ls -la")
    assert "arguments" not in item
    assert item["status"] == "completed"
    assert assembler.tool_calls == [item]  # it goes back to the client
    kinds = [type(event).__name__ for event in events]
    assert kinds == [
        "ItemAdded",
        "CustomInputDelta",
        "CustomInputDelta",
        "CustomInputDone",
        "ItemDone",
    ]
    added = events[0]
    assert isinstance(added, ev.ItemAdded)
    assert (added.item["input"], added.item["status"]) == ("", "in_progress")  # opened empty
    assert events[1] == ev.CustomInputDelta(0, item["id"], "ls")  # as its arguments come
    assert events[2] == ev.CustomInputDelta(0, item["id"], " -la")
    assert events[3] == ev.CustomInputDone(0, item["id"], "ls -la")


def test_a_custom_call_given_whole_streams_its_input_and_goes_back() -> None:
    """From an upstream that speaks Responses natively, whole: announced with no input
    yet, its input streamed as a call written here streams it, then done as it came; a
    client call, so a round that also called a gateway tool ends with it."""
    output: list[Item] = []
    events: list[ev.Event] = []
    catalog = Catalog([{"type": "custom", "name": "exec"}])
    assembler = OutputAssembler(output, events.append, set(), catalog)
    call = {"id": "ctc_1", "type": "custom_tool_call", "call_id": "c", "name": "exec"}
    call["input"] = "ls -la"
    assembler.item(call)
    assembler.finish()
    assert output == [call]
    assert assembler.tool_calls == [call]
    assert events == [
        ev.ItemAdded(0, {**call, "input": ""}),
        ev.CustomInputDelta(0, "ctc_1", "ls -la"),
        ev.CustomInputDone(0, "ctc_1", "ls -la"),
        ev.ItemDone(0, call),
    ]


BEGUN: Item = {"id": "ctc_1", "type": "custom_tool_call", "call_id": "c", "name": "exec"}


def begun_call() -> tuple[list[Item], list[ev.Event], OutputAssembler]:
    """An assembler writing a custom call an upstream began, ``ls`` of its input so far."""
    output: list[Item] = []
    events: list[ev.Event] = []
    assembler = OutputAssembler(output, events.append, set(), Catalog([CUSTOM_EXEC]))
    assembler.call_begun({**BEGUN, "input": "", "status": "in_progress"})
    assembler.call_input("l")
    assembler.call_input("s")
    return output, events, assembler


CUSTOM_EXEC: Item = {"type": "custom", "name": "exec"}


def test_a_custom_call_an_upstream_began_streams_its_pieces_then_ends_whole() -> None:
    output, events, assembler = begun_call()
    assert assembler.output_so_far() == [{**BEGUN, "input": "ls", "status": "in_progress"}]
    whole = {**BEGUN, "input": "ls -la", "status": "completed"}
    assembler.item(whole)
    assembler.finish()
    assert output == [whole]
    assert assembler.tool_calls == [whole]
    assert events == [
        ev.ItemAdded(0, {**BEGUN, "input": "", "status": "in_progress"}),
        ev.CustomInputDelta(0, "ctc_1", "l"),
        ev.CustomInputDelta(0, "ctc_1", "s"),
        ev.CustomInputDelta(0, "ctc_1", " -la"),  # what the pieces had not said
        ev.CustomInputDone(0, "ctc_1", "ls -la"),
        ev.ItemDone(0, whole),
    ]


def test_a_custom_call_an_upstream_began_and_never_ended_is_incomplete() -> None:
    output, events, assembler = begun_call()
    assembler.finish("incomplete")
    [item] = output
    assert (item["input"], item["status"]) == ("ls", "incomplete")
    assert events[-2:] == [ev.CustomInputDone(0, "ctc_1", "ls"), ev.ItemDone(0, item)]


def test_a_custom_call_an_upstream_began_is_ended_once_by_other_output() -> None:
    """Other output came before its whole item: it ends as streamed, and its whole item,
    coming after, is not added again."""
    output, events, assembler = begun_call()
    assembler.text("and")
    assembler.item({**BEGUN, "input": "ls", "status": "completed"})
    assembler.finish()
    assert [(item["type"], item["status"]) for item in output] == [
        ("custom_tool_call", "completed"),
        ("message", "completed"),
    ]
    assert output[0]["input"] == "ls"
    assert sum(isinstance(event, ev.CustomInputDone) for event in events) == 1


def test_a_computer_call_given_whole_goes_back_to_the_client() -> None:
    """The client runs a computer use call (an upstream's ``computer_call``), so a round
    that also called a gateway tool ends with it, not with the model asked again."""
    output: list[Item] = []
    assembler = OutputAssembler(output, [].append, set(), Catalog([]))
    call = {"id": "cu_1", "type": "computer_call", "call_id": "c", "actions": []}
    assembler.item(call)
    assembler.finish()
    assert output == [call]
    assert assembler.tool_calls == [call]


@pytest.mark.parametrize(
    "item",
    [
        {"id": "ig_1", "type": "image_generation_call", "status": "completed", "result": "x"},
        {"id": "ts_1", "type": "tool_search_call", "call_id": "c", "execution": "server"},
    ],
)
def test_a_call_the_upstream_ran_itself_stays_its_own(item: Item) -> None:
    """No ``call_id`` (an image generation), or run there (a server tool search): a
    result, not a call for the client."""
    output: list[Item] = []
    assembler = OutputAssembler(output, [].append, set(), Catalog([]))
    assembler.item(dict(item))
    assembler.finish()
    assert output == [item]
    assert assembler.tool_calls == []


def test_a_call_gets_ids_of_its_own_shape() -> None:
    """A call without an upstream id, or with one already used, gets a ``call_`` id; its
    item's id is an ``fc_`` one; a call opened without a name has an empty one."""
    output: list[Item] = []
    assembler = OutputAssembler(output, [].append, {"call_used"}, Catalog([]))
    assembler.tool_call(ToolCallDelta(0, "call_used", "f", "{}"))
    assembler.tool_call(ToolCallDelta(1, None, None, "{}"))
    assembler.finish()
    assert [item["id"][:3] for item in output] == ["fc_", "fc_"]
    assert [item["call_id"][:5] for item in output] == ["call_", "call_"]
    assert "call_used" not in [item["call_id"] for item in output]
    assert [item["name"] for item in output] == ["f", ""]


@pytest.mark.parametrize("later_ids", [["call_b", "call_b"], ["call_b", "call_c"]])
def test_a_nameless_fragment_under_another_id_continues_the_call(later_ids: list[str]) -> None:
    """Some servers give a call's later fragments an id other than its opening one's
    (Poolside's, mlx-openai-server's before its fix: one new id, or one per fragment): a
    fragment that names no function opens no call, whatever its id. A named one at the
    same index under a new id is another call (Ollama's, every call at index 0)."""
    output: list[Item] = []
    assembler = OutputAssembler(output, [].append, set(), Catalog([]))
    assembler.tool_call(ToolCallDelta(0, "call_a", "get_weather", '{"city": '))
    for call_id, piece in zip(later_ids, ['"Pa', 'ris"}'], strict=True):
        assembler.tool_call(ToolCallDelta(0, call_id, None, piece))
    assembler.tool_call(ToolCallDelta(0, "call_d", "get_time", "{}"))
    assembler.finish()
    assert [(i["call_id"], i["name"], i["arguments"]) for i in output] == [
        ("call_a", "get_weather", '{"city": "Paris"}'),
        ("call_d", "get_time", "{}"),
    ]


def test_a_call_that_came_without_arguments_takes_none_as_json() -> None:
    """vLLM streams a call of a tool taking no parameters without arguments
    (vllm-project/vllm#28806; its whole answer says ``{}``): the call done says ``{}``,
    its one arguments delta too, as hosted gives one. One cut short stays as it came."""
    output: list[Item] = []
    events: list[ev.Event] = []
    assembler = OutputAssembler(output, events.append, set(), Catalog([]))
    assembler.tool_call(ToolCallDelta(0, "call_a", "clock", ""))
    assembler.tool_call(ToolCallDelta(1, "call_b", "clock", ""))
    assembler.finish("incomplete")
    assert [item["arguments"] for item in output] == ["{}", ""]
    deltas = [e.delta for e in events if isinstance(e, ev.ArgumentsDelta)]
    done = [e.arguments for e in events if isinstance(e, ev.ArgumentsDone)]
    assert (deltas, done) == (["{}"], ["{}", ""])


def test_a_custom_call_cut_short_is_incomplete() -> None:
    output: list[Item] = []
    catalog = Catalog([{"type": "custom", "name": "exec"}])
    assembler = OutputAssembler(output, [].append, set(), catalog)
    assembler.tool_call(ToolCallDelta(0, "call_1", "exec", '{"input": "ls'))
    assembler.finish("incomplete")
    [item] = output
    assert (item["type"], item["status"]) == ("custom_tool_call", "incomplete")


def test_an_unmodelled_item_is_added_and_done_at_once_and_a_shell_call_goes_back() -> None:
    output: list[Item] = []
    events: list[ev.Event] = []
    assembler = OutputAssembler(output, events.append, set(), Catalog([]))
    assembler.text("hi")
    image = {"type": "image_generation_call", "status": "completed", "result": "x"}
    shell_call = {"id": "sh_1", "type": "shell_call", "call_id": "c", "action": {"commands": []}}
    assembler.item(image)
    assembler.item(shell_call)
    assembler.finish()
    assert [i["type"] for i in output] == ["message", "image_generation_call", "shell_call"]
    assert output[0]["status"] == "completed"  # the message closed before the item
    assert output[1]["id"].startswith("item_")
    assert output[2] == shell_call
    assert assembler.tool_calls == [shell_call]
    tail = [(type(e).__name__, getattr(e, "output_index", None)) for e in events[-4:]]
    assert tail == [("ItemAdded", 1), ("ItemDone", 1), ("ItemAdded", 2), ("ItemDone", 2)]


def test_a_native_apply_patch_call_goes_back_to_the_client() -> None:
    """From an upstream that speaks Responses natively, whole: a client call, so a round
    that also called a gateway tool ends with it rather than asking the model again."""
    output: list[Item] = []
    assembler = OutputAssembler(output, [].append, set(), Catalog([]))
    operation = {"type": "delete_file", "path": "old.py"}
    call = {"id": "apc_1", "type": "apply_patch_call", "call_id": "c", "operation": operation}
    assembler.item(call)
    assembler.finish()
    assert output == [call]
    assert assembler.tool_calls == [call]


def test_an_apply_patch_of_several_files_and_a_held_call_keep_their_places() -> None:
    """A Chat upstream's parallel calls, interleaved: the patch's further files are added
    right after its call, before the held call is written, each at its own index."""
    output: list[Item] = []
    events: list[ev.Event] = []
    tools = [{"type": "apply_patch"}, {"type": "function", "name": "f"}]
    assembler = OutputAssembler(output, events.append, {"call_2"}, Catalog(tools))
    patch = "*** Begin Patch\n*** Delete File: a\n*** Delete File: b\n*** End Patch"
    assembler.tool_call(ToolCallDelta(0, "call_1", "apply_patch", patch[:20]))
    assembler.tool_call(ToolCallDelta(1, "call_2", "f", "{}"))
    assembler.tool_call(ToolCallDelta(0, None, None, patch[20:]))
    assembler.finish()
    assert [(i["type"], i.get("operation", {}).get("path")) for i in output] == [
        ("apply_patch_call", "a"),
        ("apply_patch_call", "b"),
        ("function_call", None),
    ]
    assert assembler.tool_calls == output
    call_ids = [i["call_id"] for i in output]
    assert call_ids[:2] == ["call_1", "call_1_2"]
    assert len(set(call_ids)) == 3
    assert "call_2" not in call_ids  # already used: another
    done = [(e.output_index, e.item["id"]) for e in events if isinstance(e, ev.ItemDone)]
    assert done == [(index, item["id"]) for index, item in enumerate(output)]


def test_a_signature_seals_and_ends_its_reasoning() -> None:
    output: list[Item] = []
    events: list[ev.Event] = []
    assembler = OutputAssembler(output, events.append, set(), Catalog([]))
    assembler.reasoning("plan")
    assembler.reasoning_signature("sig1=")
    assembler.reasoning("more")
    assembler.reasoning_signature("sig2=")
    assembler.reasoning_signature("sig3=")  # thinking sent without its text
    assembler.finish()
    assert [(i["content"][0]["text"], i["encrypted_content"]) for i in output] == [
        ("plan", "sig1="),
        ("more", "sig2="),
        ("", "sig3="),
    ]
    done = [e.item for e in events if isinstance(e, ev.ItemDone)]
    assert [item["encrypted_content"] for item in done] == ["sig1=", "sig2=", "sig3="]


def test_a_signature_is_wrapped_with_the_thinking_it_signs() -> None:
    output: list[Item] = []
    wrapped: list[tuple[str, str | None]] = []

    def wrap(seal: str, text: str | None) -> str:
        wrapped.append((seal, text))
        return f"over:{seal}"

    assembler = OutputAssembler(output, lambda _: None, set(), Catalog([]), wrap=wrap)
    assembler.reasoning("plan ")
    assembler.reasoning("ahead")
    assembler.reasoning_signature("sig1=")
    assembler.item({"type": "reasoning", "summary": [], "encrypted_content": "redacted:x"})
    assembler.finish()
    assert wrapped == [("sig1=", "plan ahead"), ("redacted:x", None)]
    assert [item["encrypted_content"] for item in output] == ["over:sig1=", "over:redacted:x"]


def test_every_item_is_announced_with_its_status() -> None:
    """The Open Responses spec asks a status of every item, from its
    ``output_item.added`` on: ``in_progress`` while it is written."""
    output: list[Item] = []
    events: list[ev.Event] = []
    assembler = OutputAssembler(output, events.append, set(), Catalog([]))
    assembler.reasoning("plan")
    assembler.text("answer")
    assembler.tool_call(ToolCallDelta(0, "call_1", "f", "{}"))
    assembler.finish()
    added = [e.item for e in events if isinstance(e, ev.ItemAdded)]
    done = [e.item for e in events if isinstance(e, ev.ItemDone)]
    assert [(i["type"], i.get("status")) for i in added] == [
        ("reasoning", "in_progress"),
        ("message", "in_progress"),
        ("function_call", "in_progress"),
    ]
    assert [i.get("status") for i in done] == ["completed"] * 3


def test_an_item_given_whole_is_announced_in_progress_and_done_as_it_came() -> None:
    """An item an upstream gives whole (not written from deltas) is added and done at
    once, but announced as every item is, ``in_progress``; one without a status (a
    compaction, an approval request) is announced as it is."""
    output: list[Item] = []
    events: list[ev.Event] = []
    assembler = OutputAssembler(output, events.append, set(), Catalog([]))
    image = {"id": "ig_1", "type": "image_generation_call", "status": "completed", "result": "x"}
    search = {"id": "ws_1", "type": "web_search_call", "status": "failed", "action": {}}
    request = {"id": "mcpr_1", "type": "mcp_approval_request", "name": "f", "arguments": "{}"}
    for item in (image, search, request):
        assembler.item(item)
    assembler.finish()
    added = [e.item for e in events if isinstance(e, ev.ItemAdded)]
    done = [e.item for e in events if isinstance(e, ev.ItemDone)]
    assert [i.get("status") for i in added] == ["in_progress", "in_progress", None]
    assert done == output == [image, search, request]  # done as they came


def test_an_upstreams_annotations_are_on_the_text_and_announced_before_it_is_done() -> None:
    """As the Open Responses stream has them: one ``response.output_text.annotation.added``
    per annotation, numbered in order, before ``response.output_text.done``."""
    output: list[Item] = []
    events: list[ev.Event] = []
    assembler = OutputAssembler(output, events.append, set(), Catalog([]))
    cite = {"type": "url_citation", "url": "u", "title": "T", "start_index": 0, "end_index": 3}
    filed = {"type": "file_citation", "file_id": "file_1", "filename": "a.txt", "index": 0}
    assembler.text("see")
    assembler.annotation(cite)
    assert assembler.output_so_far()[0]["content"][0]["annotations"] == [cite]  # as it runs
    assembler.annotation(filed)
    assembler.finish()
    [message] = output
    assert message["content"][0]["annotations"] == [cite, filed]
    item_id = message["id"]
    announced = [e for e in events if isinstance(e, ev.AnnotationAdded)]
    assert announced == [
        ev.AnnotationAdded(0, 0, item_id, 0, cite),
        ev.AnnotationAdded(0, 0, item_id, 1, filed),
    ]
    kinds = [type(e) for e in events]
    assert kinds.index(ev.TextDelta) < events.index(announced[0])
    assert events.index(announced[-1]) < kinds.index(ev.TextDone)


def test_a_reasoning_item_starts_empty_with_its_part_and_summary_part_announced() -> None:
    output: list[Item] = []
    events: list[ev.Event] = []
    summary = ReasoningOutput(summary=True)
    assembler = OutputAssembler(output, events.append, set(), reasoning=summary)
    assembler.reasoning("plan")
    [item] = output
    assert item["id"].startswith("rs_")
    assert events[:3] == [
        ev.ItemAdded(
            0,
            {
                "id": item["id"],
                "type": "reasoning",
                "summary": [],
                "content": [],
                "status": "in_progress",
            },
        ),
        ev.PartAdded(0, 0, item["id"], {"type": "reasoning_text", "text": ""}),
        ev.SummaryPartAdded(0, 0, item["id"]),
    ]


def test_a_resumed_item_is_finished_as_this_assembler_s_own() -> None:
    """An item another assembler opened (a dead run's, rebuilt from its log): finished
    here with its text so far, and output counted as begun."""
    item = {"id": "msg_1", "type": "message", "status": "in_progress", "role": "assistant"}
    output: list[Item] = [{**item, "content": []}]
    opened = OpenItem(0, output[0])
    opened.text_part = True
    opened.chunks.append("Hel")
    events: list[ev.Event] = []
    assembler = OutputAssembler(output, events.append, set())

    assembler.resume(opened)

    assert assembler.started
    assembler.finish("incomplete")
    part = {"type": "output_text", "text": "Hel", "annotations": [], "logprobs": []}
    assert output == [{**item, "status": "incomplete", "content": [part]}]
    assert events == [
        ev.TextDone(0, 0, "msg_1", "Hel", None),
        ev.PartDone(0, 0, "msg_1", part),
        ev.ItemDone(0, output[0]),
    ]


def test_a_message_keeps_its_tokens_and_tokens_alone_open_nothing() -> None:
    output: list[Item] = []
    events: list[ev.Event] = []
    assembler = OutputAssembler(output, events.append, set(), Catalog([]))
    a, b, part = ({"token": t, "logprob": -1.0} for t in ("A", "B", "\ufffd"))
    assembler.text("", [part])  # no message yet: nothing to attach them to
    assembler.reasoning("hm")
    assembler.text("", [part])  # the open item is reasoning: dropped
    assembler.text("A", [a])
    assembler.text("", [part])  # part of a character: the message's
    assembler.text("B", [b])
    assembler.text("C")  # a delta without tokens adds none
    assembler.finish()
    reasoning, message = output
    assert reasoning["type"] == "reasoning"
    assert message["content"][0]["text"] == "ABC"
    assert message["content"][0]["logprobs"] == [a, part, b]
    deltas = [e for e in events if isinstance(e, ev.TextDelta)]
    assert [(e.delta, e.logprobs) for e in deltas] == [
        ("A", [a]),
        ("", [part]),
        ("B", [b]),
        ("C", None),
    ]
    [done] = [e for e in events if isinstance(e, ev.TextDone)]
    assert done.logprobs == [a, part, b]


def test_a_message_without_tokens_has_an_empty_list() -> None:
    output: list[Item] = []
    assembler = OutputAssembler(output, lambda event: None, set(), Catalog([]))
    assembler.text("hi")
    assembler.finish()
    assert output[0]["content"][0]["logprobs"] == []


def test_the_output_so_far_shows_the_item_being_written() -> None:
    output: list[Item] = []
    assembler = OutputAssembler(output, lambda event: None, set(), Catalog([]))
    assert assembler.output_so_far() == []
    assembler.reasoning("thinking")
    [reasoning] = assembler.output_so_far()
    assert reasoning["content"] == [{"type": "reasoning_text", "text": "thinking"}]
    assembler.text("Hel", [{"token": "Hel", "logprob": -1.0}])
    assembler.text("lo")
    done, message = assembler.output_so_far()
    assert done["content"] == [{"type": "reasoning_text", "text": "thinking"}]
    assert message["content"][0]["text"] == "Hello"
    assert message["content"][0]["logprobs"] == [{"token": "Hel", "logprob": -1.0}]
    assembler.tool_call(ToolCallDelta(0, "c1", "f", '{"a":'))
    *_, call = assembler.output_so_far()
    assert (call["type"], call["arguments"], call["status"]) == (
        "function_call",
        '{"a":',
        "in_progress",
    )
    assert output[-1]["arguments"] == ""  # the item itself is filled in when it closes


def assembled() -> tuple[OutputAssembler, list[Item], list[ev.Event]]:
    output: list[Item] = []
    events: list[ev.Event] = []
    return OutputAssembler(output, events.append, set(), Catalog([])), output, events


def test_a_refusal_alone_is_the_message_s_only_part() -> None:
    assembler, output, events = assembled()
    assembler.refusal("I can")
    assembler.refusal("'t.")
    assembler.finish()
    [message] = output
    assert message["content"] == [{"type": "refusal", "refusal": "I can't."}]
    item_id = message["id"]
    assert events[1:] == [
        ev.PartAdded(0, 0, item_id, {"type": "refusal", "refusal": ""}),
        ev.RefusalDelta(0, 0, item_id, "I can"),
        ev.RefusalDelta(0, 0, item_id, "'t."),
        ev.RefusalDone(0, 0, item_id, "I can't."),
        ev.PartDone(0, 0, item_id, {"type": "refusal", "refusal": "I can't."}),
        ev.ItemDone(0, message),
    ]


def test_a_refusal_after_text_is_the_second_part_and_text_after_it_a_new_message() -> None:
    assembler, output, events = assembled()
    assembler.text("Well")
    assembler.refusal("no")
    assert assembler.output_so_far()[0]["content"][1] == {"type": "refusal", "refusal": "no"}
    assembler.text("later")
    assembler.finish()
    first, second = output
    assert [p["type"] for p in first["content"]] == ["output_text", "refusal"]
    assert (first["content"][0]["text"], first["content"][1]["refusal"]) == ("Well", "no")
    assert ev.RefusalDelta(0, 1, first["id"], "no") in events
    of_first = [type(e).__name__ for e in events if getattr(e, "item_id", None) == first["id"]]
    assert of_first == [  # the text part is done before the refusal's begins, as hosted
        "PartAdded",
        "TextDelta",
        "TextDone",
        "PartDone",
        "PartAdded",
        "RefusalDelta",
        "RefusalDone",
        "PartDone",
    ]
    assert [p["text"] for p in second["content"]] == ["later"]


def test_an_upstream_s_message_start_begins_a_message_with_its_phase() -> None:
    assembler, output, events = assembled()
    assembler.message("commentary")
    assembler.text("Looking.")
    assembler.message("final_answer")
    assembler.text("Done.")
    assembler.message(None)  # begun and left empty: an empty text part
    assembler.finish()
    assert [(m.get("phase"), m["content"][0]["text"]) for m in output] == [
        ("commentary", "Looking."),
        ("final_answer", "Done."),
        (None, ""),
    ]
    assert "phase" not in output[2]
    added = [e for e in events if isinstance(e, ev.ItemAdded)]
    assert added[0].item["phase"] == "commentary"
    kinds = [type(e).__name__ for e in events if getattr(e, "output_index", None) == 2]
    assert kinds == ["ItemAdded", "PartAdded", "TextDone", "PartDone", "ItemDone"]


def test_citations_are_kept_on_the_text_part_they_cite() -> None:
    """Before its text or after it, a citation is the ``output_text`` part's (opened for
    it when it comes first), as the upstream gave it; a message without any has none."""
    cited = {"type": "char_location", "cited_text": "b.", "document_index": 0}
    assembler, output, events = assembled()
    assembler.text("a ")
    assembler.message(None)
    assembler.citation(cited)
    assert assembler.output_so_far()[1]["content"][0]["citations"] == [cited]
    assembler.text("b.")
    assembler.citation(cited)
    assembler.finish()
    first, second = output
    assert "citations" not in first["content"][0]
    [part] = second["content"]
    assert (part["text"], part["citations"]) == ("b.", [cited, cited])
    assert ev.PartDone(1, 0, second["id"], part) in events
    fresh, output, _ = assembled()
    fresh.citation(cited)
    fresh.finish()
    assert output[0]["content"][0]["citations"] == [cited]


def test_a_summarys_parts_stay_apart_and_its_text_breaks_between_them() -> None:
    """A Responses upstream's summary of several parts: each streamed as hosted streams
    it (added, text, text done, done, under its ``summary_index``) and kept apart on the
    item; its text, for the clients shown one, a paragraph apart."""
    output: list[Item] = []
    events: list[ev.Event] = []
    summary = ReasoningOutput(summary=True)
    assembler = OutputAssembler(output, events.append, set(), reasoning=summary)
    assembler.summary_break("\n\n")  # nothing to break yet
    assembler.reasoning("**Plan**")
    assembler.summary_break("\n\n")
    assembler.reasoning("look")
    assembler.reasoning(" first")
    assembler.finish()
    [item] = output
    rs = item["id"]
    assert item["summary"] == [
        {"type": "summary_text", "text": "**Plan**"},
        {"type": "summary_text", "text": "look first"},
    ]
    assert item["content"] == [{"type": "reasoning_text", "text": "**Plan**\n\nlook first"}]
    summaries = [e for e in events if type(e).__name__.startswith("Summary")]
    assert summaries == [
        ev.SummaryPartAdded(0, 0, rs),
        ev.SummaryTextDelta(0, 0, rs, "**Plan**"),
        ev.SummaryTextDone(0, 0, rs, "**Plan**"),
        ev.SummaryPartDone(0, 0, rs, "**Plan**"),
        ev.SummaryPartAdded(0, 1, rs),
        ev.SummaryTextDelta(0, 1, rs, "look"),
        ev.SummaryTextDelta(0, 1, rs, " first"),
        ev.SummaryTextDone(0, 1, rs, "look first"),
        ev.SummaryPartDone(0, 1, rs, "look first"),
    ]
    text = [e.delta for e in events if isinstance(e, ev.ReasoningDelta)]
    assert text == ["**Plan**", "\n\n", "look", " first"]


def test_a_summarys_break_unasked_for_breaks_the_text_only() -> None:
    output: list[Item] = []
    events: list[ev.Event] = []
    assembler = OutputAssembler(output, events.append, set())
    assembler.reasoning("a")
    assembler.summary_break("\n\n")
    assembler.reasoning("b")
    assembler.finish()
    assert output[0]["summary"] == []
    assert output[0]["content"] == [{"type": "reasoning_text", "text": "a\n\nb"}]
    assert not [e for e in events if type(e).__name__.startswith("Summary")]
