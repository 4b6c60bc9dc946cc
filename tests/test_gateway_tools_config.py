"""``gateway_tools`` on a backend: checked when the configuration loads, resolved when the
gateway's tools are built, so ``stateway check-config`` reports a tool it cannot run."""

from __future__ import annotations

from pathlib import Path

import pytest

from stateway.app import backend_gateway_tools, build_tools
from stateway.config import ConfigError, Overrides, load_config
from stateway.core.tools.ports import McpServer
from stateway.core.tools.toolset import Toolset
from stateway.tool_config import McpConfig, McpServerConfig
from tests.support.mcp_server import serve_mcp

MCP = 'type = "mcp", server_label'
BACKEND = '[[backends]]\nname = "local"\nurl = "http://127.0.0.1:8000/v1"\n'


def load(tmp_path: Path, tools: str, extra: str = "") -> Toolset | None:
    path = tmp_path / "stateway.toml"
    path.write_text(extra + BACKEND + f"gateway_tools = {tools}\n")
    config = load_config(Overrides(config=str(path)), {})
    return backend_gateway_tools(config.backends[0], build_tools(config, {}))


def test_an_mcp_server_url_is_trusted_and_runs_without_approval(tmp_path: Path) -> None:
    tools = load(
        tmp_path, '[{type = "mcp", server_label = "calc", server_url = "http://10.0.0.9/mcp"}]'
    )
    assert tools is not None
    [binding] = tools.mcp
    assert (binding.label, binding.server.url) == ("calc", "http://10.0.0.9/mcp")
    assert binding.approval.required("add") is False
    assert tools.client == []


def test_a_configured_server_is_named_by_its_label(tmp_path: Path) -> None:
    extra = '[mcp_servers.docs]\nurl = "http://127.0.0.1:9/mcp"\n'
    tools = load(
        tmp_path, '[{type = "mcp", server_label = "docs", require_approval = "never"}]', extra
    )
    assert tools is not None
    assert tools.mcp[0].server.url == "http://127.0.0.1:9/mcp"


@pytest.mark.parametrize(
    ("extra", "tools"),
    [
        ('[mcp_servers.docs]\nurl = "http://alice:pa55-w0rd-hush@127.0.0.1:9/mcp"\n', "[]"),
        ("", "[{" + MCP + ' = "c", server_url = "http://alice:pa55-w0rd-hush@x/mcp"}]'),
    ],
    ids=["mcp_servers", "gateway_tools"],
)
def test_a_configured_url_carrying_credentials_fails_to_load(
    tmp_path: Path, extra: str, tools: str
) -> None:
    """A URL's ``user:password@`` would be sent as HTTP Basic, which no error masks (it is
    not among the server's headers): the config gives credentials as headers (``headers_env``
    keeps them out of the file). The error names the field, not what it held."""
    with pytest.raises(ConfigError) as caught:
        load(tmp_path, tools, extra)
    assert "credentials" in str(caught.value)
    assert "pa55-w0rd-hush" not in str(caught.value)


def test_no_gateway_tools_is_none(tmp_path: Path) -> None:
    assert load(tmp_path, "[]") is None


@pytest.mark.parametrize(
    ("tools", "fragment"),
    [
        (
            '[{type = "function", name = "f"}]',
            "tools[0].type: 'function' is not a gateway tool; gateway_tools holds mcp, "
            "web_search, web_search_2025_08_26, web_search_preview, "
            "web_search_preview_2025_03_11 tools (the client declares its own)",
        ),
        (
            "[{" + MCP + ' = "c", server_url = "http://x/mcp", require_approval = "always"}]',
            'tools[0].require_approval: must be "never": Chat Completions and Messages '
            "clients cannot approve a call",
        ),
        ('[{type = "mcp", server_url = "http://x/mcp"}]', "server_label"),
        (
            "[{"
            + MCP
            + ' = "a", server_url = "http://x/mcp"}, {'
            + MCP
            + ' = "a", server_url = "http://y/mcp"}]',
            "Duplicate",
        ),
    ],
)
def test_malformed_gateway_tools_fail_to_load(tmp_path: Path, tools: str, fragment: str) -> None:
    with pytest.raises(ConfigError) as caught:
        load(tmp_path, tools)
    assert "gateway_tools" in str(caught.value)
    assert fragment in str(caught.value)


@pytest.mark.parametrize(
    ("tools", "fragment"),
    [
        (
            '[{type = "mcp", server_label = "nowhere"}]',
            "No MCP server is configured with label 'nowhere'",
        ),
        ('[{type = "web_search"}]', "needs a web search provider"),
        ('[{type = "web_search_preview_2025_03_11"}]', "needs a web search provider"),
    ],
)
def test_a_tool_the_gateway_cannot_run_fails_when_built(
    tmp_path: Path, tools: str, fragment: str
) -> None:
    with pytest.raises(ConfigError) as caught:
        load(tmp_path, tools)
    assert "backend 'local': gateway_tools" in str(caught.value)
    assert fragment in str(caught.value)


def test_the_tools_section_sets_the_call_limits(tmp_path: Path) -> None:
    path = tmp_path / "stateway.toml"
    path.write_text("[tools]\nmax_output_bytes = 4096\nmax_discovered_tools = 9\n" + BACKEND)
    policy = build_tools(load_config(Overrides(config=str(path)), {}), {}).policy
    assert (policy.max_output_bytes, policy.max_discovered_tools) == (4096, 9)
    default = tmp_path / "default.toml"
    default.write_text(BACKEND)
    assert build_tools(
        load_config(Overrides(config=str(default)), {}), {}
    ).policy.max_output_bytes == (1024 * 1024)
    path.write_text("[tools]\nmax_output_bytes = 10\n" + BACKEND)
    with pytest.raises(ConfigError, match="max_output_bytes"):
        load_config(Overrides(config=str(path)), {})


async def test_the_mcp_client_takes_outputs_as_long_as_max_output_bytes(tmp_path: Path) -> None:
    """The pool's SSE event limit follows the setting: a result past the SDK's 1 MiB per
    event (and past what the default allows) reaches the loop, which judges its size."""
    path = tmp_path / "stateway.toml"
    path.write_text(f"[tools]\nmax_output_bytes = {2 * 1024 * 1024}\n" + BACKEND)
    tools = build_tools(load_config(Overrides(config=str(path)), {}), {})
    line = "x" * (1024 * 1024)
    with serve_mcp() as running:
        try:
            server = McpServer("test", running.url)
            output = await tools.mcp.call_tool(server, "echo", {"text": line, "times": 5})
        finally:
            await tools.mcp.aclose()
    assert output == line * 5


@pytest.mark.parametrize(
    ("allowed", "url", "allows"),
    [
        (["mcp.internal"], "https://mcp.internal/mcp", True),
        (["mcp.internal"], "https://MCP.internal:8443/mcp", True),
        (["mcp.internal:8443"], "https://mcp.internal/mcp", False),
        (["mcp.internal:8443"], "https://mcp.internal:8443/mcp", True),
        (["[::1]"], "http://[::1]:9000/mcp", True),  # an IPv6 literal as a URL writes it
        (["::1"], "http://[::1]/mcp", True),
        (["[::1]:9000"], "http://[::1]:9000/mcp", True),
        (["[::1]:9000"], "http://[::1]:9001/mcp", False),
        (["mcp.internal"], "http://mcp.internal@evil.example/mcp", False),
        (["mcp.internal"], "ftp://mcp.internal/mcp", False),
        (["mcp.internal"], "http://mcp.internal:99999/mcp", False),  # no URL: never raises
        (["mcp.internal"], "http://[mcp.internal/mcp", False),
        (["mcp.internal"], "http://mcp.internal:port/mcp", False),
    ],
)
def test_the_mcp_allow_list(allowed: list[str], url: str, allows: bool) -> None:
    assert McpConfig(allowed_hosts=allowed).allows(url) is allows


def test_a_servers_headers_are_its_own_and_those_its_variables_hold(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    server = McpServerConfig(
        url="http://mcp/mcp", headers={"X-Team": "ops"}, headers_env={"Authorization": "DOCS"}
    )
    expected = {"X-Team": "ops", "Authorization": "Bearer t"}
    assert server.resolved_headers("docs", {"DOCS": "Bearer t"}) == expected
    monkeypatch.setenv("DOCS", "Bearer t")
    assert server.resolved_headers("docs") == expected  # the process's environment
    refusal = r"^mcp_servers\.docs: environment variable DOCS \(header Authorization\) is not set$"
    with pytest.raises(ValueError, match=refusal):
        server.resolved_headers("docs", {"DOCS": ""})


def test_the_mcp_allow_list_from_its_variable() -> None:
    env = {"STATEWAY_MCP_ALLOWED_HOSTS": " mcp.internal, ,Tools:8080 ,"}
    config = load_config(Overrides(), env)
    assert config.mcp.allowed_hosts == ["mcp.internal", "tools:8080"]
