import json
from typing import Any

import orjson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from stateway.core.errors import InvalidRequest
from stateway.protocols.responses.decode import decode_compact, decode_create, decode_input_tokens
from stateway.protocols.responses.reads import decode_list_input_items


def decode(body: object) -> object:
    return decode_create(json.dumps(body).encode())


def test_string_input_becomes_a_user_message_with_an_id() -> None:
    command = decode_create(b'{"model": "m", "input": "hi"}')
    assert command.model == "m"
    assert command.store is True
    assert command.stream is False
    [item] = command.input
    assert item["type"] == "message"
    assert item["role"] == "user"
    assert item["content"] == [{"type": "input_text", "text": "hi"}]
    assert item["id"].startswith("msg_")


def test_an_answer_filling_the_window_is_refused_as_a_context_too_long() -> None:
    """Responses has no incomplete reason for a full window
    (``tests/core/test_window_filled.py``)."""
    assert decode_create(b'{"model": "m", "input": "hi"}').settings.window_filled_refused


def test_client_ids_are_kept_as_labels_and_content_is_normalized() -> None:
    command = decode_create(
        orjson.dumps(
            {
                "model": "m",
                "input": [
                    {"role": "assistant", "content": "prev", "id": "msg_client"},
                    {
                        "type": "function_call",
                        "call_id": "c",
                        "name": "f",
                        "arguments": "{}",
                        "id": "fc_x",
                    },
                    {"type": "function_call_output", "call_id": "c", "output": "r"},
                ],
            }
        )
    )
    assistant, call, output = command.input
    assert assistant["id"] == "msg_client"
    assert assistant["content"] == [{"type": "output_text", "text": "prev", "annotations": []}]
    assert call["id"] == "fc_x"
    assert output["id"].startswith("fco_")


@pytest.mark.parametrize(
    ("body", "param"),
    [
        ({"input": "x"}, "model"),
        ({"model": 3, "input": "x"}, "model"),
        ({"model": "m", "input": 5}, "input"),
        ({"model": "m", "temperature": "hot"}, "temperature"),
        ({"model": "m", "temperature": 3}, "temperature"),
        ({"model": "m", "store": "yes"}, "store"),
        ({"model": "m", "max_output_tokens": 0}, "max_output_tokens"),
        ({"model": "m", "input": [{"role": "robot", "content": "x"}]}, "input[0].role"),
        ({"model": "m", "input": [{"role": "user", "content": 7}]}, "input[0].content"),
        (
            {"model": "m", "input": [{"role": "user", "content": [{"type": "input_text"}]}]},
            "input[0].content[0].text",
        ),
        ({"model": "m", "input": [{"type": "function_call", "name": "f"}]}, "input[0].call_id"),
        (
            {"model": "m", "tools": [{"type": "web_search", "filters": 1}]},
            "tools[0].filters.allowed_domains",
        ),
        (
            {"model": "m", "tools": [{"type": "web_search", "filters": {"allowed_domains": [""]}}]},
            "tools[0].filters.allowed_domains[0]",
        ),
        (
            {
                "model": "m",
                "tools": [{"type": "web_search", "filters": {"allowed_domains": ["a.org", "*."]}}],
            },
            "tools[0].filters.allowed_domains[1]",
        ),
        (
            {"model": "m", "tools": [{"type": "web_search", "filters": {"blocked_domains": 1}}]},
            "tools[0].filters.blocked_domains",
        ),
        (
            {
                "model": "m",
                "tools": [{"type": "web_search", "filters": {"blocked_domains": ["a.org", ""]}}],
            },
            "tools[0].filters.blocked_domains[1]",
        ),
        ({"model": "m", "tools": [{"type": "mcp"}]}, "tools[0].server_label"),
        (
            {"model": "m", "input": [{"type": "mcp_approval_response", "approve": True}]},
            "input[0].approval_request_id",
        ),
        (
            {
                "model": "m",
                "input": [{"type": "mcp_approval_response", "approval_request_id": "r"}],
            },
            "input[0].approve",
        ),
        (
            {"model": "m", "tools": [{"type": "mcp", "server_label": "s", "headers": 1}]},
            "tools[0].headers",
        ),
        ({"model": "m", "tools": [{"type": 7}]}, "tools[0].type"),
        ({"model": "m", "tools": [{"name": "f"}]}, "tools[0].type"),
        ({"model": "m", "tools": [{"type": "function"}]}, "tools[0].name"),
        ({"model": "m", "tool_choice": "sometimes"}, "tool_choice"),
        (
            {"model": "m", "text": {"format": {"type": "json_schema", "name": "x"}}},
            "text.format.schema",
        ),
        ({"model": "m", "background": "yes"}, "background"),
        ({"model": "m", "metadata": {"k": 1}}, "metadata.k"),
        ({"model": "m", "prompt_cache_retention": "1h"}, "prompt_cache_retention"),
    ],
)
def test_bad_fields_are_named(body: object, param: str) -> None:
    with pytest.raises(InvalidRequest) as caught:
        decode(body)
    assert caught.value.param == param
    assert caught.value.status == 400


@pytest.mark.parametrize("effort", ["none", "minimal", "low", "medium", "high", "xhigh", "max"])
def test_every_reasoning_effort_the_sdk_types_is_taken(effort: str) -> None:
    raw = {"model": "m", "input": "hi", "reasoning": {"effort": effort}}
    command = decode_create(orjson.dumps(raw))
    assert command.settings.reasoning_effort == effort


@pytest.mark.parametrize(
    ("reasoning", "display"),
    [
        ({"effort": "high", "summary": "auto"}, "summarized"),
        ({"effort": "high", "generate_summary": "detailed"}, "summarized"),
        ({"effort": "high"}, None),
    ],
)
def test_a_summary_asked_shows_the_thinking_summarized(
    reasoning: dict[str, str], display: str | None
) -> None:
    """Claude models from Opus 4.7 on omit their thinking's text unless ``display`` asks
    for it summarized: a summary asked for is that."""
    raw = {"model": "m", "input": "hi", "reasoning": reasoning}
    assert decode_create(orjson.dumps(raw)).settings.reasoning_display == display


def test_unknown_top_level_fields_are_ignored() -> None:
    command = decode_create(b'{"model": "m", "input": "x", "client_metadata": {"a": 1}}')
    assert command.model == "m"


def test_unknown_item_types_pass_through_untouched_but_for_their_id() -> None:
    item = {
        "type": "additional_tools",
        "role": "developer",
        "tools": [{"type": "custom", "name": "x"}],
    }
    command = decode_create(orjson.dumps({"model": "m", "input": [item]}))
    [decoded] = command.input
    assert decoded == {**item, "id": decoded["id"]}
    assert decoded["id"].startswith("item_")


@pytest.mark.parametrize("raw", [b"", b"{", b"[]", b"null", b'"x"', b"\xff\xfe"])
def test_malformed_bodies_are_invalid_requests(raw: bytes) -> None:
    with pytest.raises(InvalidRequest):
        decode_create(raw)


def test_list_input_items_query() -> None:
    command = decode_list_input_items("resp_1", {"limit": "5", "order": "asc", "after": "msg_1"})
    assert (command.limit, command.order, command.after) == (5, "asc", "msg_1")
    for query in ({"limit": "0"}, {"limit": "101"}, {"limit": "x"}, {"order": "up"}):
        with pytest.raises(InvalidRequest):
            decode_list_input_items("resp_1", query)


json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=8),
    lambda children: (
        st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=8), children, max_size=4)
    ),
    max_leaves=20,
)
parts = st.lists(
    st.fixed_dictionaries(
        {
            "type": st.sampled_from(
                ["input_text", "output_text", "refusal", "input_image", "input_file", "x"]
            )
        },
        optional={
            "text": st.one_of(st.text(max_size=5), json_values),
            "refusal": st.text(max_size=5),
            "image_url": st.sampled_from(["data:,", "https://x/y.png", "ftp://x", 5]),
            "file_data": st.text(max_size=3),
        },
    ),
    max_size=3,
)
call_ids = st.sampled_from(["c1", "c2", 7])
request_like = st.fixed_dictionaries(
    {},
    optional={
        "model": st.one_of(st.text(max_size=5), json_values),
        "input": st.one_of(
            st.text(max_size=10),
            st.lists(
                st.fixed_dictionaries(
                    {},
                    optional={
                        "type": st.sampled_from(
                            ["message", "function_call", "function_call_output", "reasoning", "x"]
                        ),
                        "role": st.sampled_from(
                            ["user", "assistant", "system", "developer", "bad"]
                        ),
                        "content": st.one_of(parts, json_values),
                        "call_id": call_ids,
                        "name": st.one_of(st.text(max_size=3), json_values),
                        "arguments": st.one_of(st.just("{}"), json_values),
                        "output": st.one_of(parts, st.text(max_size=3), json_values),
                        "summary": json_values,
                    },
                ),
                max_size=4,
            ),
            json_values,
        ),
        "tools": json_values,
        "tool_choice": json_values,
        "text": json_values,
        "reasoning": json_values,
        "metadata": json_values,
        "temperature": json_values,
        "store": json_values,
        "stream": json_values,
    },
)


@settings(max_examples=400, deadline=None)
@given(request_like)
def test_fuzzed_requests_never_fail_outside_the_error_tree(body: dict[str, object]) -> None:
    assert status_of(json.dumps(body).encode()) in (200, 400)


@settings(max_examples=200, deadline=None)
@given(st.binary(max_size=64))
def test_fuzzed_bytes_never_fail_outside_the_error_tree(raw: bytes) -> None:
    assert status_of(raw) in (200, 400)


def status_of(raw: bytes) -> int:
    """What the decoder makes of ``raw``: 200 for a command, else its refusal's status. Any
    exception but an ``InvalidRequest`` (in the protocol's error shape) fails the test."""
    try:
        decode_create(raw)
    except InvalidRequest as exc:
        refusal = exc
    else:
        return 200
    assert set(refusal.to_dict()) == {"message", "type", "param", "code"}
    return refusal.status


def test_huge_integers_become_serializable_numbers() -> None:
    command = decode_create(
        b'{"model": "m", "input": [{"role": "user", "content": "x",'
        b' "n": 123456789012345678901234567890}], "tools": [{"type": "function",'
        b' "name": "f", "parameters": {"maximum": -9223372036854775809}}]}'
    )
    [message] = command.input
    assert message["n"] == pytest.approx(1.2345678901234568e29)
    assert isinstance(message["n"], float)
    [tool] = command.settings.tools
    assert tool["parameters"] == {"maximum": -9223372036854775809.0}
    assert isinstance(tool["parameters"]["maximum"], float)
    # and both serialize again (integers past 64 bits would raise)
    assert orjson.loads(orjson.dumps(command.input)) == command.input
    assert orjson.loads(orjson.dumps(command.settings.tools)) == command.settings.tools


def test_wrong_types_are_invalid_type_and_name_the_deepest_field() -> None:
    with pytest.raises(InvalidRequest) as caught:
        decode_create(b'{"model": "m", "input": [5]}')
    assert (caught.value.param, caught.value.code) == ("input[0]", "invalid_type")
    with pytest.raises(InvalidRequest) as caught:
        decode_create(b'{"model": "m", "stream": "yes"}')
    assert (caught.value.param, caught.value.code) == ("stream", "invalid_type")


@pytest.mark.parametrize(
    ("value", "kind"), [(5, "an integer"), ({"role": "user"}, "an object"), (True, "a boolean")]
)
def test_an_input_of_neither_type_is_refused_in_hosteds_words(value: object, kind: str) -> None:
    """``input`` is a string or an array: a value of another type is said to be neither,
    as hosted says it, by every body that takes an ``input`` (create, ``/compact``,
    ``/input_tokens``)."""
    raw = orjson.dumps({"model": "m", "input": value})
    for decode in (decode_create, decode_compact, decode_input_tokens):
        with pytest.raises(InvalidRequest) as caught:
            decode(raw)
        assert (caught.value.param, caught.value.code) == ("input", "invalid_type")
        assert caught.value.message == (
            "Invalid type for 'input': expected one of a string or array of input items, "
            f"but got {kind} instead."
        )


@pytest.mark.parametrize(
    ("fields", "param", "message"),
    [
        (
            {"truncation": "bogus"},
            "truncation",
            "Invalid value: 'bogus'. Supported values are: 'auto' and 'disabled'.",
        ),
        (
            {"reasoning": {"effort": "bogus"}},
            "reasoning.effort",
            "Invalid value: 'bogus'. Supported values are: 'none', 'minimal', 'low', 'medium', "
            "'high', 'xhigh', and 'max'.",
        ),
        (
            {"tool_choice": "bogus"},
            "tool_choice",
            "Invalid value: 'bogus'. Supported values are: 'none', 'auto', and 'required'.",
        ),
    ],
)
def test_a_value_a_field_does_not_take_is_refused_in_the_apis_words(
    fields: dict[str, object], param: str, message: str
) -> None:
    with pytest.raises(InvalidRequest) as caught:
        decode({"model": "m", "input": "x", **fields})
    assert (caught.value.param, caught.value.code, caught.value.message) == (
        param,
        "invalid_value",
        message,
    )


@pytest.mark.parametrize(
    ("limit", "code", "message"),
    [
        (
            "101",
            "integer_above_max_value",
            "Invalid 'limit': integer above maximum value. Expected a value <= 100, but got "
            "101 instead.",
        ),
        (
            "0",
            "integer_below_min_value",
            "Invalid 'limit': integer below minimum value. Expected a value >= 1, but got 0 "
            "instead.",
        ),
    ],
)
def test_a_listing_limit_past_its_bounds_is_refused_in_the_apis_words(
    limit: str, code: str, message: str
) -> None:
    """As hosted answers ``GET /v1/conversations/{id}/items?limit=1000``."""
    with pytest.raises(InvalidRequest) as caught:
        decode_list_input_items("resp_1", {"limit": limit})
    assert (caught.value.param, caught.value.code, caught.value.message) == (
        "limit",
        code,
        message,
    )


@pytest.mark.parametrize("limit", ["\u00b2", "-1", "1.5", " 5"])
def test_list_input_items_limit_must_be_ascii_digits(limit: str) -> None:
    with pytest.raises(InvalidRequest):
        decode_list_input_items("resp_1", {"limit": limit})


def test_duplicate_client_ids_in_one_request_are_rejected() -> None:
    with pytest.raises(InvalidRequest) as caught:
        decode_create(
            b'{"model": "m", "input": [{"role": "user", "content": "a", "id": "x"},'
            b' {"role": "user", "content": "b", "id": "x"}]}'
        )
    assert caught.value.param == "input[1].id"


# Mostly well-formed requests, so the fuzz also reaches what lies past the decoder.
_text = st.text(max_size=6)
_good_parts = st.lists(
    st.one_of(
        st.builds(lambda t: {"type": "input_text", "text": t}, _text),
        st.builds(lambda t: {"type": "output_text", "text": t}, _text),
        st.just({"type": "input_image", "image_url": "data:image/png;base64,AA"}),
        st.just({"type": "input_file", "file_data": "data:application/pdf;base64,AA"}),
        st.builds(lambda t: {"type": "refusal", "refusal": t}, _text),
    ),
    max_size=3,
)
_good_items = st.one_of(
    st.builds(
        lambda role, content: {"role": role, "content": content},
        st.sampled_from(["user", "assistant", "system", "developer"]),
        st.one_of(_text, _good_parts),
    ),
    st.builds(
        lambda call_id, args: {
            "type": "function_call",
            "call_id": call_id,
            "name": "f",
            "arguments": args,
        },
        st.sampled_from(["c1", "c2"]),
        st.sampled_from(["{}", '{"a": 1}', "not json"]),
    ),
    st.builds(
        lambda call_id, output: {
            "type": "function_call_output",
            "call_id": call_id,
            "output": output,
        },
        st.sampled_from(["c1", "c2"]),
        st.one_of(_text, _good_parts),
    ),
    st.builds(
        lambda t: {
            "type": "reasoning",
            "summary": [],
            "content": [{"type": "reasoning_text", "text": t}],
        },
        _text,
    ),
    st.builds(lambda extra: {"type": "x_custom", "payload": extra}, json_values),
)
plausible_request = st.fixed_dictionaries(
    {
        "model": st.sampled_from(["m", "fake-model"]),
        "input": st.one_of(_text, st.lists(_good_items, max_size=5)),
    },
    optional={
        "instructions": _text,
        "stream": st.booleans(),
        "store": st.booleans(),
        "temperature": st.floats(0, 2),
        "max_output_tokens": st.integers(16, 64),
        "metadata": st.dictionaries(st.text(max_size=4), _text, max_size=3),
        "tools": st.just([{"type": "function", "name": "f", "parameters": {"type": "object"}}]),
        "text": st.just(
            {"format": {"type": "json_schema", "name": "s", "schema": {"type": "object"}}}
        ),
        "n": json_values,
    },
)


def test_a_tool_search_declared_again_counts_once() -> None:
    """Codex declares a client-run one for its catalog models (see test_decode_tool_search)."""
    search = {"type": "tool_search", "execution": "client", "parameters": {"type": "object"}}
    tools = [{"type": "function", "name": "f"}, search]
    extra = {"type": "additional_tools", "role": "developer", "tools": [{"type": "tool_search"}]}
    body = {"model": "m", "input": [extra, {"role": "user", "content": "x"}], "tools": tools}
    command = decode_create(orjson.dumps(body))
    assert command.settings.tools == [
        {"type": "function", "name": "f", "description": None, "parameters": None, "strict": None},
        search,
    ]


@pytest.mark.parametrize(
    "tool", [{"type": "tool_search"}, {"type": "tool_search", "execution": "server"}]
)
def test_a_server_run_tool_search_is_kept_for_the_core(tool: dict[str, object]) -> None:
    command = decode_create(orjson.dumps({"model": "m", "input": "x", "tools": [tool]}))
    assert command.settings.tools == [tool]


def test_a_web_search_keeps_the_blocked_domains_its_filters_name() -> None:
    """Hosted's ``filters`` hold ``allowed_domains`` only; ``blocked_domains`` (as the
    Messages API's search takes them) is kept for the core to drop those hits, never
    ignored: a search told to leave a site out must not bring its pages."""
    filters = {"allowed_domains": None, "blocked_domains": ["spam.test"]}
    tool = {"type": "web_search", "filters": filters}
    command = decode_create(orjson.dumps({"model": "m", "input": "x", "tools": [tool]}))
    assert command.settings.tools == [tool]


def test_gateway_tool_shapes_are_decoded_for_the_core_to_resolve() -> None:
    tools = [
        {
            "type": "web_search",
            "external_web_access": False,
            "filters": {"allowed_domains": ["a.org"]},
        },
        {
            "type": "mcp",
            "server_label": "docs",
            "server_url": "http://h/mcp",
            "headers": {"Authorization": "Bearer t"},
            "allowed_tools": ["search"],
            "require_approval": {"never": {"tool_names": ["search"]}},
        },
        {
            "type": "mcp",
            "server_label": "wiki",
            "allowed_tools": {"read_only": True},
            "require_approval": {"always": {"read_only": False}, "never": {"read_only": True}},
        },
    ]
    command = decode_create(orjson.dumps({"model": "m", "input": "x", "tools": tools}))
    assert command.settings.tools == tools


@pytest.mark.parametrize(
    "kind",
    ["web_search", "web_search_2025_08_26", "web_search_preview", "web_search_preview_2025_03_11"],
)
def test_every_web_search_type_is_the_gateway_tool_and_a_choice_of_it(kind: str) -> None:
    """The SDK's ``WebSearchTool`` and ``WebSearchPreviewTool`` types, dated ones among
    them: decoded (their fields checked) rather than passed through to an upstream."""
    tool = {"type": kind, "search_context_size": "low", "search_content_types": ["text"]}
    body = {"model": "m", "input": "x", "tools": [tool], "tool_choice": {"type": kind}}
    command = decode(body)
    assert command.settings.tools == [tool]
    assert command.settings.tool_choice == {"type": kind}
    with pytest.raises(InvalidRequest) as caught:
        decode({**body, "tools": [{**tool, "search_context_size": "huge"}]})
    assert caught.value.param == "tools[0].search_context_size"


@pytest.mark.parametrize(
    ("parameters", "param"),
    [
        ({"type": "string"}, "tools[0].parameters.type"),
        ({"type": "object", "properties": {"a": 1}}, "tools[0].parameters.properties"),
        ({"type": "object", "properties": [], "required": []}, "tools[0].parameters.properties"),
        ({"type": "object", "required": "a"}, "tools[0].parameters.required"),
    ],
)
def test_invalid_function_schemas_are_named(parameters: dict[str, object], param: str) -> None:
    tool = {"type": "function", "name": "f", "parameters": parameters}
    with pytest.raises(InvalidRequest) as caught:
        decode({"model": "m", "input": "x", "tools": [tool]})
    assert caught.value.param == param
    assert caught.value.code == "invalid_function_parameters"


@pytest.mark.parametrize(
    ("tool", "param"),
    [
        ({"type": "mcp", "server_label": "a__b"}, "tools[0].server_label"),
        ({"type": "mcp", "server_label": "s", "connector_id": "c"}, "tools[0].connector_id"),
        ({"type": "mcp", "server_label": "s", "tunnel_id": "t"}, "tools[0].tunnel_id"),
        (
            {"type": "mcp", "server_label": "s", "require_approval": "sometimes"},
            "tools[0].require_approval",
        ),
        ({"type": "mcp", "server_label": "s", "allowed_tools": [1]}, "tools[0].allowed_tools"),
        (
            {"type": "mcp", "server_label": "s", "require_approval": {"never": ["a"]}},
            "tools[0].require_approval.never",
        ),
        (
            {"type": "mcp", "server_label": "s", "require_approval": {"never": {"read_only": 1}}},
            "tools[0].require_approval.never",
        ),
        ({"type": "web_search", "search_context_size": "huge"}, "tools[0].search_context_size"),
        ({"type": "web_search", "search_context_size": ["low"]}, "tools[0].search_context_size"),
        ({"type": "web_search", "search_context_size": {}}, "tools[0].search_context_size"),
        ({"type": "web_search", "external_web_access": "no"}, "tools[0].external_web_access"),
        ({"type": "web_search", "user_location": "here"}, "tools[0].user_location"),
        (
            {"type": "web_search_preview", "search_content_types": ["video"]},
            "tools[0].search_content_types",
        ),
        (
            {"type": "web_search_preview", "search_content_types": "text"},
            "tools[0].search_content_types",
        ),
        ({"type": "tool_search", "execution": ["client"]}, "tools[0].execution"),
    ],
)
def test_bad_gateway_tool_shapes_are_named(tool: dict[str, object], param: str) -> None:
    with pytest.raises(InvalidRequest) as caught:
        decode({"model": "m", "input": "x", "tools": [tool]})
    assert caught.value.param == param


def test_namespace_tools_are_decoded_with_their_members() -> None:
    tools = [
        {
            "type": "namespace",
            "name": "ns",
            "description": "d",
            "tools": [{"type": "function", "name": "spawn", "strict": False}],
        }
    ]
    command = decode_create(orjson.dumps({"model": "m", "input": "x", "tools": tools}))
    [namespace] = command.settings.tools
    assert namespace["name"] == "ns"
    assert namespace["description"] == "d"
    assert [member["name"] for member in namespace["tools"]] == ["spawn"]


@pytest.mark.parametrize(
    ("tools", "param", "code"),
    [
        ([{"type": "namespace", "name": "ns"}], "tools[0].tools", "missing_required_parameter"),
        ([{"type": "namespace", "tools": []}], "tools[0].name", "missing_required_parameter"),
        (
            [{"type": "namespace", "name": "ns", "tools": [{"type": "mcp"}]}],
            "tools[0].tools[0].type",
            "unsupported_tool_type",
        ),
        (
            [
                {"type": "function", "name": "ns__f"},
                {"type": "namespace", "name": "ns", "tools": [{"type": "function", "name": "f"}]},
            ],
            "tools[1].tools[0].name",
            "duplicate_tool_name",
        ),
        (
            [{"type": "function", "name": "f"}, {"type": "function", "name": "f"}],
            "tools[1].name",
            "duplicate_tool_name",
        ),
    ],
)
def test_bad_namespace_tools_are_named(tools: object, param: str, code: str) -> None:
    with pytest.raises(InvalidRequest) as caught:
        decode({"model": "m", "input": "x", "tools": tools})
    assert (caught.value.param, caught.value.code) == (param, code)


@pytest.mark.parametrize(
    ("tool", "param", "code", "message"),
    [
        (  # the Chat Completions shape, the usual mistake
            {"type": "function", "function": {"name": "f", "parameters": {"type": "object"}}},
            "tools[1].name",
            "missing_required_parameter",
            "Missing required parameter: 'tools[1].name'.",
        ),
        (
            {"type": "custom", "name": 7},
            "tools[1].name",
            "invalid_type",
            "Invalid type for 'tools[1].name': expected a string, but got an integer instead.",
        ),
        (
            {"type": "namespace", "name": "", "tools": [{"type": "function", "name": "f"}]},
            "tools[1].name",
            "empty_string",
            "Invalid 'tools[1].name': empty string. Expected a string with minimum length 1, "
            "but got an empty string instead.",
        ),
        (
            {"type": "namespace", "name": "ns", "tools": [{"type": "function"}]},
            "tools[1].tools[0].name",
            "missing_required_parameter",
            "Missing required parameter: 'tools[1].tools[0].name'.",
        ),
    ],
)
def test_a_tool_without_a_string_name_is_refused_in_the_apis_words(
    tool: dict[str, object], param: str, code: str, message: str
) -> None:
    """As hosted words it, the field named by its whole path."""
    with pytest.raises(InvalidRequest) as caught:
        decode({"model": "m", "input": "x", "tools": [{"type": "function", "name": "g"}, tool]})
    assert (caught.value.param, caught.value.code, caught.value.message) == (
        param,
        code,
        message,
    )


def test_custom_tools_and_their_items_are_decoded() -> None:
    grammar = {"type": "grammar", "syntax": "lark", "definition": "start: /x/"}
    body = {
        "model": "m",
        "tools": [{"type": "custom", "name": "apply_patch", "format": grammar}],
        "input": [
            {"type": "custom_tool_call", "call_id": "c", "name": "apply_patch", "input": "x"},
            {"type": "custom_tool_call_output", "call_id": "c", "output": "ok"},
        ],
    }
    command = decode_create(orjson.dumps(body))
    assert command.settings.tools == [{"type": "custom", "name": "apply_patch", "format": grammar}]
    call, output = command.input
    assert call["id"].startswith("ctc_")
    assert output["id"].startswith("ctco_")


@pytest.mark.parametrize(
    ("body", "param"),
    [
        ({"tools": [{"type": "custom"}]}, "tools[0].name"),
        (
            {"tools": [{"type": "custom", "name": "x", "format": {"type": "y"}}]},
            "tools[0].format.type",
        ),
        (
            {"tools": [{"type": "custom", "name": "x", "format": {"type": "grammar"}}]},
            "tools[0].format.syntax",
        ),
        ({"input": [{"type": "custom_tool_call", "call_id": "c", "name": "x"}]}, "input[0].input"),
        ({"input": [{"type": "custom_tool_call_output", "call_id": "c"}]}, "input[0].output"),
    ],
)
def test_bad_custom_tools_and_items_are_named(body: dict[str, object], param: str) -> None:
    with pytest.raises(InvalidRequest) as caught:
        decode({"model": "m", "input": "x", **body})
    assert caught.value.param == param


def test_additional_tools_join_the_declared_ones_and_the_item_stays_as_sent() -> None:
    extra = {
        "type": "additional_tools",
        "role": "developer",
        "tools": [
            {
                "type": "namespace",
                "name": "functions",
                "tools": [{"type": "custom", "name": "exec"}],
            }
        ],
    }
    body = {"model": "m", "tools": [{"type": "function", "name": "f"}], "input": [extra]}
    command = decode_create(orjson.dumps(body))
    assert [tool["name"] for tool in command.settings.tools] == ["f", "functions"]
    assert command.input == [{**extra, "id": command.input[0]["id"]}]  # given an id only


@pytest.mark.parametrize(
    ("item", "param"),
    [
        ({"type": "additional_tools", "role": "user", "tools": []}, "input[0].role"),
        ({"type": "additional_tools", "role": "developer"}, "input[0].tools"),
        ({"type": "additional_tools", "role": "developer", "tools": [1]}, "input[0].tools[0]"),
        (
            {"type": "additional_tools", "role": "developer", "tools": [{"name": "x"}]},
            "input[0].tools[0].type",
        ),
    ],
)
def test_bad_additional_tools_items_are_named(item: dict[str, object], param: str) -> None:
    with pytest.raises(InvalidRequest) as caught:
        decode({"model": "m", "input": [item]})
    assert caught.value.param == param


@pytest.mark.parametrize(
    ("body", "param"),
    [
        ({"tool_choice": {"type": ["function"]}}, "tool_choice"),
        ({"tool_choice": {"type": {}}}, "tool_choice"),
        ({"text": {"format": {"type": ["json_object"]}}}, "text.format.type"),
        ({"input": [{"type": "message", "role": ["user"], "content": "x"}]}, "input[0].role"),
        ({"input": [{"role": {}, "content": "x"}]}, "input[0].role"),
        (
            {"input": [{"role": "user", "content": [{"type": ["input_text"], "text": "x"}]}]},
            "input[0].content[0].type",
        ),
    ],
)
def test_a_list_or_object_where_a_name_belongs_is_a_400_naming_it(
    body: dict[str, object], param: str
) -> None:
    """Not a 500: a JSON array or object is no key of the sets the names are checked in."""
    with pytest.raises(InvalidRequest) as caught:
        decode({"model": "m", "input": "x", **body})
    assert caught.value.status == 400
    assert caught.value.param == param


FUNCTION = {"type": "function", "name": "get_weather", "parameters": {"type": "object"}}
CUSTOM_TOOL = {"type": "custom", "name": "apply_patch"}
NAMESPACED = {"type": "namespace", "name": "files", "tools": [{**FUNCTION, "name": "read"}]}


@pytest.mark.parametrize(
    ("tools", "choice", "input_items"),
    [
        ([FUNCTION], {"type": "function", "name": "get_weather"}, "x"),
        ([CUSTOM_TOOL], {"type": "custom", "name": "apply_patch"}, "x"),
        ([NAMESPACED], {"type": "function", "name": "read"}, "x"),
        ([NAMESPACED], {"type": "function", "name": "read", "namespace": "files"}, "x"),
        ([FUNCTION], "required", "x"),
        ([], "auto", "x"),
        ([], "none", "x"),
        (
            [],
            {"type": "function", "name": "get_weather"},
            [
                {"type": "tool_search_output", "call_id": "c", "tools": [FUNCTION]},
                {"role": "user", "content": "x"},
            ],
        ),
    ],
)
def test_a_tool_choice_that_forces_an_offered_tool_is_kept(
    tools: list[dict[str, object]], choice: object, input_items: object
) -> None:
    command = decode({"model": "m", "input": input_items, "tools": tools, "tool_choice": choice})
    assert command.settings.tool_choice == choice


MCP_TOOL = {"type": "mcp", "server_label": "docs", "server_url": "https://mcp.example/mcp"}
HINT = {"type": "web_search", "external_web_access": False}
"""Codex's web search: a hint the core drops, declared all the same."""


def _allowed(*tools: dict[str, object]) -> dict[str, object]:
    return {"type": "allowed_tools", "mode": "auto", "tools": list(tools)}


@pytest.mark.parametrize(
    ("tools", "choice"),
    [
        ([MCP_TOOL], {"type": "mcp", "server_label": "docs"}),
        ([MCP_TOOL], {"type": "mcp", "server_label": "docs", "name": "search"}),
        ([HINT], {"type": "web_search_preview"}),
        ([{"type": "web_search_preview"}], {"type": "web_search_preview"}),
        ([{"type": "image_generation"}], {"type": "image_generation"}),
        (
            [{"type": "code_interpreter", "container": {"type": "auto"}}],
            {"type": "code_interpreter"},
        ),
        ([{"type": "computer_use_preview"}], {"type": "computer_use_preview"}),
        ([{"type": "shell"}], {"type": "shell"}),
        ([{"type": "apply_patch"}], {"type": "apply_patch"}),
        (
            [FUNCTION, NAMESPACED, MCP_TOOL, HINT, CUSTOM_TOOL],
            _allowed(
                {"type": "function", "name": "get_weather"},
                {"type": "function", "name": "read", "namespace": "files"},
                {"type": "namespace", "name": "files"},
                {"type": "mcp", "server_label": "docs"},
                {"type": "web_search"},
                {"type": "custom", "name": "apply_patch"},
            ),
        ),
    ],
)
def test_a_tool_choice_naming_a_declared_tool_is_kept(
    tools: list[dict[str, object]], choice: dict[str, object]
) -> None:
    """Judged against what the client declared: a web search hint counts, though the
    gateway offers no such tool."""
    command = decode({"model": "m", "input": "x", "tools": tools, "tool_choice": choice})
    assert command.settings.tool_choice == choice


def test_a_tool_choice_may_name_a_tool_an_input_item_declares() -> None:
    extra = {"type": "additional_tools", "role": "developer", "tools": [FUNCTION]}
    choice = {"type": "function", "name": "get_weather"}
    body = {"model": "m", "input": [extra, {"role": "user", "content": "x"}], "tool_choice": choice}
    assert decode(body).settings.tool_choice == choice


@pytest.mark.parametrize(
    ("tools", "choice", "message"),
    [
        ([], "required", "Tool choice 'required' must be specified with 'tools' parameter."),
        ([FUNCTION], {"type": "function", "name": "zzz"}, "Tool choice 'zzz' not found"),
        ([], {"type": "function", "name": "get_weather"}, "Tool choice 'get_weather' not found"),
        ([FUNCTION], {"type": "custom", "name": "get_weather"}, "'get_weather' not found"),
        ([NAMESPACED], {"type": "function", "name": "files"}, "Tool choice 'files' not found"),
        (
            [NAMESPACED],
            {"type": "function", "name": "read", "namespace": "dirs"},
            "Tool choice 'read' not found",
        ),
        ([FUNCTION], {"type": "mcp", "server_label": "docs"}, "Tool choice 'docs' not found"),
        ([MCP_TOOL], {"type": "mcp", "server_label": "wiki"}, "Tool choice 'wiki' not found"),
        ([FUNCTION], {"type": "web_search_preview"}, "'web_search_preview' not found"),
        ([HINT], {"type": "image_generation"}, "Tool choice 'image_generation' not found"),
        ([], {"type": "file_search"}, "Tool choice 'file_search' not found"),
        ([{"type": "local_shell"}], {"type": "shell"}, "Tool choice 'shell' not found"),
        ([{"type": "shell"}], {"type": "apply_patch"}, "Tool choice 'apply_patch' not found"),
        ([FUNCTION], _allowed({"type": "function", "name": "zzz"}), "Tool choice 'zzz' not"),
        (
            [FUNCTION],
            _allowed({"type": "function", "name": "get_weather"}, {"type": "web_search"}),
            "Tool choice 'web_search' not found",
        ),
        ([HINT], _allowed({"type": "function", "name": "web_search"}), "'web_search' not found"),
        ([FUNCTION], _allowed({"type": "mcp", "server_label": "docs"}), "'docs' not found"),
        ([NAMESPACED], _allowed({"type": "namespace", "name": "file"}), "'file' not found"),
        (
            [NAMESPACED],
            _allowed({"type": "function", "name": "read", "namespace": "dirs"}),
            "Tool choice 'read' not found",
        ),
    ],
)
def test_a_tool_choice_that_forces_what_is_not_offered_is_a_400(
    tools: list[dict[str, object]], choice: object, message: str
) -> None:
    """As hosted: "Tool choice 'X' not found in 'tools' parameter." (X the tool's name,
    an MCP server's label, or a hosted tool's type), for a choice or an allowed_tools
    entry; not ``auto`` in its place."""
    with pytest.raises(InvalidRequest) as caught:
        decode({"model": "m", "input": "x", "tools": tools, "tool_choice": choice})
    assert caught.value.status == 400
    assert (caught.value.param, caught.value.code) == ("tool_choice", "invalid_value")
    assert message in caught.value.message
    if "not found" in message:
        assert caught.value.message.endswith(" not found in 'tools' parameter.")


@pytest.mark.parametrize(
    ("tools", "param"),
    [
        (None, "tool_choice.tools"),
        ("get_weather", "tool_choice.tools"),
        (["get_weather"], "tool_choice.tools[0]"),
        ([{"name": "get_weather"}], "tool_choice.tools[0]"),
        ([{"type": "function"}], "tool_choice.tools[0].name"),
        ([{"type": "mcp", "name": "search"}], "tool_choice.tools[0].server_label"),
    ],
)
def test_allowed_tools_that_are_no_list_of_tools_are_a_400(tools: object, param: str) -> None:
    choice = {"type": "allowed_tools", "mode": "auto", "tools": tools}
    with pytest.raises(InvalidRequest) as caught:
        decode({"model": "m", "input": "x", "tools": [FUNCTION], "tool_choice": choice})
    assert (caught.value.status, caught.value.param) == (400, param)


@pytest.mark.parametrize(
    ("choice", "param", "code"),
    [
        ({"type": "function"}, "tool_choice.name", "missing_required_parameter"),
        ({"type": "custom", "name": None}, "tool_choice.name", "missing_required_parameter"),
        ({"type": "function", "name": 5}, "tool_choice.name", "invalid_type"),
        (
            {"type": "function", "name": "f", "namespace": 5},
            "tool_choice.namespace",
            "invalid_type",
        ),
        ({"type": "mcp"}, "tool_choice.server_label", "missing_required_parameter"),
        ({"type": "mcp", "server_label": ["x"]}, "tool_choice.server_label", "invalid_type"),
    ],
)
def test_a_tool_choice_without_the_field_naming_its_tool_is_a_400_naming_that_field(
    choice: dict[str, Any], param: str, code: str
) -> None:
    """As hosted answers it (``Missing required parameter: 'tool_choice.name'.``), and as an
    ``allowed_tools`` entry's is: not a choice of a type the gateway does not support."""
    with pytest.raises(InvalidRequest) as caught:
        decode({"model": "m", "input": "x", "tools": [FUNCTION], "tool_choice": choice})
    assert (caught.value.status, caught.value.param, caught.value.code) == (400, param, code)
    if code == "missing_required_parameter":
        assert caught.value.message == f"Missing required parameter: '{param}'."


@pytest.mark.parametrize(
    ("choice", "code"),
    [
        ({"type": "allowed_tools", "tools": []}, "missing_required_parameter"),
        ({"type": "allowed_tools", "mode": "none", "tools": []}, "invalid_value"),
    ],
)
def test_allowed_tools_without_a_mode_of_auto_or_required_is_a_400_naming_it(
    choice: dict[str, Any], code: str
) -> None:
    """The hosted API requires ``mode``; the error says so rather than calling the whole
    choice unsupported."""
    with pytest.raises(InvalidRequest) as caught:
        decode({"model": "m", "input": "x", "tools": [FUNCTION], "tool_choice": choice})
    assert (caught.value.param, caught.value.code) == ("tool_choice.mode", code)
    if code == "invalid_value":
        assert caught.value.message.endswith("Supported values are: 'auto' and 'required'.")
    else:  # as hosted words a missing field
        assert caught.value.message == "Missing required parameter: 'tool_choice.mode'."


@pytest.mark.parametrize(
    "earlier", [{"previous_response_id": "resp_1"}, {"conversation": "conv_1"}]
)
def test_a_choice_is_left_to_the_core_when_earlier_turns_may_offer_tools(
    earlier: dict[str, str],
) -> None:
    """Their ``additional_tools`` and ``tool_search_output`` items offer tools too."""
    for choice in ("required", {"type": "function", "name": "loaded_earlier"}):
        command = decode({"model": "m", "input": "x", "tool_choice": choice, **earlier})
        assert command.settings.tool_choice == choice


def test_a_bad_input_item_beside_a_forced_tool_is_the_items_400() -> None:
    """The choice is checked before the items are: a string among them is not a crash."""
    with pytest.raises(InvalidRequest) as caught:
        decode({"model": "m", "input": ["x"], "tools": [FUNCTION], "tool_choice": "required"})
    assert (caught.value.param or "").startswith("input[0]")


def test_a_hosted_prompt_is_refused_by_name_and_a_null_one_ignored() -> None:
    body = {"model": "m", "input": "x", "prompt": {"id": "pmpt_1", "variables": {"a": "b"}}}
    with pytest.raises(InvalidRequest) as caught:
        decode_create(orjson.dumps(body))
    assert (caught.value.param, caught.value.code) == ("prompt", "unsupported_parameter")
    assert "instructions" in caught.value.message
    assert decode_create(orjson.dumps({**body, "prompt": None})).input


@pytest.mark.parametrize(
    "tier", ["auto", "default", "flex", "scale", "priority", "fast", "ultrafast", None]
)
def test_a_service_tier_of_the_api_is_kept(tier: str | None) -> None:
    command = decode({"model": "m", "input": "x", "service_tier": tier})
    assert command.settings.service_tier == tier


@pytest.mark.parametrize("tier", ["turbo", "Default", ""])
def test_a_service_tier_the_api_has_not_is_a_400_naming_it(tier: str) -> None:
    """As hosted: the value named, with the values there are."""
    with pytest.raises(InvalidRequest) as caught:
        decode({"model": "m", "input": "x", "service_tier": tier})
    error = caught.value
    assert (error.status, error.param, error.code) == (400, "service_tier", "invalid_value")
    assert error.message == (
        f"Invalid value: '{tier}'. Supported values are: 'auto', 'default', 'fast', 'flex', "
        "'priority', 'scale', and 'ultrafast'."
    )


def _schema_named(name: str) -> dict[str, object]:
    fmt = {"type": "json_schema", "name": name, "schema": {"type": "object"}}
    return {"model": "m", "input": "x", "text": {"format": fmt}}


@pytest.mark.parametrize("name", ["a", "Reply_v2-final", "x" * 64])
def test_a_schema_name_the_api_takes_is_kept(name: str) -> None:
    assert decode(_schema_named(name)).settings.text_format["name"] == name


@pytest.mark.parametrize(
    ("name", "code", "words"),
    [
        ("reply.v2", "invalid_value", "string does not match pattern. Expected a string that "),
        ("a b", "invalid_value", "matches the pattern '^[a-zA-Z0-9_-]+$'."),
        ("é", "invalid_value", "does not match pattern"),
        ("x" * 65, "string_above_max_length", "string too long. Expected a string with maximum "),
        (
            "x.y" * 22,
            "string_above_max_length",
            "length 64, but got a string with length 66 instead.",
        ),
    ],
)
def test_a_schema_name_the_api_refuses_is_a_400(name: str, code: str, words: str) -> None:
    """As hosted: ``^[a-zA-Z0-9_-]+$``, at most 64 characters (the length judged first)."""
    with pytest.raises(InvalidRequest) as caught:
        decode(_schema_named(name))
    error = caught.value
    assert (error.status, error.param, error.code) == (400, "text.format.name", code)
    assert error.message.startswith("Invalid 'text.format.name': ")
    assert words in error.message


@pytest.mark.parametrize(
    ("key", "value", "words"),
    [
        ("strict", "yes", "expected a boolean, but got a string instead."),
        ("description", 3, "expected a string, but got an integer instead."),
        ("name", 5, "expected a string, but got an integer instead."),
        ("schema", "object", "expected an object, but got a string instead."),
        ("schema", [], "expected an object, but got an array instead."),
    ],
)
def test_a_schema_field_of_the_wrong_type_is_named_in_the_apis_words(
    key: str, value: object, words: str
) -> None:
    """As hosted: a field that was sent is of the wrong type, not missing."""
    body = _schema_named("reply")
    body["text"]["format"][key] = value  # type: ignore[index]
    with pytest.raises(InvalidRequest) as caught:
        decode(body)
    error = caught.value
    assert (error.param, error.code) == (f"text.format.{key}", "invalid_type")
    assert error.message == f"Invalid type for 'text.format.{key}': {words}"


@pytest.mark.parametrize("fmt", [{"name": "reply", "schema": {}}, {"type": None}])
def test_a_format_without_its_type_is_missing_it(fmt: dict[str, object]) -> None:
    with pytest.raises(InvalidRequest) as caught:
        decode({"model": "m", "input": "x", "text": {"format": fmt}})
    error = caught.value
    assert (error.param, error.code) == ("text.format.type", "missing_required_parameter")
    assert error.message == "Missing required parameter: 'text.format.type'."


def test_prompt_cache_options_go_where_the_upstream_has_them() -> None:
    """Sent on to a Chat or Responses upstream (which judges the values), as Chat's are."""
    options = {"mode": "explicit", "ttl": "12h"}
    command = decode({"model": "m", "input": "x", "prompt_cache_options": options})
    assert command.settings.prompt_cache_options == options
    assert command.generate is True
    assert decode({"model": "m", "input": "x"}).settings.prompt_cache_options is None


def test_a_cache_prewarm_is_the_gateways_prewarm() -> None:
    """``prewarm``: a response with no output, no model asked (hosted asks none either);
    ``comparison_response_id`` names a response of the gateway's, no upstream's."""
    for options, sent in [
        ({"prewarm": True, "ttl": "30m", "comparison_response_id": "resp_1"}, {"ttl": "30m"}),
        ({"prewarm": True}, None),
    ]:
        command = decode({"model": "m", "input": "x", "prompt_cache_options": options})
        assert (command.generate, command.settings.prompt_cache_options) == (False, sent)
    options = {"prewarm": False, "comparison_response_id": "resp_1"}
    command = decode({"model": "m", "input": "x", "prompt_cache_options": options})
    assert (command.generate, command.settings.prompt_cache_options) == (True, None)


@pytest.mark.parametrize(
    ("options", "param"),
    [
        ({"prewarm": "yes"}, "prompt_cache_options.prewarm"),
        ({"mode": 1}, "prompt_cache_options.mode"),
        ("30m", "prompt_cache_options"),
    ],
)
def test_prompt_cache_options_of_the_wrong_type_are_a_400(options: object, param: str) -> None:
    with pytest.raises(InvalidRequest) as caught:
        decode({"model": "m", "input": "x", "prompt_cache_options": options})
    assert (caught.value.status, caught.value.param) == (400, param)


@pytest.mark.parametrize("side", ["input", "output"])
def test_a_moderation_policy_that_blocks_is_refused(side: str) -> None:
    """The gateway cannot moderate: ignoring the policy would let through what it blocks."""
    policy = {side: {"mode": "block"}}
    with pytest.raises(InvalidRequest) as caught:
        decode({"model": "m", "input": "x", "moderation": {"model": "m", "policy": policy}})
    param = f"moderation.policy.{side}.mode"
    assert (caught.value.status, caught.value.param) == (400, param)
    assert (caught.value.code, "'block'" in caught.value.message) == ("unsupported_value", True)


@pytest.mark.parametrize(
    ("moderation", "param"),
    [
        ({"model": "m", "policy": {"input": {"mode": "redact"}}}, "moderation.policy.input.mode"),
        ({"policy": {"input": {"mode": "score"}}}, "moderation.model"),
        ({"model": "m", "policy": {"output": {}}}, "moderation.policy.output.mode"),
    ],
)
def test_a_moderation_object_the_api_refuses_is_a_400(
    moderation: dict[str, object], param: str
) -> None:
    with pytest.raises(InvalidRequest) as caught:
        decode({"model": "m", "input": "x", "moderation": moderation})
    assert (caught.value.status, caught.value.param) == (400, param)


@pytest.mark.parametrize(
    "moderation",
    [
        {"model": "omni-moderation-latest"},
        {"model": "m", "policy": None},
        {"model": "m", "policy": {"input": {"mode": "score"}, "output": {"mode": "score"}}},
    ],
)
def test_moderation_scores_alone_are_ignored(moderation: dict[str, object]) -> None:
    """Scores change nothing generated, and the response has no moderation to show them."""
    command = decode({"model": "m", "input": "x", "moderation": moderation})
    assert command.settings == decode({"model": "m", "input": "x"}).settings


def test_an_empty_schema_name_is_an_empty_string() -> None:
    with pytest.raises(InvalidRequest) as caught:
        decode(_schema_named(""))
    assert (caught.value.param, caught.value.code) == ("text.format.name", "empty_string")
