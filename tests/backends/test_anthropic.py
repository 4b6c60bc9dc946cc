"""The Anthropic backend: canonical requests to Messages bodies, replies to deltas, and its
HTTP leg against scripted loopback servers."""

from __future__ import annotations

import base64
from functools import partial
from typing import Any

import orjson
import pytest
from aiohttp import web

from stateway.backends.anthropic import AnthropicBackend, StreamState, from_upstream_message
from stateway.backends.anthropic_content import EMPTY_TURN
from stateway.backends.anthropic_names import ToolNames, safe_name
from stateway.backends.anthropic_request import AnthropicOptions, count_body, to_upstream
from stateway.backends.upstream_http import UpstreamClient
from stateway.backends.upstream_status import classify_reported
from stateway.backends.upstream_target import UpstreamTarget
from stateway.core.errors import (
    GatewayError,
    InvalidRequest,
    UpstreamError,
    UpstreamRejected,
    UpstreamUnavailable,
)
from stateway.core.generation_settings import GenerationSettings
from stateway.core.inference import (
    PAUSED,
    Citation,
    Delta,
    Finish,
    InferenceRequest,
    MessageStart,
    OutputItem,
    ReasoningDelta,
    ReasoningSignature,
    TextDelta,
    ToolCallDelta,
    UsageReport,
)
from stateway.core.items import Item
from stateway.core.reasoning import REDACTED, SEALED_BY_RESPONSES, responses_maker
from stateway.core.usage import Usage
from stateway.fake_upstream.errors import UpstreamError as Refused
from stateway.fake_upstream.messages_checks import check_messages_request
from tests.backends.conftest import Loopback


def request(
    items: list[Item], *, tools: list[Item] | None = None, **settings: Any
) -> InferenceRequest:
    choice = settings.pop("tool_choice", "auto")
    instructions = settings.pop("instructions", None)
    return InferenceRequest(
        model="claude",
        instructions=instructions,
        items=items,
        settings=GenerationSettings(**settings),
        stream=False,
        tools=tools or [],
        tool_choice=choice,
    )


def body(
    items: list[Item], options: AnthropicOptions | None = None, **settings: Any
) -> dict[str, Any]:
    return to_upstream(request(items, **settings), options or AnthropicOptions(), ToolNames())


def user(text: str, **part: Any) -> Item:
    return {
        "type": "message",
        "role": "user",
        "content": [{"type": "input_text", "text": text, **part}],
    }


def system(text: str, role: str = "system") -> Item:
    return {"type": "message", "role": role, "content": [{"type": "input_text", "text": text}]}


def call(call_id: str, name: str = "f", arguments: str = '{"a":1}') -> Item:
    return {"type": "function_call", "call_id": call_id, "name": name, "arguments": arguments}


def output(call_id: str, out: Any = "ok", **extra: Any) -> Item:
    return {"type": "function_call_output", "call_id": call_id, "output": out, **extra}


def reasoning(text: str, seal: str | None) -> Item:
    item: Item = {
        "type": "reasoning",
        "summary": [],
        "content": [{"type": "reasoning_text", "text": text}],
    }
    if seal is not None:
        item["encrypted_content"] = seal
    return item


def test_system_leads_and_later_system_messages_stay_in_place() -> None:
    sent = body(
        [system("dev", "developer"), user("hi"), system("# Environment"), user("more")],
        instructions="rules",
    )
    assert sent["system"] == [{"type": "text", "text": "rules"}, {"type": "text", "text": "dev"}]
    assert sent["messages"] == [
        {"role": "user", "content": [{"type": "text", "text": "hi"}]},
        {"role": "system", "content": [{"type": "text", "text": "# Environment"}]},
        {"role": "user", "content": [{"type": "text", "text": "more"}]},
    ]
    assert body([user("hi")], instructions="rules")["system"] == "rules"
    assert "system" not in body([user("hi")])


def test_a_system_message_between_calls_and_their_results_follows_the_results() -> None:
    """Anthropic refuses any message between a ``tool_use`` and the message of its
    results: a system or developer message a client put there (a reminder sent with the
    outputs) goes right after them, before the next assistant message, in its order."""
    items = [
        user("go"),
        call("c1"),
        call("c2"),
        system("first"),
        output("c1"),
        system("second", "developer"),
        output("c2"),
        user("more"),
        {"type": "message", "role": "assistant", "content": "done"},
        user("next"),
    ]
    sent = body(items, tools=[{"type": "function", "name": "f"}])
    assert [m["role"] for m in sent["messages"]] == [
        "user",
        "assistant",
        "user",
        "system",
        "assistant",
        "user",
    ]
    assert sent["messages"][3]["content"] == [
        {"type": "text", "text": "first"},
        {"type": "text", "text": "second"},
    ]
    assert [b["type"] for b in sent["messages"][2]["content"]] == [
        "tool_result",
        "tool_result",
        "text",
    ]
    check_messages_request(sent, lambda *_: None)
    last = body([user("go"), call("c1"), system("note"), output("c1")], tools=[])
    assert [m["role"] for m in last["messages"]] == ["user", "assistant", "user", "system"]


def test_calls_and_outputs_pair_in_consecutive_messages() -> None:
    items = [
        user("go", cache_control={"type": "ephemeral"}),
        reasoning("plan", "sig=="),
        reasoning("unsigned", None),
        {"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": ""}]},
        call("c1"),
        call("c2", arguments="not json"),
        output("c1", is_error=True, cache_control={"type": "ephemeral"}),
        user("and?"),
        output("c2", [{"type": "input_text", "text": "two"}]),
    ]
    sent = body(items)
    assert sent["messages"] == [
        {
            "role": "user",
            "content": [{"type": "text", "text": "go", "cache_control": {"type": "ephemeral"}}],
        },
        {
            "role": "assistant",
            "content": [
                {"type": "thinking", "thinking": "plan", "signature": "sig=="},
                {"type": "tool_use", "id": "c1", "name": "f", "input": {"a": 1}},
                {"type": "tool_use", "id": "c2", "name": "f", "input": {"arguments": "not json"}},
            ],
        },
        {
            "role": "user",
            "content": [
                {
                    "type": "tool_result",
                    "tool_use_id": "c1",
                    "content": "ok",
                    "is_error": True,
                    "cache_control": {"type": "ephemeral"},
                },
                {
                    "type": "tool_result",
                    "tool_use_id": "c2",
                    "content": [{"type": "text", "text": "two"}],
                },
                {"type": "text", "text": "and?"},
            ],
        },
    ]


def test_arguments_nested_past_what_can_be_written_go_as_their_text() -> None:
    """A call's arguments that parse but nest deeper than the gateway writes JSON (a client's
    history, a model's answer) go as the text they are, as arguments that are no object do,
    not as a body that cannot be sent."""
    deep = '{"a":' * 300 + "1" + "}" * 300
    sent = body([user("go"), call("c1", arguments=deep), output("c1")])
    assert sent["messages"][1]["content"][0]["input"] == {"arguments": deep}
    orjson.dumps(sent)


def test_a_call_after_a_gateway_calls_result_is_the_next_assistant_turn() -> None:
    """An MCP call ran, then the model called a client tool: two turns of one ``tool_use``
    each, the MCP result between them, not two parallel ``tool_use`` blocks."""
    mcp = {"type": "mcp_call", "id": "m1", "server_label": "s", "name": "t", "arguments": "{}"}
    items = [user("go"), {**mcp, "output": "4", "status": "completed"}, call("c1"), output("c1")]
    turns = [
        (m["role"], [b.get("id") or b.get("tool_use_id") for b in m["content"]])
        for m in body(items)["messages"]
    ]
    assert turns == [
        ("user", [None]),
        ("assistant", ["m1"]),
        ("user", ["m1"]),
        ("assistant", ["c1"]),
        ("user", ["c1"]),
    ]


@pytest.mark.parametrize("prefix", [SEALED_BY_RESPONSES, responses_maker("openai")])
def test_a_responses_upstreams_seal_is_not_sent_as_a_signature(prefix: str) -> None:
    """Reasoning an OpenAI Responses upstream sealed would be refused as a signature."""
    item = {
        "type": "reasoning",
        "summary": [],
        "content": [{"type": "reasoning_text", "text": "plan"}],
        "encrypted_content": prefix + "gAAAA",
    }
    sent = body([user("q"), item, user("next")])
    assert [message["role"] for message in sent["messages"]] == ["user"]


def test_prompt_caching_marks_reach_anthropic() -> None:
    tool = {"type": "function", "name": "f", "parameters": {"type": "object"}}
    cached = {**tool, "cache_control": {"type": "ephemeral", "ttl": "1h"}}
    automatic = {"type": "ephemeral"}
    sent = body([user("q")], tools=[cached, tool], cache_control=automatic)
    assert sent["tools"][0]["cache_control"] == {"type": "ephemeral", "ttl": "1h"}
    assert "cache_control" not in sent["tools"][1]
    assert sent["cache_control"] == automatic
    assert "cache_control" not in body([user("q")], tools=[tool], client_cache_marks=True)


def test_a_strict_tool_stays_strict() -> None:
    """Anthropic's strict tool use (a tool's ``strict: true``) is asked for as the client
    asked; a tool not strict, or not said to be, is sent without the field."""
    schema = {"type": "object", "properties": {}, "additionalProperties": False}
    tool = {"type": "function", "name": "f", "parameters": schema}
    strict = {**tool, "name": "g", "strict": True}
    loose = {**tool, "name": "h", "strict": False}
    sent = body([user("q")], tools=[strict, loose, tool])
    assert [t.get("strict") for t in sent["tools"]] == [True, None, None]


def test_redacted_thinking_goes_back_whole() -> None:
    item = {
        "type": "reasoning",
        "summary": [],
        "content": [],
        "encrypted_content": REDACTED + "data",
    }
    sent = body([user("q"), item])
    assert sent["messages"][1]["content"] == [{"type": "redacted_thinking", "data": "data"}]


def test_names_and_ids_are_respelled_and_names_restored() -> None:
    names = ToolNames()
    tools = [{"type": "function", "name": "files.read", "parameters": {"type": "object"}}]
    req = request(
        [user("q"), call("call:1", "files.read"), output("call:1")],
        tools=tools,
        tool_choice={"type": "function", "name": "files.read"},
    )
    sent = to_upstream(req, AnthropicOptions(), names)
    wire = sent["tools"][0]["name"]
    assert wire.startswith("files_read_")
    assert sent["tool_choice"] == {"type": "tool", "name": wire}
    use = sent["messages"][1]["content"][0]
    result = sent["messages"][2]["content"][0]
    assert use["name"] == wire
    assert use["id"] == result["tool_use_id"] == safe_name("call:1")
    assert safe_name("call:1") != safe_name("call;1")
    assert names.from_upstream(wire) == "files.read"
    assert names.from_upstream("other") == "other"
    assert safe_name("x" * 200) != safe_name("x" * 201)
    assert len(safe_name("é" * 200)) <= 128


JPEG = base64.b64encode(b"\xff\xd8\xff\xe0\x00\x10JFIF\x00").decode()
PNG = base64.b64encode(b"\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR").decode()
GIF = base64.b64encode(b"GIF89a\x01\x00\x01\x00").decode()
WEBP = base64.b64encode(b"RIFF\x24\x00\x00\x00WEBPVP8 ").decode()


@pytest.mark.parametrize(
    ("url", "media_type"),
    [
        (f"data:image/jpg;base64,{JPEG}", "image/jpeg"),  # a common label Anthropic refuses
        (f"data:image/png;base64,{JPEG}", "image/jpeg"),  # mislabelled: the bytes tell
        (f"data:application/octet-stream;base64,{PNG}", "image/png"),
        (f"data:image/jpeg;base64,{GIF}", "image/gif"),
        (f"data:image/png;base64,{WEBP}", "image/webp"),
        ("data:image/jpg;base64,AA==", "image/jpeg"),  # bytes unknown: the label, spelled
        ("data:IMAGE/PNG;base64,AA==", "image/png"),  # as Anthropic spells it
        ("data:image/heic;base64,AA==", "image/heic"),  # left to Anthropic's refusal
    ],
)
def test_an_image_is_sent_as_the_media_type_its_bytes_are(url: str, media_type: str) -> None:
    """Anthropic takes only ``image/jpeg``, ``image/png``, ``image/gif`` and ``image/webp``,
    and refuses an image whose bytes are not of the type its label names; OpenAI's APIs
    read an image whatever its data URL's label (browsers and tools write ``image/jpg``):
    the type sent is the one the bytes are."""
    part = {"type": "input_image", "image_url": url}
    sent = body([{"type": "message", "role": "user", "content": [part]}])
    [block] = sent["messages"][0]["content"]
    assert block["source"]["media_type"] == media_type
    assert block["source"]["data"] == url.partition(",")[2]


def test_images_and_documents() -> None:
    parts = [
        {"type": "input_image", "image_url": "data:image/png;base64,AA=="},
        {"type": "input_image", "image_url": "https://x/i.png"},
        {"type": "input_file", "file_data": "data:application/pdf;base64,JVBE", "filename": "p"},
        {"type": "input_file", "file_data": "data:text/plain;base64,aGk="},
        {"type": "input_file", "file_url": "https://x/d.pdf"},
    ]
    sent = body([{"type": "message", "role": "user", "content": parts}])
    assert sent["messages"][0]["content"] == [
        {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": "AA=="}},
        {"type": "image", "source": {"type": "url", "url": "https://x/i.png"}},
        {
            "type": "document",
            "source": {"type": "base64", "media_type": "application/pdf", "data": "JVBE"},
            "title": "p",
        },
        {"type": "document", "source": {"type": "text", "media_type": "text/plain", "data": "hi"}},
        {"type": "document", "source": {"type": "url", "url": "https://x/d.pdf"}},
    ]
    for part in (
        {"type": "input_file", "file_id": "file_1"},
        {"type": "input_image", "file_id": "f"},
    ):
        with pytest.raises(InvalidRequest):
            body([{"type": "message", "role": "user", "content": [part]}])


def test_a_text_file_of_any_text_type_goes_as_a_text_document() -> None:
    """Anthropic takes base64 documents as PDFs only: a text file (Markdown, JSON, a named
    charset) goes as a ``text`` source, as :mod:`stateway.core.text_files` judges it; one
    whose bytes are not UTF-8 keeps its media type, for Anthropic to refuse."""
    files = [
        "data:text/markdown;base64,IyBo",
        "data:application/json;base64,e30=",
        "data:text/plain;charset=utf-8;base64,aGk=",
    ]
    parts = [{"type": "input_file", "file_data": data} for data in files]
    sent = body([{"type": "message", "role": "user", "content": parts}])
    assert [block["source"] for block in sent["messages"][0]["content"]] == [
        {"type": "text", "media_type": "text/plain", "data": text} for text in ("# h", "{}", "hi")
    ]
    latin = {"type": "input_file", "file_data": "data:text/csv;base64,Y2Fm6Q=="}
    sent = body([{"type": "message", "role": "user", "content": [latin]}])
    assert sent["messages"][0]["content"][0]["source"] == {
        "type": "base64",
        "media_type": "text/csv",
        "data": "Y2Fm6Q==",
    }


@pytest.mark.parametrize("data", ["Y2Fm6Q==", "abc"])
def test_a_plain_text_file_that_is_no_text_file_goes_as_it_came_too(data: str) -> None:
    """``text/plain`` is judged as any text type is (:mod:`stateway.core.text_files`): bytes
    that are not UTF-8 (Latin-1 here), or base64 that does not decode, go as they came.
    A rule of its own decoded them, the first with replacement characters, the second not
    at all: an ``Incorrect padding`` error, the request's 500."""
    part = {"type": "input_file", "file_data": f"data:text/plain;base64,{data}"}
    sent = body([{"type": "message", "role": "user", "content": [part]}])
    assert sent["messages"][0]["content"][0]["source"] == {
        "type": "base64",
        "media_type": "text/plain",
        "data": data,
    }


def test_a_file_with_an_empty_url_and_no_data_is_refused() -> None:
    part = {"type": "input_file", "file_url": ""}
    with pytest.raises(InvalidRequest, match="file_id or without a data URL"):
        body([{"type": "message", "role": "user", "content": [part]}])


def test_a_messages_clients_document_goes_as_it_came() -> None:
    """Its ``context`` and ``citations``, and a custom-content ``source`` (whose blocks
    Anthropic's citations of it count) rather than the text joined from it."""
    source = {"type": "content", "content": [{"type": "text", "text": "a"}]}
    part = {
        "type": "input_file",
        "file_data": "data:text/plain;base64,YQ==",
        "filename": "d",
        "source": source,
        "context": "notes",
        "citations": {"enabled": True},
    }
    sent = body([{"type": "message", "role": "user", "content": [part]}])
    assert sent["messages"][0]["content"] == [
        {
            "type": "document",
            "source": source,
            "title": "d",
            "context": "notes",
            "citations": {"enabled": True},
        }
    ]


def _cited_answer(*citations: dict[str, Any]) -> Item:
    part = {"type": "output_text", "text": "cited", "citations": list(citations)}
    return {"type": "message", "role": "assistant", "content": [part]}


DOCUMENT_CITED = {
    "type": "page_location",
    "cited_text": "page 1",
    "document_index": 0,
    "document_title": "d",
    "start_page_number": 1,
    "end_page_number": 2,
}
HIT_CITED = {
    "type": "search_result_location",
    "cited_text": "About a.",
    "search_result_index": 0,
    "source": "https://a.test/",
    "title": "A",
    "start_block_index": 0,
    "end_block_index": 1,
}
WEB_CITED = {
    "type": "web_search_result_location",
    "url": "https://a.test/",
    "title": "A",
    "encrypted_index": "c3J2dG9vbHVfYTow",
    "cited_text": "About a.",
}
HIT = {
    "type": "search_result",
    "source": "https://a.test/",
    "title": "A",
    "content": [{"type": "text", "text": "About a."}],
    "citations": {"enabled": True},
}


def test_a_search_result_goes_as_it_came_and_is_cited_back() -> None:
    """A Messages client's ``search_result`` block (kept beside its text), in a user
    message or a tool result; an answer's citations of it and of a document go back."""
    pdf = {"type": "input_file", "file_data": "data:application/pdf;base64,JVBE"}
    hit = {"type": "input_text", "text": "A\nhttps://a.test/\nAbout a.", "search_result": HIT}
    asked = {"type": "message", "role": "user", "content": [pdf, hit]}
    sent = body([asked, _cited_answer(DOCUMENT_CITED, HIT_CITED), user("more")])
    first, answer, _ = sent["messages"]
    assert first["content"][1] == HIT
    assert answer["content"] == [
        {"type": "text", "text": "cited", "citations": [DOCUMENT_CITED, HIT_CITED]}
    ]
    in_result = body([user("q"), call("c1"), output("c1", [hit])])
    assert in_result["messages"][2]["content"][0]["content"] == [HIT]


def test_citations_of_nothing_sent_are_left_out_and_the_text_kept() -> None:
    """The gateway's own web search citations (no Anthropic search made them), citations
    of a document or search result not sent before them, and unknown kinds."""
    later = {**HIT_CITED, "search_result_index": 1}
    odd = {"type": "video_location", "document_index": 0}
    sent = body([user("q"), _cited_answer(WEB_CITED, DOCUMENT_CITED, later, odd), user("more")])
    assert sent["messages"][1]["content"] == [{"type": "text", "text": "cited"}]


def test_a_request_without_turns_is_refused_before_sending() -> None:
    with pytest.raises(InvalidRequest):
        body([system("only rules")])


def assistant(text: str) -> Item:
    return {
        "type": "message",
        "role": "assistant",
        "content": [{"type": "output_text", "text": text}],
    }


def test_an_empty_user_turn_stays_a_turn_anthropic_takes() -> None:
    """A Chat client's ``content: ""``: Anthropic refuses an empty text block, and leaving
    the turn out would send no message (alone) or make the assistant's last text a prefill
    to continue; a turn with other blocks needs no stand-in."""
    placeholder = {"type": "text", "text": EMPTY_TURN}
    for items, messages in [
        ([user("")], [{"role": "user", "content": [placeholder]}]),
        (
            [user("hi"), assistant("hello"), user("")],
            [
                {"role": "user", "content": [{"type": "text", "text": "hi"}]},
                {"role": "assistant", "content": [{"type": "text", "text": "hello"}]},
                {"role": "user", "content": [placeholder]},
            ],
        ),
        ([user(""), user("hi")], [{"role": "user", "content": [{"type": "text", "text": "hi"}]}]),
        (
            [call("c1"), output("c1"), user("")],
            [
                {
                    "role": "assistant",
                    "content": [{"type": "tool_use", "id": "c1", "name": "f", "input": {"a": 1}}],
                },
                {
                    "role": "user",
                    "content": [{"type": "tool_result", "tool_use_id": "c1", "content": "ok"}],
                },
            ],
        ),
    ]:
        sent = body([system("rules"), *items])
        assert sent["messages"] == messages
        check_messages_request(sent, lambda *_: None)  # what Anthropic takes


def test_blank_text_is_left_out_as_empty_text_is() -> None:
    """Anthropic refuses text blocks of whitespace only, as it refuses empty ones: a
    blank part, message, instruction or tool output is left out, and a user turn left
    with nothing is the empty turn's stand-in."""
    blank_part = {"type": "input_text", "text": " "}
    sent = body(
        [
            system(" "),
            user(" \n\t"),
            assistant(" "),
            {"type": "message", "role": "user", "content": "  "},
            {**user("hi"), "content": [blank_part, *user("hi")["content"]]},
            call("c1"),
            output("c1", [{"type": "input_text", "text": "\n"}]),
            call("c2"),
            output("c2", "\n"),
        ],
        instructions="  ",
    )
    assert "system" not in sent
    uses = [{"type": "tool_use", "id": c, "name": "f", "input": {"a": 1}} for c in ("c1", "c2")]
    assert sent["messages"] == [
        {"role": "user", "content": [{"type": "text", "text": "hi"}]},
        {"role": "assistant", "content": [uses[0]]},
        {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "c1"}]},
        {"role": "assistant", "content": [uses[1]]},
        {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "c2"}]},
    ]
    check_messages_request(sent, lambda *_: None)  # what Anthropic takes
    alone = body([user("hi"), assistant("hello"), user(" ")])
    assert alone["messages"][-1] == {
        "role": "user",
        "content": [{"type": "text", "text": EMPTY_TURN}],
    }
    check_messages_request(alone, lambda *_: None)


def test_a_final_assistant_texts_trailing_whitespace_is_trimmed() -> None:
    """A last assistant message is a prefill to Anthropic, which refuses one whose text
    ends in whitespace (an OpenAI client's answer sent back ends with a newline often);
    an earlier turn's text is sent as it was."""
    sent = body([user("hi"), assistant("Sure.\n\n"), user("go on"), assistant("Well, ")])
    assert [m["content"][-1]["text"] for m in sent["messages"]] == [
        "hi",
        "Sure.\n\n",
        "go on",
        "Well,",
    ]
    check_messages_request(sent, lambda *_: None)  # what Anthropic takes
    with pytest.raises(Refused) as refused:
        check_messages_request(
            {**sent, "messages": [*sent["messages"][:-1], assistant_turn("Well, ")]},
            lambda *_: None,
        )
    assert refused.value.status == 400


def assistant_turn(text: str) -> dict[str, Any]:
    return {"role": "assistant", "content": [{"type": "text", "text": text}]}


def test_max_tokens_is_always_sent() -> None:
    assert body([user("q")])["max_tokens"] == 4096
    assert body([user("q")], AnthropicOptions(default_max_tokens=77))["max_tokens"] == 77
    assert body([user("q")], max_output_tokens=9)["max_tokens"] == 9


@pytest.mark.parametrize(
    ("asked", "user_id"),
    [
        ({"safety_identifier": "hashed-7"}, "hashed-7"),
        ({"safety_identifier": "hashed-7", "user": "u-1"}, "hashed-7"),
        ({"user": "u-1"}, "u-1"),
    ],
)
def test_the_user_anthropic_is_told_of_is_the_safety_identifier_first(
    asked: dict[str, str], user_id: str
) -> None:
    """OpenAI's ``safety_identifier`` (which replaces ``user``) is what Anthropic's
    ``metadata.user_id`` is for: an opaque id of the end user, to detect abuse by."""
    assert body([user("q")], **asked)["metadata"] == {"user_id": user_id}


def test_sampling_settings_without_thinking() -> None:
    sent = body(
        [user("q")],
        temperature=1.6,
        top_p=0.5,
        top_k=20,
        stop_sequences=["END"],
        user="u-1",
        reasoning_effort="none",
    )
    assert (sent["temperature"], sent["top_p"], sent["top_k"]) == (1.0, 0.5, 20)
    assert sent["stop_sequences"] == ["END"]
    assert sent["metadata"] == {"user_id": "u-1"}
    assert sent["thinking"] == {"type": "disabled"}
    assert "service_tier" not in sent


def test_no_thinking_asked_is_sent_as_disabled_and_none_asked_as_nothing() -> None:
    """Newer models think unasked when ``thinking`` is left out: a client that asked for
    none (effort ``none``) has it ``disabled``, whatever the backend's ``thinking``,
    and with a forced tool or an unsigned tool turn too; a client that said nothing sends
    no ``thinking``."""
    adaptive = AnthropicOptions(thinking="adaptive")
    for options in (AnthropicOptions(), adaptive):
        sent = body([user("q")], options, reasoning_effort="none", temperature=0.2)
        assert sent["thinking"] == {"type": "disabled"}
        assert "output_config" not in sent
        assert sent["temperature"] == 0.2
        assert "thinking" not in body([user("q")], options)
    tools = [{"type": "function", "name": "f", "parameters": {"type": "object"}}]
    forced = to_upstream(
        request([user("q")], tools=tools, tool_choice="required", reasoning_effort="none"),
        AnthropicOptions(),
        ToolNames(),
    )
    assert forced["thinking"] == {"type": "disabled"}
    assert count_body(forced)["thinking"] == {"type": "disabled"}


def test_a_count_keeps_the_output_config() -> None:
    """A structured output's schema is part of what the model reads: a count of the input
    is asked with it (``/messages/count_tokens`` takes ``output_config``), and with the
    adaptive effort beside it."""
    schema = {"type": "object", "properties": {"a": {"type": "string"}}}
    sent = body(
        [user("q")],
        AnthropicOptions(thinking="adaptive"),
        reasoning_effort="low",
        text_format={"type": "json_schema", "name": "s", "schema": schema},
    )
    wanted = {"effort": "low", "format": {"type": "json_schema", "schema": schema}}
    assert count_body(sent)["output_config"] == sent["output_config"] == wanted


def test_a_messages_clients_thinking_disabled_is_sent_as_disabled() -> None:
    """Messages' ``thinking: disabled`` (no effort asked) reaches an Anthropic upstream as
    ``disabled``, whatever the backend's ``thinking``."""
    for options in (AnthropicOptions(), AnthropicOptions(thinking="adaptive")):
        sent = body([user("q")], options, reasoning_disabled=True)
        assert sent["thinking"] == {"type": "disabled"}
        assert "output_config" not in sent


@pytest.mark.parametrize(
    ("tier", "sent"),
    [("auto", "auto"), ("priority", "auto"), ("default", "standard_only"), ("flex", None)],
)
def test_service_tiers_anthropic_has(tier: str, sent: str | None) -> None:
    assert body([user("q")], service_tier=tier).get("service_tier") == sent


def test_thinking_budgets_stay_within_what_anthropic_accepts() -> None:
    # without the client's limit, thinking takes half the backend's default, leaving the
    # answer the rest (not one token)
    assert body([user("q")], reasoning_effort="high")["thinking"] == {
        "type": "enabled",
        "budget_tokens": 2048,
    }
    assert body([user("q")], reasoning_effort="high")["max_tokens"] == 4096
    thinking = body([user("q")], reasoning_effort="low", max_output_tokens=10000)["thinking"]
    assert thinking == {"type": "enabled", "budget_tokens": 2048}
    most = body([user("q")], reasoning_effort="max", max_output_tokens=100000)["thinking"]
    assert most == {"type": "enabled", "budget_tokens": 65536}
    explicit = body([user("q")], reasoning_budget=50000, max_output_tokens=8000)["thinking"]
    assert explicit["budget_tokens"] == 7999
    assert "thinking" not in body([user("q")], reasoning_effort="high", max_output_tokens=1024)
    assert (
        body([user("q")], reasoning_budget=1024, max_output_tokens=1100)["thinking"][
            "budget_tokens"
        ]
        == 1024
    )


def test_an_interleaved_thinking_budget_goes_past_max_tokens_as_it_came() -> None:
    interleaved = ["interleaved-thinking-2025-05-14"]
    sent = body(
        [user("q")], reasoning_budget=50000, max_output_tokens=8000, anthropic_beta=interleaved
    )
    assert (sent["max_tokens"], sent["thinking"]["budget_tokens"]) == (8000, 50000)
    small = body(
        [user("q")], reasoning_budget=2048, max_output_tokens=1000, anthropic_beta=interleaved
    )
    assert small["thinking"] == {"type": "enabled", "budget_tokens": 2048}


def test_thinking_leaves_out_sampling_anthropic_refuses_with_it() -> None:
    sent = body([user("q")], reasoning_effort="low", temperature=0.2, top_k=5, top_p=0.5)
    assert not {"temperature", "top_k", "top_p"} & set(sent)
    kept = body([user("q")], reasoning_effort="low", temperature=1.0, top_p=0.97)
    assert (kept["temperature"], kept["top_p"]) == (1.0, 0.97)


@pytest.mark.parametrize(
    ("sampling", "asked", "sent"),
    [
        ("all", {"temperature": 0.3, "top_p": 0.9, "top_k": 5}, (0.3, 0.9, 5)),
        ("one", {"temperature": 0.3, "top_p": 0.9, "top_k": 5}, (0.3, None, 5)),
        ("one", {"top_p": 0.9}, (None, 0.9, None)),
        ("none", {"temperature": 0.3, "top_p": 0.9, "top_k": 5}, (None, None, None)),
    ],
)
def test_sampling_is_sent_as_the_model_takes_it(
    sampling: Any, asked: dict[str, Any], sent: tuple[Any, ...]
) -> None:
    """Claude models from Sonnet 4.5 on refuse ``temperature`` and ``top_p`` together
    ("cannot both be specified for this model"), those from Opus 4.7 on any of the three
    ("`temperature` is deprecated for this model"): ``sampling`` leaves out what they
    refuse, where a Chat client sends both on every request."""
    wire = body([user("q")], AnthropicOptions(sampling=sampling), **asked)
    assert (wire.get("temperature"), wire.get("top_p"), wire.get("top_k")) == sent
    thinking = body(
        [user("q")],
        AnthropicOptions(sampling="one"),
        reasoning_effort="low",
        temperature=1.0,
        top_p=0.97,
    )
    assert (thinking["temperature"], "top_p" in thinking) == (1.0, False)


def test_adaptive_thinking_carries_the_effort() -> None:
    adaptive = AnthropicOptions(thinking="adaptive")
    sent = body([user("q")], adaptive, reasoning_effort="xhigh")
    assert (sent["thinking"], sent["output_config"]) == ({"type": "adaptive"}, {"effort": "xhigh"})
    assert body([user("q")], adaptive, reasoning_effort="minimal")["output_config"] == {
        "effort": "low"
    }
    assert body([user("q")], adaptive, reasoning_effort="max")["output_config"] == {"effort": "max"}
    # a level Anthropic does not know (a Chat client's own word) is asked as its default
    assert body([user("q")], adaptive, reasoning_effort="ultra")["output_config"] == {
        "effort": "high"
    }
    assert body([user("q")], adaptive, reasoning_budget=2000)["thinking"]["type"] == "enabled"
    asked = body([user("q")], reasoning_effort="high", reasoning_adaptive=True)
    assert (asked["thinking"], asked["output_config"]) == ({"type": "adaptive"}, {"effort": "high"})
    # the backend's "enabled" is for clients that give an effort only: a client that asks
    # for adaptive thinking gets it (newer models refuse enabled thinking)
    hidden = body([user("q")], reasoning_effort="low", reasoning_display="hidden")
    assert "display" not in hidden["thinking"]


def test_a_json_schema_is_anthropics_structured_output() -> None:
    schema = {"type": "object", "properties": {"a": {"type": "string"}}, "required": ["a"]}
    text_format = {"type": "json_schema", "name": "answer", "schema": schema, "strict": True}
    sent = body([user("q")], text_format=text_format)
    assert sent["output_config"] == {"format": {"type": "json_schema", "schema": schema}}
    adaptive = AnthropicOptions(thinking="adaptive")
    both = body([user("q")], adaptive, reasoning_effort="high", text_format=text_format)
    assert both["output_config"] == {
        "effort": "high",
        "format": {"type": "json_schema", "schema": schema},
    }
    assert "output_config" not in body([user("q")], text_format={"type": "json_object"})
    assert "output_config" not in body([user("q")], text_format={"type": "json_schema"})
    assert "output_config" not in body([user("q")])


def test_a_messages_clients_thinking_display_goes_along() -> None:
    adaptive = AnthropicOptions(thinking="adaptive")
    sent = body([user("q")], adaptive, reasoning_effort="high", reasoning_display="omitted")
    assert sent["thinking"] == {"type": "adaptive", "display": "omitted"}
    enabled = body([user("q")], reasoning_budget=2000, reasoning_display="summarized")
    assert enabled["thinking"] == {
        "type": "enabled",
        "budget_tokens": 2000,
        "display": "summarized",
    }
    assert "display" not in body([user("q")], adaptive, reasoning_effort="high")["thinking"]


@pytest.mark.parametrize(
    ("choice", "parallel", "wire"),
    [
        ("auto", True, {"type": "auto"}),
        ("auto", False, {"type": "auto", "disable_parallel_tool_use": True}),
        ("required", True, {"type": "any"}),
        ("none", False, {"type": "none"}),
        ({"type": "function", "name": "f"}, True, {"type": "tool", "name": "f"}),
    ],
)
def test_tool_choice(choice: Any, parallel: bool, wire: dict[str, Any]) -> None:
    tools = [
        {"type": "function", "name": "f", "description": "d", "parameters": {"type": "object"}}
    ]
    sent = to_upstream(
        request([user("q")], tools=tools, tool_choice=choice, parallel_tool_calls=parallel),
        AnthropicOptions(),
        ToolNames(),
    )
    assert sent["tools"] == [{"name": "f", "description": "d", "input_schema": {"type": "object"}}]
    assert sent["tool_choice"] == wire


def test_a_history_of_tool_calls_without_tools_declares_them_not_to_be_called() -> None:
    """Anthropic refuses ``tool_use`` and ``tool_result`` blocks in a request declaring no
    tools ("... must define tools"): a compaction's summary call offers none, as does a
    client that sends its tool history with no tools. The tools called are declared from
    the history (each once, as spelled there), with ``none`` for a choice."""
    items = [user("go"), call("c1", "files.read"), call("c2"), output("c1"), output("c2")]
    sent = body([*items, call("c3", "files.read"), output("c3"), user("sum up")])
    read = safe_name("files.read")
    assert sent["tools"] == [
        {"name": read, "input_schema": {"type": "object"}},
        {"name": "f", "input_schema": {"type": "object"}},
    ]
    assert sent["tool_choice"] == {"type": "none"}
    check_messages_request(sent, lambda thinking, signature: None)
    assert "tools" not in body([user("q")])
    assert "tool_choice" not in body([user("q")])
    declared = [{"type": "function", "name": "g"}]
    sent = to_upstream(request(items, tools=declared), AnthropicOptions(), ToolNames())
    assert [tool["name"] for tool in sent["tools"]] == ["g"]  # declared: as declared
    assert sent["tool_choice"] == {"type": "auto"}


@pytest.mark.parametrize(
    ("parameters", "schema"),
    [
        ({}, {"type": "object"}),
        (
            {"properties": {"a": {"type": "string"}}},
            {"type": "object", "properties": {"a": {"type": "string"}}},
        ),
        ({"type": "object", "required": []}, {"type": "object", "required": []}),
    ],
)
def test_a_tools_schema_without_a_type_is_sent_as_an_object_schema(
    parameters: dict[str, Any], schema: dict[str, Any]
) -> None:
    """OpenAI takes a function's ``parameters`` without a ``type`` (``{}`` for a function
    of no arguments); Anthropic requires ``input_schema.type: "object"``."""
    tools = [{"type": "function", "name": "f", "parameters": parameters}]
    sent = to_upstream(request([user("q")], tools=tools), AnthropicOptions(), ToolNames())
    assert sent["tools"][0]["input_schema"] == schema
    check_messages_request(sent, lambda *_: None)


def test_a_forced_tool_turns_thinking_off() -> None:
    tools = [{"type": "function", "name": "f"}]
    sent = to_upstream(
        request([user("q")], tools=tools, tool_choice="required", reasoning_effort="high"),
        AnthropicOptions(),
        ToolNames(),
    )
    assert "thinking" not in sent
    assert sent["tools"][0]["input_schema"] == {"type": "object"}


def test_tools_not_to_be_called_keep_thinking_on() -> None:
    """``none`` forces no tool: thinking stays (only a forced tool turns it off)."""
    tools = [{"type": "function", "name": "f"}]
    sent = to_upstream(
        request([user("q")], tools=tools, tool_choice="none", reasoning_effort="high"),
        AnthropicOptions(),
        ToolNames(),
    )
    assert sent["tool_choice"] == {"type": "none"}
    assert sent["thinking"] == {"type": "enabled", "budget_tokens": 2048}


def test_a_tool_turn_without_its_signed_thinking_turns_thinking_off() -> None:
    """Anthropic refuses thinking when the last assistant message calls tools without
    leading thinking: a Chat client, which cannot carry signatures, sends such a turn on
    the second request of every tool loop; thinking goes back on with the signature."""
    tools = [{"type": "function", "name": "f"}]
    unsigned = [user("q"), reasoning("hm", None), call("c1"), output("c1")]
    sent = to_upstream(
        request(unsigned, tools=tools, reasoning_effort="high", temperature=0.5),
        AnthropicOptions(),
        ToolNames(),
    )
    assert "thinking" not in sent
    assert sent["temperature"] == 0.5
    assert [b["type"] for b in sent["messages"][1]["content"]] == ["tool_use"]
    signed = [user("q"), reasoning("hm", "sig="), call("c1"), output("c1")]
    sent = to_upstream(
        request(signed, tools=tools, reasoning_effort="high"), AnthropicOptions(), ToolNames()
    )
    assert sent["thinking"]["type"] == "enabled"
    # an earlier tool turn without thinking does not matter, nor a last one without calls
    earlier = [*unsigned, {"type": "message", "role": "assistant", "content": "done"}, user("n")]
    sent = to_upstream(
        request(earlier, tools=tools, reasoning_effort="high"), AnthropicOptions(), ToolNames()
    )
    assert sent["thinking"]["type"] == "enabled"


START = {
    "type": "message_start",
    "message": {
        "id": "msg_1",
        "usage": {"input_tokens": 5, "cache_read_input_tokens": 2, "output_tokens": 1},
    },
}


def feed(events: list[dict[str, Any]], names: ToolNames | None = None) -> list[Delta]:
    reported = partial(classify_reported, backend="claude", scrub=str, mid_stream=True)
    state = StreamState(names or ToolNames(), reported)
    return [delta for event in events for delta in state.feed(event)]


def test_stream_events_to_deltas() -> None:
    names = ToolNames()
    wire = names.to_upstream("files.read")
    events = [
        START,
        {"type": "ping"},
        {
            "type": "content_block_start",
            "index": 0,
            "content_block": {"type": "thinking", "thinking": ""},
        },
        {
            "type": "content_block_delta",
            "index": 0,
            "delta": {"type": "thinking_delta", "thinking": "hm"},
        },
        {
            "type": "content_block_delta",
            "index": 0,
            "delta": {"type": "signature_delta", "signature": "s="},
        },
        {"type": "content_block_stop", "index": 0},
        {
            "type": "content_block_start",
            "index": 1,
            "content_block": {"type": "redacted_thinking", "data": "x"},
        },
        {"type": "content_block_stop", "index": 1},
        {"type": "content_block_start", "index": 2, "content_block": {"type": "text", "text": ""}},
        {"type": "content_block_delta", "index": 2, "delta": {"type": "text_delta", "text": "hi"}},
        {
            "type": "content_block_delta",
            "index": 2,
            "delta": {"type": "citations_delta", "citation": {}},
        },
        {"type": "content_block_stop", "index": 2},
        {
            "type": "content_block_start",
            "index": 3,
            "content_block": {"type": "tool_use", "id": "toolu_1", "name": wire, "input": {}},
        },
        {
            "type": "content_block_delta",
            "index": 3,
            "delta": {"type": "input_json_delta", "partial_json": '{"a"'},
        },
        {
            "type": "content_block_delta",
            "index": 3,
            "delta": {"type": "input_json_delta", "partial_json": ":1}"},
        },
        {"type": "content_block_stop", "index": 3},
        {
            "type": "content_block_start",
            "index": 4,
            "content_block": {"type": "tool_use", "id": "toolu_2", "name": "g", "input": {}},
        },
        {"type": "content_block_stop", "index": 4},
        {
            "type": "message_delta",
            "delta": {"stop_reason": "tool_use", "stop_sequence": None},
            "usage": {"output_tokens": 7, "cache_creation_input_tokens": 3},
        },
        {"type": "message_stop"},
    ]
    prompt, *deltas = feed(events, names)
    # message_start's usage, the prompt's, is reported before any output
    assert prompt == UsageReport(Usage(7, 1, cached_tokens=2))
    redacted = deltas[3]
    assert isinstance(redacted, OutputItem)
    assert redacted.item["encrypted_content"] == REDACTED + "x"
    assert deltas[:3] == [ReasoningDelta(""), ReasoningDelta("hm"), ReasoningSignature("s=")]
    assert deltas[4:] == [
        TextDelta(""),
        TextDelta("hi"),
        ToolCallDelta(3, "toolu_1", "files.read", ""),
        ToolCallDelta(3, None, None, '{"a"'),
        ToolCallDelta(3, None, None, ":1}"),
        ToolCallDelta(4, "toolu_2", "g", ""),
        ToolCallDelta(4, None, None, "{}"),
        UsageReport(Usage(10, 7, cached_tokens=2, cache_write_tokens=3)),
        Finish("tool_calls"),
    ]


def test_a_call_whose_input_streams_only_empty_json_has_empty_arguments() -> None:
    """Anthropic streams a tool call without input as one ``input_json_delta`` whose
    ``partial_json`` is empty (and opens every other input with one): its arguments are
    ``{}``, not the empty string."""
    start = {"type": "tool_use", "id": "toolu_1", "name": "list_all", "input": {}}
    empty = {"type": "input_json_delta", "partial_json": ""}
    events = [
        START,
        {"type": "content_block_start", "index": 0, "content_block": start},
        {"type": "content_block_delta", "index": 0, "delta": empty},
        {"type": "content_block_stop", "index": 0},
        {
            "type": "content_block_start",
            "index": 1,
            "content_block": {**start, "id": "toolu_2", "name": "g"},
        },
        {"type": "content_block_delta", "index": 1, "delta": empty},
        {
            "type": "content_block_delta",
            "index": 1,
            "delta": {"type": "input_json_delta", "partial_json": '{"a":1}'},
        },
        {"type": "content_block_stop", "index": 1},
    ]
    arguments: dict[int, str] = {}
    for delta in feed(events)[1:]:  # after message_start's usage
        assert isinstance(delta, ToolCallDelta)
        arguments[delta.index] = arguments.get(delta.index, "") + delta.arguments
    assert arguments == {0: "{}", 1: '{"a":1}'}


def test_an_upstreams_own_server_tool_blocks_are_left_out_of_a_stream() -> None:
    """A ``server_tool_use`` block streams its input as ``input_json_delta`` too: it is no
    call of the client's (a whole message leaves it out as well)."""
    search = {"type": "server_tool_use", "id": "srvtoolu_1", "name": "web_search", "input": {}}
    result = {"type": "web_search_tool_result", "tool_use_id": "srvtoolu_1", "content": []}
    events = [
        START,
        {"type": "content_block_start", "index": 0, "content_block": search},
        {
            "type": "content_block_delta",
            "index": 0,
            "delta": {"type": "input_json_delta", "partial_json": '{"query": "x"}'},
        },
        {"type": "content_block_stop", "index": 0},
        {"type": "content_block_start", "index": 1, "content_block": result},
        {"type": "content_block_stop", "index": 1},
        {"type": "content_block_start", "index": 2, "content_block": {"type": "text", "text": ""}},
        {"type": "content_block_delta", "index": 2, "delta": {"type": "text_delta", "text": "a"}},
        {"type": "content_block_stop", "index": 2},
    ]
    assert feed(events)[1:] == [TextDelta(""), TextDelta("a")]
    searched = {**search, "input": {"query": "x"}}
    whole = {"content": [searched, result, {"type": "text", "text": "a"}]}
    assert list(from_upstream_message(whole, ToolNames()))[:1] == [TextDelta("a")]


CHAR = {"type": "char_location", "cited_text": "b.", "document_index": 0}


def test_cited_text_blocks_are_messages_of_their_own() -> None:
    """Anthropic splits an answer where its citations change: each text block after
    another begins a message, and its citations (streamed: ``citations_delta``, before or
    after its text) come with it."""

    def text_block(index: int) -> dict[str, Any]:
        block = {"type": "text", "text": ""}
        return {"type": "content_block_start", "index": index, "content_block": block}

    def delta(index: int, value: dict[str, Any]) -> dict[str, Any]:
        return {"type": "content_block_delta", "index": index, "delta": value}

    cite = {"type": "citations_delta", "citation": CHAR}
    events = [
        START,
        text_block(0),
        delta(0, {"type": "text_delta", "text": "a "}),
        {"type": "content_block_stop", "index": 0},
        text_block(1),
        delta(1, cite),
        delta(1, {"type": "text_delta", "text": "b."}),
        {"type": "content_block_stop", "index": 1},
        text_block(2),
        delta(2, {"type": "text_delta", "text": "c"}),
        delta(2, cite),
        {"type": "content_block_stop", "index": 2},
    ]
    assert feed(events)[1:] == [
        TextDelta(""),
        TextDelta("a "),
        MessageStart(),
        TextDelta(""),
        Citation(CHAR),
        TextDelta("b."),
        MessageStart(),
        TextDelta(""),
        TextDelta("c"),
        Citation(CHAR),
    ]
    whole = {
        "content": [
            {"type": "text", "text": "a "},
            {"type": "text", "text": "b.", "citations": [CHAR]},
        ]
    }
    assert list(from_upstream_message(whole, ToolNames()))[:4] == [
        TextDelta("a "),
        MessageStart(),
        TextDelta("b."),
        Citation(CHAR),
    ]


@pytest.mark.parametrize(
    ("reason", "sequence", "finish"),
    [
        ("end_turn", None, Finish("stop")),
        ("stop_sequence", "END", Finish("stop", stop_sequence="END")),
        ("max_tokens", None, Finish("length")),
        (
            "model_context_window_exceeded",
            None,
            Finish("length", stop_reason="model_context_window_exceeded"),
        ),
        ("refusal", None, Finish("content_filter", stop_reason="refusal")),
        ("pause_turn", None, Finish(PAUSED, stop_reason="pause_turn")),
    ],
)
def test_stop_reasons(reason: str, sequence: str | None, finish: Finish) -> None:
    delta = {
        "type": "message_delta",
        "delta": {"stop_reason": reason, "stop_sequence": sequence},
        "usage": {},
    }
    assert feed([START, delta])[-1] == finish


def test_a_refusals_stop_details_go_along_as_they_came() -> None:
    details = {"type": "refusal", "category": "cyber", "explanation": "Malware."}
    stop = {"stop_reason": "refusal", "stop_sequence": None, "stop_details": details}
    delta = {"type": "message_delta", "delta": stop, "usage": {}}
    expected = Finish("content_filter", stop_reason="refusal", stop_details=details)
    assert feed([START, delta])[-1] == expected
    whole = {"content": [{"type": "text", "text": "No."}], **stop, "usage": {}}
    assert list(from_upstream_message(whole, ToolNames()))[-1] == expected


def test_a_mid_stream_error_event_is_an_upstream_failure() -> None:
    overloaded = {"type": "error", "error": {"type": "overloaded_error", "message": "Overloaded"}}
    with pytest.raises(UpstreamUnavailable) as caught:
        feed([START, overloaded])
    assert (caught.value.status, caught.value.code) == (503, "upstream_overloaded")
    with pytest.raises(UpstreamError) as failed:
        feed([START, {"type": "error", "error": {"type": "api_error", "message": "boom"}}])
    assert failed.value.status == 502
    assert "boom" in failed.value.message


def test_a_whole_message_to_deltas() -> None:
    message = {
        "content": [
            {"type": "thinking", "thinking": "hm", "signature": "s="},
            {"type": "text", "text": "hi"},
            {"type": "tool_use", "id": "t1", "name": "f", "input": {"a": 1}},
        ],
        "stop_reason": "tool_use",
        "usage": {
            "input_tokens": 4,
            "output_tokens": 2,
            "output_tokens_details": {"thinking_tokens": 1},
        },
    }
    assert list(from_upstream_message(message, ToolNames())) == [
        ReasoningDelta("hm"),
        ReasoningSignature("s="),
        TextDelta("hi"),
        ToolCallDelta(2, "t1", "f", '{"a":1}'),
        UsageReport(Usage(4, 2, reasoning_tokens=1)),
        Finish("tool_calls"),
    ]


def test_redacted_thinking_comes_as_a_whole_reasoning_item() -> None:
    """Its data as the item's seal, marked redacted; no text: ``summary`` and ``content``
    empty, as the Responses wire shows a reasoning item, and completed."""
    message = {
        "content": [{"type": "redacted_thinking", "data": "opaque"}],
        "stop_reason": "end_turn",
        "usage": {"input_tokens": 4, "output_tokens": 2},
    }
    first = next(from_upstream_message(message, ToolNames()))
    assert isinstance(first, OutputItem)
    item = dict(first.item)
    assert item.pop("id").startswith("rs_")
    assert item == {
        "type": "reasoning",
        "summary": [],
        "content": [],
        "encrypted_content": REDACTED + "opaque",
        "status": "completed",
    }


def backend(loopback: Loopback, url: str, **options: Any) -> AnthropicBackend:
    target = UpstreamTarget(
        "claude",
        url,
        api_key="sk-ant-1",
        key_header="x-api-key",
        headers=(("anthropic-version", "2023-06-01"),),
    )
    return AnthropicBackend(loopback.adopt(UpstreamClient(target)), AnthropicOptions(**options))


def sse(*events: dict[str, Any]) -> bytes:
    return b"".join(
        b"event: " + e["type"].encode() + b"\ndata: " + orjson.dumps(e) + b"\n\n" for e in events
    )


async def collect(backend: AnthropicBackend, req: InferenceRequest) -> list[Delta]:
    return [delta async for delta in backend.infer(req)]


async def test_the_key_and_version_headers(loopback: Loopback) -> None:
    seen: list[tuple[str, dict[str, str], dict[str, Any]]] = []

    async def answer(http: web.Request) -> web.StreamResponse:
        seen.append((http.path, dict(http.headers), await http.json()))
        if http.path.endswith("/count_tokens"):
            return web.json_response({"input_tokens": 12})
        message = {
            "content": [{"type": "text", "text": "hi"}],
            "stop_reason": "end_turn",
            "usage": {},
        }
        return web.json_response(message)

    claude = backend(loopback, await loopback.serve(answer))
    deltas = await collect(claude, request([user("q")]))
    assert deltas[0] == TextDelta("hi")
    assert await claude.count_tokens(request([user("q")], max_output_tokens=5)) == 12
    (path, headers, sent), (count_path, _, counted) = seen
    assert path == "/v1/messages"
    assert headers["x-api-key"] == "sk-ant-1"
    assert headers["anthropic-version"] == "2023-06-01"
    assert "Authorization" not in headers
    assert sent["max_tokens"] == 4096
    assert count_path == "/v1/messages/count_tokens"
    assert "max_tokens" not in counted
    assert counted["messages"] == sent["messages"]


async def test_a_529_is_an_overloaded_upstream(loopback: Loopback) -> None:
    async def overloaded(http: web.Request) -> web.StreamResponse:
        error = {"type": "error", "error": {"type": "overloaded_error", "message": "Overloaded"}}
        return web.json_response(error, status=529)

    claude = backend(loopback, await loopback.serve(overloaded))
    with pytest.raises(UpstreamUnavailable) as caught:
        await collect(claude, request([user("q")]))
    assert (caught.value.status, caught.value.code) == (503, "upstream_overloaded")
    assert "Overloaded" in caught.value.message


async def test_a_mid_stream_error_is_classified_with_the_key_scrubbed(
    loopback: Loopback,
) -> None:
    """A mid-stream ``error`` event goes by the rule for errors reported in a 200 reply:
    its type names the status, and the upstream's key is masked in its words."""
    leaked = {"type": "rate_limit_error", "message": "slow down, sk-ant-1 is over its limit"}

    async def limited(http: web.Request) -> web.StreamResponse:
        reply = web.StreamResponse(headers={"content-type": "text/event-stream"})
        await reply.prepare(http)
        await reply.write(sse(START, {"type": "error", "error": leaked}))
        return reply

    claude = backend(loopback, await loopback.serve(limited))
    req = request([user("q")])
    req.stream = True
    with pytest.raises(UpstreamRejected) as caught:
        await collect(claude, req)
    assert (caught.value.status, caught.value.code) == (429, "rate_limit_exceeded")
    assert caught.value.message.startswith("Model server 'claude' failed mid-stream: slow down")
    assert "sk-ant-1" not in caught.value.message


async def test_a_200_reply_that_is_an_error_is_an_upstream_failure(loopback: Loopback) -> None:
    async def overloaded(http: web.Request) -> web.StreamResponse:
        error = {"type": "overloaded_error", "message": "Overloaded (key sk-ant-1)"}
        return web.json_response({"type": "error", "error": error})

    claude = backend(loopback, await loopback.serve(overloaded))
    with pytest.raises(UpstreamUnavailable) as caught:
        await collect(claude, request([user("q")]))
    assert (caught.value.status, caught.value.code) == (503, "upstream_overloaded")
    assert "answered with an error: Overloaded" in caught.value.message


OVERLOADED = {"type": "error", "error": {"type": "overloaded_error", "message": "Overloaded"}}


@pytest.mark.parametrize(
    ("body", "status", "code"),
    [
        (OVERLOADED, 503, "upstream_overloaded"),
        (  # a proxy's OpenAI-shaped error in front of a Messages server
            {"error": {"message": "Overloaded", "type": "requests", "code": "rate_limit_exceeded"}},
            429,
            "rate_limit_exceeded",
        ),
        ({"error": {"message": "Overloaded", "type": "server_error"}}, 502, "upstream_error"),
    ],
)
@pytest.mark.parametrize("stream", [False, True])
async def test_a_200_json_error_is_that_error_streamed_or_not(
    loopback: Loopback, body: dict[str, Any], status: int, code: str, stream: bool
) -> None:
    """A 200 whose JSON body is only an error, to a streamed request too (as some proxies
    answer): the error the body names, before any delta, as a non-streamed request's;
    not an empty answer, nor a stream cut short."""

    async def reports(http: web.Request) -> web.StreamResponse:
        return web.json_response(body)

    claude = backend(loopback, await loopback.serve(reports))
    req = request([user("q")])
    req.stream = stream
    with pytest.raises(GatewayError) as caught:  # before any delta
        await anext(claude.infer(req))
    assert (caught.value.status, caught.value.code) == (status, code)
    assert caught.value.message.startswith("Model server 'claude' answered with an error: ")


async def test_a_stream_whose_first_event_is_an_error_is_that_error(loopback: Loopback) -> None:
    async def overloaded(http: web.Request) -> web.StreamResponse:
        return web.Response(body=sse(OVERLOADED), content_type="text/event-stream")

    claude = backend(loopback, await loopback.serve(overloaded))
    req = request([user("q")])
    req.stream = True
    with pytest.raises(UpstreamUnavailable) as caught:
        await collect(claude, req)
    assert (caught.value.status, caught.value.code) == (503, "upstream_overloaded")
    assert caught.value.message.startswith("Model server 'claude' failed mid-stream: Overloaded")
    assert "sk-ant-1" not in caught.value.message


async def test_a_stream_without_message_stop_is_cut_short(loopback: Loopback) -> None:
    async def cut(http: web.Request) -> web.StreamResponse:
        reply = web.StreamResponse(headers={"content-type": "text/event-stream"})
        await reply.prepare(http)
        await reply.write(
            sse(
                START,
                {
                    "type": "content_block_start",
                    "index": 0,
                    "content_block": {"type": "text", "text": "a"},
                },
            )
        )
        return reply

    claude = backend(loopback, await loopback.serve(cut))
    req = request([user("q")])
    req.stream = True
    with pytest.raises(UpstreamError) as caught:
        await collect(claude, req)
    assert caught.value.code == "upstream_stream_cut"


@pytest.mark.parametrize(
    "payload",
    [b"not json", b"[1]", orjson.dumps({"type": "content_block_delta", "index": "x", "delta": {}})],
)
async def test_malformed_events_are_upstream_errors(loopback: Loopback, payload: bytes) -> None:
    async def broken(http: web.Request) -> web.StreamResponse:
        reply = web.StreamResponse(headers={"content-type": "text/event-stream"})
        await reply.prepare(http)
        await reply.write(sse(START) + b"event: x\ndata: " + payload + b"\n\n")
        return reply

    claude = backend(loopback, await loopback.serve(broken))
    req = request([user("q")])
    req.stream = True
    with pytest.raises(UpstreamError) as caught:
        await collect(claude, req)
    assert "malformed" in caught.value.message


async def test_a_malformed_count_is_an_upstream_error(loopback: Loopback) -> None:
    async def answer(http: web.Request) -> web.StreamResponse:
        return web.json_response({"tokens": 1})

    claude = backend(loopback, await loopback.serve(answer))
    with pytest.raises(UpstreamError):
        await claude.count_tokens(request([user("q")]))


async def test_the_model_listing_is_read_page_by_page(loopback: Loopback) -> None:
    """Anthropic lists 20 models unless asked for more, with ``has_more`` and ``last_id``
    to go on from: every page is read."""
    models = [f"claude-{n}" for n in range(1500)]
    asked: list[dict[str, str]] = []

    async def listing(http: web.Request) -> web.StreamResponse:
        query = dict(http.query)
        asked.append(query)
        limit = int(query.get("limit", "20"))
        start = models.index(query["after_id"]) + 1 if "after_id" in query else 0
        page = models[start : start + limit]
        return web.json_response(
            {
                "data": [{"type": "model", "id": m} for m in page],
                "has_more": start + limit < len(models),
                "first_id": page[0],
                "last_id": page[-1],
            }
        )

    claude = backend(loopback, await loopback.serve(listing))
    assert await claude.list_models() == models
    assert asked == [{"limit": "1000"}, {"limit": "1000", "after_id": "claude-999"}]


def test_a_blank_stop_sequence_is_not_sent() -> None:
    """Anthropic refuses an empty or whitespace-only stop sequence: only the others go."""
    sent = body([user("q")], stop_sequences=["\n", "END", "", " \t"])
    assert sent["stop_sequences"] == ["END"]
    check_messages_request(sent, lambda *_: None)
    assert "stop_sequences" not in body([user("q")], stop_sequences=["\n\n"])


@pytest.mark.parametrize("stream", [False, True])
async def test_the_text_ends_at_a_blank_stop_sequence(loopback: Loopback, stream: bool) -> None:
    """The gateway ends the text at a blank stop sequence itself (the line break of
    ``stop: ["\\n"]``); a streamed round's usage keeps the input Anthropic reported as it
    began, its output estimated."""
    words = ["one ", "two\n", "three"]

    async def answer(http: web.Request) -> web.StreamResponse:
        if not stream:
            message = {
                "content": [{"type": "text", "text": "".join(words)}],
                "stop_reason": "end_turn",
                "usage": {"input_tokens": 5, "output_tokens": 3},
            }
            return web.json_response(message)
        reply = web.StreamResponse(headers={"content-type": "text/event-stream"})
        await reply.prepare(http)
        opened = {"type": "content_block_start", "index": 0, "content_block": {"type": "text"}}
        await reply.write(sse(START, opened))
        for word in words:
            delta = {"type": "text_delta", "text": word}
            await reply.write(sse({"type": "content_block_delta", "index": 0, "delta": delta}))
        await loopback.hold()  # the rest never comes: the gateway stopped reading
        return reply

    claude = backend(loopback, await loopback.serve(answer))
    req = request([user("q")], stop_sequences=["\n", "zz"])
    req.stream = stream
    deltas = await collect(claude, req)
    assert "".join(d.text for d in deltas if isinstance(d, TextDelta)) == "one two"
    assert deltas[-1] == Finish("stop", stop_sequence="\n")
    [*_, usage] = [d.usage for d in deltas if isinstance(d, UsageReport)]
    expected = Usage(7, 2, cached_tokens=2) if stream else Usage(5, 3)  # 7: cache reads in
    assert usage == expected


def test_a_data_url_with_parameters_keeps_its_media_type() -> None:
    """``data:application/pdf;name=a.pdf;base64,...`` (RFC 2397 parameters before
    ``;base64``) is a PDF's data, not a part to refuse."""
    part = {"type": "input_file", "file_data": "data:application/pdf;name=a.pdf;base64,JVBE"}
    image = {"type": "input_image", "image_url": "data:image/png;name=a.png;base64,AA=="}
    sent = body([{"type": "message", "role": "user", "content": [part, image]}])
    assert [block["source"] for block in sent["messages"][0]["content"]] == [
        {"type": "base64", "media_type": "application/pdf", "data": "JVBE"},
        {"type": "base64", "media_type": "image/png", "data": "AA=="},
    ]


def test_a_messages_clients_effort_goes_along_thinking_or_not() -> None:
    """Anthropic applies ``output_config.effort`` to the whole answer (text and tool calls
    as well as thinking), thinking or not: a Messages client's effort reaches it as asked,
    beside no thinking, thinking disabled, or a budget."""
    assert body([user("q")], output_effort="low")["output_config"] == {"effort": "low"}
    assert "thinking" not in body([user("q")], output_effort="low")
    disabled = body([user("q")], output_effort="medium", reasoning_disabled=True)
    assert (disabled["thinking"], disabled["output_config"]) == (
        {"type": "disabled"},
        {"effort": "medium"},
    )
    budget = body([user("q")], reasoning_budget=2000, reasoning_effort="low", output_effort="max")
    assert (budget["thinking"]["type"], budget["output_config"]) == ("enabled", {"effort": "max"})
    adaptive = body(
        [user("q")], reasoning_effort="xhigh", reasoning_adaptive=True, output_effort="xhigh"
    )
    assert adaptive["output_config"] == {"effort": "xhigh"}
    schema = {"type": "object"}
    both = body(
        [user("q")], output_effort="low", text_format={"type": "json_schema", "schema": schema}
    )
    assert both["output_config"] == {
        "effort": "low",
        "format": {"type": "json_schema", "schema": schema},
    }
