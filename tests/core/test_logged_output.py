"""A dead run's output rebuilt from its logged events (as the Responses wire stores them):
what a cancel at the point the log was cut leaves."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from stateway.core import events as ev
from stateway.core.assembler import OutputAssembler
from stateway.core.compaction.reasoning_output import ReasoningOutput
from stateway.core.generation_settings import GenerationSettings
from stateway.core.inference import ToolCallDelta
from stateway.core.items import Item
from stateway.core.logged_output import logged_output
from stateway.core.response import ResponseState
from stateway.core.tools.catalog import Catalog
from stateway.core.tools.open_items import OpenItems
from stateway.protocols.responses.event_log import decode_event_json
from stateway.protocols.responses.stream import encode_event_json

Step = Callable[[OutputAssembler], None]

TOKEN = {"token": "A", "logprob": -0.5, "bytes": [65], "top_logprobs": []}

SCRIPT: list[Step] = [
    lambda a: a.reasoning("Let me "),
    lambda a: a.reasoning("think."),
    lambda a: a.summary_break("\n\n"),
    lambda a: a.reasoning("Then answer."),
    lambda a: a.text("Hel", [TOKEN]),
    lambda a: a.text("lo"),
    lambda a: a.refusal("I can't"),
    lambda a: a.refusal(" say more."),
    lambda a: a.text("Other"),
    lambda a: a.tool_call(ToolCallDelta(0, "call_a", "lookup", '{"ci')),
    lambda a: a.tool_call(ToolCallDelta(0, None, None, 'ty": "Paris"}')),
    lambda a: a.text("Then"),
    lambda a: a.tool_call(ToolCallDelta(1, "call_b", "lookup", "")),
    lambda a: a.tool_call(ToolCallDelta(1, None, None, '{"city"')),
    lambda a: a.message("final_answer"),
    lambda a: a.text("Done"),
]
"""A round's deltas, as its upstream sends them: reasoning (a summary of two parts), text
with tokens, a refusal
after the text, another message, a call, text, another call, a message with a phase."""


def log_of(events: list[ev.Event]) -> list[bytes]:
    """The events as a journal stores them."""
    return [encode_event_json(seq, event) for seq, event in enumerate(events)]


def state() -> ResponseState:
    return ResponseState("resp_1", "t", 1.0, "m", None, None, True, GenerationSettings())


@pytest.mark.parametrize("summary", [True, False], ids=["summary", "no_summary"])
@pytest.mark.parametrize("cut", range(len(SCRIPT) + 1))
def test_a_log_cut_after_any_delta_gives_what_a_cancel_then_leaves(cut: int, summary: bool) -> None:
    output: list[Item] = []
    events: list[ev.Event] = [ev.ResponseCreated(state()), ev.ResponseInProgress(state())]
    reasoning = ReasoningOutput(summary=True) if summary else None
    assembler = OutputAssembler(output, events.append, set(), Catalog([]), reasoning=reasoning)
    for step in SCRIPT[:cut]:
        step(assembler)

    rebuilt = logged_output(log_of(events), decode_event_json)

    assembler.finish("incomplete")  # what a cancel does to the round at this point
    assert rebuilt == output


def test_a_log_with_no_output_gives_none_without_complaint(
    caplog: pytest.LogCaptureFixture,
) -> None:
    created = log_of([ev.ResponseCreated(state()), ev.ResponseInProgress(state())])
    assert logged_output(created, decode_event_json) == []
    assert logged_output([], decode_event_json) == []
    assert caplog.records == []  # rebuilt, not given up on


def test_a_message_opened_without_text_is_an_incomplete_empty_one() -> None:
    item = {"id": "msg_1", "type": "message", "status": "in_progress", "role": "assistant"}
    part = {"type": "output_text", "text": "", "annotations": [], "logprobs": []}
    log = log_of([ev.ItemAdded(0, {**item, "content": []}), ev.PartAdded(0, 0, "msg_1", part)])

    [message] = logged_output(log, decode_event_json)

    assert message == {**item, "status": "incomplete", "content": [part]}


def call_added(index: int, item_id: str) -> ev.ItemAdded:
    return ev.ItemAdded(
        index,
        {
            "id": item_id,
            "type": "function_call",
            "status": "in_progress",
            "call_id": f"call_{item_id}",
            "name": "lookup",
            "arguments": "",
        },
    )


def test_a_log_cut_in_a_call_s_arguments_gives_the_call_with_what_it_had() -> None:
    log = log_of(
        [
            call_added(0, "fc_1"),
            ev.ArgumentsDelta(0, "fc_1", '{"city": '),
            ev.ArgumentsDelta(0, "fc_1", '"Par'),
        ]
    )

    [call] = logged_output(log, decode_event_json)

    assert (call["status"], call["arguments"]) == ("incomplete", '{"city": "Par')
    assert (call["call_id"], call["name"]) == ("call_fc_1", "lookup")


def test_a_finished_call_is_kept_as_it_was_done() -> None:
    arguments = '{"city": "Paris"}'
    added = call_added(0, "fc_1")
    done = {**added.item, "status": "completed", "arguments": arguments}
    log = log_of(
        [
            added,
            ev.ArgumentsDelta(0, "fc_1", arguments),
            ev.ArgumentsDone(0, "fc_1", "lookup", arguments),
            ev.ItemDone(0, done),
        ]
    )

    assert logged_output(log, decode_event_json) == [done]


def test_a_finished_call_then_one_cut_keeps_the_first_whole() -> None:
    first = {**call_added(0, "fc_1").item, "status": "completed", "arguments": "{}"}
    added = [call_added(0, "fc_1"), ev.ItemDone(0, first), call_added(1, "fc_2")]
    log = log_of([*added, ev.ArgumentsDelta(1, "fc_2", "{")])

    done, cut = logged_output(log, decode_event_json)

    assert done == first
    assert (cut["id"], cut["status"], cut["arguments"]) == ("fc_2", "incomplete", "{")


def mcp_call(item_id: str) -> Item:
    return {
        "id": item_id,
        "type": "mcp_call",
        "status": "in_progress",
        "server_label": "docs",
        "name": "search",
        "arguments": "",
        "output": None,
        "error": None,
        "approval_request_id": None,
    }


def test_the_gateway_s_calls_left_open_are_closed_as_a_cancel_closes_them() -> None:
    ran, waiting, writing = mcp_call("mcp_1"), mcp_call("mcp_2"), mcp_call("mcp_3")
    ran_done = {**ran, "status": "completed", "arguments": "{}", "output": "found"}
    log = log_of(
        [
            ev.ItemAdded(0, ran),
            ev.McpArgumentsDelta(0, "mcp_1", "{}"),
            ev.McpArgumentsDone(0, "mcp_1", "{}"),
            ev.ToolProgress("response.mcp_call.completed", 0, "mcp_1"),
            ev.ItemDone(0, ran_done),
            ev.ItemAdded(1, waiting),  # closed, its call not run yet
            ev.McpArgumentsDelta(1, "mcp_2", '{"q": "a"}'),
            ev.McpArgumentsDone(1, "mcp_2", '{"q": "a"}'),
            ev.ItemAdded(2, writing),  # its arguments being written
            ev.McpArgumentsDelta(2, "mcp_3", '{"q": '),
        ]
    )

    output = logged_output(log, decode_event_json)

    expected: list[Item] = [
        ran_done,
        {**waiting, "arguments": '{"q": "a"}'},
        {**writing, "arguments": '{"q": '},
    ]
    open_items = OpenItems(expected, lambda _: None)
    for index in (1, 2):
        open_items.added(expected[index], index)
    open_items.abandon()  # as a cancel's ``tools.abandon()`` leaves them
    assert output == expected
    assert [item["status"] for item in output] == ["completed", "incomplete", "incomplete"]


def test_a_listing_left_open_fails_as_a_cancel_fails_it() -> None:
    listing = {"id": "mcpl_1", "type": "mcp_list_tools", "server_label": "docs", "tools": []}

    [failed] = logged_output(log_of([ev.ItemAdded(0, listing)]), decode_event_json)

    assert failed == {**listing, "error": "The response ended before the tools were listed."}


def test_calls_held_behind_the_one_being_written_are_not_in_the_log() -> None:
    """A second call's fragments wait while the first is written (never logged): a
    cancel writes it (the first ``completed``), the log shows the first one alone."""
    output: list[Item] = []
    events: list[ev.Event] = []
    assembler = OutputAssembler(output, events.append, set())
    assembler.tool_call(ToolCallDelta(0, "call_a", "f", "{}"))
    assembler.tool_call(ToolCallDelta(1, "call_b", "f", "{"))

    [first] = logged_output(log_of(events), decode_event_json)

    assembler.finish("incomplete")
    assert [(i["call_id"], i["status"]) for i in output] == [
        ("call_a", "completed"),
        ("call_b", "incomplete"),
    ]
    assert (first["call_id"], first["status"], first["arguments"]) == ("call_a", "incomplete", "{}")


def test_payloads_it_cannot_read_are_skipped() -> None:
    log = [
        b"{}",
        b"not json",
        b"[1, 2]",
        b'{"type": ["response.output_item.added"]}',
        b'{"type": "response.output_item.added", "output_index": "0", "item": {}}',
        b'{"type": "response.output_text.delta", "output_index": 0}',
        *log_of([call_added(0, "fc_1")]),
        b'{"type": "response.output_item.added", "output_index": 5, "item": {"type": "x"}}',
    ]

    [call] = logged_output(log, decode_event_json)

    assert (call["id"], call["status"]) == ("fc_1", "incomplete")


def test_a_reasoning_item_cut_keeps_its_summary_when_it_streamed_one() -> None:
    output: list[Item] = []
    events: list[Any] = []
    summary = ReasoningOutput(summary=True)
    assembler = OutputAssembler(output, events.append, set(), reasoning=summary)
    assembler.reasoning("hmm")

    [reasoning] = logged_output(log_of(events), decode_event_json)

    assert reasoning["summary"] == [{"type": "summary_text", "text": "hmm"}]
    assert reasoning["status"] == "incomplete"
    assert "encrypted_content" not in reasoning  # never sealed: never continued from


def test_an_open_item_no_assembler_writes_is_closed_incomplete_not_resumed() -> None:
    """An item passed through whole, or a compaction, is added and done in one go; a log
    cut between the two leaves it open, and it is closed as open tools are (never as the
    call the assembler would finish: it has no ``name``)."""
    compaction = {"id": "cmp_1", "type": "compaction", "encrypted_content": "x"}
    payloads = log_of([ev.ItemAdded(0, compaction)])
    assert logged_output(payloads, decode_event_json) == [{**compaction, "status": "incomplete"}]


def test_a_log_that_cannot_be_replayed_leaves_the_output_empty_and_says_so(
    caplog: pytest.LogCaptureFixture,
) -> None:
    def broken(payload: bytes) -> ev.Event | None:
        raise ValueError("a shape no decoder foresaw")

    assert logged_output([b"{}"], broken) == []
    assert "could not be rebuilt" in caplog.text


def message_added(index: int, item_id: str) -> ev.ItemAdded:
    item = {"id": item_id, "type": "message", "status": "in_progress", "role": "assistant"}
    return ev.ItemAdded(index, {**item, "content": []})


def test_a_log_cut_as_a_refusal_part_begins_keeps_that_part_empty() -> None:
    output: list[Item] = []
    events: list[ev.Event] = []
    assembler = OutputAssembler(output, events.append, set())
    assembler.text("Hi")
    assembler.refusal("no")
    assert isinstance(events[-1], ev.RefusalDelta)

    [message] = logged_output(log_of(events[:-1]), decode_event_json)

    assert message["status"] == "incomplete"
    assert [(p["type"], p.get("text", p.get("refusal"))) for p in message["content"]] == [
        ("output_text", "Hi"),
        ("refusal", ""),
    ]


def test_a_refusal_whose_part_is_missing_from_the_log_is_kept() -> None:
    """A log is never a reason for a recovery to fail: a delta read without the event
    that announced its part still counts."""
    log = log_of([message_added(0, "msg_1"), ev.RefusalDelta(0, 0, "msg_1", "no")])

    [message] = logged_output(log, decode_event_json)

    assert message["content"] == [{"type": "refusal", "refusal": "no"}]


def test_an_item_past_the_end_of_the_log_and_its_deltas_are_skipped() -> None:
    """A log with a gap (an item's events unreadable): what comes after the gap is not
    put anywhere, nor taken for the item being written."""
    log = log_of(
        [
            call_added(0, "fc_1"),
            ev.ArgumentsDelta(0, "fc_1", "{"),
            message_added(2, "msg_2"),
            ev.PartAdded(2, 0, "msg_2", {"type": "output_text", "text": "", "annotations": []}),
            ev.TextDelta(2, 0, "msg_2", "lost"),
            message_added(-1, "msg_3"),
            ev.TextDelta(-1, 0, "msg_3", "lost"),
        ]
    )

    [call] = logged_output(log, decode_event_json)

    assert (call["id"], call["status"], call["arguments"]) == ("fc_1", "incomplete", "{")


def test_deltas_of_an_item_whose_announcement_is_unreadable_are_skipped() -> None:
    log = [
        b'{"type": "response.output_item.added", "output_index": 0, "item": {}}',
        *log_of([ev.ArgumentsDelta(0, "fc_1", "{"), ev.TextDelta(0, 0, "fc_1", "x")]),
    ]

    assert logged_output(log, decode_event_json) == []


def test_a_call_done_after_the_next_one_was_added_keeps_both() -> None:
    """The gateway runs a round's calls after it: the first one's run is done after the
    second was written, whose run the log was cut in."""
    first, second = mcp_call("mcp_1"), mcp_call("mcp_2")
    first_done = {**first, "status": "completed", "arguments": "{}", "output": "found"}
    log = log_of(
        [
            ev.ItemAdded(0, first),
            ev.McpArgumentsDone(0, "mcp_1", "{}"),
            ev.ItemAdded(1, second),
            ev.McpArgumentsDelta(1, "mcp_2", '{"q": 1}'),
            ev.McpArgumentsDone(1, "mcp_2", '{"q": 1}'),
            ev.ItemDone(0, first_done),
        ]
    )

    output = logged_output(log, decode_event_json)

    assert output == [first_done, {**second, "arguments": '{"q": 1}', "status": "incomplete"}]


def test_a_log_cut_after_a_call_s_arguments_were_done_closes_that_call() -> None:
    log = log_of(
        [
            ev.ItemAdded(0, mcp_call("mcp_1")),
            ev.McpArgumentsDelta(0, "mcp_1", "{}"),
            ev.McpArgumentsDone(0, "mcp_1", "{}"),
        ]
    )

    [call] = logged_output(log, decode_event_json)

    assert (call["arguments"], call["status"]) == ("{}", "incomplete")


def test_an_approval_request_cut_is_done_as_a_cancel_does_it_without_a_status() -> None:
    """An ``mcp_approval_request`` is never open (it has no status): the assembler ends
    it done, and nothing closes it again as ``incomplete``."""
    request = {
        "id": "mcpr_1",
        "type": "mcp_approval_request",
        "server_label": "docs",
        "name": "search",
        "arguments": "",
    }

    assert logged_output(log_of([ev.ItemAdded(0, request)]), decode_event_json) == [request]


CUSTOM_EXEC: Item = {"type": "custom", "name": "exec"}
PATCH = '*** Begin Patch\n*** Add File: a.txt\n+say "hi"\n*** End Patch'

CUSTOM_SCRIPT: list[Step] = [
    lambda a: a.tool_call(ToolCallDelta(0, "call_a", "exec", '{"input": "*** Begin')),
    lambda a: a.tool_call(ToolCallDelta(0, None, None, ' Patch\\n*** Add File: a.txt\\n+say \\"')),
    lambda a: a.tool_call(ToolCallDelta(0, None, None, 'hi\\"\\n*** End Patch"}')),
    lambda a: a.text("Now"),
    lambda a: a.call_begun({"type": "custom_tool_call", "call_id": "c_b", "name": "exec"}),
    lambda a: a.call_input("*** Begin Patch\n"),
    lambda a: a.call_input('+say "hi"\n'),
    lambda a: a.item(
        {"type": "custom_tool_call", "call_id": "c_b", "name": "exec", "input": PATCH}
    ),
    lambda a: a.item(
        {
            "id": "ctc_c",
            "type": "custom_tool_call",
            "call_id": "c_c",
            "name": "exec",
            "input": PATCH,
        }
    ),
]
"""Custom calls (Codex's freeform ``apply_patch``): one written from a function's
arguments (a Chat upstream), one an upstream began and streamed raw, one given whole."""


@pytest.mark.parametrize("cut", range(len(CUSTOM_SCRIPT) + 1))
def test_a_log_cut_in_a_custom_call_keeps_the_input_the_model_wrote(cut: int) -> None:
    """Its input is logged only as its input's events (decoded, never as arguments): the
    rebuilt call has what a cancel at that point leaves it."""
    output: list[Item] = []
    events: list[ev.Event] = []
    assembler = OutputAssembler(output, events.append, set(), Catalog([CUSTOM_EXEC]))
    for step in CUSTOM_SCRIPT[:cut]:
        step(assembler)

    rebuilt = logged_output(log_of(events), decode_event_json)

    assembler.finish("incomplete")
    assert rebuilt == output


def test_a_log_cut_after_a_custom_call_s_input_was_done_keeps_all_of_it() -> None:
    added = {"id": "ctc_1", "type": "custom_tool_call", "status": "in_progress"}
    added |= {"call_id": "c", "name": "exec", "input": ""}
    log = log_of(
        [
            ev.ItemAdded(0, added),
            ev.CustomInputDelta(0, "ctc_1", "*** Begin"),
            ev.CustomInputDone(0, "ctc_1", PATCH),
        ]
    )

    [call] = logged_output(log, decode_event_json)

    assert (call["input"], call["status"]) == (PATCH, "incomplete")
