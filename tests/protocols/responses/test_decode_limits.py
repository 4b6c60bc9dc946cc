"""What ``decode_create`` bounds and refuses: item counts, nesting, empty requests, and the
codes every refusal carries; plus what it normalizes (item status, ``json_schema``)."""

from __future__ import annotations

from typing import Any, get_args

import orjson
import pytest
from openai.types.responses import ResponseIncludable

from stateway.core.errors import InvalidRequest
from stateway.core.nesting import MAX_NESTING
from stateway.protocols.responses.decode import decode_create
from stateway.protocols.responses.reads import decode_list_input_items


def nested(levels: int) -> dict[str, Any]:
    """A JSON object ``levels`` containers deep."""
    value: dict[str, Any] = {}
    for _ in range(levels - 1):
        value = {"a": value}
    return value


def refusal(body: dict[str, Any], **options: Any) -> InvalidRequest:
    with pytest.raises(InvalidRequest) as caught:
        decode_create(orjson.dumps(body), **options)
    return caught.value


def messages(count: int) -> list[dict[str, Any]]:
    return [{"role": "user", "content": "x"}] * count


def test_item_count_at_the_limit_is_accepted() -> None:
    body = {"model": "m", "input": messages(5)}
    assert len(decode_create(orjson.dumps(body), max_input_items=5).input) == 5


def test_one_item_over_the_limit_is_refused_naming_input() -> None:
    error = refusal({"model": "m", "input": messages(6)}, max_input_items=5)
    assert (error.status, error.param, error.code) == (400, "input", "array_above_max_length")
    assert "maximum length 5" in error.message


def test_item_count_is_checked_before_the_items_are() -> None:
    # Six broken items: the count is what is reported, not the first broken item.
    error = refusal({"model": "m", "input": [{"role": "robot"}] * 6}, max_input_items=5)
    assert error.code == "array_above_max_length"


@pytest.mark.parametrize(
    ("place", "param"),
    [
        (
            lambda v: {"tools": [{"type": "function", "name": "f", "parameters": v}]},
            "tools[0].parameters",
        ),
        (
            lambda v: {"text": {"format": {"type": "json_schema", "name": "s", "schema": v}}},
            "text.format.schema",
        ),
        (lambda v: {"input": [{"role": "user", "content": "x", "extra": v}]}, "input[0].extra"),
        (lambda v: {"input": [{"type": "custom_thing", "payload": v}]}, "input[0].payload"),
        (
            lambda v: {
                "input": [
                    {"role": "user", "content": [{"type": "input_text", "text": "x", "x": v}]}
                ]
            },
            "input[0].content",
        ),
    ],
)
def test_nesting_deeper_than_storable_is_refused_naming_the_field(place: Any, param: str) -> None:
    error = refusal({"model": "m", "input": "x", **place(nested(MAX_NESTING + 1))})
    assert (error.status, error.param, error.code) == (400, param, "nesting_too_deep")
    assert param in error.message
    for levels in (40, MAX_NESTING - 3):  # the content part and the message wrap the value
        decode_create(orjson.dumps({"model": "m", "input": "x", **place(nested(levels))}))


def test_values_at_the_nesting_limit_still_serialize_inside_their_wrappers() -> None:
    deepest = nested(MAX_NESTING)
    event = {"response": {"text": {"format": {"schema": deepest}}}}
    orjson.dumps({"wrappers": [[[[[[[[event]]]]]]]]})  # headroom for wrappers yet to come


def test_nesting_of_a_thousand_levels_is_refused_without_recursion() -> None:
    deep = b'{"a":' * 999 + b"{}" + b"}" * 999  # too deep for orjson to write
    with pytest.raises(InvalidRequest) as caught:
        decode_create(b'{"model": "m", "input": [{"type": "x", "deep": ' + deep + b"}]}")
    assert caught.value.param == "input[0].deep"


@pytest.mark.parametrize(
    "extra", [{}, {"input": []}, {"input": None}, {"input": [], "instructions": ""}]
)
def test_nothing_to_respond_to_is_refused(extra: dict[str, Any]) -> None:
    error = refusal({"model": "m", **extra})
    assert (error.status, error.param, error.code) == (400, "input", "missing_required_parameter")


def test_a_cache_prewarm_needs_nothing_to_respond_to() -> None:
    """It answers nothing (as WebSocket mode's ``generate: false``)."""
    body = {"model": "m", "input": [], "prompt_cache_options": {"prewarm": True}}
    assert decode_create(orjson.dumps(body)).generate is False


@pytest.mark.parametrize(
    "extra", [{"instructions": "be brief"}, {"previous_response_id": "resp_1"}, {"input": "x"}]
)
def test_instructions_or_a_previous_response_are_enough(extra: dict[str, Any]) -> None:
    decode_create(orjson.dumps({"model": "m", **extra}))


def test_a_null_input_is_no_input() -> None:
    """The Open Responses spec lets ``input`` be null (the SDK sends ``input=None`` so):
    nothing to add to the instructions, as when it is left out."""
    command = decode_create(orjson.dumps({"model": "m", "input": None, "instructions": "hi"}))
    assert command.input == []
    assert command.instructions == "hi"


BAD_BODIES: list[dict[str, Any]] = [
    {"input": "x"},
    {"model": "m", "input": "x", "temperature": "hot"},
    {"model": "m", "input": [{"role": "robot", "content": "x"}]},
    {"model": "m", "input": [{"role": "user", "content": 7}]},
    {"model": "m", "input": [{"content": "x"}]},
    {"model": "m", "input": [{"type": 3}]},
    {"model": "m", "input": [{"role": "user", "content": [5]}]},
    {"model": "m", "input": [{"role": "user", "content": [{"type": "video"}]}]},
    {"model": "m", "input": [{"role": "user", "content": [{"type": "input_text"}]}]},
    {"model": "m", "input": [{"role": "user", "content": [{"type": "input_text", "text": 1}]}]},
    {
        "model": "m",
        "input": [{"role": "user", "content": [{"type": "input_image", "image_url": "file-1"}]}],
    },
    {
        "model": "m",
        "input": [{"role": "user", "content": [{"type": "input_file", "file_id": "f"}]}],
    },
    {"model": "m", "input": [{"type": "function_call", "name": "f"}]},
    {
        "model": "m",
        "input": [{"type": "function_call", "call_id": 1, "name": "f", "arguments": ""}],
    },
    {"model": "m", "input": [{"type": "function_call_output", "call_id": "c", "output": 3}]},
    {"model": "m", "input": [{"type": "reasoning", "summary": "x"}]},
    {"model": "m", "input": [{"type": "item_reference"}]},
    {"model": "m", "input": [{"role": "user", "content": "x", "id": "a"}] * 2},
    {"model": "m", "input": "x", "background": 1},
    {"model": "m", "input": "x", "conversation": {"id": ""}},
    {"model": "m", "input": "x", "include": [""]},
    {"model": "m", "input": "x", "tools": [{"type": "web_search", "filters": 1}]},
    {"model": "m", "input": "x", "tools": [{"type": "function"}]},
    {"model": "m", "input": "x", "tools": [{"type": "function", "name": "f", "parameters": []}]},
    {"model": "m", "input": "x", "tools": [{"type": "function", "name": "f", "description": 1}]},
    {"model": "m", "input": "x", "tools": [{"type": "function", "name": "f", "strict": "y"}]},
    {"model": "m", "input": "x", "tool_choice": "sometimes"},
    {"model": "m", "input": "x", "tool_choice": {"type": "mcp"}},
    {"model": "m", "input": "x", "text": {"format": {"type": "yaml"}}},
    {"model": "m", "input": "x", "text": {"format": {"type": "json_schema", "schema": {}}}},
    {"model": "m", "input": "x", "text": {"format": {"type": "json_schema", "name": "s"}}},
    {
        "model": "m",
        "input": "x",
        "text": {"format": {"type": "json_schema", "name": "s", "schema": {}, "strict": 1}},
    },
    {
        "model": "m",
        "input": "x",
        "text": {"format": {"type": "json_schema", "name": "s", "schema": {}, "description": 1}},
    },
    {"model": "m", "input": "x", "metadata": {"k" * 65: "v"}},
    {"model": "m", "input": "x", "metadata": {"k": "v" * 513}},
    {"model": "m"},
]


@pytest.mark.parametrize("body", BAD_BODIES)
def test_every_refusal_carries_a_code_and_names_the_field(body: dict[str, Any]) -> None:
    error = refusal(body)
    assert error.status == 400
    assert error.code is not None
    assert error.param is not None


@pytest.mark.parametrize(
    ("body", "code"),
    [
        ({"model": "m", "input": [{"role": "robot", "content": "x"}]}, "invalid_value"),
        ({"model": "m", "input": "x", "tool_choice": "sometimes"}, "invalid_value"),
        (
            {"model": "m", "input": [{"type": "function_call", "name": "f"}]},
            "missing_required_parameter",
        ),
        ({"model": "m", "input": "x", "background": "yes"}, "invalid_type"),
        (
            {"model": "m", "input": "x", "tool_choice": {"type": "mcp"}},
            "missing_required_parameter",
        ),
        ({"model": "m", "input": "x", "tool_choice": {"type": "bogus"}}, "unsupported_value"),
    ],
)
def test_refusal_codes(body: dict[str, Any], code: str) -> None:
    assert refusal(body).code == code


@pytest.mark.parametrize(
    ("body", "param", "code"),
    [
        (
            {"model": "m", "input": [{"type": "item_reference", "id": 1}]},
            "input[0].id",
            "invalid_type",
        ),
        (
            {
                "model": "m",
                "input": [
                    {"role": "user", "content": "w"},
                    {"role": "user", "content": "x", "id": "a"},
                    {"role": "user", "content": "y", "id": "b"},
                    {"role": "user", "content": "z", "id": "a"},
                ],
            },
            "input[3].id",
            "duplicate_item_id",
        ),
        (
            {"model": "m", "input": [{"type": "function_call", "name": "f", "arguments": ""}]},
            "input[0].call_id",
            "missing_required_parameter",
        ),
        (
            {"model": "m", "input": "x", "include": ["reasoning.encrypted_content", ""]},
            "include[1]",
            "invalid_value",
        ),
    ],
)
def test_refusals_name_the_field_and_code(body: dict[str, Any], param: str, code: str) -> None:
    error = refusal(body)
    assert (error.status, error.param, error.code) == (400, param, code)


def test_max_output_tokens_below_sixteen_is_refused_as_hosted_refuses_it() -> None:
    """The hosted API and the Open Responses spec both set ``max_output_tokens``'
    minimum at 16: a smaller budget is a 400 in the hosted words, not a request that an
    OpenAI upstream would refuse later."""
    error = refusal({"model": "m", "input": "x", "max_output_tokens": 15})
    assert (error.status, error.param, error.code) == (
        400,
        "max_output_tokens",
        "integer_below_min_value",
    )
    assert error.message == (
        "Invalid 'max_output_tokens': integer below minimum value. Expected a value >= 16, "
        "but got 15 instead."
    )
    body = {"model": "m", "input": "x", "max_output_tokens": 16}
    assert decode_create(orjson.dumps(body)).settings.max_output_tokens == 16


BACKGROUND = {"model": "m", "input": "x", "background": True}


@pytest.mark.parametrize(
    ("body", "param", "code"),
    [
        (
            {**BACKGROUND, "image": {"context_compression": "enabled"}},
            "image.context_compression",
            "unsupported_value",
        ),
        (
            {**BACKGROUND, "image": {"context_compression": "on"}},
            "image.context_compression",
            "invalid_value",
        ),
        ({**BACKGROUND, "image": "auto"}, "image", "invalid_type"),
        (
            {**BACKGROUND, "background_options": {"completion_window": "1h"}},
            "background_options.completion_window",
            "invalid_value",
        ),
        (
            {"model": "m", "input": "x", "background_options": {"completion_window": "2h"}},
            "background_options.completion_window",
            "invalid_value",
        ),
        (
            {**BACKGROUND, "stream": True, "background_options": {"completion_window": "8h"}},
            "background_options.completion_window",
            "invalid_value",
        ),
        (
            {
                **BACKGROUND,
                "service_tier": "flex",
                "background_options": {"completion_window": "2h"},
            },
            "background_options.completion_window",
            "invalid_value",
        ),
        (
            {**BACKGROUND, "background_options": {"continuation_id": 5}},
            "background_options.continuation_id",
            "invalid_type",
        ),
        (
            {**BACKGROUND, "access_programs": {"cyber": "daybreak_red"}},
            "access_programs.cyber",
            "unsupported_value",
        ),
        (
            {**BACKGROUND, "access_programs": {"cyber": "red"}},
            "access_programs.cyber",
            "invalid_value",
        ),
        (
            {**BACKGROUND, "stream_options": {"include_obfuscation": "no"}},
            "stream_options.include_obfuscation",
            "invalid_type",
        ),
    ],
)
def test_request_options_served_one_way_refuse_what_else_they_ask(
    body: dict[str, Any], param: str, code: str
) -> None:
    """``image``, ``background_options``, ``access_programs`` and ``stream_options``:
    checked as hosted checks them; what the gateway cannot give refused by name."""
    error = refusal(body)
    assert (error.status, error.param, error.code) == (400, param, code)


def test_request_options_the_gateway_serves_are_accepted() -> None:
    command = decode_create(
        orjson.dumps(
            {
                **BACKGROUND,
                "image": {"context_compression": "disabled"},
                "background_options": {"completion_window": "2h", "continuation_id": "c"},
                "access_programs": {"cyber": "standard"},
                "stream_options": {"include_obfuscation": False},
            }
        )
    )
    assert command.background


@pytest.mark.parametrize(
    "image", [{"context_compression": "auto"}, {"context_compression": "disabled"}, {}]
)
def test_image_options_come_to_disabled(image: dict[str, Any]) -> None:
    """The gateway compresses no image context: whatever it was asked, the policy in
    effect (echoed as the Response's ``image``) is ``disabled``."""
    command = decode_create(orjson.dumps({"model": "m", "input": "x", "image": image}))
    assert command.settings.image == {"context_compression": "disabled"}


def test_no_image_options_is_no_policy_to_echo() -> None:
    command = decode_create(orjson.dumps({"model": "m", "input": "x"}))
    assert command.settings.image is None


def test_include_entries_are_kept() -> None:
    include = ["reasoning.encrypted_content", "message.output_text.logprobs"]
    body = {"model": "m", "input": "x", "include": include}
    assert decode_create(orjson.dumps(body)).settings.include == include


def test_every_include_value_the_sdk_types_is_taken() -> None:
    include = list(get_args(ResponseIncludable))
    body = {"model": "m", "input": "x", "include": include}
    assert decode_create(orjson.dumps(body)).settings.include == include


@pytest.mark.parametrize("value", ["reasoning.summary", "usage", "Reasoning.encrypted_content"])
def test_an_include_value_the_hosted_api_does_not_take_is_refused_by_name(value: str) -> None:
    error = refusal({"model": "m", "input": "x", "include": ["reasoning.encrypted_content", value]})

    assert (error.status, error.param, error.code) == (400, "include[1]", "invalid_value")
    assert error.message.startswith(f"Invalid value: '{value}'. Supported values are: ")
    assert "'reasoning.encrypted_content'" in error.message


def test_items_without_an_id_are_not_duplicates() -> None:
    body = {"model": "m", "input": [{"role": "user", "content": "x", "id": ""}] * 2 + messages(2)}
    assert len(decode_create(orjson.dumps(body)).input) == 4


@pytest.mark.parametrize(
    ("query", "code"),
    [
        ({"limit": "0"}, "integer_below_min_value"),
        ({"limit": "101"}, "integer_above_max_value"),
        ({"order": "up"}, "invalid_value"),
    ],
)
def test_input_items_query_refusals_carry_a_code(query: dict[str, str], code: str) -> None:
    with pytest.raises(InvalidRequest) as caught:
        decode_list_input_items("resp_1", query)
    assert caught.value.code == code


def test_modelled_items_without_a_status_are_completed() -> None:
    body = {
        "model": "m",
        "input": [
            {"role": "user", "content": "x"},
            {"type": "function_call", "call_id": "c", "name": "f", "arguments": "{}"},
            {"type": "function_call_output", "call_id": "c", "output": "r"},
            {"type": "reasoning", "summary": []},
            {"role": "assistant", "content": "y", "status": "incomplete"},
            {"type": "custom_thing"},
        ],
    }
    statuses = [item.get("status") for item in decode_create(orjson.dumps(body)).input]
    assert statuses == ["completed"] * 4 + ["incomplete", None]
    [string_input] = decode_create(b'{"model": "m", "input": "x"}').input
    assert string_input["status"] == "completed"


def test_a_reasoning_item_without_a_summary_gets_an_empty_one() -> None:
    body = {"model": "m", "input": [{"type": "reasoning", "content": []}]}
    [item] = decode_create(orjson.dumps(body)).input
    assert item["summary"] == []


def test_json_schema_format_keeps_only_the_keys_given() -> None:
    fmt = {"type": "json_schema", "name": "s", "schema": {"type": "object"}}
    command = decode_create(orjson.dumps({"model": "m", "input": "x", "text": {"format": fmt}}))
    assert command.settings.text_format == fmt  # no null strict/description goes upstream
    full = {**fmt, "strict": True, "description": "d"}
    command = decode_create(orjson.dumps({"model": "m", "input": "x", "text": {"format": full}}))
    assert command.settings.text_format == full


def test_content_parts_past_ten_an_item_allowed_are_refused_before_validation() -> None:
    """A request may carry ten content parts (a message's, a tool output's) for each
    input item it may carry: each part costs the gateway as much as an item (a million
    one-letter parts held a gigabyte), and no client sends that many."""
    part = {"type": "input_text", "text": "a"}
    within = [{"role": "user", "content": [part] * 30}, {"role": "user", "content": "x"}]
    assert (
        len(decode_create(orjson.dumps({"model": "m", "input": within}), max_input_items=3).input)
        == 2
    )
    output = {"type": "function_call_output", "call_id": "c", "output": [part] * 20}
    past = [{"role": "user", "content": [{"type": "robot"}] * 11}, output]
    error = refusal({"model": "m", "input": past}, max_input_items=3)
    assert (error.status, error.param, error.code) == (400, "input", "array_above_max_length")
    assert error.message == (
        "Invalid 'input': 31 content parts are more than the 30 this gateway takes "
        "(ten for each input item)."
    )
