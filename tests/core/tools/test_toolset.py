"""Declared tools resolved against the gateway's configuration: owners, MCP servers (the
allow-list, credentials, filters, approvals) and web search."""

from __future__ import annotations

from typing import Any

import pytest

from stateway.core.errors import InvalidRequest
from stateway.core.tools import mcp
from stateway.core.tools.ports import McpServer, McpTool
from stateway.core.tools.toolset import ConfiguredServer, GatewayTools, ToolPolicy, Toolset
from tests.core.fakes import FakeMcp, FakeSearch

DOCS = McpServer("docs", "http://docs.test/mcp", (("Authorization", "Bearer cfg"),), "sse")


def tools(*, search: bool = False, configured: ConfiguredServer | None = None) -> GatewayTools:
    return GatewayTools(
        mcp=FakeMcp({}),
        search=FakeSearch([]) if search else None,
        servers={"docs": configured or ConfiguredServer(DOCS)},
        url_allowed=lambda url: url.startswith("http://ok.test"),
        policy=ToolPolicy(max_mcp_servers=3),
    )


def resolve_one(tool: dict[str, Any], **kwargs: Any) -> Any:
    [binding] = tools(**kwargs).resolve([tool]).mcp
    return binding


def test_owners_split_client_and_gateway_tools() -> None:
    function = {"type": "function", "name": "f"}
    search = {"type": "web_search", "filters": {"allowed_domains": ["a.org"]}}
    resolved = tools(search=True).resolve(
        [function, {"type": "mcp", "server_label": "docs"}, search]
    )
    assert resolved.client == [function]
    assert [b.label for b in resolved.mcp] == ["docs"]
    assert resolved.web_search is not None
    assert resolved.web_search.allowed_domains == ("a.org",)
    assert resolved.gateway_owned


@pytest.mark.parametrize(
    "kind",
    ["web_search", "web_search_2025_08_26", "web_search_preview", "web_search_preview_2025_03_11"],
)
def test_every_web_search_type_is_run_by_the_gateway(kind: str) -> None:
    resolved = tools(search=True).resolve([{"type": kind}])
    assert resolved.web_search is not None
    assert resolved.native == []


def test_a_configured_label_uses_the_configured_server_and_its_credentials() -> None:
    binding = resolve_one({"type": "mcp", "server_label": "docs"})
    assert binding.server == DOCS
    assert not binding.approval.required("anything")  # configured default: never


def test_request_credentials_replace_the_configured_ones() -> None:
    binding = resolve_one({"type": "mcp", "server_label": "docs", "authorization": "tok"})
    assert binding.server.url == DOCS.url
    assert binding.server.transport == "sse"
    assert binding.server.headers == (("Authorization", "Bearer tok"),)


def test_the_configured_url_named_again_keeps_the_configured_transport() -> None:
    binding = resolve_one({"type": "mcp", "server_label": "docs", "server_url": DOCS.url})
    assert binding.server == DOCS


def test_an_allowed_url_is_used_as_given_with_its_headers() -> None:
    tool = {
        "type": "mcp",
        "server_label": "other",
        "server_url": "http://ok.test/mcp",
        "headers": {"X-B": "2", "X-A": "1"},
    }
    binding = resolve_one(tool)
    assert binding.server == McpServer("other", "http://ok.test/mcp", (("X-A", "1"), ("X-B", "2")))
    assert binding.approval.required("anything")  # a request-named server: always, as hosted


def test_authorization_is_the_one_authorization_header_sent() -> None:
    """``authorization`` beside an ``Authorization`` header of ``headers`` (in any case)
    replaces it: two would reach the server, each taken by some and not by others."""
    tool = {
        "type": "mcp",
        "server_label": "other",
        "server_url": "http://ok.test/mcp",
        "headers": {"authorization": "Bearer old", "X-A": "1"},
        "authorization": "tok",
    }
    binding = resolve_one(tool)
    assert binding.server.headers == (("Authorization", "Bearer tok"), ("X-A", "1"))


def test_a_header_given_twice_in_two_cases_is_refused_without_its_values() -> None:
    """HTTP header names are case-insensitive: ``X-Key`` and ``x-key`` are one header given
    twice, which the server would get twice."""
    tool = {
        "type": "mcp",
        "server_label": "other",
        "server_url": "http://ok.test/mcp",
        "headers": {"X-Key": "s3cret-one", "x-key": "s3cret-two"},
    }
    with pytest.raises(InvalidRequest) as caught:
        tools().resolve([tool])
    assert (caught.value.param, caught.value.code) == ("tools[0].headers", "invalid_value")
    assert "given twice" in caught.value.message
    assert "s3cret" not in str(caught.value)


@pytest.mark.parametrize(
    ("tool", "param", "code"),
    [
        (
            {"server_label": "x", "server_url": "http://evil.test/mcp"},
            "tools[0].server_url",
            "mcp_server_not_allowed",
        ),
        (
            {"server_label": "docs", "server_url": "http://169.254.169.254/"},
            "tools[0].server_url",
            "mcp_server_not_allowed",
        ),
        ({"server_label": "unknown"}, "tools[0].server_label", "invalid_value"),
    ],
)
def test_servers_the_gateway_may_not_reach_are_refused(
    tool: dict[str, Any], param: str, code: str
) -> None:
    with pytest.raises(InvalidRequest) as caught:
        tools().resolve([{"type": "mcp", **tool}])
    assert (caught.value.param, caught.value.code) == (param, code)


@pytest.mark.parametrize(
    "url",
    [
        "http://ok.test:99999/mcp",  # a port out of range
        "http://ok.test:x/mcp",  # a port that is no number
        "http://[ok.test/mcp",  # an unclosed IPv6 bracket
        "http://ok.test/mcp\t",  # whitespace the URL parser would drop, the HTTP client refuse
        "http://ok.test/m cp",
        "http:///mcp",  # no host
        "ok.test/mcp",  # no scheme
    ],
)
def test_a_server_url_that_is_no_http_url_is_refused_before_the_allow_list(url: str) -> None:
    """Checked before the allow-list is asked (which would have to parse it too), so that
    a URL the HTTP client cannot send is the client's 400, never a 500 or a failed call."""

    def allow_list(url: str) -> bool:
        raise AssertionError(f"asked about {url!r}")

    gateway = GatewayTools(mcp=FakeMcp({}), url_allowed=allow_list)
    tool = {"type": "mcp", "server_label": "x", "server_url": url}
    with pytest.raises(InvalidRequest) as caught:
        gateway.resolve([tool])
    assert (caught.value.param, caught.value.code, caught.value.status) == (
        "tools[0].server_url",
        "invalid_value",
        400,
    )


@pytest.mark.parametrize(
    "url",
    [
        "http://alice:hush-hush@ok.test/mcp",
        "http://hush-hush@ok.test/mcp",  # a token as the user
        "http://:hush-hush@ok.test/mcp",
        "http://@ok.test/mcp",  # an empty userinfo: refused all the same
        "https://ok.test@hush-hush.evil/mcp",  # the host is the part after '@'
    ],
)
def test_a_server_url_carrying_credentials_is_refused_without_quoting_it(url: str) -> None:
    """Stored and echoed with the response's tools, a URL is no place for a credential; the
    400 says where one goes, and never repeats the URL."""
    tool = {"type": "mcp", "server_label": "x", "server_url": url}
    with pytest.raises(InvalidRequest) as caught:
        GatewayTools(mcp=FakeMcp({}), url_allowed=lambda url: True).resolve([tool])
    assert (caught.value.param, caught.value.code) == ("tools[0].server_url", "invalid_value")
    assert "'authorization' or 'headers'" in caught.value.message
    assert "hush" not in caught.value.message


@pytest.mark.parametrize(
    ("fields", "param"),
    [
        ({"headers": {"Host": "admin.internal"}}, "tools[0].headers"),  # another virtual host
        ({"headers": {"host": "admin.internal"}}, "tools[0].headers"),
        ({"headers": {"Transfer-Encoding": "chunked"}}, "tools[0].headers"),
        ({"headers": {"Mcp-Session-Id": "someone-else"}}, "tools[0].headers"),
        ({"headers": {"Bad Name": "v"}}, "tools[0].headers"),
        ({"headers": {"X-A": "a\r\nInjected: b"}}, "tools[0].headers"),
        ({"headers": {"X-A": "caf\u00e9"}}, "tools[0].headers"),
        ({"authorization": "s3cret\nX-Injected: b"}, "tools[0].authorization"),
    ],
)
def test_headers_that_would_reroute_or_break_the_request_are_refused(
    fields: dict[str, Any], param: str
) -> None:
    tool = {"type": "mcp", "server_label": "other", "server_url": "http://ok.test/mcp", **fields}
    with pytest.raises(InvalidRequest) as caught:
        tools().resolve([tool])
    assert (caught.value.param, caught.value.code, caught.value.status) == (
        param,
        "invalid_value",
        400,
    )
    assert "admin.internal" not in str(caught.value)  # a value is never quoted
    assert "s3cret" not in str(caught.value)


def test_a_repeated_label_and_too_many_servers_are_refused() -> None:
    docs = {"type": "mcp", "server_label": "docs"}
    with pytest.raises(InvalidRequest) as caught:
        tools().resolve([docs, docs])
    assert caught.value.code == "duplicate_tool_name"
    assert caught.value.param == "tools[1].server_label"
    many = [
        {"type": "mcp", "server_label": f"s{i}", "server_url": "http://ok.test"} for i in range(4)
    ]
    with pytest.raises(InvalidRequest) as caught:
        tools().resolve(many)
    assert caught.value.code == "too_many_tools"


def test_without_an_mcp_client_mcp_tools_are_refused() -> None:
    with pytest.raises(InvalidRequest) as caught:
        GatewayTools().resolve([{"type": "mcp", "server_label": "docs"}])
    assert caught.value.code == "unsupported_tool_type"


def test_secrets_are_left_out_of_the_public_tools() -> None:
    tool = {"type": "mcp", "server_label": "docs", "headers": {"A": "b"}, "authorization": "t"}
    resolved = tools().resolve([tool])
    assert resolved.public == [{"type": "mcp", "server_label": "docs"}]


@pytest.mark.parametrize(
    ("allowed", "configured", "offered"),
    [
        (None, None, {"r", "w"}),
        (["r"], None, {"r"}),
        ({"tool_names": ["w"]}, None, {"w"}),
        ({"read_only": True}, None, {"r"}),
        (None, frozenset({"w"}), {"w"}),
        (["r", "w"], frozenset({"w"}), {"w"}),
    ],
)
def test_allowed_tools_filter_by_name_and_read_only(
    allowed: Any, configured: frozenset[str] | None, offered: set[str]
) -> None:
    tool: dict[str, Any] = {"type": "mcp", "server_label": "docs"}
    if allowed is not None:
        tool["allowed_tools"] = allowed
    binding = resolve_one(tool, configured=ConfiguredServer(DOCS, allowed_tools=configured))
    listed = {"r": True, "w": False}  # name -> read-only
    assert {name for name, ro in listed.items() if binding.offers(name, ro)} == offered


@pytest.mark.parametrize(
    ("rule", "needs"),
    [
        ("always", {"a", "b"}),
        ("never", set()),
        ({"never": {"tool_names": ["a"]}}, {"b"}),
        ({"always": {"tool_names": ["a"]}, "never": {"tool_names": ["b"]}}, {"a"}),
    ],
)
def test_require_approval_forms(rule: Any, needs: set[str]) -> None:
    tool = {
        "type": "mcp",
        "server_label": "x",
        "server_url": "http://ok.test",
        "require_approval": rule,
    }
    binding = resolve_one(tool)
    assert {name for name in ("a", "b") if binding.approval.required(name)} == needs


def test_a_configured_server_can_require_approval() -> None:
    binding = resolve_one(
        {"type": "mcp", "server_label": "docs"},
        configured=ConfiguredServer(DOCS, require_approval=True),
    )
    assert binding.approval.required("a")


def test_another_server_under_a_configured_label_takes_none_of_its_settings() -> None:
    # the request names its own server: approval by default, as hosted, and all its tools
    configured = ConfiguredServer(DOCS, allowed_tools=frozenset({"a"}), require_approval=False)
    tool = {"type": "mcp", "server_label": "docs", "server_url": "http://ok.test/mcp"}
    binding = resolve_one(tool, configured=configured)
    assert binding.server.url == "http://ok.test/mcp"
    assert binding.approval.required("a")
    assert binding.allowed_tools is None


@pytest.mark.parametrize(
    ("declared", "seen"),
    [
        ({}, "Internal docs."),  # the configured server's description
        ({"server_url": DOCS.url}, "Internal docs."),  # the same server, named by its URL
        ({"server_description": "Ours."}, "Ours."),  # the request's own wins
        ({"server_url": "http://ok.test/mcp"}, None),  # another server under the label
        ({"server_url": "http://ok.test/mcp", "server_description": "Ours."}, "Ours."),
    ],
)
def test_the_model_is_told_what_the_server_is_for(
    declared: dict[str, Any], seen: str | None
) -> None:
    configured = ConfiguredServer(DOCS, description="Internal docs.")
    binding = resolve_one(
        {"type": "mcp", "server_label": "docs", **declared}, configured=configured
    )
    [entry] = mcp.entries(binding, [McpTool("search", {"type": "object"}, "Search.")])
    expected = "Search." if seen is None else f"Search.\n\nMCP server 'docs': {seen}"
    assert entry.function["description"] == expected


def test_web_search_without_a_provider_is_refused_unless_declared_as_codex_does() -> None:
    with pytest.raises(InvalidRequest) as caught:
        tools().resolve([{"type": "web_search"}])
    assert (caught.value.param, caught.value.code) == ("tools[0].type", "unsupported_tool_type")
    assert caught.value.message == (
        "Tool type 'web_search' needs a web search provider, and none is configured: set "
        "STATEWAY_WEB_SEARCH_PROVIDER (searxng, brave or tavily), or send it with "
        "'external_web_access' to make it an optional hint."
    )
    for access in (False, True):
        hint = {"type": "web_search", "external_web_access": access}
        resolved = tools().resolve([hint])
        assert resolved.public == []
        assert resolved.web_search is None


def test_mcp_tool_parallel_safety_follows_the_read_only_hint() -> None:
    assert McpTool("a", {}, annotations={"readOnlyHint": True}).parallel_safe
    assert not McpTool("a", {}, annotations={"readOnlyHint": False}).parallel_safe
    assert not McpTool("a", {}).parallel_safe


def test_an_allowed_tools_choice_keeps_the_tools_sent_as_declared_whose_type_it_names() -> None:
    image = {"type": "image_generation"}
    code = {"type": "code_interpreter", "container": {"type": "auto"}}
    toolset = Toolset([image, code], [], native=[image, code])
    choice = {"type": "allowed_tools", "mode": "auto", "tools": [{"type": "code_interpreter"}]}

    assert toolset.native_choice(choice) is None  # the catalog maps its mode
    assert toolset.native == [code]
    assert toolset.native_choice({"type": "code_interpreter"}) == {"type": "code_interpreter"}
