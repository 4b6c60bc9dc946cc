import asyncio
import json
from typing import Any

import orjson
import pytest
from aiohttp import web
from hypothesis import given, settings
from hypothesis import strategies as st

from stateway.backends.chat_forwarder import OpenAIChatBackend
from stateway.backends.chat_reply import from_upstream_chunk, from_upstream_completion
from stateway.backends.chat_request import to_upstream
from stateway.backends.responses_request import to_upstream as responses_to_upstream
from stateway.backends.upstream_http import UpstreamClient
from stateway.backends.upstream_target import UpstreamTarget
from stateway.core.context import build_context
from stateway.core.errors import GatewayError, InvalidRequest
from stateway.core.generation_settings import GenerationSettings
from stateway.core.inference import (
    Answered,
    Finish,
    InferenceRequest,
    ReasoningDelta,
    RefusalDelta,
    TextDelta,
    ToolCallDelta,
    UsageReport,
)
from stateway.core.items import Item
from stateway.core.tools.catalog import model_tools
from stateway.core.usage import Usage
from stateway.protocols.responses.decode import decode_create
from tests.backends.conftest import Loopback
from tests.core.fakes import MemoryStore
from tests.protocols.responses.test_decode import plausible_request, request_like

UNUSED_CLIENT = UpstreamClient(UpstreamTarget("t", "http://127.0.0.1:9/v1"))


def request(items: list[Item], **settings: Any) -> InferenceRequest:
    generation = GenerationSettings(
        **{k: v for k, v in settings.items() if k not in ("instructions", "stream")}
    )
    return InferenceRequest(
        model="m",
        instructions=settings.get("instructions"),
        items=items,
        settings=generation,
        stream=settings.get("stream", True),
        tools=model_tools(generation.tools),
        tool_choice=generation.tool_choice,
    )


def user(text: str) -> Item:
    return {"type": "message", "role": "user", "content": [{"type": "input_text", "text": text}]}


def test_messages_roles_and_instructions() -> None:
    items: list[Item] = [
        {
            "type": "message",
            "role": "developer",
            "content": [{"type": "input_text", "text": "be brief"}],
        },
        user("hi"),
        {
            "type": "message",
            "role": "assistant",
            "content": [{"type": "output_text", "text": "hello"}],
        },
    ]
    body = to_upstream(request(items, instructions="sys"))
    assert body["messages"] == [
        {"role": "system", "content": "sys\n\nbe brief"},
        {"role": "user", "content": [{"type": "text", "text": "hi"}]},
        {"role": "assistant", "content": "hello"},
    ]
    assert body["stream"] is True
    assert body["stream_options"] == {"include_usage": True}


def test_a_string_content_of_several_parts_keeps_them_a_line_apart() -> None:
    """As vLLM joins a message's text parts itself: Claude Code's system blocks must not
    run into each other's words."""

    def message(role: str, kind: str) -> Item:
        parts = [{"type": kind, "text": "You are Claude Code."}, {"type": kind, "text": "Be."}]
        return {"type": "message", "role": role, "content": parts}

    body = to_upstream(request([message("system", "input_text"), user("hi")]))
    assert body["messages"][0] == {"role": "system", "content": "You are Claude Code.\nBe."}
    body = to_upstream(request([user("hi"), message("assistant", "output_text")]))
    assert body["messages"][1] == {"role": "assistant", "content": "You are Claude Code.\nBe."}


def test_function_calls_join_one_assistant_message_with_reasoning() -> None:
    items: list[Item] = [
        user("weather?"),
        {
            "type": "reasoning",
            "summary": [],
            "content": [{"type": "reasoning_text", "text": "think"}],
        },
        {"type": "function_call", "call_id": "c1", "name": "f", "arguments": "{}"},
        {"type": "function_call", "call_id": "c2", "name": "g", "arguments": '{"x":1}'},
        {"type": "function_call_output", "call_id": "c1", "output": "sunny"},
        {
            "type": "function_call_output",
            "call_id": "c2",
            "output": [{"type": "input_text", "text": "ok"}],
        },
    ]
    messages = to_upstream(request(items))["messages"]
    assert messages[1] == {
        "role": "assistant",
        "content": None,
        "reasoning_content": "think",
        "reasoning": "think",
        "tool_calls": [
            {"id": "c1", "type": "function", "function": {"name": "f", "arguments": "{}"}},
            {"id": "c2", "type": "function", "function": {"name": "g", "arguments": '{"x":1}'}},
        ],
    }
    assert messages[2] == {"role": "tool", "tool_call_id": "c1", "content": "sunny"}
    assert messages[3] == {"role": "tool", "tool_call_id": "c2", "content": "ok"}


@pytest.mark.parametrize("arguments", ["", "  "])
def test_a_call_without_arguments_goes_with_an_empty_object(arguments: str) -> None:
    """A call of a tool that takes none may have come with no arguments at all (from a
    Chat upstream that streamed none, or in a client's history): Ollama refuses such a call
    in the history (``invalid tool call arguments``: it parses them as an object); vLLM
    reads them as ``{}`` itself, as an Anthropic upstream gets an empty ``input``."""
    items: list[Item] = [
        user("now?"),
        {"type": "function_call", "call_id": "c1", "name": "clock", "arguments": arguments},
        {"type": "function_call_output", "call_id": "c1", "output": "noon"},
    ]
    [call] = to_upstream(request(items))["messages"][1]["tool_calls"]
    assert call["function"] == {"name": "clock", "arguments": "{}"}


def test_several_reasoning_items_share_one_message_a_blank_line_apart() -> None:
    """A Messages client resending a run's rounds: a thought per round, then one answer."""

    def thought(text: str) -> Item:
        return {"type": "reasoning", "content": [{"type": "reasoning_text", "text": text}]}

    answer = {"type": "message", "role": "assistant", "content": "It is 5."}
    items = [user("add"), thought("adding"), thought(""), thought("done"), answer]
    call = {"type": "function_call", "call_id": "c1", "name": "f", "arguments": "{}"}
    messages = to_upstream(request(items))["messages"]
    assert messages[1]["reasoning_content"] == "adding\n\ndone"
    calling = to_upstream(request([user("add"), thought("a"), thought("b"), call]))["messages"]
    assert calling[1]["reasoning_content"] == "a\n\nb"


@pytest.mark.parametrize("calls", [False, True])
def test_reasoning_goes_back_under_both_names_servers_read(calls: bool) -> None:
    """llama.cpp and SGLang read an assistant message's ``reasoning_content``; vLLM reads
    only ``reasoning`` (it dropped ``reasoning_content``, vllm-project/vllm#33402), and a
    model that thinks between tool calls loses its thoughts without them: both are sent."""
    thought = {"type": "reasoning", "content": [{"type": "reasoning_text", "text": "hmm"}]}
    answer: Item = (
        {"type": "function_call", "call_id": "c1", "name": "f", "arguments": "{}"}
        if calls
        else {"type": "message", "role": "assistant", "content": "It is 5."}
    )
    [_, sent] = to_upstream(request([user("add"), thought, answer]))["messages"]
    assert (sent["reasoning_content"], sent["reasoning"]) == ("hmm", "hmm")
    [_, plain] = to_upstream(request([user("add"), answer]))["messages"]
    assert "reasoning" not in plain
    assert "reasoning_content" not in plain


def test_image_parts_map_to_image_url() -> None:
    item = user("look")
    item["content"].append(
        {"type": "input_image", "image_url": "data:image/png;base64,AA", "detail": "low"}
    )
    content = to_upstream(request([item]))["messages"][0]["content"]
    assert content[1] == {
        "type": "image_url",
        "image_url": {"url": "data:image/png;base64,AA", "detail": "low"},
    }


def test_a_tool_outputs_text_parts_reach_a_tool_message_a_line_apart() -> None:
    """As vLLM joins a message's text parts: glued, two lines would read as one."""
    items: list[Item] = [
        user("go"),
        {"type": "function_call", "call_id": "c1", "name": "f", "arguments": "{}"},
        {
            "type": "function_call_output",
            "call_id": "c1",
            "output": [
                {"type": "input_text", "text": "line one"},
                {"type": "input_text", "text": "line two"},
            ],
        },
    ]
    assert to_upstream(request(items))["messages"][2]["content"] == "line one\nline two"


def test_images_of_tool_outputs_follow_the_round_in_a_user_message() -> None:
    """A ``tool`` message carries text only: images a tool returned (Claude Code's Read of a
    screenshot) go in one user message after the round's tool messages, which must follow
    their assistant message unbroken."""
    image = {"type": "input_image", "image_url": "data:image/png;base64,AA", "detail": "low"}

    def call(call_id: str) -> Item:
        return {"type": "function_call", "call_id": call_id, "name": "read", "arguments": "{}"}

    items: list[Item] = [
        user("look at both"),
        call("c1"),
        call("c2"),
        {"type": "function_call_output", "call_id": "c1", "output": [image]},
        {
            "type": "function_call_output",
            "call_id": "c2",
            "output": [{"type": "input_text", "text": "a chart"}, image],
        },
        user("and?"),
    ]
    messages = to_upstream(request(items))["messages"]
    assert [m["role"] for m in messages] == ["user", "assistant", "tool", "tool", "user", "user"]
    assert messages[2]["content"] == "[1 image of this output follows in the next user message.]"
    assert messages[3]["content"] == (
        "a chart\n[1 image of this output follows in the next user message.]"
    )
    picture = {
        "type": "image_url",
        "image_url": {"url": "data:image/png;base64,AA", "detail": "low"},
    }
    assert messages[4]["content"] == [
        {"type": "text", "text": "Images of the output of tool call c1:"},
        picture,
        {"type": "text", "text": "Images of the output of tool call c2:"},
        picture,
    ]
    last = to_upstream(request(items[:4]))["messages"]  # the round ends the context
    assert [m["role"] for m in last] == ["user", "assistant", "tool", "user"]


def test_image_detail_levels_chat_does_not_know_are_mapped_or_left_out() -> None:
    def detail_sent(detail: str) -> str | None:
        item = user("look")
        item["content"].append({"type": "input_image", "image_url": "data:,", "detail": detail})
        image = to_upstream(request([item]))["messages"][0]["content"][1]["image_url"]
        return image.get("detail")

    assert detail_sent("original") == "high"  # Codex's view_image asks for full resolution
    assert detail_sent("low") == "low"
    assert detail_sent("sharpest") is None


def test_unsupported_part_is_rejected_by_name() -> None:
    item = user("file")
    item["content"].append({"type": "input_file", "file_id": "f"})
    with pytest.raises(InvalidRequest, match="input_file") as refused:
        to_upstream(request([item]))
    assert (refused.value.param, refused.value.code) == ("input", "unsupported_content_type")


def test_a_part_other_than_text_in_a_message_sent_as_text_is_refused_by_name() -> None:
    """A system or assistant message is sent as one text: an image or a PDF in it is a 400
    naming the part's type and the message's role."""
    pdf = {"type": "input_file", "file_data": "data:application/pdf;base64,AA"}
    image = {"type": "input_image", "image_url": "data:image/png;base64,AA"}
    for role, part in (("system", pdf), ("assistant", image)):
        item = {"type": "message", "role": role, "content": [part]}
        with pytest.raises(InvalidRequest) as refused:
            to_upstream(request([user("hi"), item]))
        assert refused.value.message == (
            f"Content part type '{part['type']}' is not supported in a '{role}' message by a "
            "Chat Completions upstream."
        )
        assert (refused.value.param, refused.value.code) == ("input", "unsupported_content_type")


def test_a_tool_output_of_several_images_says_how_many_follow() -> None:
    image = {"type": "input_image", "image_url": "data:image/png;base64,AA"}
    call = {"type": "function_call", "call_id": "c1", "name": "read", "arguments": "{}"}
    answer = {"type": "function_call_output", "call_id": "c1", "output": [image, image]}
    messages = to_upstream(request([user("look"), call, answer]))["messages"]
    assert messages[2]["content"] == "[2 images of this output follow in the next user message.]"


def test_a_text_file_is_sent_as_its_text() -> None:
    """A Chat server takes no files: a text one (a Messages client's plain-text document, a
    Responses client's text file) goes as a text part, its filename and context first, one
    a line; in a tool output or a system message, as part of its text."""
    notes = {
        "type": "input_file",
        "filename": "notes.md",
        "context": "Written on Monday.",
        "file_data": "data:text/markdown;base64,IyBOb3RlcwpBbGwgd2VsbC4=",
    }
    untitled = {"type": "input_file", "file_data": "data:text/plain;base64,aGk="}
    read = {"type": "function_call", "call_id": "c1", "name": "read", "arguments": "{}"}
    items: list[Item] = [
        {"type": "message", "role": "system", "content": [untitled]},
        {
            "type": "message",
            "role": "user",
            "content": [{"type": "input_text", "text": "see"}, notes],
        },
        read,
        {"type": "function_call_output", "call_id": "c1", "output": [untitled, notes]},
    ]
    messages = to_upstream(request(items))["messages"]
    assert messages[0] == {"role": "system", "content": "hi"}
    assert messages[1]["content"] == [
        {"type": "text", "text": "see"},
        {"type": "text", "text": "notes.md\nWritten on Monday.\n# Notes\nAll well."},
    ]
    assert messages[3] == {
        "role": "tool",
        "tool_call_id": "c1",
        "content": "hi\nnotes.md\nWritten on Monday.\n# Notes\nAll well.",
    }


def test_a_text_part_without_text_is_sent_empty() -> None:
    """Nothing is made up for it (a refusal part's text is its ``refusal``)."""
    empty = {"type": "input_text", "text": ""}
    refusal = {"type": "refusal", "refusal": "No."}
    items: list[Item] = [
        {
            "type": "message",
            "role": "user",
            "content": [empty, {"type": "input_text", "text": "hi"}],
        },
        {"type": "message", "role": "assistant", "content": [refusal]},
    ]
    messages = to_upstream(request(items))["messages"]
    assert messages[0]["content"] == [{"type": "text", "text": ""}, {"type": "text", "text": "hi"}]
    assert messages[1] == {"role": "assistant", "content": "No."}


def test_a_file_that_is_not_text_is_refused() -> None:
    item = user("file")
    item["content"].append({"type": "input_file", "file_data": "data:application/pdf;base64,AA"})
    with pytest.raises(InvalidRequest, match="input_file"):
        to_upstream(request([item]))


def test_a_tool_is_sent_strict_only_when_strict() -> None:
    """``strict: false`` is Chat's default: left out, for servers that do not know it."""
    tools = [
        {"type": "function", "name": name, "parameters": {"type": "object"}, "strict": strict}
        for name, strict in (("loose", False), ("tight", True))
    ]
    sent = to_upstream(request([user("x")], tools=tools))["tools"]
    assert [tool["function"].get("strict") for tool in sent] == [None, True]
    assert "strict" not in sent[0]["function"]


def test_settings_are_mapped() -> None:
    tools = [
        {
            "type": "function",
            "name": "f",
            "description": "d",
            "parameters": {"type": "object"},
            "strict": None,
        }
    ]
    body = to_upstream(
        request(
            [user("x")],
            temperature=0.5,
            top_p=0.9,
            max_output_tokens=64,
            tools=tools,
            tool_choice={"type": "function", "name": "f"},
            parallel_tool_calls=False,
            text_format={
                "type": "json_schema",
                "name": "s",
                "schema": {"type": "object"},
                "strict": True,
            },
            reasoning_effort="low",
            verbosity="low",
            service_tier="flex",
            metadata={"k": "v"},
            user="u",
            safety_identifier="s1",
            prompt_cache_key="pk",
            prompt_cache_retention="24h",
            prompt_cache_options={"mode": "explicit"},
        )
    )
    assert body["temperature"] == 0.5
    assert body["top_p"] == 0.9
    assert body["max_tokens"] == 64
    assert body["tools"] == [
        {
            "type": "function",
            "function": {"name": "f", "description": "d", "parameters": {"type": "object"}},
        }
    ]
    assert body["tool_choice"] == {"type": "function", "function": {"name": "f"}}
    assert body["parallel_tool_calls"] is False
    assert body["response_format"] == {
        "type": "json_schema",
        "json_schema": {"name": "s", "schema": {"type": "object"}, "strict": True},
    }
    assert body["reasoning_effort"] == "low"
    assert (body["verbosity"], body["service_tier"]) == ("low", "flex")
    assert "metadata" not in body  # the stored object's: OpenAI refuses it unless it stores
    assert (body["user"], body["safety_identifier"], body["prompt_cache_key"]) == ("u", "s1", "pk")
    assert body["prompt_cache_retention"] == "24h"
    assert body["prompt_cache_options"] == {"mode": "explicit"}


def test_unset_settings_are_not_sent() -> None:
    body = to_upstream(request([user("x")]))
    assert set(body) == {"model", "messages", "stream", "stream_options"}


def test_chunks_to_deltas() -> None:
    chunks: list[dict[str, Any]] = [
        {"choices": [{"index": 0, "delta": {"role": "assistant"}}]},
        {"choices": [{"index": 0, "delta": {"reasoning_content": "hm"}}]},
        {"choices": [{"index": 0, "delta": {"content": "Hi"}}]},
        {
            "choices": [
                {
                    "index": 0,
                    "delta": {
                        "tool_calls": [
                            {
                                "index": 0,
                                "id": "call_1",
                                "type": "function",
                                "function": {"name": "f", "arguments": ""},
                            }
                        ]
                    },
                }
            ]
        },
        {
            "choices": [
                {
                    "index": 0,
                    "delta": {"tool_calls": [{"index": 0, "function": {"arguments": "{}"}}]},
                }
            ]
        },
        {"choices": [{"index": 0, "delta": {}, "finish_reason": "tool_calls"}]},
        {
            "choices": [],
            "usage": {
                "prompt_tokens": 3,
                "completion_tokens": 4,
                "prompt_tokens_details": {"cached_tokens": 1},
                "completion_tokens_details": {"reasoning_tokens": 2},
            },
        },
    ]
    deltas = [d for chunk in chunks for d in from_upstream_chunk(chunk)]
    assert deltas == [
        ReasoningDelta("hm"),
        TextDelta("Hi"),
        ToolCallDelta(0, "call_1", "f", ""),
        ToolCallDelta(0, None, None, "{}"),
        Finish("tool_calls"),
        UsageReport(Usage(3, 4, 1, 2)),
    ]


def test_only_the_first_choice_is_read() -> None:
    chunk = {
        "choices": [
            {"index": 1, "delta": {"content": "other"}, "finish_reason": "length"},
            {"index": 0, "delta": {"content": "mine"}, "finish_reason": "stop"},
            {"index": 2, "delta": {"content": "another"}},
        ],
        "usage": {"prompt_tokens": 1, "completion_tokens": 2},
    }
    assert list(from_upstream_chunk(chunk)) == [
        TextDelta("mine"),
        Finish("stop"),
        UsageReport(Usage(1, 2)),
    ]
    unnumbered = {"choices": [{"delta": {"content": "x"}}]}  # a server that omits the index
    assert list(from_upstream_chunk(unnumbered)) == [TextDelta("x")]


@pytest.mark.parametrize(
    ("delta", "deltas"),
    [
        ({"content": " word"}, [TextDelta(" word")]),
        ({"reasoning_content": " hm"}, [ReasoningDelta(" hm")]),
        ({"reasoning": " hm"}, [ReasoningDelta(" hm")]),
        ({"refusal": "no"}, [RefusalDelta("no")]),
        ({"content": ""}, []),
        ({"role": "assistant"}, []),
        ({"content": None}, []),
        ({}, []),
        (None, []),
    ],
)
def test_a_delta_of_one_field_is_read_as_any_other(delta: Any, deltas: list[Any]) -> None:
    """Most chunks carry one word in one field; that case is read first, alike."""
    assert from_upstream_chunk({"choices": [{"index": 0, "delta": delta}]}) == deltas


@pytest.mark.parametrize(
    "delta", [{"content": 5}, {"reasoning_content": ["x"]}, {"reasoning": {}}, "x", [1]]
)
def test_a_one_field_delta_of_the_wrong_type_is_malformed(delta: Any) -> None:
    with pytest.raises((TypeError, AttributeError)):
        from_upstream_chunk({"choices": [{"index": 0, "delta": delta}]})


def test_streamed_tool_calls_keep_their_index() -> None:
    def calls(*deltas: dict[str, Any]) -> dict[str, Any]:
        return {"choices": [{"index": 0, "delta": {"tool_calls": list(deltas)}}]}

    first = {"index": 0, "id": "call_a", "function": {"name": "f", "arguments": ""}}
    second = {"index": 1, "id": "call_b", "function": {"name": "g", "arguments": ""}}
    chunks = [
        calls(first, second),
        calls({"index": 1, "function": {"arguments": "{}"}}),
        calls({"function": {"arguments": "[]"}}),  # a server that omits the index: the first
    ]
    assert [d for chunk in chunks for d in from_upstream_chunk(chunk)] == [
        ToolCallDelta(0, "call_a", "f", ""),
        ToolCallDelta(1, "call_b", "g", ""),
        ToolCallDelta(1, None, None, "{}"),
        ToolCallDelta(0, None, None, "[]"),
    ]


def test_reasoning_is_read_from_either_field_name() -> None:
    """Model servers name it ``reasoning_content`` or ``reasoning``."""
    chunk = {"choices": [{"index": 0, "delta": {"reasoning": "hm"}}]}
    assert list(from_upstream_chunk(chunk)) == [ReasoningDelta("hm")]
    completion = {
        "choices": [{"message": {"reasoning": "r", "content": "a"}, "finish_reason": "stop"}]
    }
    assert list(from_upstream_completion(completion)) == [
        ReasoningDelta("r"),
        TextDelta("a"),
        Finish("stop"),
    ]


def test_completion_to_deltas() -> None:
    payload = {
        "choices": [
            {
                "index": 0,
                "message": {
                    "role": "assistant",
                    "content": "done",
                    "reasoning_content": "r",
                    "tool_calls": [
                        {
                            "id": "c",
                            "type": "function",
                            "function": {"name": "f", "arguments": "{}"},
                        }
                    ],
                },
                "finish_reason": "length",
            }
        ],
        "usage": {"prompt_tokens": 1, "completion_tokens": 2},
    }
    assert list(from_upstream_completion(payload)) == [
        ReasoningDelta("r"),
        TextDelta("done"),
        ToolCallDelta(0, "c", "f", "{}"),
        UsageReport(Usage(1, 2, 0, 0)),
        Finish("length"),
    ]


@settings(max_examples=300, deadline=None)
@given(st.one_of(request_like, plausible_request))
def test_every_accepted_request_translates_without_crashing(body: dict[str, object]) -> None:
    """Whatever the decoder and the context checks accept, the translators can send."""
    try:
        command = decode_create(json.dumps(body).encode())
        asyncio.run(build_context(MemoryStore(), "t", command, OpenAIChatBackend(UNUSED_CLIENT)))
    except GatewayError:
        return
    for translate in (to_upstream, responses_to_upstream):
        orjson.dumps(
            translate(
                InferenceRequest(
                    "m",
                    command.instructions,
                    command.input,
                    command.settings,
                    True,
                    tools=model_tools(command.settings.tools),
                )
            )
        )


def test_max_output_tokens_field_is_configurable() -> None:
    body = to_upstream(request([user("x")], max_output_tokens=7), "max_completion_tokens")
    assert body["max_completion_tokens"] == 7
    assert "max_tokens" not in body


def test_refusal_parts_keep_their_text() -> None:
    item = user("a")
    item["content"].append({"type": "refusal", "refusal": "no"})
    assert to_upstream(request([item]))["messages"][0]["content"][1] == {
        "type": "text",
        "text": "no",
    }


def test_namespace_tools_and_prior_member_calls_reach_chat_flattened() -> None:
    namespace = {
        "type": "namespace",
        "name": "ns",
        "tools": [{"type": "function", "name": "spawn", "parameters": {"type": "object"}}],
    }
    call = {
        "type": "function_call",
        "call_id": "c1",
        "name": "spawn",
        "namespace": "ns",
        "arguments": "{}",
    }
    output = {"type": "function_call_output", "call_id": "c1", "output": "ok"}
    body = to_upstream(request([user("go"), call, output], tools=[namespace]))
    [tool] = body["tools"]
    assert tool["function"]["name"] == "ns__spawn"
    assert body["messages"][1]["tool_calls"][0]["function"]["name"] == "ns__spawn"
    assert body["messages"][2] == {"role": "tool", "tool_call_id": "c1", "content": "ok"}
    responses_body = responses_to_upstream(request([call], tools=[namespace]))
    assert responses_body["tools"][0]["name"] == "ns__spawn"
    assert responses_body["input"][0]["name"] == "ns__spawn"
    assert "namespace" not in responses_body["input"][0]


def test_stop_sequences_and_top_k_reach_chat() -> None:
    body = to_upstream(request([user("q")], stop_sequences=["END", "\n\n"], top_k=40))
    assert body["stop"] == ["END", "\n\n"]
    assert body["top_k"] == 40
    assert "stop" not in to_upstream(request([user("q")]))


def test_the_stop_string_vllm_names_is_the_stop_sequence() -> None:
    choice = {"index": 0, "delta": {}, "finish_reason": "stop", "stop_reason": "END"}
    assert list(from_upstream_chunk({"choices": [choice]})) == [Finish("stop", "END")]
    eos = {"index": 0, "delta": {}, "finish_reason": "stop", "stop_reason": 151645}
    assert list(from_upstream_chunk({"choices": [eos]})) == [Finish("stop")]
    whole = {
        "choices": [{"message": {"content": "a"}, "finish_reason": "stop", "stop_reason": "X"}]
    }
    assert list(from_upstream_completion(whole))[-1] == Finish("stop", "X")


def test_the_stop_string_sglang_names_is_the_stop_sequence() -> None:
    """SGLang names it ``matched_stop`` (a token id for an end token), in a chunk and a
    whole completion alike (sglang's ``protocol.py``)."""
    choice = {"index": 0, "delta": {}, "finish_reason": "stop", "matched_stop": "END"}
    assert list(from_upstream_chunk({"choices": [choice]})) == [Finish("stop", "END")]
    eos = {"index": 0, "delta": {}, "finish_reason": "stop", "matched_stop": 151645}
    assert list(from_upstream_chunk({"choices": [eos]})) == [Finish("stop")]
    whole = {
        "choices": [{"message": {"content": "a"}, "finish_reason": "stop", "matched_stop": "X"}]
    }
    assert list(from_upstream_completion(whole))[-1] == Finish("stop", "X")


def test_vendor_fields_fill_what_the_gateway_does_not_set() -> None:
    vendor = {"min_p": 0.1, "temperature": 2.0, "stream": False}
    body = to_upstream(request([user("hi")], temperature=0.5, vendor_fields=vendor))
    assert (body["min_p"], body["temperature"], body["stream"]) == (0.1, 0.5, True)


def test_a_prefill_is_continued_only_when_asked_and_only_after_text() -> None:
    prefill: Item = {
        "type": "message",
        "role": "assistant",
        "content": [{"type": "output_text", "text": "{"}],
    }
    call: Item = {"type": "function_call", "call_id": "c", "name": "f", "arguments": "{}"}
    continued = to_upstream(request([user("hi"), prefill], continue_final_message=True))
    assert (continued["continue_final_message"], continued["add_generation_prompt"]) == (
        True,
        False,
    )
    led = to_upstream(request([user("hi"), prefill], continue_final_message=True, instructions="x"))
    assert led["continue_final_message"] is True  # the last message, after the system one
    answered = [user("hi"), prefill, user("more")]
    for items, asked in (
        ([user("hi"), prefill], False),
        ([user("hi"), call], True),
        (answered, True),
    ):
        body = to_upstream(request(items, continue_final_message=asked))
        assert "continue_final_message" not in body
        assert "add_generation_prompt" not in body


def test_a_prefill_is_continued_in_a_stream_though_the_answer_is_not() -> None:
    """llama-server's whole answer to a continued message holds the message from its start
    (the prefill, then what follows); its stream, only what follows."""
    prefill: Item = {
        "type": "message",
        "role": "assistant",
        "content": [{"type": "output_text", "text": "{"}],
    }
    continued = request([user("hi"), prefill], continue_final_message=True, stream=False)
    body = to_upstream(continued)
    assert (body["stream"], body["stream_options"]) == (True, {"include_usage": True})
    assert "stream" not in to_upstream(request([user("hi"), prefill], stream=False))


def test_a_completion_without_a_finish_reason_ends_as_stopped() -> None:
    completion = {"choices": [{"message": {"content": "a"}}]}
    assert list(from_upstream_completion(completion)) == [TextDelta("a"), Finish("stop")]


async def test_the_fast_path_sends_a_run_of_user_messages_as_one_with_alternate_roles(
    loopback: Loopback,
) -> None:
    """``alternate_roles`` on the fast path: a run of user messages is re-encoded as one;
    a body without one, or with messages it cannot read, goes in the very bytes sent."""
    received: list[bytes] = []

    async def answer(request: web.Request) -> web.Response:
        received.append(await request.read())
        return web.json_response({"choices": []})

    url = await loopback.serve(answer)
    client = loopback.adopt(UpstreamClient(UpstreamTarget("mistral", url)))
    backend = OpenAIChatBackend(client, alternate_roles=True)
    alternating = b'{"model": "m", "messages": [{"role": "user", "content": "a"}]}'
    unreadable = b'{"model": "m", "messages": [{"role": "user"}, {"role": "user"}]}'
    run = {
        "model": "m",
        "messages": [
            {"role": "user", "content": "a", "name": "ada"},
            {"role": "user", "content": [{"type": "text", "text": "b"}]},
            {"role": "assistant", "content": "c"},
        ],
    }
    for body in (alternating, unreadable, orjson.dumps(run)):
        relay = await backend.forward_chat(body, orjson.loads(body))
        await relay.aclose()
    assert received[:2] == [alternating, unreadable]
    assert orjson.loads(received[2])["messages"] == [
        {
            "role": "user",
            "content": [{"type": "text", "text": "a"}, {"type": "text", "text": "b"}],
            "name": "ada",
        },
        {"role": "assistant", "content": "c"},
    ]


async def test_a_traced_stream_notes_the_first_id_and_model_it_names(loopback: Loopback) -> None:
    """Azure OpenAI opens its stream with a chunk of prompt filter results whose ``id``
    and ``model`` are empty: the answer's own are noted from the chunks after it."""

    async def answer(request: web.Request) -> web.StreamResponse:
        reply = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await reply.prepare(request)
        chunks = [
            {"id": "", "model": "", "choices": [], "prompt_filter_results": []},
            {"id": "chatcmpl-9", "model": "gpt-4o-2024", "choices": [{"delta": {"content": "a"}}]},
            {"id": "chatcmpl-9", "model": "gpt-4o-2024", "choices": [{"finish_reason": "stop"}]},
        ]
        for chunk in chunks:
            await reply.write(b"data: " + orjson.dumps(chunk) + b"\n\n")
        await reply.write(b"data: [DONE]\n\n")
        return reply

    url = await loopback.serve(answer)
    backend = OpenAIChatBackend(loopback.adopt(UpstreamClient(UpstreamTarget("azure", url))))
    sent = request([user("hi")])
    sent.answered = Answered()
    deltas = [delta async for delta in backend.infer(sent)]
    assert deltas == [TextDelta("a"), Finish("stop")]
    assert sent.answered == Answered("chatcmpl-9", "gpt-4o-2024")


def test_a_prompt_cache_breakpoint_is_not_sent_to_a_chat_upstream() -> None:
    """A Chat server caches prefixes unmarked; the parts are rebuilt with what every
    Chat server takes (the request's prompt cache options still go: OpenAI's field)."""
    mark = {"prompt_cache_breakpoint": {"mode": "explicit"}}
    image = {"type": "input_image", "image_url": "https://x/i.png", "detail": "auto", **mark}
    marked: Item = {
        "type": "message",
        "role": "user",
        "content": [{"type": "input_text", "text": "q", **mark}, image],
    }
    call = {"type": "function_call", "call_id": "c", "name": "f", "arguments": "{}"}
    output = {
        "type": "function_call_output",
        "call_id": "c",
        "output": [mark | {"type": "input_text", "text": "o"}],
    }
    body = to_upstream(request([marked, call, output], prompt_cache_options={"mode": "explicit"}))
    assert "prompt_cache_breakpoint" not in str(body["messages"])
    assert body["messages"][0]["content"][0] == {"type": "text", "text": "q"}
    assert body["messages"][-1]["content"] == "o"
    assert body["prompt_cache_options"] == {"mode": "explicit"}
