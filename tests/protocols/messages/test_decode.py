"""Messages requests -> canonical commands, and every way a bad one is refused."""

from __future__ import annotations

import re
from typing import Any

import orjson
import pytest

from stateway.core.errors import InvalidRequest, ThreadNotFound
from stateway.core.reasoning import REDACTED
from stateway.core.tools.catalog import model_tools
from stateway.protocols.messages.decode import decode_count_tokens, decode_messages

OBJECT = {"type": "object"}
"""The least ``input_schema`` Anthropic takes."""


def body(**fields: Any) -> bytes:
    base: dict[str, Any] = {
        "model": "m",
        "max_tokens": 100,
        "messages": [{"role": "user", "content": "hi"}],
    }
    return orjson.dumps({**base, **fields})


def sent_back(prompt: str, answer: list[Any]) -> bytes:
    """A body whose assistant turn is an earlier ``answer``'s blocks, sent back between
    its ``prompt`` and the next user turn."""
    return body(
        messages=[
            {"role": "user", "content": prompt},
            {"role": "assistant", "content": answer},
            {"role": "user", "content": "thanks"},
        ]
    )


def refused(raw: bytes) -> InvalidRequest:
    with pytest.raises(InvalidRequest) as caught:
        decode_messages(raw)
    assert caught.value.status == 400
    return caught.value


def test_a_plain_request_is_a_stateless_command() -> None:
    command = decode_messages(body(stream=True))
    assert command.store is False
    assert command.stream is True
    assert command.model == "m"
    assert command.instructions is None
    [item] = command.input
    assert item["role"] == "user"
    assert item["content"] == [{"type": "input_text", "text": "hi"}]
    assert command.settings.max_output_tokens == 100


def test_system_blocks_keep_cache_control_and_lead_the_context() -> None:
    system = [
        {"type": "text", "text": "rules", "cache_control": {"type": "ephemeral"}},
        {"type": "text", "text": "more"},
    ]
    messages = [
        {"role": "user", "content": "hi"},
        {"role": "system", "content": [{"type": "text", "text": "# Environment"}]},
    ]
    command = decode_messages(body(system=system, messages=messages))
    first, user, later = command.input
    assert first["role"] == "system"
    assert first["content"] == [
        {"type": "input_text", "text": "rules", "cache_control": {"type": "ephemeral"}},
        {"type": "input_text", "text": "more"},
    ]
    assert user["role"] == "user"
    assert later["role"] == "system"
    assert later["content"][0]["text"] == "# Environment"


MARK = {"type": "ephemeral"}
BILLING_HEADER = "x-anthropic-billing-header: cc_version=2.1.332.0b8; cc_entrypoint=sdk-cli;"
"""Claude Code's first system block (its ``cc_version`` suffix changes with the first
message; some builds add a ``cch`` changing with every request)."""


@pytest.mark.parametrize(
    "decode",
    [decode_messages, lambda raw: decode_count_tokens(raw).request],
    ids=["create", "count_tokens"],
)
def test_claude_codes_billing_header_is_left_out_of_the_prompt(decode: Any) -> None:
    """Attribution Anthropic reads, not the model's prompt: kept, it made every session's
    prompt differ from its first line on, and no model server reused a cached prefix."""
    system = [
        {"type": "text", "text": BILLING_HEADER},
        {"type": "text", "text": "rules", "cache_control": {"type": "ephemeral"}},
    ]
    [first, _] = decode(body(system=system)).input
    assert first["content"] == [
        {"type": "input_text", "text": "rules", "cache_control": {"type": "ephemeral"}}
    ]
    [first, _] = decode(body(system=f"{BILLING_HEADER}\nrules")).input
    assert first["content"] == [{"type": "input_text", "text": "rules"}]
    blocks = [{"type": "text", "text": f"{BILLING_HEADER}\nrules", "cache_control": MARK}]
    [first, _] = decode(body(system=blocks)).input  # the rest of its block kept, marked
    assert first["content"] == [{"type": "input_text", "text": "rules", "cache_control": MARK}]
    [only] = decode(body(system=[{"type": "text", "text": BILLING_HEADER}])).input
    assert only["role"] == "user"


def test_a_system_prompt_only_naming_the_billing_header_is_kept() -> None:
    text = f"Quote it: {BILLING_HEADER}"
    [first, _] = decode_messages(body(system=text)).input
    assert first["content"] == [{"type": "input_text", "text": text}]


def test_a_tool_round_trip_becomes_calls_and_outputs_in_order() -> None:
    messages = [
        {"role": "user", "content": "go"},
        {
            "role": "assistant",
            "content": [
                {"type": "thinking", "thinking": "plan", "signature": "sig=="},
                {"type": "redacted_thinking", "data": "opaque"},
                {"type": "text", "text": "calling"},
                {"type": "tool_use", "id": "toolu_1", "name": "f", "input": {"a": 1}},
                {"type": "tool_use", "id": "toolu_2", "name": "g", "input": {}},
            ],
        },
        {
            "role": "user",
            "content": [
                {"type": "tool_result", "tool_use_id": "toolu_1", "content": "one"},
                {
                    "type": "tool_result",
                    "tool_use_id": "toolu_2",
                    "is_error": True,
                    "cache_control": {"type": "ephemeral"},
                    "content": [
                        {"type": "text", "text": "bad"},
                        {"type": "image", "source": {"type": "url", "url": "http://x/i.png"}},
                    ],
                },
                {"type": "text", "text": "<system-reminder>go on</system-reminder>"},
            ],
        },
    ]
    items = decode_messages(body(messages=messages)).input
    kinds = [(i["type"], i.get("role")) for i in items]
    assert kinds == [
        ("message", "user"),
        ("reasoning", None),
        ("reasoning", None),
        ("message", "assistant"),
        ("function_call", None),
        ("function_call", None),
        ("function_call_output", None),
        ("function_call_output", None),
        ("message", "user"),
    ]
    assert items[1]["encrypted_content"] == "sig=="
    assert items[1]["content"] == [{"type": "reasoning_text", "text": "plan"}]
    assert items[2]["encrypted_content"] == REDACTED + "opaque"
    assert items[4]["call_id"] == "toolu_1"
    assert orjson.loads(items[4]["arguments"]) == {"a": 1}
    assert items[6] | {"id": ""} == {
        "id": "",
        "type": "function_call_output",
        "call_id": "toolu_1",
        "output": "one",
        "status": "completed",
    }
    error = items[7]
    assert error["is_error"] is True
    assert error["cache_control"] == {"type": "ephemeral"}
    assert error["output"][1] == {
        "type": "input_image",
        "image_url": "http://x/i.png",
        "detail": "auto",
    }


def test_images_and_documents_become_input_parts() -> None:
    content = [
        {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": "AA=="}},
        {
            "type": "document",
            "title": "paper",
            "source": {"type": "base64", "media_type": "application/pdf", "data": "JVBE"},
        },
        {"type": "document", "source": {"type": "url", "url": "https://x/d.pdf"}},
        {"type": "document", "source": {"type": "text", "media_type": "text/plain", "data": "hi"}},
        {"type": "text", "text": ""},
    ]
    [item] = decode_messages(body(messages=[{"role": "user", "content": content}])).input
    image, pdf, url, text = item["content"]
    assert image["image_url"] == "data:image/png;base64,AA=="
    assert pdf == {
        "type": "input_file",
        "file_data": "data:application/pdf;base64,JVBE",
        "filename": "paper",
    }
    assert url == {"type": "input_file", "file_url": "https://x/d.pdf"}
    assert text["file_data"] == "data:text/plain;base64,aGk="


def test_a_custom_content_documents_images_follow_its_text() -> None:
    image = {"type": "image", "source": {"type": "url", "url": "https://x/a.png"}}
    source = {"type": "content", "content": [{"type": "text", "text": "hi"}, image]}
    document = {"type": "document", "source": source}
    [item] = decode_messages(body(messages=[{"role": "user", "content": [document]}])).input
    text, shown = item["content"]
    assert (text["file_data"], text["source"]) == ("data:text/plain;base64,aGk=", source)
    assert shown == {
        "type": "input_image",
        "image_url": "https://x/a.png",
        "detail": "auto",
        "in_document": True,
    }


def test_settings_map_to_generation_settings() -> None:
    tools = [
        {
            "name": "f",
            "description": "does f",
            "input_schema": {"type": "object"},
            "cache_control": {"type": "ephemeral"},
            "defer_loading": True,
        },
        {"type": "custom", "name": "g", "input_schema": {"type": "object"}},
    ]
    command = decode_messages(
        body(
            tools=tools,
            tool_choice={"type": "tool", "name": "g", "disable_parallel_tool_use": True},
            stop_sequences=["END"],
            temperature=0.5,
            top_p=0.9,
            top_k=40,
            metadata={"user_id": "u-1"},
            max_tokens=5000,
            context_management={"edits": [{"type": "clear_tool_uses_20250919"}]},
            service_tier="auto",
        )
    )
    s = command.settings
    assert s.tools == [
        {
            "type": "function",
            "name": "f",
            "parameters": {"type": "object"},
            "description": "does f",
            "strict": False,  # as Anthropic means it (a Responses upstream's default is strict)
            "defer_loading": True,
            "cache_control": {"type": "ephemeral"},  # for an Anthropic upstream
        },
        {"type": "function", "name": "g", "parameters": {"type": "object"}, "strict": False},
    ]
    assert s.tool_choice == {"type": "function", "name": "g"}
    assert s.parallel_tool_calls is False
    assert s.stop_sequences == ["END"]
    assert (s.temperature, s.top_p, s.top_k, s.user) == (0.5, 0.9, 40, "u-1")
    assert s.service_tier == "auto"
    assert [edit["type"] for edit in s.context_edits] == ["clear_tool_uses_20250919"]
    thinking = {"type": "enabled", "budget_tokens": 2048}  # with no tool forced (Anthropic's)
    s = decode_messages(body(max_tokens=5000, thinking=thinking)).settings
    assert (s.reasoning_budget, s.reasoning_effort) == (2048, "low")


def test_service_tiers_are_said_in_canonical_words() -> None:
    standard = decode_messages(body(service_tier="standard_only")).settings
    assert standard.service_tier == "default"
    assert decode_messages(body()).settings.service_tier is None


@pytest.mark.parametrize(
    ("choice", "expected"),
    [({"type": "auto"}, "auto"), ({"type": "any"}, "required"), ({"type": "none"}, "none")],
)
def test_tool_choice_kinds(choice: dict[str, Any], expected: str) -> None:
    tools = [{"name": "f", "input_schema": {"type": "object"}}]
    assert decode_messages(body(tools=tools, tool_choice=choice)).settings.tool_choice == expected


@pytest.mark.parametrize(
    ("name", "expected"),
    [("f", {"type": "function", "name": "f"}), ("web_search", {"type": "web_search"})],
)
def test_a_named_choice_beside_the_web_search_tool_forces_the_tool_it_names(
    name: str, expected: dict[str, Any]
) -> None:
    """Declaring ``web_search`` makes only a choice naming it the gateway's search."""
    tools = [
        {"type": "web_search_20250305", "name": "web_search"},
        {"name": "f", "input_schema": {"type": "object"}},
    ]
    choice = {"type": "tool", "name": name}
    assert decode_messages(body(tools=tools, tool_choice=choice)).settings.tool_choice == expected


@pytest.mark.parametrize(
    ("thinking", "effort", "expected"),
    [
        ({"type": "adaptive"}, None, "high"),
        ({"type": "adaptive"}, "max", "max"),
        ({"type": "adaptive"}, "low", "low"),
        ({"type": "adaptive"}, "xhigh", "xhigh"),
        ({"type": "adaptive"}, "ultra", "high"),
        ({"type": "enabled", "budget_tokens": 8000}, None, "medium"),
        ({"type": "enabled", "budget_tokens": 20000}, None, "high"),
        ({"type": "disabled"}, None, None),
        ({"type": "between_tools"}, "high", None),
    ],
)
def test_thinking_becomes_an_effort(
    thinking: dict[str, Any], effort: str | None, expected: str | None
) -> None:
    output = {"effort": effort} if effort else None
    raw = body(thinking=thinking, output_config=output, max_tokens=32000)
    assert decode_messages(raw).settings.reasoning_effort == expected
    assert decode_messages(raw).settings.reasoning_adaptive == (thinking["type"] == "adaptive")


@pytest.mark.parametrize(
    ("thinking", "effort", "expected"),
    [
        (None, "low", "low"),
        ({"type": "disabled"}, "medium", "medium"),
        ({"type": "enabled", "budget_tokens": 2000}, "max", "max"),
        ({"type": "adaptive"}, "xhigh", "xhigh"),
        ({"type": "adaptive"}, "ultra", "high"),
        (None, None, None),
        ({"type": "adaptive"}, None, None),
    ],
)
def test_the_effort_asked_is_kept_thinking_or_not(
    thinking: dict[str, Any] | None, effort: str | None, expected: str | None
) -> None:
    """Anthropic applies ``output_config.effort`` to the whole answer, thinking or not:
    kept for an Anthropic upstream whatever the thinking (a level it does not know as its
    default)."""
    fields: dict[str, Any] = {"thinking": thinking} if thinking else {}
    if effort is not None:
        fields["output_config"] = {"effort": effort}
    raw = body(max_tokens=32000, **fields)
    assert decode_messages(raw).settings.output_effort == expected


@pytest.mark.parametrize(
    ("display", "kept"),
    [("omitted", "omitted"), ("summarized", "summarized"), ("full", "summarized"), (None, None)],
)
def test_thinking_display_is_kept_and_every_thinking_block_is_signed(
    display: str | None, kept: str | None
) -> None:
    thinking = {"type": "adaptive", **({"display": display} if display else {})}
    settings = decode_messages(body(thinking=thinking)).settings
    assert settings.reasoning_display == kept
    assert settings.include == ["reasoning.encrypted_content"]
    assert decode_messages(body()).settings.include == ["reasoning.encrypted_content"]


def test_thinking_with_only_its_block_binding_is_thinking_left_out() -> None:
    """The Vercel AI SDK's ``thinking: {blockBinding}`` (ai-sdk/anthropic 3.0.140) sends
    ``block_binding`` without a ``type``: the model's own thinking, as without
    ``thinking``; beside a ``type`` it changes nothing either."""
    binding = {"prefix_mismatch_behavior": "drop_block"}
    alone = decode_messages(body(thinking={"block_binding": binding})).settings
    left_out = decode_messages(body()).settings
    assert (alone.reasoning_display, alone.reasoning_disabled, alone.reasoning_effort) == (
        left_out.reasoning_display,
        left_out.reasoning_disabled,
        left_out.reasoning_effort,
    )
    bound = {"type": "adaptive", "block_binding": binding}
    assert decode_messages(body(thinking=bound)).settings.reasoning_effort == "high"
    assert str(refused(body(thinking={}))) == "thinking.type: Field required"


EFFORT_LOW = {"role": "system", "content": [], "output_config": {"effort": "low"}}
"""A per-message effort change, as the Vercel AI SDK sends a system message's ``effort``
(Anthropic's ``mid-conversation-output-config-2026-07-01``)."""
EFFORT_MAX = {**EFFORT_LOW, "output_config": {"effort": "max"}}
CALLED = {
    "role": "assistant",
    "content": [{"type": "tool_use", "id": "t", "name": "f", "input": {}}],
}
RESULT = {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "t", "content": "ok"}]}


@pytest.mark.parametrize(
    ("messages", "expected"),
    [
        # between an assistant turn and the next user turn: from that user turn
        (["plan", {"role": "assistant", "content": "done"}, EFFORT_LOW, "sum up"], "low"),
        # right after the user turn it answers: that turn's answer (a system message
        # between them or not)
        (["plan", EFFORT_LOW], "low"),
        (["plan", {"role": "system", "content": "# Environment"}, EFFORT_LOW], "low"),
        # leading the conversation: from its first user turn
        ([EFFORT_LOW, "plan"], "low"),
        # after a turn of tool results only (no new input): from the next user turn,
        # which this request does not have yet
        (["plan", CALLED, RESULT, EFFORT_LOW], "high"),
        (["plan", CALLED, RESULT, EFFORT_LOW, {"role": "assistant", "content": "ok"}], "high"),
        # the latest change holds
        (["a", EFFORT_LOW, {"role": "assistant", "content": "b"}, EFFORT_MAX, "c"], "max"),
    ],
)
def test_a_system_message_changes_the_effort_from_where_it_starts(
    messages: list[Any], expected: str
) -> None:
    turns = [{"role": "user", "content": m} if isinstance(m, str) else m for m in messages]
    tools = [{"name": "f", "input_schema": OBJECT}]
    raw = body(
        messages=turns,
        tools=tools,
        thinking={"type": "adaptive"},
        output_config={"effort": "high"},
    )
    command = decode_messages(raw)
    assert command.settings.reasoning_effort == expected
    assert all(item.get("content") != [] for item in command.input)


def test_a_per_message_effort_is_adaptive_thinkings_as_the_request_effort_is() -> None:
    raw = body(messages=[{"role": "user", "content": "hi"}, EFFORT_LOW])
    assert decode_messages(raw).settings.reasoning_effort is None


def test_prompt_caching_marks_are_kept_for_an_anthropic_upstream() -> None:
    mark = {"type": "ephemeral", "ttl": "1h"}
    tools = [{"name": "f", "input_schema": {"type": "object"}, "cache_control": mark}]
    settings = decode_messages(body(tools=tools, cache_control={"type": "ephemeral"})).settings
    assert settings.tools[0]["cache_control"] == mark
    assert model_tools(settings.tools)[0]["cache_control"] == mark
    assert settings.cache_control == {"type": "ephemeral"}


def test_thinking_not_enabled_is_hidden() -> None:
    """Anthropic answers no thinking blocks when thinking is not enabled; ``between_tools``
    (thinking off, progress notes between tool calls as thinking blocks) is taken as
    ``disabled``, as Anthropic's fallback rules run a model without it."""
    for thinking in (None, {"type": "disabled"}, {"type": "between_tools"}):
        raw = body(thinking=thinking) if thinking else body()
        assert decode_messages(raw).settings.reasoning_display == "hidden"


def test_no_thinking_asked_is_told_from_thinking_left_out() -> None:
    """``disabled`` and ``between_tools`` ask for no thinking (which an Anthropic upstream
    is sent as ``disabled``) and no effort; a request without ``thinking`` leaves it to
    the upstream."""
    assert decode_messages(body()).settings.reasoning_disabled is False
    for kind in ("disabled", "between_tools"):
        off = decode_messages(body(thinking={"type": kind})).settings
        assert off.reasoning_disabled is True
        assert (off.reasoning_effort, off.reasoning_budget, off.reasoning_adaptive) == (
            None,
            None,
            False,
        )


def test_output_format_becomes_a_json_schema_text_format() -> None:
    output = {"format": {"type": "json_schema", "schema": {"type": "object"}}}
    fmt = decode_messages(body(output_config=output)).settings.text_format
    assert fmt == {
        "type": "json_schema",
        "name": "output",
        "schema": {"type": "object"},
        "strict": True,
    }
    assert refused(body(output_config={"format": {"type": "xml"}})).param == "output_config.format"


def test_the_deprecated_top_level_output_format_is_still_taken() -> None:
    """``output_format`` (the structured-outputs beta's, which older SDKs send) is
    ``output_config.format`` under its former name, as Anthropic still takes it; both at
    once are a 400, as the SDK refuses them."""
    schema = {"type": "json_schema", "schema": {"type": "object"}}
    fmt = decode_messages(body(output_format=schema)).settings.text_format
    assert fmt["type"] == "json_schema"
    assert fmt["schema"] == {"type": "object"}
    effort = {"effort": "low"}
    fmt = decode_messages(body(output_format=schema, output_config=effort)).settings.text_format
    assert fmt["schema"] == {"type": "object"}
    both = body(output_format=schema, output_config={"format": schema})
    assert refused(both).param == "output_format"
    assert refused(body(output_format={"type": "xml"})).param == "output_format"


@pytest.mark.parametrize(
    ("raw", "named"),
    [
        (b"{", None),
        (b"[1]", None),
        (
            orjson.dumps({"model": "m", "messages": [{"role": "user", "content": "x"}]}),
            "max_tokens",
        ),
        (body(model=""), "model"),
        (body(max_tokens="5"), "max_tokens"),
        (body(max_tokens=-1), "max_tokens"),
        (body(messages=[]), "messages"),
        (body(messages="hi"), "messages"),
        (body(messages=[{"role": "bot", "content": "x"}]), "messages.0.role"),
        (
            body(messages=[{"role": "user", "content": [{"type": "video"}]}]),
            "messages.0.content.0.type",
        ),
        (
            body(messages=[{"role": "user", "content": [{"text": "x"}]}]),
            "messages.0.content.0.type",
        ),
        (
            body(messages=[{"role": "user", "content": [{"type": "tool_result"}]}]),
            "messages.0.content.0.tool_use_id",
        ),
        (
            body(
                messages=[
                    {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "t9"}]}
                ]
            ),
            "messages.0.content.0.tool_use_id",
        ),
        (
            body(
                messages=[
                    {"role": "assistant", "content": [{"type": "tool_result", "tool_use_id": "t"}]}
                ]
            ),
            "messages",
        ),
        (
            body(
                messages=[
                    {
                        "role": "user",
                        "content": [{"type": "tool_use", "id": "t", "name": "f", "input": {}}],
                    }
                ]
            ),
            "messages.0.content.0.type",
        ),
        (
            body(
                messages=[
                    {
                        "role": "user",
                        "content": [{"type": "image", "source": {"type": "file", "file_id": "f"}}],
                    }
                ]
            ),
            "messages.0.content.0.source.type",
        ),
        (body(system=[{"type": "text"}]), "system.0.text"),
        (
            body(
                messages=[
                    {
                        "role": "user",
                        "content": [
                            {"type": "search_result", "source": "s", "content": [{"type": "text"}]}
                        ],
                    }
                ]
            ),
            "messages.0.content.0.content.0.text",
        ),
        (body(tools=[{"name": "f"}]), "tools.0.input_schema"),
        (body(tools=[{"type": "computer_20250124", "name": "computer"}]), "tools.0.type"),
        (body(tools=[{"type": "bash_20990101", "name": "bash"}]), "tools.0.type"),
        (body(tools=[{"type": "bash_20250124", "name": "shell"}]), "tools.0.name"),
        (
            body(tools=[{"type": "memory_20250818", "name": "memory", "max_characters": 0}]),
            "tools.0.max_characters",
        ),
        (body(tools=[{"type": "web_fetch_20250910", "name": "web_fetch"}]), "tools.0.type"),
        (body(tools=[{"type": 5, "name": "f", "input_schema": OBJECT}]), "tools.0.type"),
        (body(tools=[{"type": "web_search_20250305", "name": "search"}]), "tools.0.name"),
        (
            body(tools=[{"type": "web_search_20250305", "name": "web_search", "max_uses": 0}]),
            "tools.0.max_uses",
        ),
        (
            body(
                tools=[
                    {
                        "type": "web_search_20250305",
                        "name": "web_search",
                        "allowed_domains": ["a.example"],
                        "blocked_domains": ["b.example"],
                    }
                ]
            ),
            "tools.0.blocked_domains",
        ),
        (
            body(
                tools=[
                    {"name": "web_search", "input_schema": OBJECT},
                    {"type": "web_search_20250305", "name": "web_search"},
                ]
            ),
            "tools.1.name",
        ),
        (
            body(
                messages=[
                    {"role": "user", "content": "hi"},
                    {
                        "role": "assistant",
                        "content": [
                            {"type": "server_tool_use", "id": "s", "name": "web_fetch", "input": {}}
                        ],
                    },
                ]
            ),
            "messages.1.content.0.name",
        ),
        (
            body(
                messages=[
                    {"role": "user", "content": "hi"},
                    {
                        "role": "assistant",
                        "content": [
                            {"type": "web_search_tool_result", "tool_use_id": "s", "content": []}
                        ],
                    },
                ]
            ),
            "messages.1.content.0.tool_use_id",
        ),
        (
            body(
                tools=[{"name": "f", "input_schema": OBJECT}, {"name": "f", "input_schema": OBJECT}]
            ),
            "tools.1.name",
        ),
        (body(service_tier="priority"), "service_tier"),
        (body(tool_choice={"type": "sometimes"}), "tool_choice.type"),
        (body(thinking={"type": "enabled"}), "thinking.budget_tokens"),
        (body(thinking={"type": "enabled", "budget_tokens": 512}), "thinking.budget_tokens"),
        (body(thinking={"type": "enabled", "budget_tokens": 2048}), "thinking.budget_tokens"),
        (body(temperature=1.5), "temperature"),
        (body(stop_sequences="END"), "stop_sequences"),
        (body(metadata={"user_id": 5}), "metadata.user_id"),
        (body(system=[{"type": "image"}]), "system"),
        (
            body(
                messages=[
                    {"role": "user", "content": "hi"},
                    {
                        "role": "assistant",
                        "content": [{"type": "tool_result", "tool_use_id": "t", "content": "x"}],
                    },
                ]
            ),
            "messages.1.content.0.type",
        ),
        (
            body(
                messages=[
                    {
                        "role": "user",
                        "content": [
                            {
                                "type": "image",
                                "source": {
                                    "type": "base64",
                                    "media_type": "image/bmp",
                                    "data": "A",
                                },
                            }
                        ],
                    }
                ]
            ),
            "messages.0.content.0.source.media_type",
        ),
        (body(messages=[{"role": "user", "content": [{"type": "text", "text": "x"}] * 3}]), None),
        (body(system="rules", messages=[{"role": "user", "content": ""}]), "messages"),
        (body(messages=[{"role": "user", "content": [{"type": "text", "text": ""}]}]), "messages"),
        (
            body(
                messages=[{"role": "user", "content": "hi"}, {"role": "assistant", "content": ""}]
            ),
            None,
        ),
    ],
)
def test_bad_input_is_a_400_naming_the_field(raw: bytes, named: str | None) -> None:
    if named is None and raw.startswith(b'{"model"'):
        decode_messages(raw)  # the control: well-formed
        return
    error = refused(raw)
    assert error.type == "invalid_request_error"
    if named is not None:
        assert (error.param or "").startswith(named), error.param
        assert named.split(".")[-1] in error.message


def test_an_interleaved_thinking_budget_may_exceed_max_tokens() -> None:
    thinking = {"type": "enabled", "budget_tokens": 20000}
    raw = body(max_tokens=16000, thinking=thinking)
    assert refused(raw).param == "thinking.budget_tokens"
    betas = ["claude-code-20250219", "interleaved-thinking-2025-05-14"]
    settings = decode_messages(raw, betas=betas).settings
    assert (settings.reasoning_budget, settings.max_output_tokens) == (20000, 16000)
    assert settings.anthropic_beta == betas


@pytest.mark.parametrize(
    "url", ["file:///etc/passwd", "/etc/passwd", "ftp://host/a.png", "data:image/png;base64,A"]
)
def test_a_url_source_that_is_no_web_url_is_refused_naming_it(url: str) -> None:
    """A URL source is fetched, as Anthropic fetches it: only http(s) (a model server told
    ``file://`` may read its own disk), as the Responses surface refuses an image URL."""
    image = {"type": "image", "source": {"type": "url", "url": url}}
    document = {"type": "document", "source": {"type": "url", "url": url}}
    use = {"type": "tool_use", "id": "toolu_1", "name": "look", "input": {}}
    result = {"type": "tool_result", "tool_use_id": "toolu_1", "content": [image]}
    cases = [
        ([{"role": "user", "content": [image]}], "messages.0.content.0.source.url"),
        ([{"role": "user", "content": [document]}], "messages.0.content.0.source.url"),
        (
            [
                {"role": "user", "content": "look"},
                {"role": "assistant", "content": [use]},
                {"role": "user", "content": [result]},
            ],
            "messages.2.content.0.content.0.source.url",
        ),
    ]
    for messages, param in cases:
        error = refused(body(messages=messages))
        assert error.param == param
        assert error.message == f"{param}: expected an http:// or https:// URL"
    for fine in ("https://example.com/a.png", "http://10.0.0.2:8080/a.png"):
        safe = {"type": "image", "source": {"type": "url", "url": fine}}
        [item] = decode_messages(body(messages=[{"role": "user", "content": [safe]}])).input
        assert item["content"][0]["image_url"] == fine


def test_a_file_source_is_refused_as_a_source_not_a_block() -> None:
    image = {"type": "image", "source": {"type": "file", "file_id": "file_1"}}
    error = refused(body(messages=[{"role": "user", "content": [image]}]))
    assert error.param == "messages.0.content.0.source.type"
    assert "source type 'file' is not supported" in error.message
    assert "'base64', 'url'" in error.message
    assert "content block" not in error.message


def test_a_tool_result_answers_one_tool_use_once() -> None:
    use = {"type": "tool_use", "id": "t1", "name": "f", "input": {}}
    result = {"type": "tool_result", "tool_use_id": "t1"}
    messages = [
        {"role": "user", "content": "go"},
        {"role": "assistant", "content": [use]},
        {"role": "user", "content": [result, result]},
    ]
    error = refused(body(messages=messages))
    assert error.param == "messages.2.content.1.tool_use_id"
    assert "'t1'" in error.message


def test_every_tool_use_is_answered_and_ids_are_unique() -> None:
    use = {"type": "tool_use", "id": "t1", "name": "f", "input": {}}
    other = {**use, "id": "t2"}
    result = {"type": "tool_result", "tool_use_id": "t1"}
    unanswered = [
        {"role": "user", "content": "go"},
        {"role": "assistant", "content": [use, other]},
        {"role": "user", "content": [result]},
    ]
    error = refused(body(messages=unanswered))
    assert (error.param, error.code) == ("messages.1", "tool_output_missing")
    assert error.message.startswith(
        "messages.1: `tool_use` ids were found without `tool_result` blocks immediately after: t2."
    )
    reused = [
        *unanswered[:2],
        {"role": "user", "content": [result, {**result, "tool_use_id": "t2"}]},
    ]
    reused += [{"role": "assistant", "content": [use]}]
    error = refused(body(messages=reused))
    assert (error.param, error.code) == ("messages.3.content.0", "duplicate_call_id")
    assert error.message == "messages.3.content.0: `tool_use` ids must be unique."


def test_the_message_after_tool_use_begins_with_its_results() -> None:
    """As Anthropic checks it; a Chat upstream could not take them elsewhere either (its
    tool messages follow their call)."""
    use = {"type": "tool_use", "id": "t1", "name": "f", "input": {}}
    result = {"type": "tool_result", "tool_use_id": "t1", "content": "ok"}
    text = {"type": "text", "text": "and then"}
    before = [
        {"role": "user", "content": "go"},
        {"role": "assistant", "content": [use]},
        {"role": "user", "content": [text, result]},
    ]
    error = refused(body(messages=before))
    assert (error.param, error.code) == ("messages.2.content.0", "tool_output_missing")
    assert "at the beginning of this message" in error.message
    later = [
        *before[:2],
        {"role": "user", "content": "not yet"},
        {"role": "assistant", "content": "ok"},
        {"role": "user", "content": [result]},
    ]
    error = refused(body(messages=later))
    assert (error.param, error.code) == ("messages.1", "tool_output_missing")
    first = [*before[:2], {"role": "user", "content": [result, text]}]
    assert len(decode_messages(body(messages=first)).input) == 4  # results first: fine


def test_consecutive_messages_of_one_role_are_one_turn_for_calls_and_results() -> None:
    """Anthropic takes a run of user (or assistant) messages as one turn: calls split over
    assistant messages, and their results over user messages, pair up as in one; the
    items are those of the turns written as one message each."""

    def use(call: str) -> dict[str, Any]:
        return {"type": "tool_use", "id": call, "name": "f", "input": {}}

    def result(call: str) -> dict[str, Any]:
        return {"type": "tool_result", "tool_use_id": call, "content": call}

    def user(*blocks: Any) -> dict[str, Any]:
        return {"role": "user", "content": list(blocks)}

    def assistant(*blocks: Any) -> dict[str, Any]:
        return {"role": "assistant", "content": list(blocks)}

    go, wait, more = ({"type": "text", "text": word} for word in ("go", "wait", "more"))
    split = {
        "results": [user(go), assistant(use("a"), use("b")), user(result("a")), user(result("b"))],
        "calls": [
            user(go),
            assistant(use("a")),
            assistant(use("b")),
            user(result("a"), result("b")),
        ],
        "text after a call": [user(go), assistant(use("a")), assistant(wait), user(result("a"))],
        "text after the results": [
            user(go),
            assistant(use("a"), use("b")),
            user(result("a")),
            user(result("b"), more),
        ],
    }
    whole = {
        "results": [user(go), assistant(use("a"), use("b")), user(result("a"), result("b"))],
        "calls": [user(go), assistant(use("a"), use("b")), user(result("a"), result("b"))],
        "text after a call": [user(go), assistant(use("a"), wait), user(result("a"))],
        "text after the results": [
            user(go),
            assistant(use("a"), use("b")),
            user(result("a"), result("b"), more),
        ],
    }

    def kinds(messages: list[Any]) -> list[tuple[str, str | None]]:
        items = decode_messages(body(messages=messages)).input
        return [(item["type"], item.get("call_id")) for item in items]

    for case, messages in split.items():
        assert kinds(messages) == kinds(whole[case]), case
    late = [user(go), assistant(use("a"), use("b")), user(result("a")), user(more, result("b"))]
    error = refused(body(messages=late))  # the turn's results come first, whatever its split
    assert (error.param, error.code) == ("messages.2.content.0", "tool_output_missing")
    never = [user(go), assistant(use("a")), assistant(use("b")), user(result("a"))]
    error = refused(body(messages=never))
    assert (error.param, error.code) == ("messages.2", "tool_output_missing")
    assert "found without `tool_result` blocks immediately after: b." in error.message


def test_deep_free_form_json_is_refused_by_name() -> None:
    deep: Any = {}
    for _ in range(200):
        deep = {"a": deep}
    tools = [{"name": "f", "input_schema": deep}]
    error = refused(body(tools=tools))
    assert (error.param, error.code) == ("tools", "nesting_too_deep")
    assert error.message == "tools: JSON nested deeper than 128 levels."  # Anthropic's way


def test_too_many_messages_are_refused_before_they_are_decoded() -> None:
    messages = [{"role": "user", "content": "x"}] * 5
    with pytest.raises(InvalidRequest) as caught:
        decode_messages(body(messages=messages), max_input_items=4)
    assert caught.value.param == "messages"


def test_too_many_items_once_decoded_are_refused_by_count() -> None:
    """Two messages, but with a system prompt three items: the limit counts items."""
    messages = [{"role": "user", "content": "x"}, {"role": "user", "content": "y"}]
    raw = body(system="rules", messages=messages)
    assert len(decode_messages(raw, max_input_items=3).input) == 3
    with pytest.raises(InvalidRequest) as caught:
        decode_messages(raw, max_input_items=2)
    assert caught.value.param == "messages"
    assert caught.value.message == (
        "messages: 3 messages and blocks are more than the 2 this gateway takes."
    )


def test_no_messages_is_a_missing_parameter() -> None:
    error = refused(body(messages=[]))
    assert (error.param, error.code) == ("messages", "missing_required_parameter")
    assert error.message == "messages: at least one message is required."


def test_gateway_tools_of_a_route_run_in_hidden_rounds() -> None:
    assert decode_messages(body()).hidden_rounds is True


def test_max_tokens_0_is_a_prewarm() -> None:
    """Anthropic's "populate the prompt cache without generating a response": the context
    is checked, no model asked; a thinking budget is no reason to refuse it."""
    assert decode_messages(body()).generate is True
    thinking = {"type": "enabled", "budget_tokens": 2048}
    command = decode_messages(body(max_tokens=0, thinking=thinking, stream=True))
    assert (command.generate, command.stream) == (False, True)
    assert command.settings.max_output_tokens == 0
    error = refused(body(max_tokens=0, messages=[{"role": "user", "content": "x"}], tools=[{}]))
    assert error.param == "tools.0.name"  # still validated as any request


def test_count_tokens_needs_no_max_tokens() -> None:
    counted = decode_count_tokens(
        orjson.dumps({"model": "m", "messages": [{"role": "user", "content": "hi"}]})
    )
    assert counted.request.model == "m"
    assert counted.request.store is False
    with pytest.raises(InvalidRequest):
        decode_count_tokens(orjson.dumps({"model": "m"}))


def test_a_tool_search_result_and_search_hits_in_a_tool_result_become_text() -> None:
    """Claude Code's ToolSearch answers with ``tool_reference`` blocks: a 400 here makes it
    drop tool search for the rest of the session, after three failed requests."""
    command = decode_messages(
        body(
            messages=[
                {"role": "user", "content": "find the tool"},
                {
                    "role": "assistant",
                    "content": [
                        {"type": "tool_use", "id": "t1", "name": "ToolSearch", "input": {}}
                    ],
                },
                {
                    "role": "user",
                    "content": [
                        {
                            "type": "tool_result",
                            "tool_use_id": "t1",
                            "content": [
                                {"type": "tool_reference", "tool_name": "WebSearch"},
                                {
                                    "type": "search_result",
                                    "source": "https://a.test/",
                                    "title": "A",
                                    "content": [{"type": "text", "text": "About a."}],
                                },
                            ],
                        }
                    ],
                },
            ]
        )
    )
    output = command.input[-1]
    assert output["type"] == "function_call_output"
    hit = {
        "type": "search_result",
        "source": "https://a.test/",
        "title": "A",
        "content": [{"type": "text", "text": "About a."}],
    }
    assert output["output"] == [
        {"type": "input_text", "text": "Tool loaded: WebSearch"},
        {"type": "input_text", "text": "A\nhttps://a.test/\nAbout a.", "search_result": hit},
    ]


def test_anthropic_defined_client_tools_become_functions_with_their_input() -> None:
    tools = [
        {"type": "bash_20250124", "name": "bash"},
        {"type": "text_editor_20250728", "name": "str_replace_based_edit_tool"},
        {"type": "text_editor_20250124", "name": "str_replace_editor", "defer_loading": True},
        {"type": "memory_20250818", "name": "memory", "cache_control": {"type": "ephemeral"}},
    ]
    choice = {"type": "tool", "name": "memory"}
    command = decode_messages(body(tools=tools, tool_choice=choice))
    bash, editor, old_editor, memory = command.settings.tools
    assert (bash["type"], bash["name"]) == ("function", "bash")
    assert set(bash["parameters"]["properties"]) == {"command", "restart"}
    commands = editor["parameters"]["properties"]["command"]["enum"]
    assert commands == ["view", "create", "str_replace", "insert"]
    assert "insert_text" in editor["parameters"]["properties"]
    assert editor["parameters"]["required"] == ["command", "path"]
    assert "undo_edit" in old_editor["parameters"]["properties"]["command"]["enum"]
    assert "insert_text" not in old_editor["parameters"]["properties"]
    assert old_editor["defer_loading"] is True
    memory_commands = memory["parameters"]["properties"]["command"]["enum"]
    assert memory_commands == ["view", "create", "str_replace", "insert", "delete", "rename"]
    assert {"old_path", "new_path", "insert_text"} <= set(memory["parameters"]["properties"])
    assert all(tool["description"] for tool in command.settings.tools)
    assert all(tool["strict"] is False for tool in command.settings.tools)  # optional inputs
    assert command.settings.tool_choice == {"type": "function", "name": "memory"}


def test_a_request_of_empty_messages_is_refused_in_anthropics_words() -> None:
    error = refused(body(messages=[{"role": "user", "content": ""}]))
    assert error.message == f"messages: {EMPTY}"


EMPTY = "all messages must have non-empty content except for the optional final assistant message"
"""Hosted Anthropic's refusal of a message with no content, after its path."""


@pytest.mark.parametrize("empty", ["", [], [{"type": "text", "text": ""}]])
@pytest.mark.parametrize("before", ["assistant", "user"])
def test_an_empty_last_user_message_is_refused_naming_it(empty: Any, before: str) -> None:
    """Left out, the assistant's answer before it would be a prefill the model continues
    (or the user's turn before it answered again); refused as Anthropic refuses it."""
    messages = [
        {"role": "user", "content": "hi"},
        {"role": before, "content": "hello"},
        {"role": "user", "content": empty},
    ]
    environment = {"role": "system", "content": "# Environment"}  # after it, as Claude Code
    for decode in (decode_messages, decode_count_tokens):
        for sent in (messages, [*messages, environment]):
            with pytest.raises(InvalidRequest) as caught:
                decode(body(messages=sent))
            assert caught.value.status == 400
            assert caught.value.param == "messages.2"
            assert caught.value.message == f"messages.2: {EMPTY}"


def test_a_last_user_message_with_content_besides_empty_text_is_taken() -> None:
    """Claude Code's empty text blocks are left out; what else the message holds stays."""
    text = [{"type": "text", "text": ""}, {"type": "text", "text": "go on"}]
    messages = [
        {"role": "user", "content": "hi"},
        {"role": "assistant", "content": "hello"},
        {"role": "user", "content": text},
    ]
    command = decode_messages(body(messages=messages))
    assert command.input[-1]["content"] == [{"type": "input_text", "text": "go on"}]
    assert command.settings.continue_final_message is False


TRAILING = "messages: final assistant content cannot end with trailing whitespace"
"""Hosted Anthropic's refusal of a prefill ending in whitespace (a token the model would
not have written: it cannot continue from it)."""


@pytest.mark.parametrize(
    "prefill",
    [
        "Sure ",
        "Sure\n",
        "  ",
        [{"type": "text", "text": "Sure,\n"}],
        [{"type": "text", "text": "a"}, {"type": "text", "text": "b "}],
    ],
)
def test_a_prefill_ending_in_whitespace_is_refused_in_anthropics_words(prefill: Any) -> None:
    messages = [{"role": "user", "content": "hi"}, {"role": "assistant", "content": prefill}]
    for decode in (decode_messages, decode_count_tokens):
        with pytest.raises(InvalidRequest) as caught:
            decode(body(messages=messages))
        assert (caught.value.param, caught.value.message) == ("messages", TRAILING)


@pytest.mark.parametrize(
    "messages",
    [
        [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "Sure,"}],
        [{"role": "user", "content": "hi"}, {"role": "assistant", "content": ""}],
        [{"role": "user", "content": "hi "}],
        [
            {"role": "user", "content": "hi"},
            {"role": "assistant", "content": "Sure. "},
            {"role": "user", "content": "and? "},
        ],
    ],
)
def test_whitespace_ends_any_content_but_a_prefills(messages: list[Any]) -> None:
    """An empty prefill is none (hosted takes it); an assistant turn before the last is
    no prefill, nor is a user turn."""
    decode_messages(body(messages=messages))


HIT = {
    "type": "search_result",
    "source": "https://a.test/",
    "title": "A",
    "content": [{"type": "text", "text": "About a."}],
    "citations": {"enabled": True},
    "cache_control": {"type": "ephemeral"},
}


def test_a_search_result_in_a_user_message_is_its_text_keeping_the_block() -> None:
    command = decode_messages(
        body(messages=[{"role": "user", "content": [HIT, {"type": "text", "text": "and?"}]}])
    )
    [message] = command.input
    assert message["content"] == [
        {
            "type": "input_text",
            "text": "A\nhttps://a.test/\nAbout a.",
            "search_result": HIT,
            "cache_control": {"type": "ephemeral"},
        },
        {"type": "input_text", "text": "and?"},
    ]


def test_a_text_blocks_citations_stay_on_its_part() -> None:
    cited = {
        "type": "char_location",
        "cited_text": "x",
        "document_index": 0,
        "document_title": None,
        "start_char_index": 0,
        "end_char_index": 1,
    }
    command = decode_messages(
        body(
            messages=[
                {"role": "user", "content": "q"},
                {
                    "role": "assistant",
                    "content": [
                        {"type": "text", "text": "plain"},
                        {"type": "text", "text": "x", "citations": [cited]},
                    ],
                },
                {"role": "user", "content": "more"},
            ]
        )
    )
    assert command.input[1]["content"] == [
        {"type": "output_text", "text": "plain"},
        {"type": "output_text", "text": "x", "citations": [cited]},
    ]


def test_input_examples_are_shown_after_the_tool_description() -> None:
    examples = [{"city": "Paris"}, {"city": "Oslo", "unit": "C"}]
    custom = {"name": "weather", "description": "Weather now.", "input_schema": OBJECT}
    bash = {"type": "bash_20250124", "name": "bash", "input_examples": [{"command": "ls"}]}
    tools = decode_messages(
        body(tools=[{**custom, "input_examples": examples}, custom | {"name": "bare"}, bash])
    ).settings.tools
    assert tools[0]["description"] == (
        'Weather now.\n\nExample inputs:\n{"city":"Paris"}\n{"city":"Oslo","unit":"C"}'
    )
    assert tools[1]["description"] == "Weather now."
    assert tools[2]["description"].endswith('\n\nExample inputs:\n{"command":"ls"}')
    undescribed = {"name": "f", "input_schema": OBJECT, "input_examples": [{}]}
    [tool] = decode_messages(body(tools=[undescribed])).settings.tools
    assert tool["description"] == "Example inputs:\n{}"


def test_a_tool_only_code_execution_may_call_is_refused() -> None:
    tool = {"name": "f", "input_schema": OBJECT, "allowed_callers": ["code_execution_20250825"]}
    error = refused(body(tools=[tool]))
    assert error.param == "tools.0.allowed_callers"
    direct = {**tool, "allowed_callers": ["direct", "code_execution_20250825"]}
    [function] = decode_messages(body(tools=[direct])).settings.tools
    assert function["name"] == "f"


@pytest.mark.parametrize(
    ("tools", "choice", "param", "words"),
    [
        (
            [],
            {"type": "any"},
            "tool_choice",
            "tool_choice.any may only be specified while providing tools",
        ),
        (
            [],
            {"type": "tool", "name": "f"},
            "tool_choice.name",
            "Tool 'f' not found in provided tools",
        ),
        (
            [{"name": "g", "input_schema": OBJECT}],
            {"type": "tool", "name": "f"},
            "tool_choice.name",
            "Tool 'f' not found in provided tools",
        ),
    ],
)
def test_a_tool_choice_forcing_an_undeclared_tool_is_refused_in_hosted_words(
    tools: list[Any], choice: dict[str, Any], param: str, words: str
) -> None:
    error = refused(body(tools=tools, tool_choice=choice))
    assert (error.param, error.code, error.message) == (param, "invalid_value", words)
    with pytest.raises(InvalidRequest):
        decode_count_tokens(body(tools=tools, tool_choice=choice))


def test_a_tool_choice_of_a_tool_without_its_name_is_a_missing_field() -> None:
    tools = [{"name": "f", "input_schema": {"type": "object"}}]
    error = refused(body(tools=tools, tool_choice={"type": "tool"}))
    assert (error.param, error.code) == ("tool_choice.name", "missing_required_parameter")
    assert error.message == "tool_choice.name: Field required"


@pytest.mark.parametrize(
    ("tool", "named", "message"),
    [
        (
            {"name": "get weather", "input_schema": OBJECT},
            "tools.0.name",
            "tools.0.name: String should match pattern '^[a-zA-Z0-9_-]{1,128}$'",
        ),
        (
            {"name": "a.b", "input_schema": OBJECT},
            "tools.0.name",
            "tools.0.name: String should match pattern '^[a-zA-Z0-9_-]{1,128}$'",
        ),
        (
            {"name": "f" * 129, "input_schema": OBJECT},
            "tools.0.name",
            "tools.0.name: String should match pattern '^[a-zA-Z0-9_-]{1,128}$'",
        ),
        (
            {"name": "f", "input_schema": {}},
            "tools.0.input_schema.type",
            "tools.0.input_schema.type: Field required",
        ),
        (
            {"name": "f", "input_schema": {"properties": {"a": {"type": "string"}}}},
            "tools.0.input_schema.type",
            "tools.0.input_schema.type: Field required",
        ),
        (
            {"name": "f", "input_schema": {"type": "string"}},
            "tools.0.input_schema.type",
            "tools.0.input_schema.type: Input should be 'object'",
        ),
        (
            {"name": "f", "input_schema": "not a schema"},
            "tools.0.input_schema",
            "tools.0.input_schema: Input should be a valid dictionary",
        ),
    ],
)
def test_a_custom_tool_anthropic_refuses_is_a_400_naming_its_field(
    tool: dict[str, Any], named: str, message: str
) -> None:
    """As Anthropic: ``tools.N.custom.name: String should match pattern
    '^[a-zA-Z0-9_-]{1,128}$'``, ``tools.N.custom.input_schema.type: Field required`` (the
    gateway's paths leave out the ``custom`` tag, as for every other field)."""
    error = refused(body(tools=[tool]))
    assert (error.type, error.param, error.message) == ("invalid_request_error", named, message)
    second = refused(body(tools=[{"name": "ok", "input_schema": OBJECT}, tool]))
    assert second.param == named.replace("tools.0", "tools.1")


def test_the_tools_claude_code_declares_are_taken() -> None:
    """Its own tools, MCP tools (``mcp__server__tool``), the longest name Anthropic takes,
    and the server and client tools, which have no ``input_schema``."""
    schema = {
        "type": "object",
        "properties": {"command": {"type": "string"}},
        "required": ["command"],
        "additionalProperties": False,
        "$schema": "http://json-schema.org/draft-07/schema#",
    }
    tools = [
        {"name": "Bash", "description": "Run", "input_schema": schema},
        {"name": "mcp__my-server__do_thing", "input_schema": {"type": "object"}},
        {"name": "n" * 128, "input_schema": {"type": "object", "properties": {}}},
        {"type": "custom", "name": "typed", "input_schema": {"type": "object"}},
        {"type": "web_search_20250305", "name": "web_search"},
        {"type": "bash_20250124", "name": "bash"},
        {"type": "text_editor_20250728", "name": "str_replace_based_edit_tool"},
    ]
    declared = decode_messages(body(tools=tools)).settings.tools
    assert [tool.get("name", tool["type"]) for tool in declared] == [
        "Bash",
        "mcp__my-server__do_thing",
        "n" * 128,
        "typed",
        "web_search",
        "bash",
        "str_replace_based_edit_tool",
    ]
    assert declared[0]["parameters"] == schema


@pytest.mark.parametrize(
    ("kind", "name"),
    [
        ("tool_search_tool_regex_20251119", "tool_search_tool_regex"),
        ("tool_search_tool_regex", "tool_search_tool_regex"),
        ("tool_search_tool_bm25_20251119", "tool_search_tool_bm25"),
        ("tool_search_tool_bm25", "tool_search_tool_bm25"),
    ],
)
def test_the_tool_search_server_tool_is_the_gateways_tool_search_of_its_syntax(
    kind: str, name: str
) -> None:
    """Anthropic's tool search: the gateway's ``tool_search`` (run by the gateway), whose
    query syntax is the variant's; the deferred tools keep ``defer_loading``."""
    mark = {"type": "ephemeral"}
    search = {"type": kind, "name": name, "defer_loading": False, "cache_control": mark}
    deferred = {"name": "Later", "input_schema": OBJECT, "defer_loading": True}
    tools = [search, {"name": "Now", "input_schema": OBJECT}, deferred]
    raw = body(tools=tools, tool_choice={"type": "auto"})
    offered = decode_messages(raw).settings.tools
    counted = decode_count_tokens(raw).request.settings.tools
    syntax = name.removeprefix("tool_search_tool_")
    assert offered[0] == {"type": "tool_search", "execution": "server", "syntax": syntax}
    assert [tool.get("name") for tool in offered[1:]] == ["Now", "Later"]
    assert offered[2]["defer_loading"] is True
    assert counted == offered


@pytest.mark.parametrize(
    ("tool", "param"),
    [
        ({"type": "tool_search_tool_regex_20251119", "name": "search"}, "tools.0.name"),
        ({"type": "tool_search_tool_regex_20251119"}, "tools.0.name"),
        (
            {"type": "tool_search_tool_bm25_20251119", "name": "tool_search_tool_regex"},
            "tools.0.name",
        ),
        ({"type": "tool_search_tool_regex_2025", "name": "tool_search_tool_regex"}, "tools.0.type"),
        ({"type": "tool_search_tool_glob", "name": "tool_search_tool_glob"}, "tools.0.type"),
    ],
)
def test_a_tool_search_tool_anthropic_refuses_is_a_400_naming_its_field(
    tool: dict[str, Any], param: str
) -> None:
    assert refused(body(tools=[tool])).param == param


def test_a_tool_search_tool_named_as_another_tool_is_a_duplicate() -> None:
    search = {"type": "tool_search_tool_regex_20251119", "name": "tool_search_tool_regex"}
    custom = {"name": "tool_search_tool_regex", "input_schema": OBJECT}
    assert refused(body(tools=[search, custom])).param == "tools.1.name"


@pytest.mark.parametrize(
    "thinking", [{"type": "adaptive"}, {"type": "enabled", "budget_tokens": 1024}]
)
@pytest.mark.parametrize("choice", [{"type": "any"}, {"type": "tool", "name": "f"}])
def test_a_forced_tool_choice_while_thinking_is_refused(
    thinking: dict[str, Any], choice: dict[str, Any]
) -> None:
    """As Anthropic refuses it: thinking takes only ``auto`` and ``none``."""
    tools = [{"name": "f", "input_schema": OBJECT}]
    error = refused(body(tools=tools, tool_choice=choice, thinking=thinking, max_tokens=2048))
    assert (error.type, error.param) == ("invalid_request_error", "tool_choice")
    assert error.message == (
        "tool_choice: Thinking may not be enabled when tool_choice forces tool use."
    )


@pytest.mark.parametrize(
    ("thinking", "choice"),
    [
        ({"type": "adaptive"}, {"type": "auto"}),
        ({"type": "adaptive"}, {"type": "none"}),
        ({"type": "enabled", "budget_tokens": 1024}, None),
        ({"type": "disabled"}, {"type": "any"}),
        (None, {"type": "tool", "name": "f"}),
    ],
)
def test_thinking_takes_a_choice_that_forces_no_tool(
    thinking: dict[str, Any] | None, choice: dict[str, Any] | None
) -> None:
    tools = [{"name": "f", "input_schema": OBJECT}]
    fields = {"tools": tools, "tool_choice": choice, "thinking": thinking, "max_tokens": 2048}
    decode_messages(body(**{key: value for key, value in fields.items() if value is not None}))


def test_count_tokens_takes_a_forced_tool_choice_while_thinking() -> None:
    """``/count_tokens`` runs no model: only ``/v1/messages`` refuses the pair."""
    tools = [{"name": "f", "input_schema": OBJECT}]
    raw = body(tools=tools, tool_choice={"type": "any"}, thinking={"type": "adaptive"})
    decode_count_tokens(raw)


@pytest.mark.parametrize(
    ("stops", "problem"),
    [
        ([""], "each stop sequence must be non-empty"),
        (["END", ""], "each stop sequence must be non-empty"),
        (["\n"], "each stop sequence must contain non-whitespace"),
        ([" \t\n"], "each stop sequence must contain non-whitespace"),
    ],
)
def test_an_empty_or_blank_stop_sequence_is_refused(stops: list[str], problem: str) -> None:
    """In Anthropic's words (a Chat client's blank ``stop`` is the gateway's to keep; a
    Messages client's is refused, as hosted refuses it)."""
    error = refused(body(stop_sequences=stops))
    assert (error.param, error.message) == ("stop_sequences", f"stop_sequences: {problem}")


def test_a_stop_sequence_with_whitespace_around_text_is_taken() -> None:
    stops = ["\nHuman:", " END "]
    assert decode_messages(body(stop_sequences=stops)).settings.stop_sequences == stops


def test_a_user_id_past_512_characters_is_refused() -> None:
    """Anthropic's documented bound (``maxLength 512``), worded as its validation words a
    string too long."""
    taken = decode_messages(body(metadata={"user_id": "u" * 512}))
    assert taken.settings.user == "u" * 512
    error = refused(body(metadata={"user_id": "u" * 513}))
    assert error.param == "metadata.user_id"
    assert error.message == "metadata.user_id: String should have at most 512 characters"


@pytest.mark.parametrize(
    ("fields", "named"),
    [
        ({"fallbacks": [{"model": "other"}]}, "fallbacks"),
        (
            {"billing_policy": {"type": "billing_policy", "bill_to": "user_profile"}},
            "billing_policy.bill_to",
        ),
        ({"fallbacks": "mine"}, "fallbacks"),
    ],
)
def test_hosted_features_that_ignoring_would_answer_another_request_are_refused(
    fields: dict[str, Any], named: str
) -> None:
    error = refused(body(**fields))
    assert error.param == named
    assert error.message.startswith(f"{named}: ")


def test_a_thread_create_is_stored_its_system_held_apart() -> None:
    tools = [{"name": "get_weather", "input_schema": {"type": "object"}}]
    command = decode_messages(body(thread={"type": "create"}, system="rules", tools=tools))
    assert command.store is True
    assert command.thread is not None
    assert command.thread.previous_response_id is None
    assert [item["role"] for item in command.input] == ["user"]  # the system is not an input
    [system] = command.thread.system or []
    assert system["role"] == "system"
    assert system["content"][0]["text"] == "rules"


def test_a_thread_continue_names_the_response_and_may_inherit() -> None:
    result = {"type": "tool_result", "tool_use_id": "toolu_1", "content": "sunny"}
    continued = {"type": "continue", "previous_message_id": "msg_abc"}
    raw = body(
        thread=continued,
        messages=[{"role": "user", "content": [result]}],
        tool_choice={"type": "tool", "name": "get_weather"},
    )
    command = decode_messages(raw)
    assert command.thread is not None
    assert command.thread.previous_response_id == "resp_abc"
    assert (command.thread.system, command.thread.tools_given) == (None, False)
    assert command.settings.tools == []  # the thread's, found by the core
    assert command.settings.tool_choice == {"type": "function", "name": "get_weather"}
    [output] = command.input  # answering a call of the thread's last response
    assert (output["type"], output["call_id"]) == ("function_call_output", "toolu_1")
    emptied = decode_messages(body(thread={**continued, "previous_message_id": "msg_a"}, system=[]))
    assert emptied.thread is not None
    assert emptied.thread.system == []  # sent empty: replaces the thread's with none
    error = refused(body(messages=[{"role": "user", "content": [result]}]))
    assert error.param == "messages.0.content.0.tool_use_id"  # no thread: nothing it answers


def test_a_continue_without_messages_resumes_its_paused_turn() -> None:
    """The SDK's thread helper goes on after ``pause_turn`` with no messages: the paused
    answer, last in the thread, is continued (the core refuses it after a turn that was
    not paused); a create without messages has nothing to answer."""
    continued = {"type": "continue", "previous_message_id": "msg_abc"}
    command = decode_messages(body(thread=continued, messages=[]))
    assert command.thread is not None
    assert command.thread.resumes
    assert command.input == []
    assert command.settings.continue_final_message
    assert not decode_messages(body(thread=continued)).thread.resumes  # type: ignore[union-attr]
    for refused_body in (body(thread={"type": "create"}, messages=[]), body(messages=[])):
        error = refused(refused_body)
        assert (error.param, error.code) == ("messages", "missing_required_parameter")


def test_a_count_of_a_thread_turn_is_that_turn_and_stores_nothing() -> None:
    """``count_tokens`` counts what the turn would send: its thread's too (the core)."""
    result = {"type": "tool_result", "tool_use_id": "toolu_1", "content": "sunny"}
    continued = {"type": "continue", "previous_message_id": "msg_abc"}
    raw = body(thread=continued, messages=[{"role": "user", "content": [result]}])
    command = decode_count_tokens(raw).request
    assert command.thread is not None
    assert command.thread.previous_response_id == "resp_abc"
    assert (command.thread.system, command.thread.tools_given) == (None, False)
    [output] = command.input  # answering a call of the thread's last response
    assert (output["type"], output["call_id"]) == ("function_call_output", "toolu_1")
    assert not command.store
    with pytest.raises(InvalidRequest) as caught:
        decode_count_tokens(body(thread={"type": "fork"}))
    assert caught.value.param == "thread.type"


@pytest.mark.parametrize(
    ("thread", "param"),
    [
        ({}, "thread.type"),
        ({"type": "fork"}, "thread.type"),
        ({"type": "continue"}, "thread.previous_message_id"),
        ({"type": "continue", "previous_message_id": 7}, "thread.previous_message_id"),
    ],
)
def test_a_malformed_thread_is_named(thread: dict[str, Any], param: str) -> None:
    error = refused(body(thread=thread))
    assert error.param == param
    assert error.message.startswith(f"{param}: ")


def test_a_continue_from_no_message_id_is_thread_not_found() -> None:
    with pytest.raises(ThreadNotFound) as caught:
        decode_messages(body(thread={"type": "continue", "previous_message_id": "resp_1"}))
    assert (caught.value.status, caught.value.code) == (404, "thread_not_found")


def test_a_fallback_list_is_refused_in_the_words_claude_code_recovers_from() -> None:
    """Claude Code sends the request again without ``fallbacks`` when the 400 says the
    parameter is not supported, in hosted's words (its pattern, from its 2.1 build)."""
    error = refused(body(fallbacks=[{"model": "other"}]))
    assert re.search(r"The `fallbacks?` parameter is not supported", error.message)


def test_hosted_features_that_change_no_answer_are_ignored() -> None:
    """Latency, region, billing to the caller, cache diagnostics, the requested model
    alone: the answer asked for is the answer given."""
    command = decode_messages(
        body(
            speed="fast",
            inference_geo="us",
            diagnostics={"previous_message_id": None},
            fallbacks="default",
            fallback_credit_token="tok",
            billing_policy={"type": "billing_policy", "bill_to": "self"},
            container="container_1",
            output_config={"task_budget": {"type": "tokens", "total": 100000}},
        )
    )
    assert command.generate is True
    assert decode_messages(body(fallbacks=[])).generate is True


def test_count_tokens_ignores_a_compaction_request() -> None:
    """As Anthropic: the count is for the conversation as sent."""
    raw = orjson.dumps(
        {
            "model": "m",
            "messages": [{"role": "user", "content": "hi"}],
            "compaction": {"type": "summarize"},
        }
    )
    assert decode_count_tokens(raw).request.model == "m"


def test_content_blocks_past_ten_a_message_allowed_are_refused_before_validation() -> None:
    """Ten blocks (a tool result's own among them) for each message the gateway takes:
    each block costs as much as a message, and no client sends that many."""
    text = {"type": "text", "text": "a"}
    result = {"type": "tool_result", "tool_use_id": "t", "content": [text] * 9}
    within = [{"role": "user", "content": [text] * 10}]
    assert decode_messages(body(messages=within), max_input_items=1).input
    past = [{"role": "user", "content": [result, {"type": "robot"}]}]
    with pytest.raises(InvalidRequest) as caught:
        decode_messages(body(messages=past), max_input_items=1)
    assert (caught.value.param, caught.value.code) == ("messages", "array_above_max_length")
    assert caught.value.message == (
        "messages: 11 content blocks are more than the 10 this gateway takes "
        "(ten for each message)."
    )
    system = [text] * 6  # the system prompt's blocks count too
    assert decode_messages(body(system=system, messages=within[:1]), max_input_items=2).input
    with pytest.raises(InvalidRequest) as caught:
        decode_messages(body(system=system, messages=[*within, *within]), max_input_items=2)
    assert caught.value.message.startswith("messages: 26 content blocks are more than the 20")
