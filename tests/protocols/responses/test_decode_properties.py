"""Properties of what the decoder accepts: well-formed requests are accepted, and what they
set comes back unchanged in the Response the gateway echoes."""

from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import event, given, settings
from hypothesis import strategies as st
from openai.types.responses import Response

from stateway.core.errors import InvalidRequest
from stateway.core.response import ResponseState
from stateway.protocols.responses.decode import decode_create
from stateway.protocols.responses.encode import encode_response
from stateway.protocols.responses.reads import decode_list_input_items
from tests.protocols.responses.test_decode import request_like

_words = st.text(min_size=1, max_size=12)
_input_parts = st.one_of(
    st.builds(lambda t: {"type": "input_text", "text": t}, _words),
    st.just({"type": "input_image", "image_url": "data:image/png;base64,AA"}),
    st.just({"type": "input_file", "file_data": "data:application/pdf;base64,AA"}),
)
_output_parts = st.one_of(
    st.builds(lambda t: {"type": "output_text", "text": t}, _words),
    st.builds(lambda t: {"type": "refusal", "refusal": t}, _words),
)
_messages = st.one_of(
    st.builds(
        lambda role, content: {"role": role, "content": content},
        st.sampled_from(["user", "system", "developer"]),
        st.one_of(_words, st.lists(_input_parts, min_size=1, max_size=3)),
    ),
    st.builds(
        lambda content: {"role": "assistant", "content": content},
        st.one_of(_words, st.lists(_output_parts, min_size=1, max_size=3)),
    ),
)
_calls = st.builds(
    lambda call_id, args: [
        {"type": "function_call", "call_id": call_id, "name": "f", "arguments": args},
        {"type": "function_call_output", "call_id": call_id, "output": "done"},
    ],
    st.sampled_from(["c1", "c2"]),
    st.sampled_from(["{}", '{"a": 1}']),
)
_input = st.one_of(
    _words,
    st.lists(st.one_of(_messages.map(lambda m: [m]), _calls), min_size=1, max_size=4).map(
        lambda groups: [item for group in groups for item in group]
    ),
)
_schema = st.fixed_dictionaries(
    {"type": st.just("object")},
    optional={"properties": st.just({"a": {"type": "string"}}), "required": st.just(["a"])},
)
_tools = st.lists(
    st.fixed_dictionaries(
        {"type": st.just("function"), "name": st.from_regex(r"[a-z_]{1,10}", fullmatch=True)},
        optional={
            "description": _words,
            "parameters": _schema,
            "strict": st.booleans(),
        },
    ),
    max_size=3,
    unique_by=lambda tool: tool["name"],
)
_text_format = st.one_of(
    st.just({"type": "text"}),
    st.just({"type": "json_object"}),
    st.fixed_dictionaries(
        {
            "type": st.just("json_schema"),
            "name": st.from_regex(r"[a-zA-Z0-9_-]{1,64}", fullmatch=True),
            "schema": _schema,
        },
        optional={"strict": st.booleans(), "description": _words},
    ),
)
valid_request = st.fixed_dictionaries(
    {"model": st.text(min_size=1, max_size=12), "input": _input},
    optional={
        "instructions": _words,
        "stream": st.booleans(),
        "store": st.booleans(),
        "temperature": st.floats(0, 2),
        "top_p": st.floats(0, 1),
        "max_output_tokens": st.integers(16, 1_000_000),
        "max_tool_calls": st.integers(1, 100),
        "tools": _tools,
        "tool_choice": st.sampled_from(["auto", "none", "required"]),
        "parallel_tool_calls": st.booleans(),
        "text": st.fixed_dictionaries(
            {},
            optional={
                "format": _text_format,
                "verbosity": st.sampled_from(["low", "medium", "high"]),
            },
        ),
        "reasoning": st.fixed_dictionaries(
            {},
            optional={
                "effort": st.sampled_from(["minimal", "low", "medium", "high"]),
                "summary": st.sampled_from(["auto", "concise", "detailed"]),
            },
        ),
        "metadata": st.dictionaries(st.text(max_size=64), st.text(max_size=512), max_size=16),
        "user": _words,
        "safety_identifier": st.text(min_size=1, max_size=128),
        "prompt_cache_key": st.text(min_size=1, max_size=64),
        "prompt_cache_retention": st.sampled_from(["in_memory", "24h"]),
        "truncation": st.sampled_from(["auto", "disabled"]),
        "service_tier": st.sampled_from(["auto", "default", "flex"]),
        "top_logprobs": st.integers(0, 20),
        "presence_penalty": st.floats(-2, 2),
        "frequency_penalty": st.floats(-2, 2),
        "client_extension": st.just({"ignored": True}),
    },
).filter(lambda body: body.get("tool_choice") != "required" or bool(body.get("tools")))
"""Well-formed: ``required`` forces a tool, so it comes with some (else a 400)."""


@settings(max_examples=300, deadline=None)
@given(valid_request)
def test_well_formed_requests_are_accepted_and_echoed(body: dict[str, Any]) -> None:
    command = decode_create(json.dumps(body).encode())
    wire = encode_response(ResponseState.start("resp_x", "t", 1_700_000_000.0, command))
    Response.model_validate(wire)  # what the official SDK parses

    assert command.stream is body.get("stream", False)
    assert wire["store"] is body.get("store", True)
    expected = {
        "model": body["model"],
        "instructions": body.get("instructions"),
        "temperature": body.get("temperature", 1.0),
        "top_p": body.get("top_p", 1.0),
        "max_output_tokens": body.get("max_output_tokens"),
        "max_tool_calls": body.get("max_tool_calls"),
        "tool_choice": body.get("tool_choice", "auto"),
        "parallel_tool_calls": body.get("parallel_tool_calls", True),
        "metadata": body.get("metadata", {}),
        "user": body.get("user"),
        "safety_identifier": body.get("safety_identifier"),
        "prompt_cache_key": body.get("prompt_cache_key"),
        "prompt_cache_retention": body.get("prompt_cache_retention"),
        "truncation": body.get("truncation", "disabled"),
        "service_tier": body.get("service_tier", "auto"),  # as asked while in progress
        "top_logprobs": body.get("top_logprobs", 0),
        "presence_penalty": body.get("presence_penalty", 0.0),
        "frequency_penalty": body.get("frequency_penalty", 0.0),
    }
    assert {name: wire[name] for name in expected} == expected
    reasoning = body.get("reasoning", {})
    assert wire["reasoning"] == {
        "effort": reasoning.get("effort"),
        "summary": reasoning.get("summary"),
    }
    text = body.get("text", {})
    assert wire["text"]["verbosity"] == text.get("verbosity", "medium")
    sent_format = text.get("format", {"type": "text"})
    echoed_format = wire["text"]["format"]
    for key in ("type", "name", "schema", "description", "strict"):
        if key in sent_format:
            assert echoed_format[key] == sent_format[key], key
    echoed_tools = {tool["name"]: tool for tool in wire["tools"]}
    assert list(echoed_tools) == [tool["name"] for tool in body.get("tools", [])]
    for tool in body.get("tools", []):
        for key in ("description", "parameters", "strict"):
            assert echoed_tools[tool["name"]][key] == tool.get(key), key
    sent_input = body["input"]
    if isinstance(sent_input, str):
        [message] = command.input
        assert message["content"] == [{"type": "input_text", "text": sent_input}]
    else:
        assert [item.get("role") for item in command.input] == [
            item.get("role") for item in sent_input
        ]
        assert all(item["id"] for item in command.input)


def refusal(body: dict[str, Any]) -> InvalidRequest | None:
    """The decoder's refusal of ``body``, or None when it accepts it. Any other exception
    escapes and fails the test."""
    try:
        decode_create(json.dumps(body).encode())
    except InvalidRequest as exc:
        return exc
    return None


@settings(max_examples=400, deadline=None)
@given(st.one_of(valid_request, request_like))
def test_mixed_requests_are_accepted_or_refused_as_invalid_requests(body: dict[str, Any]) -> None:
    refused = refusal(body)
    event("accepted" if refused is None else "refused")
    if refused is not None:
        assert refused.status == 400
        assert refused.to_dict()["type"] == "invalid_request_error"
        assert refused.message


def test_a_good_share_of_mixed_requests_is_accepted() -> None:
    """Counted over a fixed, derandomized set of draws, so the share does not flake."""
    outcomes: list[bool] = []

    @settings(max_examples=200, deadline=None, derandomize=True, database=None)
    @given(st.one_of(valid_request, request_like))
    def draw(body: dict[str, Any]) -> None:
        outcomes.append(refusal(body) is None)

    draw()
    share = sum(outcomes) / len(outcomes)
    assert 0.3 <= share <= 0.9, (share, len(outcomes))


@pytest.mark.parametrize(
    ("metadata", "param", "code", "words"),
    [
        (
            {"k": "v" * 513},
            "metadata.k",
            "string_above_max_length",
            "Expected a string with maximum length 512, but got a string with length 513",
        ),
        (
            {"k" * 65: "v"},
            "metadata." + "k" * 65,
            "property_name_above_max_length",
            "Expected a string with maximum length 64, but got a string with length 65",
        ),
        (
            {f"k{i}": "v" for i in range(17)},
            "metadata",
            "object_above_max_properties",
            "at most 16 properties, but got an object with 17 properties instead.",
        ),
    ],
    ids=["value over 512", "key over 64", "17 pairs"],
)
def test_metadata_over_its_limits_is_refused(
    metadata: dict[str, str], param: str, code: str, words: str
) -> None:
    """As on conversations (one check for both), with the hosted API's codes."""
    with pytest.raises(InvalidRequest) as caught:
        decode_create(json.dumps({"model": "m", "input": "x", "metadata": metadata}).encode())
    assert caught.value.status == 400
    assert (caught.value.param, caught.value.code) == (param, code)
    assert words in caught.value.message


def test_metadata_at_its_limits_is_kept() -> None:
    metadata = {f"{i:02d}" + "k" * 62: "v" * 512 for i in range(16)}
    command = decode_create(json.dumps({"model": "m", "input": "x", "metadata": metadata}).encode())
    assert command.settings.metadata == metadata


@pytest.mark.parametrize(("sent", "kept"), [(None, True), (True, True), (False, False)])
def test_parallel_tool_calls_default_to_true(sent: bool | None, kept: bool) -> None:
    body: dict[str, Any] = {"model": "m", "input": "x"}
    if sent is not None:
        body["parallel_tool_calls"] = sent
    command = decode_create(json.dumps(body).encode())
    assert command.settings.parallel_tool_calls is kept
    assert (
        encode_response(ResponseState.start("r", "t", 0.0, command))["parallel_tool_calls"] is kept
    )


def test_input_item_listing_defaults_and_bounds() -> None:
    default = decode_list_input_items("resp_1", {})
    assert (default.response_id, default.limit, default.order, default.after) == (
        "resp_1",
        20,
        "desc",
        None,
    )
    assert decode_list_input_items("resp_1", {"limit": "100", "order": "desc"}).limit == 100
    assert decode_list_input_items("resp_1", {"limit": "1", "order": "asc"}).order == "asc"
    assert decode_list_input_items("resp_1", {"after": ""}).after is None


@pytest.mark.parametrize(
    ("query", "param"), [({"limit": "101"}, "limit"), ({"order": "newest"}, "order")]
)
def test_input_item_listing_refusals_name_the_parameter(query: dict[str, str], param: str) -> None:
    """In ``param``; the message names the parameter or, in hosted's words for a value
    none of the supported ones, the value at fault."""
    with pytest.raises(InvalidRequest) as caught:
        decode_list_input_items("resp_1", query)
    assert caught.value.param == param
    assert param in caught.value.message or f"'{query[param]}'" in caught.value.message
