"""The Chat Completions encoders: the ``chat.completion`` object and the chunk stream, as
the ``openai`` SDK parses them, with the gateway's own tool items hidden."""

from __future__ import annotations

from typing import Any

import orjson
import pytest
from openai.lib.streaming.chat import ChatCompletionStreamState
from openai.types.chat import ChatCompletion, ChatCompletionChunk, ParsedChatCompletion

from stateway.core import events as ev
from stateway.core.errors import UpstreamError
from stateway.core.generation_settings import GenerationSettings
from stateway.core.items import Item
from stateway.core.response import ResponseState
from stateway.core.usage import Usage
from stateway.protocols.chat.encode import encode_completion, finish_reason
from stateway.protocols.chat.stream import ChatStream, stream_error

LISTED: Item = {"id": "mcpl_1", "type": "mcp_list_tools", "server_label": "calc", "tools": []}
MCP_CALL: Item = {
    "id": "mcp_1",
    "type": "mcp_call",
    "server_label": "calc",
    "name": "add",
    "arguments": "{}",
    "output": "5",
}
REASONING: Item = {
    "id": "rs_1",
    "type": "reasoning",
    "summary": [],
    "content": [{"type": "reasoning_text", "text": "hm"}],
}


def message(text: str) -> Item:
    return {
        "id": "msg_1",
        "type": "message",
        "role": "assistant",
        "status": "completed",
        "content": [{"type": "output_text", "text": text, "annotations": []}],
    }


def call(call_id: str, name: str = "f") -> Item:
    return {
        "id": "fc_" + call_id,
        "type": "function_call",
        "call_id": call_id,
        "name": name,
        "arguments": '{"a":1}',
    }


def state(output: list[Item], **fields: Any) -> ResponseState:
    made = ResponseState(
        "resp_abc", "default", 1700000000.5, "public-model", None, None, False, GenerationSettings()
    )
    made.output = output
    made.status = "completed"
    made.usage = Usage(10, 5, cached_tokens=2, reasoning_tokens=1, cache_write_tokens=3)
    for key, value in fields.items():
        setattr(made, key, value)
    return made


def added_up(chunks: list[Any]) -> ParsedChatCompletion[None]:
    """The completion the ``openai`` SDK adds ``chunks`` up to, as a client reads it."""
    accumulated: ChatCompletionStreamState[None] = ChatCompletionStreamState()
    for chunk in chunks:
        accumulated.handle_chunk(ChatCompletionChunk.model_validate(chunk))
    return accumulated.get_final_completion()


def test_a_completion_shows_text_reasoning_and_client_calls_only() -> None:
    done = state(
        [LISTED, REASONING, message("Let me add."), MCP_CALL, message("It is 5."), call("c1")]
    )
    wire = encode_completion(done)
    parsed = ChatCompletion.model_validate(wire)
    assert parsed.id == "chatcmpl-abc"
    assert (parsed.object, parsed.model, parsed.created) == (
        "chat.completion",
        "public-model",
        1700000000,
    )
    choice = parsed.choices[0]
    assert choice.finish_reason == "tool_calls"
    assert choice.message.content == "Let me add.\n\nIt is 5."  # each round's text apart
    assert choice.message.tool_calls is not None
    assert [(c.id, c.function.name, c.function.arguments) for c in choice.message.tool_calls] == [  # type: ignore[union-attr]
        ("c1", "f", '{"a":1}')
    ]
    assert wire["choices"][0]["message"]["reasoning_content"] == "hm"
    assert wire["choices"][0]["message"]["reasoning"] == "hm"  # vLLM's name for it
    assert "mcp" not in orjson.dumps(wire).decode()
    assert parsed.usage is not None
    assert (
        parsed.usage.prompt_tokens,
        parsed.usage.completion_tokens,
        parsed.usage.total_tokens,
    ) == (10, 5, 15)
    assert parsed.usage.prompt_tokens_details is not None
    assert parsed.usage.prompt_tokens_details.cached_tokens == 2
    assert parsed.usage.prompt_tokens_details.cache_write_tokens == 3  # as hosted reports it


def test_finish_reasons() -> None:
    assert finish_reason(state([LISTED, MCP_CALL, message("x")])) == "stop"
    assert finish_reason(state([call("c")])) == "tool_calls"
    cut = state([message("x")], status="incomplete", incomplete_reason="max_output_tokens")
    assert finish_reason(cut) == "length"
    rounds = state([MCP_CALL], status="incomplete", incomplete_reason="max_rounds")
    assert finish_reason(rounds) == "length"
    filtered = state([], status="incomplete", incomplete_reason="content_filter")
    assert finish_reason(filtered) == "content_filter"


def test_a_completion_without_text_has_null_content_and_a_refusal() -> None:
    refusal = {
        "type": "message",
        "role": "assistant",
        "content": [{"type": "refusal", "refusal": "no"}],
    }
    wire = encode_completion(state([refusal]))
    assert wire["choices"][0]["message"]["content"] is None
    assert wire["choices"][0]["message"]["refusal"] == "no"
    assert "tool_calls" not in wire["choices"][0]["message"]
    assert "reasoning_content" not in wire["choices"][0]["message"]
    assert "reasoning" not in wire["choices"][0]["message"]


def test_an_answer_of_nothing_has_empty_content_streamed_as_not() -> None:
    """No text, refusal or call (the output limit spent on reasoning, say): ``content``
    is ``""``, as hosted and a Chat upstream answer, and as the SDK adds up the stream
    (its role chunk opens with ``content: ""``)."""
    for output in ([], [REASONING], [MCP_CALL]):
        done = state(output)
        whole = encode_completion(done)["choices"][0]["message"]
        events: list[ev.Event] = [ev.ResponseCreated(done)]
        if output == [REASONING]:
            events.append(ev.ReasoningDelta(0, 0, "rs_1", "hm"))
        streamed = (
            added_up(play([*events, ev.ResponseFinished(done)], False)[:-1]).choices[0].message
        )
        assert whole["content"] == streamed.content == "", output


def test_an_empty_text_beside_a_call_or_a_refusal_is_no_content_streamed_as_not() -> None:
    """A message whose only text is empty (a Responses upstream's, an Anthropic upstream's
    empty text block) is no text: beside a tool call or a refusal ``content`` is ``null``,
    in the completion as the SDK adds up the stream (its role chunk opens with the call)."""
    empty = message("")
    refused = {**empty, "content": [*empty["content"], {"type": "refusal", "refusal": "no"}]}
    firsts: list[tuple[list[Item], ev.Event]] = [
        ([empty, call("c1")], ev.ItemAdded(1, {**call("c1"), "arguments": ""})),
        ([refused], ev.RefusalDelta(0, 1, "msg_1", "no")),
    ]
    for output, shown in firsts:
        done = state(output)
        whole = encode_completion(done)["choices"][0]["message"]
        events: list[ev.Event] = [
            ev.ResponseCreated(done),
            ev.ItemAdded(0, empty),
            ev.TextDelta(0, 0, "msg_1", ""),
            shown,
            ev.ResponseFinished(done),
        ]
        streamed = added_up(play(events, False)[:-1]).choices[0].message
        assert whole["content"] is streamed.content is None, output


def chunks(data: bytes) -> list[Any]:
    frames = data.split(b"\n\n")
    assert frames[-1] == b""
    out: list[Any] = []
    for frame in frames[:-1]:
        assert frame.startswith(b"data: ")
        payload = frame.removeprefix(b"data: ")
        out.append("[DONE]" if payload == b"[DONE]" else orjson.loads(payload))
    return out


def play(events: list[ev.Event], include_usage: bool) -> list[Any]:
    stream = ChatStream(include_usage)
    return chunks(b"".join(stream.encode(event) for event in events))


def test_a_stream_with_hidden_rounds_and_usage() -> None:
    done = state([LISTED, MCP_CALL, REASONING, message("5"), call("c1")])
    events: list[ev.Event] = [
        ev.ResponseCreated(done),
        ev.ResponseInProgress(done),
        ev.ItemAdded(0, LISTED),
        ev.ToolProgress("response.mcp_list_tools.completed", 0, "mcpl_1"),
        ev.ItemDone(0, LISTED),
        ev.ItemAdded(1, MCP_CALL),
        ev.McpArgumentsDelta(1, "mcp_1", "{}"),
        ev.ItemDone(1, MCP_CALL),
        ev.ItemAdded(2, REASONING),
        ev.ReasoningDelta(2, 0, "rs_1", "hm"),
        ev.ItemAdded(3, message("")),
        ev.TextDelta(3, 0, "msg_1", "5"),
        ev.TextDone(3, 0, "msg_1", "5"),
        ev.ItemAdded(4, {**call("c1"), "arguments": ""}),
        ev.ArgumentsDelta(4, "fc_c1", '{"a":'),
        ev.ArgumentsDelta(4, "fc_c1", "1}"),
        ev.ItemDone(4, call("c1")),
        ev.ResponseFinished(done),
    ]
    got = play(events, include_usage=True)
    assert got[-1] == "[DONE]"
    parsed = [ChatCompletionChunk.model_validate(chunk) for chunk in got[:-1]]
    assert {p.id for p in parsed} == {"chatcmpl-abc"}
    assert all(chunk["usage"] is None for chunk in got[:-2])
    deltas = [p.choices[0].delta for p in parsed[:-1]]
    assert deltas[0].role == "assistant"
    assert [getattr(d, "reasoning_content", None) for d in deltas] == [
        None,
        "hm",
        None,
        None,
        None,
        None,
        None,
    ]
    assert [d.content for d in deltas[1:]] == [None, "5", None, None, None, None]
    opened = deltas[3].tool_calls
    assert opened is not None
    assert (opened[0].index, opened[0].id, opened[0].function.name) == (0, "c1", "f")  # type: ignore[union-attr]
    arguments = "".join(d.tool_calls[0].function.arguments for d in deltas[4:6])  # type: ignore[index, union-attr, misc]
    assert arguments == '{"a":1}'
    assert parsed[-2].choices[0].finish_reason == "tool_calls"
    assert parsed[-1].choices == []
    assert parsed[-1].usage is not None
    assert parsed[-1].usage.total_tokens == 15


def reasoning(item_id: str, text: str) -> Item:
    return {**REASONING, "id": item_id, "content": [{"type": "reasoning_text", "text": text}]}


def test_each_rounds_text_and_reasoning_stay_apart_streamed_as_not() -> None:
    """Several rounds' texts (and thoughts) share one field: a blank line between them, in
    the stream as in the completion, never words run together."""
    output = [
        reasoning("rs_1", "adding"),
        message("Let me add."),
        MCP_CALL,
        reasoning("rs_2", ""),
        reasoning("rs_3", "done"),
        message(""),
        message("It is 5."),
    ]
    done = state(output)
    events: list[ev.Event] = [
        ev.ResponseCreated(done),
        ev.ReasoningDelta(0, 0, "rs_1", "add"),
        ev.ReasoningDelta(0, 0, "rs_1", "ing"),
        ev.TextDelta(1, 0, "msg_1", "Let me "),
        ev.TextDelta(1, 0, "msg_1", "add."),
        ev.ReasoningDelta(3, 0, "rs_2", ""),
        ev.ReasoningDelta(4, 0, "rs_3", "done"),
        ev.TextDelta(5, 0, "msg_2", ""),
        ev.TextDelta(6, 0, "msg_3", ""),
        ev.TextDelta(6, 0, "msg_3", "It is"),
        ev.TextDelta(6, 0, "msg_3", " 5."),
        ev.ResponseFinished(done),
    ]
    deltas = [chunk["choices"][0]["delta"] for chunk in play(events, False)[:-2]]
    streamed = "".join(delta.get("content") or "" for delta in deltas)
    thought = "".join(delta.get("reasoning_content") or "" for delta in deltas)
    assert (streamed, thought) == ("Let me add.\n\nIt is 5.", "adding\n\ndone")
    assert "".join(delta.get("reasoning") or "" for delta in deltas) == thought
    whole = encode_completion(done)["choices"][0]["message"]
    assert (whole["content"], whole["reasoning_content"]) == (streamed, thought)
    assert whole["reasoning"] == thought


def test_every_chunk_has_the_completions_envelope() -> None:
    """As hosted: each chunk, the usage chunk too, names the same id, created time, model,
    ``service_tier`` and ``system_fingerprint`` as the completion would."""
    done = state([message("hi")])
    done.settings.service_tier = "fast"
    events: list[ev.Event] = [
        ev.ResponseCreated(done),
        ev.TextDelta(0, 0, "msg_1", "hi"),
        ev.ResponseFinished(done),
    ]
    whole = encode_completion(done)
    assert whole["service_tier"] == "priority"
    keys = ("id", "created", "model", "service_tier", "system_fingerprint")
    envelope = {key: whole[key] for key in keys}
    got = play(events, include_usage=True)
    assert got[-1] == "[DONE]"
    assert len(got) == 5  # role, text, finish reason, usage, [DONE]
    for chunk in got[:-1]:
        assert {key: chunk.get(key, "absent") for key in envelope} == envelope
        assert chunk["object"] == "chat.completion.chunk"


def test_a_stream_without_usage_has_no_usage_keys() -> None:
    done = state([message("hi")])
    got = play(
        [ev.ResponseCreated(done), ev.TextDelta(0, 0, "msg_1", "hi"), ev.ResponseFinished(done)],
        False,
    )
    assert got[-1] == "[DONE]"
    assert all("usage" not in chunk for chunk in got[:-1])
    assert got[-2]["choices"][0]["finish_reason"] == "stop"


def test_a_failed_stream_ends_with_an_error_line_and_no_done() -> None:
    failed = state([message("par")])
    failed.fail(UpstreamError("The model server closed the stream.", code="upstream_stream_cut"))
    got = play([ev.ResponseCreated(failed), ev.ResponseFinished(failed)], True)
    assert "[DONE]" not in got
    assert got[-1] == {
        "error": {
            "message": "The model server closed the stream.",
            "type": "server_error",
            "param": None,
            "code": "upstream_stream_cut",
        }
    }


def test_a_stream_that_fails_before_any_output_is_its_error_line_alone() -> None:
    """Its status line sent (the upstream was silent past a keep-alive interval), a
    stream that fails before it showed anything is not opened as an answer: no role
    chunk, only the error line; one that showed output first keeps its role chunk."""
    failed = state([])
    failed.fail(UpstreamError("Model server 'a' answered 429.", status=429))
    got = play([ev.ResponseCreated(failed), ev.ResponseFinished(failed)], True)
    assert [list(chunk) for chunk in got] == [["error"]]
    shown = play(
        [
            ev.ResponseCreated(failed),
            ev.TextDelta(0, 0, "msg_1", "par"),
            ev.ResponseFinished(failed),
        ],
        True,
    )
    assert shown[0]["choices"][0]["delta"]["role"] == "assistant"
    assert list(shown[-1]) == ["error"]


@pytest.mark.parametrize(
    ("status", "code", "message", "kind"),
    [
        (429, "rate_limit_exceeded", "m", "requests"),
        (429, "rate_limit_exceeded", "Limit reached on tokens per min (TPM)", "tokens"),
        (429, "insufficient_quota", "m", "insufficient_quota"),
        (400, "context_length_exceeded", "m", "invalid_request_error"),
        (None, "upstream_stream_cut", "m", "server_error"),
    ],
)
def test_a_stream_error_is_typed_as_its_answer_would_be(
    status: int | None, code: str, message: str, kind: str
) -> None:
    """An upstream's 429 once the stream began is typed as it is answered before it
    (``requests`` or ``tokens``), not as a bad request."""
    error = stream_error({"message": message, "status": status, "code": code})
    assert (error["type"], error["code"], error["message"]) == (kind, code, message)


def said(text: str, *urls: str) -> Item:
    """An answer citing ``urls``, where its text names them (as the assembler cites)."""
    annotations = [
        {
            "type": "url_citation",
            "start_index": text.index(url),
            "end_index": text.index(url) + len(url),
            "url": url,
            "title": "T",
        }
        for url in urls
    ]
    part = {"type": "output_text", "text": text, "annotations": annotations}
    return {"type": "message", "role": "assistant", "content": [part]}


def test_search_citations_are_annotations_at_their_place_in_the_joined_content() -> None:
    first = said("see https://a.test/ now", "https://a.test/")
    second = said("and https://b.test/", "https://b.test/")
    plain = {"type": "message", "role": "assistant", "content": [{"type": "output_text"}]}
    wire = encode_completion(state([first, plain, second]))
    message = ChatCompletion.model_validate(wire).choices[0].message
    assert message.content == "see https://a.test/ now\n\nand https://b.test/"
    assert message.annotations is not None
    spans = [
        message.content[a.url_citation.start_index : a.url_citation.end_index]
        for a in message.annotations
    ]
    assert spans == ["https://a.test/", "https://b.test/"]
    assert "annotations" not in encode_completion(state([plain]))["choices"][0]["message"]


@pytest.mark.parametrize("include_usage", [False, True])
def test_a_streamed_answer_carries_its_citations_once_with_its_finish(include_usage: bool) -> None:
    """As hosted search models stream them: every annotation in the last chunk's delta,
    beside the ``finish_reason``, so that the SDK's stream helper adds up the message the
    completion shows."""
    first = said("see https://a.test/ now", "https://a.test/")
    second = said("and https://b.test/", "https://b.test/")
    done = state([first, MCP_CALL, second])
    events: list[ev.Event] = [
        ev.ResponseCreated(done),
        ev.TextDelta(0, 0, "msg_1", "see https://a.test/ now"),
        ev.TextDelta(2, 0, "msg_2", "and https://b.test/"),
        ev.ResponseFinished(done),
    ]
    got = play(events, include_usage)
    whole = encode_completion(done)["choices"][0]["message"]
    cited = [
        i
        for i, chunk in enumerate(got[:-1])
        if chunk["choices"] and "annotations" in chunk["choices"][0]["delta"]
    ]
    assert len(cited) == 1
    [finish] = [
        chunk for chunk in got[:-1] if chunk["choices"] and chunk["choices"][0]["finish_reason"]
    ]
    assert finish["choices"][0]["delta"] == {"annotations": whole["annotations"]}
    streamed = added_up(got[:-1]).choices[0].message
    assert streamed.content == whole["content"]
    assert [a.model_dump() for a in streamed.annotations or []] == whole["annotations"]


def test_a_stream_citing_nothing_finishes_with_an_empty_delta() -> None:
    done = state([message("no links")])
    events: list[ev.Event] = [
        ev.ResponseCreated(done),
        ev.TextDelta(0, 0, "msg_1", "no links"),
        ev.ResponseFinished(done),
    ]
    assert play(events, False)[-2]["choices"][0]["delta"] == {}


def test_asked_for_logprobs_every_text_chunk_has_them_and_the_completion_too() -> None:
    token = {"token": "hi", "bytes": [104, 105], "logprob": -0.5, "top_logprobs": []}
    asked = GenerationSettings(include=["message.output_text.logprobs"])
    tokened = message("hi")
    tokened["content"][0]["logprobs"] = [token]
    done = state([tokened], settings=asked)
    events: list[ev.Event] = [
        ev.ResponseCreated(done),
        ev.TextDelta(0, 0, "msg_1", "h", [token]),
        ev.TextDelta(0, 0, "msg_1", "i"),  # an upstream that gave none for this one
        ev.ResponseFinished(done),
    ]
    got = [c for c in play(events, False)[1:-2]]
    assert [c["choices"][0]["logprobs"] for c in got] == [
        {"content": [token], "refusal": None},
        {"content": [], "refusal": None},
    ]
    ChatCompletionChunk.model_validate(got[0])
    completion = encode_completion(done)
    assert completion["choices"][0]["logprobs"] == {"content": [token], "refusal": None}
    assert ChatCompletion.model_validate(completion).choices[0].logprobs is not None
    assert encode_completion(state([message("hi")]))["choices"][0]["logprobs"] is None
    plain = play([ev.ResponseCreated(state([])), ev.TextDelta(0, 0, "msg_1", "h", [token])], False)
    assert plain[1]["choices"][0]["logprobs"] is None  # not asked: none shown


def test_asked_for_logprobs_a_stream_without_text_adds_up_to_the_completions() -> None:
    """As hosted opens the stream (the role chunk has ``{"content": [], ...}``): the SDK's
    accumulated answer has the completion's empty list, not ``None``."""
    asked = GenerationSettings(include=["message.output_text.logprobs"])
    done = state([call("c1")], settings=asked)
    events: list[ev.Event] = [
        ev.ResponseCreated(done),
        ev.ItemAdded(0, {**call("c1"), "arguments": ""}),
        ev.ResponseFinished(done),
    ]
    streamed = added_up(play(events, False)[:-1]).choices[0].logprobs
    assert streamed is not None
    whole = encode_completion(done)["choices"][0]["logprobs"]
    assert streamed.model_dump() == whole == {"content": [], "refusal": None}


def test_the_role_chunk_opens_the_answer_as_its_first_output_does() -> None:
    """As OpenAI streams: ``content: ""`` before text, ``content: null`` before a refusal
    (with ``refusal: ""``) or a tool call; sent with the answer's first output."""
    refused = {"type": "message", "role": "assistant", "content": [{"type": "refusal"}]}
    first_events: list[tuple[list[Item], ev.Event]] = [
        ([message("hi")], ev.TextDelta(0, 0, "msg_1", "hi")),
        ([refused], ev.RefusalDelta(0, 0, "msg_1", "no")),
        ([call("c1")], ev.ItemAdded(0, {**call("c1"), "arguments": ""})),
    ]
    openings = []
    for output, first in first_events:
        done = state(output)
        created = ChatStream(False)
        assert created.encode(ev.ResponseCreated(done)) == b""
        got = chunks(created.encode(first) + created.encode(ev.ResponseFinished(done)))
        openings.append(got[0]["choices"][0]["delta"])
        assert "role" not in got[1]["choices"][0]["delta"]
    assert openings == [
        {"role": "assistant", "content": "", "refusal": None},
        {"role": "assistant", "content": None, "refusal": ""},
        {"role": "assistant", "content": None, "refusal": None},
    ]


@pytest.mark.parametrize(
    ("asked", "served"),
    [(None, "default"), ("auto", "default"), ("default", "default"), ("flex", "flex")],
)
def test_the_completion_says_the_tier_it_was_served_at_as_hosted(
    asked: str | None, served: str
) -> None:
    """Hosted answers name the tier (``default`` for ``auto`` or none), which clients
    account tokens by (LangChain prices flex and priority apart)."""
    done = state([message("hi")])
    done.settings.service_tier = asked
    assert encode_completion(done)["service_tier"] == served


def test_reasoning_before_a_call_or_a_refusal_streams_no_content() -> None:
    """An open model thinks, then calls a tool (or declines): the completion's ``content``
    is ``null``, and so is what the SDK adds up of the stream, whose role chunk came with
    the reasoning, before the call was known."""
    refused = {**message(""), "content": [{"type": "refusal", "refusal": "no"}]}
    cases: list[tuple[list[Item], ev.Event]] = [
        ([REASONING, call("c1")], ev.ItemAdded(1, {**call("c1"), "arguments": ""})),
        ([REASONING, refused], ev.RefusalDelta(1, 0, "msg_1", "no")),
    ]
    for output, shown in cases:
        done = state(output)
        whole = encode_completion(done)["choices"][0]["message"]
        events: list[ev.Event] = [
            ev.ResponseCreated(done),
            ev.ReasoningDelta(0, 0, "rs_1", "hm"),
            shown,
            ev.ResponseFinished(done),
        ]
        streamed = added_up(play(events, False)[:-1]).choices[0].message
        assert whole["content"] is streamed.content is None, output
        assert (streamed.model_extra or {})["reasoning_content"] == "hm"
