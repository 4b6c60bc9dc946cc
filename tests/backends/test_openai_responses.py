from typing import Any

import pytest
from openai.types.responses import ResponseInputParam
from pydantic import TypeAdapter

from stateway.backends.responses_reply import Reported, StreamState, from_upstream_response
from stateway.backends.responses_request import to_upstream
from stateway.core.generation_settings import GenerationSettings
from stateway.core.inference import (
    Annotation,
    CallBegun,
    CallInput,
    Delta,
    Finish,
    InferenceRequest,
    MessageStart,
    OutputItem,
    ReasoningDelta,
    ReasoningSignature,
    RefusalDelta,
    SummaryBreak,
    TextDelta,
    ToolCallDelta,
    UsageReport,
)
from stateway.core.items import Item
from stateway.core.reasoning import REDACTED, SEALED_BY_RESPONSES, responses_maker
from stateway.core.tools.catalog import model_tools
from stateway.core.usage import Usage
from stateway.protocols.responses.decode import decode_create
from stateway.protocols.responses.items import decode_items

USAGE = {
    "input_tokens": 4,
    "output_tokens": 6,
    "input_tokens_details": {"cached_tokens": 1, "cache_write_tokens": 3},
    "output_tokens_details": {"reasoning_tokens": 2},
}


def test_request_is_stateless_with_the_full_context() -> None:
    items = [
        {
            "id": "msg_1",
            "type": "message",
            "role": "user",
            "content": [{"type": "input_text", "text": "hi"}],
        },
        {
            "id": "fc_1",
            "status": "completed",
            "type": "function_call",
            "call_id": "c",
            "name": "f",
            "arguments": "{}",
        },
    ]
    settings = GenerationSettings(
        tools=[
            {"type": "function", "name": "f", "parameters": {}, "strict": None, "description": None}
        ],
        reasoning_effort="low",
        reasoning_summary="auto",
        text_format={"type": "json_object"},
        verbosity="low",
        max_output_tokens=9,
    )
    body = to_upstream(
        InferenceRequest(
            "m", "rules", items, settings, stream=True, tools=model_tools(settings.tools)
        )
    )
    assert body["store"] is False
    assert body["stream"] is True
    assert body["instructions"] == "rules"
    assert body["input"] == items
    assert body["reasoning"] == {"effort": "low", "summary": "auto"}
    assert body["text"] == {"format": {"type": "json_object"}, "verbosity": "low"}
    assert body["max_output_tokens"] == 9
    assert body["tool_choice"] == "auto"
    assert "temperature" not in body


def test_optional_settings_are_sent_with_their_values() -> None:
    settings = GenerationSettings(
        temperature=0.3,
        top_p=0.8,
        max_output_tokens=50,
        user="u-1",
        safety_identifier="s-1",
        prompt_cache_key="k-1",
        prompt_cache_retention="24h",
        prompt_cache_options={"mode": "explicit"},
        metadata={"team": "a"},
        service_tier="priority",
        image={"context_compression": "disabled"},
        presence_penalty=0.5,
        frequency_penalty=0.25,
        stop_sequences=["END"],
        top_k=4,
        seed=7,
    )
    body = to_upstream(InferenceRequest("m", None, [], settings, stream=False))
    assert body == {
        "model": "m",
        "input": [],
        "store": False,
        "stream": False,
        "temperature": 0.3,
        "top_p": 0.8,
        "max_output_tokens": 50,
        "user": "u-1",
        "safety_identifier": "s-1",
        "prompt_cache_key": "k-1",
        "prompt_cache_retention": "24h",
        "prompt_cache_options": {"mode": "explicit"},
        "metadata": {"team": "a"},
        "service_tier": "priority",
        "image": {"context_compression": "disabled"},
        "include": ["reasoning.encrypted_content"],
    }  # the Responses API has no penalties, stop sequences, top_k or seed: not sent


def test_a_messages_clients_cache_marks_are_not_sent() -> None:
    cached = {"type": "function", "name": "f", "cache_control": {"type": "ephemeral"}}
    sent = to_upstream(
        InferenceRequest("m", None, [], GenerationSettings(), stream=True, tools=[cached])
    )
    assert sent["tools"] == [{"type": "function", "name": "f"}]


def test_a_zero_temperature_is_sent() -> None:
    body = to_upstream(
        InferenceRequest("m", None, [], GenerationSettings(temperature=0.0), stream=True)
    )
    assert body["temperature"] == 0.0


def feed(events: list[dict[str, Any]]) -> tuple[list[Delta], bool]:
    state = StreamState()
    deltas = [delta for event in events for delta in state.feed(event)]
    return deltas, state.finished


def test_stream_events_to_deltas() -> None:
    call = {"type": "function_call", "call_id": "call_9", "name": "f", "arguments": ""}
    deltas, finished = feed(
        [
            {"type": "response.created", "response": {}},
            {"type": "response.reasoning_text.delta", "delta": "hm"},
            {"type": "response.output_text.delta", "delta": "Hi"},
            {"type": "response.output_item.added", "output_index": 2, "item": call},
            {"type": "response.function_call_arguments.delta", "output_index": 2, "delta": "{}"},
            {
                "type": "response.output_item.done",
                "output_index": 2,
                "item": {**call, "arguments": "{}"},
            },
            {"type": "response.completed", "response": {"status": "completed", "usage": USAGE}},
        ]
    )
    assert finished
    assert deltas == [
        ReasoningDelta("hm"),
        TextDelta("Hi"),
        ToolCallDelta(2, "call_9", "f", ""),
        ToolCallDelta(2, None, None, "{}"),
        UsageReport(Usage(4, 6, 1, 2, cache_write_tokens=3)),
        Finish("stop"),
    ]


def test_arguments_only_in_item_done_are_not_lost() -> None:
    call = {"type": "function_call", "call_id": "c", "name": "f", "arguments": '{"a":1}'}
    deltas, _ = feed(
        [
            {
                "type": "response.output_item.added",
                "output_index": 0,
                "item": {**call, "arguments": ""},
            },
            {"type": "response.output_item.done", "output_index": 0, "item": call},
        ]
    )
    assert "".join(d.arguments for d in deltas if isinstance(d, ToolCallDelta)) == '{"a":1}'


def added(index: int, item: dict[str, Any]) -> dict[str, Any]:
    return {"type": "response.output_item.added", "output_index": index, "item": item}


def done(index: int, item: dict[str, Any]) -> dict[str, Any]:
    return {"type": "response.output_item.done", "output_index": index, "item": item}


def summary(index: int, part: int, delta: str) -> dict[str, Any]:
    return {
        "type": "response.reasoning_summary_text.delta",
        "output_index": index,
        "summary_index": part,
        "delta": delta,
    }


def test_a_reasoning_summary_is_the_reasoning_when_no_reasoning_text_streams() -> None:
    """As OpenAI's reasoning models stream it: summary parts only."""
    reasoning = {"type": "reasoning", "summary": [], "content": []}
    deltas, _ = feed(
        [
            added(0, reasoning),
            summary(0, 0, "**Plan**"),
            summary(0, 0, " first"),
            summary(0, 1, "then"),
            done(0, {**reasoning, "summary": [{"type": "summary_text", "text": "x"}]}),
        ]
    )
    assert deltas == [
        ReasoningDelta("**Plan**"),
        ReasoningDelta(" first"),
        SummaryBreak("\n\n"),
        ReasoningDelta("then"),
    ]
    parts = [{"type": "summary_text", "text": t} for t in ("**Plan** first", "then")]
    whole = {**reasoning, "summary": parts}
    given, _ = feed([added(0, reasoning), done(0, whole)])
    unstreamed = list(from_upstream_response({"status": "completed", "output": [whole]}))
    expected = [ReasoningDelta("**Plan** first"), SummaryBreak("\n\n"), ReasoningDelta("then")]
    assert given == unstreamed[:3] == expected  # a part each, whole as streamed
    text_too, _ = feed(
        [
            {"type": "response.reasoning_text.delta", "output_index": 0, "delta": "think"},
            summary(0, 0, "thought"),
            done(0, reasoning),
        ]
    )
    assert text_too == [ReasoningDelta("think")], "the summary would repeat the text"


def test_hidden_reasoning_keeps_its_upstreams_seal() -> None:
    """OpenAI hides its reasoning (a summary at most): its ``encrypted_content`` is what the
    model continues from, so it ends the item; vLLM's text comes with it and is enough."""
    hidden = {"type": "reasoning", "summary": [], "content": [], "encrypted_content": None}
    sealed = {**hidden, "encrypted_content": "gAAAA-blob"}
    deltas, _ = feed([added(0, hidden), summary(0, 0, "Plan"), done(0, sealed)])
    assert deltas == [
        ReasoningDelta("Plan"),
        ReasoningSignature(SEALED_BY_RESPONSES + "gAAAA-blob"),
    ]
    unsummarized, _ = feed([added(0, hidden), done(0, sealed)])
    assert unsummarized == [ReasoningSignature(SEALED_BY_RESPONSES + "gAAAA-blob")]
    whole = list(from_upstream_response({"status": "completed", "output": [sealed]}))
    assert whole[0] == ReasoningSignature(SEALED_BY_RESPONSES + "gAAAA-blob")

    shown = {**sealed, "content": [{"type": "reasoning_text", "text": "think"}]}
    deltas, _ = feed(
        [
            added(0, hidden),
            {"type": "response.reasoning_text.delta", "output_index": 0, "delta": "think"},
            done(0, shown),
        ]
    )
    assert deltas == [ReasoningDelta("think")]
    whole = list(from_upstream_response({"status": "completed", "output": [shown]}))
    assert whole[0] == ReasoningDelta("think")
    assert not any(isinstance(delta, ReasoningSignature) for delta in whole)


def test_reasoning_goes_back_with_its_own_upstreams_seal_only() -> None:
    def sent(encrypted: str, maker: str = SEALED_BY_RESPONSES) -> dict[str, Any]:
        item = {
            "id": "rs_1",
            "type": "reasoning",
            "summary": [{"type": "summary_text", "text": "Plan"}],
            "content": [{"type": "reasoning_text", "text": "Plan"}],
            "encrypted_content": encrypted,
        }
        request = InferenceRequest("m", None, [item], GenerationSettings(), stream=True)
        body = to_upstream(request, maker)
        assert body["include"] == ["reasoning.encrypted_content"]
        result: dict[str, Any] = body["input"][0]
        return result

    assert sent(SEALED_BY_RESPONSES + "gAAAA-blob") == {
        "id": "rs_1",
        "type": "reasoning",
        "summary": [{"type": "summary_text", "text": "Plan"}],
        "content": [],
        "encrypted_content": "gAAAA-blob",
    }  # as it came: the text was read from the summary
    for foreign in ("EqQBCkYIBRgCKkB-signature==", REDACTED + "data"):
        assert "encrypted_content" not in sent(foreign)
        assert sent(foreign)["content"] == [{"type": "reasoning_text", "text": "Plan"}]
    # a backend's own blob goes back to it; another backend's (another server or
    # account) does not; one stored before makers were named goes to any
    ours, theirs = responses_maker("a"), responses_maker("b")
    assert ours != theirs
    assert ours.startswith("responses@")
    assert sent(ours + "gAAAA-blob", ours)["encrypted_content"] == "gAAAA-blob"
    assert "encrypted_content" not in sent(theirs + "gAAAA-blob", ours)
    assert sent(theirs + "gAAAA-blob", ours)["content"] == [
        {"type": "reasoning_text", "text": "Plan"}
    ]
    assert sent(SEALED_BY_RESPONSES + "gAAAA-blob", ours)["encrypted_content"] == "gAAAA-blob"


def test_reasoning_that_carries_nothing_for_the_upstream_is_not_sent() -> None:
    """Another upstream's seal with no text (a foreign ``redacted_thinking``, a blob of
    another backend hidden as OpenAI hides its reasoning) would reach the upstream as a
    bare reasoning item: nothing for the model, and an id hosted OpenAI looks up and
    refuses with ``store: false`` (``Item with id 'rs_...' not found``)."""
    bare = {"type": "reasoning", "summary": [], "content": []}
    items: list[Item] = [
        {"id": "msg_1", "type": "message", "role": "user", "content": "hi"},
        {**bare, "id": "rs_1", "encrypted_content": REDACTED + "data"},
        {**bare, "id": "rs_2", "encrypted_content": responses_maker("b") + "gAAAA"},
        {**bare, "id": "rs_3", "encrypted_content": SEALED_BY_RESPONSES + "gAAAA"},
    ]
    request = InferenceRequest("m", None, items, GenerationSettings(), stream=True)
    sent = to_upstream(request, responses_maker("a"))["input"]
    assert [item["id"] for item in sent] == ["msg_1", "rs_3"]  # its own blob goes back


def test_a_backends_blobs_carry_its_prefix() -> None:
    maker = responses_maker("openai")
    hidden = {"type": "reasoning", "summary": [], "content": [], "encrypted_content": "gAAAA"}
    state = StreamState(maker=maker)
    deltas = list(state.feed(added(0, {**hidden, "encrypted_content": None})))
    deltas += state.feed(done(0, hidden))
    assert deltas == [ReasoningSignature(maker + "gAAAA")]
    whole = from_upstream_response({"status": "completed", "output": [hidden]}, maker=maker)
    assert next(iter(whole)) == ReasoningSignature(maker + "gAAAA")


def test_items_that_come_only_whole_are_not_lost() -> None:
    message = {
        "type": "message",
        "role": "assistant",
        "phase": "final_answer",
        "content": [{"type": "output_text", "text": "whole"}],
    }
    reasoning = {"type": "reasoning", "summary": [{"type": "summary_text", "text": "s"}]}
    deltas, _ = feed(
        [
            added(0, reasoning),
            done(0, reasoning),
            added(1, {**message, "content": []}),
            done(1, message),
        ]
    )
    assert deltas == [ReasoningDelta("s"), MessageStart("final_answer"), TextDelta("whole")]
    streamed, _ = feed(
        [
            added(0, {**message, "content": [], "phase": "commentary"}),
            {"type": "response.output_text.delta", "output_index": 0, "delta": "whole"},
            done(0, message),
        ]
    )
    assert streamed == [MessageStart("commentary"), TextDelta("whole")], "not repeated"


def test_an_upstreams_annotations_come_after_their_text_streamed_or_whole() -> None:
    """A Responses upstream's annotations (a hosted tool's citations) are kept, each after
    the text it annotates, its text indices moved to where its part stands in the
    message's text (a message's parts are one text here); a file's ``index`` is no place
    in the text and stays."""
    cite = {"type": "url_citation", "url": "u", "title": "T", "start_index": 0, "end_index": 3}
    moved = {**cite, "start_index": 4, "end_index": 7}
    filed = {"type": "file_citation", "file_id": "file_1", "filename": "a.txt", "index": 1}
    first = {"type": "output_text", "text": "one ", "annotations": [filed]}
    second = {"type": "output_text", "text": "two", "annotations": [cite]}
    message = {"type": "message", "role": "assistant", "content": [first, second]}
    whole = list(from_upstream_response({"status": "completed", "output": [message]}))
    assert whole == [
        MessageStart(),
        TextDelta("one two"),
        Annotation(filed),
        Annotation(moved),
        Finish("stop"),
    ]

    def part(kind: str, index: int, **fields: Any) -> dict[str, Any]:
        return {"type": kind, "output_index": 0, "content_index": index, **fields}

    annotated = "response.output_text.annotation.added"
    streamed, _ = feed(
        [
            added(0, {**message, "content": []}),
            part("response.output_text.delta", 0, delta="one "),
            part(annotated, 0, annotation_index=0, annotation=filed),
            part("response.output_text.done", 0, text="one "),
            part("response.output_text.delta", 1, delta="two"),
            part(annotated, 1, annotation_index=0, annotation=cite),
            part("response.output_text.done", 1, text="two"),
            done(0, message),
        ]
    )
    assert streamed == [
        MessageStart(),
        TextDelta("one "),
        Annotation(filed),
        TextDelta("two"),
        Annotation(moved),
    ]


def test_a_refusal_streamed_or_whole() -> None:
    refusal = {"type": "refusal", "refusal": "I can't."}
    message = {"type": "message", "role": "assistant", "content": [refusal]}
    streamed, _ = feed(
        [
            added(0, {**message, "content": []}),
            {"type": "response.refusal.delta", "output_index": 0, "delta": "I can't."},
            {"type": "response.refusal.done", "output_index": 0, "refusal": "I can't."},
            done(0, message),
        ]
    )
    assert streamed == [MessageStart(), RefusalDelta("I can't.")]
    whole = list(from_upstream_response({"status": "completed", "output": [message]}))
    assert whole == [MessageStart(), RefusalDelta("I can't."), Finish("stop")]


def test_incomplete_and_failed_streams() -> None:
    deltas, _ = feed(
        [
            {
                "type": "response.incomplete",
                "response": {
                    "status": "incomplete",
                    "incomplete_details": {"reason": "max_output_tokens"},
                },
            }
        ]
    )
    assert deltas[-1] == Finish("length")
    with pytest.raises(Reported) as failed:  # classified by the backend
        feed([{"type": "response.failed", "response": {"error": {"message": "boom"}}}])
    assert failed.value.error == {"message": "boom"}
    with pytest.raises(Reported) as errored:
        feed([{"type": "error", "message": "bad"}])
    assert errored.value.error == {"type": "error", "message": "bad"}


def test_whole_response_to_deltas() -> None:
    payload = {
        "status": "completed",
        "output": [
            {
                "type": "reasoning",
                "summary": [],
                "content": [{"type": "reasoning_text", "text": "r"}],
            },
            {
                "type": "message",
                "role": "assistant",
                "content": [{"type": "output_text", "text": "t"}],
            },
            {"type": "function_call", "call_id": "c", "name": "f", "arguments": "{}"},
        ],
        "usage": USAGE,
    }
    assert list(from_upstream_response(payload)) == [
        ReasoningDelta("r"),
        MessageStart(),
        TextDelta("t"),
        ToolCallDelta(2, "c", "f", "{}"),
        UsageReport(Usage(4, 6, 1, 2, cache_write_tokens=3)),
        Finish("stop"),
    ]


def test_assistant_messages_get_the_status_output_messages_need() -> None:
    assistant = {
        "id": "msg_a",
        "type": "message",
        "role": "assistant",
        "content": [{"type": "output_text", "text": "x"}],
    }
    body = to_upstream(InferenceRequest("m", None, [assistant], GenerationSettings(), stream=False))
    assert body["input"] == [{**assistant, "status": "completed"}]


def test_upstream_input_validates_as_the_sdk_input_type() -> None:
    """What a stateless Responses server parses with the same types (vLLM does)."""
    command = decode_create(
        b'{"model": "m", "input": ['
        b'{"role": "developer", "content": "rules"},'
        b'{"role": "user", "content": [{"type": "input_text", "text": "hi"}]},'
        b'{"type": "reasoning", "summary": [],'
        b' "content": [{"type": "reasoning_text", "text": "r"}]},'
        b'{"role": "assistant", "content": "hello"},'
        b'{"type": "function_call", "call_id": "c", "name": "f", "arguments": "{}"},'
        b'{"type": "function_call_output", "call_id": "c", "output": "ok"}]}'
    )
    body = to_upstream(
        InferenceRequest(
            "m",
            None,
            command.input,
            command.settings,
            stream=True,
            tools=model_tools(command.settings.tools),
        )
    )
    validated = TypeAdapter(ResponseInputParam).validate_python(body["input"])
    assert len(validated) == 6


IMAGE_CALL = {"id": "ig_1", "type": "image_generation_call", "status": "completed", "result": "x"}
SHELL_CALL = {
    "id": "sh_1",
    "type": "shell_call",
    "call_id": "c1",
    "action": {"commands": ["ls"]},
    "status": "completed",
}


def test_native_tools_and_shell_items_are_sent_as_they_are() -> None:
    image = {"type": "image_generation", "size": "auto"}
    output = {"type": "shell_call_output", "call_id": "c1", "output": [], "id": "sho_1"}
    odd = {"type": "future_item", "payload": 1}
    body = to_upstream(
        InferenceRequest(
            "m",
            None,
            [SHELL_CALL, output, odd],
            GenerationSettings(),
            stream=False,
            native_tools=[image, {"type": "shell"}],
        )
    )
    assert body["tools"] == [image, {"type": "shell"}]
    assert body["input"] == [SHELL_CALL, output, odd]


def test_the_gateways_ids_of_unmodelled_items_are_not_sent() -> None:
    """An item of a type the gateway does not model is sent without the ``item_`` id the
    gateway gave it (a page cursor of its own): hosted OpenAI holds an input item's id to
    its type's prefix (``fc``, ``ctc``, ...), which the gateway does not know for these. An
    id from elsewhere (the upstream's own, the client's) goes as it came."""
    screenshot = {"type": "computer_screenshot", "image_url": "data:,"}
    given = decode_items(
        [
            {"type": "computer_call_output", "call_id": "c", "output": screenshot},
            {"type": "computer_call_output", "call_id": "d", "output": screenshot, "id": "cu_2"},
            IMAGE_CALL,
        ]
    )
    shell_output = {"type": "local_shell_call_output", "id": "item_1", "output": "x"}  # its call's
    request = InferenceRequest(
        "m", None, [*given, shell_output], GenerationSettings(), stream=False
    )
    sent = to_upstream(request)["input"]
    unlabelled = {k: v for k, v in given[0].items() if k != "id"}
    assert sent == [unlabelled, given[1], IMAGE_CALL, shell_output]
    assert given[0]["id"].startswith("item_")  # kept by the gateway


def test_an_unmodelled_items_encrypted_content_goes_as_it_came() -> None:
    """Only a reasoning item's seal is the gateway's to read (or leave out): another type's
    ``encrypted_content`` is the upstream's, sent back untouched."""
    [given] = decode_items([{"type": "a_future_type", "encrypted_content": "opaque"}])
    request = InferenceRequest("m", None, [given], GenerationSettings(), stream=False)
    assert to_upstream(request)["input"] == [
        {"type": "a_future_type", "encrypted_content": "opaque"}
    ]


def test_unmodelled_output_items_come_back_whole() -> None:
    added = {**IMAGE_CALL, "status": "in_progress"}
    deltas, _ = feed(
        [
            {"type": "response.output_item.added", "output_index": 0, "item": added},
            {"type": "response.image_generation_call.partial_image", "output_index": 0},
            {"type": "response.output_item.done", "output_index": 0, "item": IMAGE_CALL},
            {"type": "response.output_item.done", "output_index": 1, "item": SHELL_CALL},
        ]
    )
    assert deltas == [OutputItem(IMAGE_CALL), OutputItem(SHELL_CALL)]
    whole = list(
        from_upstream_response({"status": "completed", "output": [IMAGE_CALL, SHELL_CALL]})
    )
    assert whole[:2] == [OutputItem(IMAGE_CALL), OutputItem(SHELL_CALL)]


def test_a_custom_calls_input_streams_in_its_pieces_then_it_comes_whole() -> None:
    """Begun (added), its input as the upstream sends it, then whole (done), as hosted
    streams a custom tool's call; llama-server's, placed by its item id."""
    call = {"id": "ctc_1", "type": "custom_tool_call", "call_id": "c", "name": "exec"}
    added = {**call, "input": "", "status": "in_progress"}
    whole = {**call, "input": "ls -la", "status": "completed"}
    for at in ({"output_index": 0}, {}):
        deltas, _ = feed(
            [
                {"type": "response.output_item.added", **at, "item": added},
                {
                    "type": "response.custom_tool_call_input.delta",
                    **at,
                    "item_id": "ctc_1",
                    "delta": "ls",
                },
                {
                    "type": "response.custom_tool_call_input.delta",
                    **at,
                    "item_id": "ctc_1",
                    "delta": " -la",
                },
                {
                    "type": "response.custom_tool_call_input.done",
                    **at,
                    "item_id": "ctc_1",
                    "input": "ls -la",
                },
                {"type": "response.output_item.done", **at, "item": whole},
            ]
        )
        assert deltas == [CallBegun(added), CallInput("ls"), CallInput(" -la"), OutputItem(whole)]


def test_fields_a_messages_client_marks_are_not_sent_to_responses() -> None:
    items = [
        {
            "type": "message",
            "role": "user",
            "content": [
                {"type": "input_text", "text": "q", "cache_control": {"type": "ephemeral"}},
                {
                    "type": "input_file",
                    "file_data": "data:text/plain;base64,YQ==",
                    "source": {"type": "content", "content": "a"},
                    "context": "notes",
                    "citations": {"enabled": True},
                },
            ],
        },
        {"type": "function_call", "call_id": "c", "name": "f", "arguments": "{}"},
        {
            "type": "function_call_output",
            "call_id": "c",
            "is_error": True,
            "cache_control": {"type": "ephemeral"},
            "output": [{"type": "input_text", "text": "x", "cache_control": {"type": "ephemeral"}}],
        },
        {
            "type": "message",
            "role": "user",
            "content": [{"type": "input_text", "text": "hit", "search_result": {"x": 1}}],
        },
    ]
    request = InferenceRequest("m", None, items, GenerationSettings(), stream=False)
    sent = to_upstream(request)["input"]
    assert sent[0]["content"] == [
        {"type": "input_text", "text": "q"},
        {"type": "input_file", "file_data": "data:text/plain;base64,YQ=="},
    ]
    assert sent[2] == {
        "type": "function_call_output",
        "call_id": "c",
        "output": [{"type": "input_text", "text": "x"}],
    }
    assert sent[3]["content"] == [{"type": "input_text", "text": "hit"}]
    assert "cache_control" in items[0]["content"][0]  # the context itself is untouched


def test_each_mark_of_another_client_is_left_out_alone() -> None:
    """Each of a tool result's marks is left out on its own, a Chat client's message
    ``name`` (a message's only: a call's is its tool's), and an image a custom content
    document showed is sent as an image of its own."""
    output: Item = {"type": "function_call_output", "call_id": "c", "output": "x"}
    shown = {"type": "input_image", "image_url": "https://x/a.png", "detail": "auto"}
    items: list[Item] = [
        {"type": "function_call", "call_id": "c", "name": "f", "arguments": "{}"},
        {**output, "is_error": True},
        {**output, "cache_control": {"type": "ephemeral"}},
        {"type": "message", "role": "user", "name": "ann", "content": "hi"},
        {"type": "message", "role": "user", "content": [{**shown, "in_document": True}]},
    ]
    request = InferenceRequest("m", None, items, GenerationSettings(), stream=False)
    assert to_upstream(request)["input"] == [
        items[0],
        output,
        output,
        {"type": "message", "role": "user", "content": "hi"},
        {"type": "message", "role": "user", "content": [shown]},
    ]


def test_an_assistant_message_keeps_the_status_it_has() -> None:
    cut: Item = {
        "type": "message",
        "role": "assistant",
        "status": "incomplete",
        "content": [{"type": "output_text", "text": "x"}],
    }
    request = InferenceRequest("m", None, [cut], GenerationSettings(), stream=False)
    assert to_upstream(request)["input"] == [cut]


def test_a_prompt_cache_breakpoint_reaches_a_responses_upstream_as_it_came() -> None:
    """Hosted OpenAI reads it (on input parts, a tool output's too); so do the request's
    prompt cache options."""
    mark = {"mode": "explicit", "ttl": "12h"}
    part = {"type": "input_text", "text": "q", "prompt_cache_breakpoint": mark}
    items = [
        {"type": "message", "role": "user", "content": [part]},
        {"type": "function_call", "call_id": "c", "name": "f", "arguments": "{}"},
        {"type": "function_call_output", "call_id": "c", "output": [part]},
    ]
    options = {"mode": "explicit", "ttl": "12h"}
    settings = GenerationSettings(prompt_cache_options=options)
    sent = to_upstream(InferenceRequest("m", None, items, settings, stream=False))
    assert sent["input"][0]["content"] == [part]
    assert sent["input"][2]["output"] == [part]
    assert sent["prompt_cache_options"] == options
    assert "cache_control" not in sent


def llama(kind: str, item_id: str, **fields: Any) -> dict[str, Any]:
    """An event as llama-server's ``/v1/responses`` writes it: its item named by
    ``item_id`` alone, with no ``output_index``, ``content_index`` or ``sequence_number``."""
    return {"type": f"response.{kind}", "item_id": item_id, **fields}


def test_llama_servers_events_are_placed_by_their_item_ids() -> None:
    """llama-server numbers nothing: each item's place is the order its
    ``output_item.added`` came in, and a delta's item is its ``item_id``. Its reasoning
    item is done only after the message and the call that follow it (events as the
    pinned build wrote them)."""
    reasoning = {"id": "rs_1", "summary": [], "type": "reasoning", "content": []}
    message = {"content": [], "id": "msg_1", "role": "assistant", "type": "message"}
    call = {"id": "fc_1", "call_id": "call_1", "name": "f", "type": "function_call"}
    text = [{"type": "output_text", "annotations": [], "logprobs": [], "text": "Hi"}]
    deltas, finished = feed(
        [
            {"type": "response.created", "response": {"id": "resp_1", "status": "in_progress"}},
            {"type": "response.output_item.added", "item": {**reasoning, "encrypted_content": ""}},
            llama("reasoning_text.delta", "rs_1", delta="hm"),
            {"type": "response.output_item.added", "item": message},
            llama("content_part.added", "msg_1", part={"type": "output_text", "text": ""}),
            llama("output_text.delta", "msg_1", delta="Hi"),
            {"type": "response.output_item.added", "item": {**call, "arguments": ""}},
            llama("function_call_arguments.delta", "fc_1", delta="{"),
            llama("function_call_arguments.delta", "fc_1", delta="}"),
            {
                "type": "response.output_item.done",
                "item": {
                    **reasoning,
                    "content": [{"type": "reasoning_text", "text": "hm"}],
                    "encrypted_content": "",
                },
            },
            llama("output_text.done", "msg_1", text="Hi"),
            {"type": "response.output_item.done", "item": {**message, "content": text}},
            {"type": "response.output_item.done", "item": {**call, "arguments": "{}"}},
            {
                "type": "response.completed",
                "response": {"id": "resp_1", "status": "completed", "usage": USAGE},
            },
        ]
    )
    assert finished
    assert deltas == [
        ReasoningDelta("hm"),
        MessageStart(),
        TextDelta("Hi"),
        ToolCallDelta(2, "call_1", "f", ""),
        ToolCallDelta(2, None, None, "{"),
        ToolCallDelta(2, None, None, "}"),
        UsageReport(Usage(4, 6, 1, 2, cache_write_tokens=3)),
        Finish("stop"),
    ]  # nothing repeated from the items done, the reasoning's empty seal left out


def test_an_item_done_unannounced_takes_the_next_place() -> None:
    call = {"id": "fc_2", "call_id": "call_2", "name": "g", "arguments": "{}"}
    deltas, _ = feed(
        [
            {"type": "response.output_item.added", "item": {"id": "msg_1", "type": "message"}},
            llama("output_text.delta", "msg_1", delta="Hi"),
            {"type": "response.output_item.done", "item": {**call, "type": "function_call"}},
        ]
    )
    assert deltas == [MessageStart(), TextDelta("Hi"), ToolCallDelta(1, "call_2", "g", "{}")]


@pytest.mark.parametrize(
    "event",
    [
        {"type": "response.function_call_arguments.delta", "delta": "{"},
        llama("function_call_arguments.delta", "fc_unknown", delta="{"),
        {"type": "response.output_item.added", "item": {"type": "function_call", "name": "f"}},
        {"type": "response.output_item.done", "item": {"type": "function_call", "name": "f"}},
    ],
)
def test_an_event_placed_by_neither_index_nor_known_id_is_malformed(
    event: dict[str, Any],
) -> None:
    """What cannot be placed is not guessed: the backend reads the ``KeyError`` as a
    malformed event."""
    with pytest.raises(KeyError):
        feed([event])
