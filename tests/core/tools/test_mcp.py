"""MCP items and functions: the ``mcp_list_tools`` a client reads and a later turn reuses, the
functions the model is offered, the call and approval items, a call's arguments."""

from __future__ import annotations

import hashlib
from typing import Any

import orjson
import pytest
from openai.types.responses import FunctionTool
from openai.types.responses.mcp_tool_call_error import (
    HTTPError,
    McpProtocolError,
    McpToolExecutionError,
)
from openai.types.responses.response_output_item import McpApprovalRequest, McpCall, McpListTools

from stateway.core.tools import mcp
from stateway.core.tools.mcp_binding import (
    Approval,
    McpBinding,
    ToolFilter,
    allowed_tools_of,
    approval_of,
)
from stateway.core.tools.ports import INVALID_PARAMS, McpServer, McpTool, ToolError, ToolFailure
from tests.core.tools.wire import is_id, sdk_item

SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {"a": {"type": "number"}, "b": {"type": "number"}},
    "required": ["a", "b"],
}
ADD = McpTool("add", SCHEMA, "Add two numbers.", {"readOnlyHint": True, "title": "Add"})
WRITE = McpTool("write", {"type": "object"})
DOCS = McpServer("docs", "http://docs.test/mcp")


def binding(
    *, allowed: frozenset[str] | None = None, read_only: bool = False, approval: bool = False
) -> McpBinding:
    return McpBinding(DOCS, allowed, read_only, Approval(default=approval))


def test_a_listing_starts_empty_and_shows_each_tool_with_its_schema_and_annotations() -> None:
    """Every tool's ``annotations`` an object with hosted's ``read_only`` (beside the
    server's own hints), and no ``null`` field: the Vercel AI SDK refuses the response
    holding one (its schema: a record or nothing, a string or nothing)."""
    item = mcp.list_item("docs")
    assert is_id(item["id"], "mcpl")
    assert item == {"id": item["id"], "type": "mcp_list_tools", "server_label": "docs", "tools": []}
    item["tools"] = [mcp.listed_tool(ADD), mcp.listed_tool(WRITE)]
    assert item["tools"] == [
        {
            "name": "add",
            "input_schema": SCHEMA,
            "description": "Add two numbers.",
            "annotations": {"readOnlyHint": True, "title": "Add", "read_only": True},
        },
        {
            "name": "write",
            "input_schema": {"type": "object"},
            "annotations": {"read_only": False},
        },
    ]
    assert isinstance(sdk_item(item), McpListTools)
    assert [tool.read_only for tool in mcp.tools_of(item)] == [True, False]


def test_a_listing_made_under_a_filter_says_so_by_its_id_alone() -> None:
    """The wire item has no field for it: the id of a filtered listing tells a later turn
    that it may show only some of the server's tools, and under which filter. Any other
    listing (the gateway's unfiltered ones, one a client made) is taken to show them all."""
    key = binding(allowed=frozenset({"add"})).filter_key
    assert key is not None
    filtered = mcp.list_item("docs", key)
    assert is_id(filtered["id"], f"mcpl_f_{key}")  # still an mcpl_ id
    assert isinstance(sdk_item(filtered), McpListTools)
    assert mcp.listing_filter(filtered) == key
    assert mcp.listing_filter(mcp.list_item("docs")) is None
    assert mcp.listing_filter({"type": "mcp_list_tools", "id": "mcpl_f_" + "0" * 48}) == ""
    for other in ("mcpl_f", "mcpl_fa0", "mcpl_abc", "", None, 7):
        assert mcp.listing_filter({"type": "mcp_list_tools", "id": other}) is None, other
    assert mcp.listing_filter({"type": "mcp_list_tools"}) is None


def test_a_filter_has_one_key_however_it_is_written() -> None:
    assert binding().filter_key is None
    same = binding(allowed=frozenset({"add", "write"})).filter_key
    assert same == binding(allowed=frozenset({"write", "add"})).filter_key
    keys = {
        same,
        binding(allowed=frozenset({"add"})).filter_key,
        binding(allowed=frozenset({"add", "write"}), read_only=True).filter_key,
        binding(read_only=True).filter_key,
        binding(allowed=frozenset()).filter_key,
    }
    assert len(keys) == 5
    assert all(key is not None and len(key) == 16 for key in keys)


def test_a_filter_key_is_pinned_to_its_framing() -> None:
    """A listing's id carries the key into stored responses, where another process (or
    version) reads it back: the key is the digest of the sorted names and the read-only
    flag, never of a set's iteration order."""
    framing = orjson.dumps([["add", "write"], True])
    assert (
        binding(allowed=frozenset({"write", "add"}), read_only=True).filter_key
        == (hashlib.sha256(framing).hexdigest()[:16])
    )
    assert binding(read_only=True).filter_key == (hashlib.sha256(b"[null,true]").hexdigest()[:16])


@pytest.mark.parametrize(
    ("allowed", "read_only", "offered", "filtered"),
    [
        (None, False, ["add", "write"], False),
        (frozenset({"write", "gone"}), False, ["write"], True),
        (None, True, ["add"], True),
        (frozenset({"add", "write"}), True, ["add"], True),
        (frozenset(), False, [], True),
    ],
)
def test_a_binding_offers_the_tools_its_filter_lets_through(
    allowed: frozenset[str] | None, read_only: bool, offered: list[str], filtered: bool
) -> None:
    declared = binding(allowed=allowed, read_only=read_only)
    assert [tool.name for tool in declared.offered([ADD, WRITE])] == offered
    assert declared.filtered is filtered


def test_a_later_turn_reads_back_the_tools_a_listing_showed() -> None:
    listing = {**mcp.list_item("docs"), "tools": [mcp.listed_tool(ADD), mcp.listed_tool(WRITE)]}
    assert mcp.tools_of(listing) == [ADD, WRITE]
    assert mcp.tools_of(listing)[0].parallel_safe


def test_a_hosted_listing_sent_back_keeps_which_tools_are_read_only() -> None:
    listing = {
        "type": "mcp_list_tools",
        "tools": [
            {"name": "read", "input_schema": {}, "annotations": {"read_only": True}},
            {"name": "write", "input_schema": {}, "annotations": {"read_only": False}},
        ],
    }
    assert [(tool.read_only, tool.annotations) for tool in mcp.tools_of(listing)] == [
        (True, {"readOnlyHint": True}),
        (False, None),
    ]


def test_a_stored_listing_with_odd_entries_keeps_the_readable_tools() -> None:
    listing = {
        "type": "mcp_list_tools",
        "tools": [
            "not a tool",
            {"input_schema": {"type": "object"}},  # no name
            {"name": "bare"},
            {"name": "odd", "input_schema": "not a schema", "description": "Odd."},
        ],
    }
    assert mcp.tools_of(listing) == [
        McpTool("bare", {"type": "object"}),
        McpTool("odd", {"type": "object"}, "Odd."),
    ]
    assert mcp.tools_of({"type": "mcp_list_tools", "tools": None}) == []


def test_the_model_sees_each_offered_tool_as_a_prefixed_function() -> None:
    untyped = McpTool("untyped", {"properties": {"x": {}}})
    [add, write, odd] = mcp.entries(binding(), [ADD, WRITE, untyped])
    assert add.function == {
        "type": "function",
        "name": "docs__add",
        "parameters": SCHEMA,
        "description": "Add two numbers.",
        "strict": False,  # the server's schema as it is, on a Responses upstream too
    }
    assert add.function["parameters"] is not SCHEMA  # a copy: the listing keeps its own
    assert write.function == {
        "type": "function",
        "name": "docs__write",
        "parameters": {"type": "object"},
        "strict": False,
    }
    # a schema that is not an object schema: the model gets a function without arguments
    assert odd.function["parameters"] == {"type": "object", "properties": {}}
    for entry in (add, write, odd):
        FunctionTool.model_validate(entry.function, strict=True)
    assert (add.kind, add.server_label, add.name) == ("mcp", "docs", "add")
    assert add.tool == {"type": "mcp", "server_label": "docs"}
    assert add.parallel_safe
    assert not write.parallel_safe


def test_the_servers_description_follows_each_tools_own() -> None:
    described = McpBinding(DOCS, None, False, Approval(default=False), "Internal docs.")
    [add, write] = mcp.entries(described, [ADD, WRITE])
    assert add.function["description"] == "Add two numbers.\n\nMCP server 'docs': Internal docs."
    assert write.function["description"] == "MCP server 'docs': Internal docs."


def test_a_string_schema_is_no_object_schema() -> None:
    [entry] = mcp.entries(binding(), [McpTool("s", {"type": "string"})])
    assert entry.function["parameters"] == {"type": "object", "properties": {}}


def test_the_binding_decides_what_is_offered_and_what_needs_approval() -> None:
    names = [e.name for e in mcp.entries(binding(allowed=frozenset({"write"})), [ADD, WRITE])]
    assert names == ["write"]
    assert [e.name for e in mcp.entries(binding(read_only=True), [WRITE, ADD])] == ["add"]
    always = McpBinding(
        DOCS, None, False, Approval(default=False, always=ToolFilter(frozenset({"write"})))
    )
    assert [(e.name, e.approval) for e in mcp.entries(always, [ADD, WRITE])] == [
        ("add", False),
        ("write", True),
    ]


def test_approval_filters_match_by_name_and_read_only() -> None:
    """``always`` before ``never``; each filter's criteria all hold for a tool it matches."""
    approval = approval_of(
        {"always": {"tool_names": ["write"]}, "never": {"read_only": True}}, default=True
    )
    asking = McpBinding(DOCS, None, False, approval)
    assert [(e.name, e.approval) for e in mcp.entries(asking, [ADD, WRITE])] == [
        ("add", False),
        ("write", True),
    ]
    named = approval_of({"never": {"tool_names": ["add", "write"], "read_only": True}}, True)
    assert [named.required(n, n == "add") for n in ("add", "write", "other")] == [
        False,
        True,
        True,
    ]
    assert approval.required("write", True) is True


@pytest.mark.parametrize(
    ("declared", "read"),
    [
        (None, (None, False)),
        ([], (frozenset(), False)),
        (["add", "write"], (frozenset({"add", "write"}), False)),
        ({}, (None, False)),
        ({"read_only": True}, (None, True)),
        ({"tool_names": ["add"], "read_only": False}, (frozenset({"add"}), False)),
        ({"tool_names": [], "read_only": True}, (frozenset(), True)),
    ],
)
def test_allowed_tools_are_names_a_read_only_flag_or_both(
    declared: Any, read: tuple[frozenset[str] | None, bool]
) -> None:
    assert allowed_tools_of(declared) == read


@pytest.mark.parametrize(
    ("declared", "default", "approval"),
    [
        (None, True, Approval(True)),
        (None, False, Approval(False)),
        ("always", False, Approval(True)),
        ("never", True, Approval(False)),
        ({}, False, Approval(False)),
        ({"always": ["write"]}, False, Approval(False, ToolFilter(frozenset({"write"})))),
        ({"never": {"read_only": True}}, True, Approval(True, None, ToolFilter(None, True))),
        (
            {"always": {"tool_names": ["write"]}, "never": ["add"]},
            True,
            Approval(True, ToolFilter(frozenset({"write"})), ToolFilter(frozenset({"add"}))),
        ),
    ],
)
def test_require_approval_is_a_word_or_a_filter_per_answer(
    declared: Any, default: bool, approval: Approval
) -> None:
    """A word overrides the server's default; filters keep it for the tools they miss."""
    assert approval_of(declared, default) == approval


def test_a_tool_without_annotations_is_not_read_only() -> None:
    approval = Approval(True, never=ToolFilter(None, read_only=True))
    assert (approval.required("add"), approval.required("add", True)) == (True, False)
    asking = Approval(False, always=ToolFilter(None, read_only=True))
    assert (asking.required("add"), asking.required("add", True)) == (False, True)
    assert ToolFilter().matches("any", False)
    assert not ToolFilter(frozenset()).matches("a", True)


def test_a_call_starts_in_progress_without_output_or_error() -> None:
    [entry] = mcp.entries(binding(), [ADD])
    item = mcp.call_item(entry)
    assert is_id(item["id"], "mcp")
    assert item == {
        "id": item["id"],
        "type": "mcp_call",
        "status": "in_progress",
        "server_label": "docs",
        "name": "add",
        "arguments": "",
        "output": None,
        "error": None,
        "approval_request_id": None,
    }
    assert isinstance(sdk_item(item), McpCall)
    approved = mcp.call_item(entry, '{"a":1,"b":2}', "mcpr_1")
    assert (approved["arguments"], approved["approval_request_id"]) == ('{"a":1,"b":2}', "mcpr_1")


def test_an_approval_request_names_the_tool_and_gets_its_arguments_as_they_stream() -> None:
    [entry] = mcp.entries(binding(approval=True), [ADD])
    item = mcp.approval_item(entry)
    assert is_id(item["id"], "mcpr")
    assert item == {
        "id": item["id"],
        "type": "mcp_approval_request",
        "server_label": "docs",
        "name": "add",
        "arguments": "",
    }
    assert isinstance(sdk_item(item), McpApprovalRequest)


@pytest.mark.parametrize(("arguments", "parsed"), [("", {}), ("  \n", {}), ('{"a": 1}', {"a": 1})])
def test_arguments_are_a_json_object_or_nothing(arguments: str, parsed: dict[str, Any]) -> None:
    assert mcp.parse_arguments(arguments) == parsed


@pytest.mark.parametrize(
    ("arguments", "told"),
    [
        ('{"a": 1,', "The arguments are not valid JSON."),
        ("[1, 2]", "The arguments must be a JSON object."),
        ('"a"', "The arguments must be a JSON object."),
        ('{"a":' * 300 + "1" + "}" * 300, "The arguments nest deeper than 128 levels."),
    ],
)
def test_other_arguments_fail_the_call_with_what_the_model_is_told(
    arguments: str, told: str
) -> None:
    with pytest.raises(ToolFailure) as caught:
        mcp.parse_arguments(arguments)
    assert caught.value.error == ToolError.protocol(INVALID_PARAMS, told)


IMAGE = {"type": "image", "data": "iVBORw0KGgo=", "mimeType": "image/png"}


@pytest.mark.parametrize(
    ("error", "wire", "model"),
    [
        (
            ToolError.protocol(-32602, "Unknown tool: nope"),
            {"type": "mcp_protocol_error", "code": -32602, "message": "Unknown tool: nope"},
            McpProtocolError,
        ),
        (
            ToolError.http(401, "MCP server 'docs' refused the credentials (HTTP 401)"),
            {
                "type": "http_error",
                "code": 401,
                "message": "MCP server 'docs' refused the credentials (HTTP 401)",
            },
            HTTPError,
        ),
        (
            ToolError.execution([{"type": "text", "text": "no"}, IMAGE], "no"),
            {
                "type": "mcp_tool_execution_error",
                "content": [{"type": "text", "text": "no"}, IMAGE],
            },
            McpToolExecutionError,
        ),
    ],
)
def test_a_failed_calls_error_is_the_object_the_sdk_reads(
    error: ToolError, wire: dict[str, Any], model: type[Any]
) -> None:
    [entry] = mcp.entries(binding(), [ADD])
    item = {**mcp.call_item(entry, "{}"), "status": "failed", "error": mcp.call_error(error)}
    assert item["error"] == wire
    read = sdk_item(item)
    assert isinstance(read, McpCall)
    assert isinstance(read.error, model)
