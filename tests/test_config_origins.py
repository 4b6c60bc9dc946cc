"""An invalid setting is named with where its value came from: the file and the line it is
on, the ``STATEWAY_*`` variable or the flag that set it (an operator told
``server.max_body_bytes`` is wrong looks for it in the file, where it may not be)."""

from pathlib import Path

import pytest

from stateway.config import ConfigError, Overrides, load_config


def refusal(flags: Overrides, env: dict[str, str] | None = None) -> str:
    with pytest.raises(ConfigError) as refused:
        load_config(flags, env or {})
    return str(refused.value)


def test_a_files_setting_is_named_with_the_file_and_its_line(tmp_path: Path) -> None:
    path = tmp_path / "gateway.toml"
    path.write_text('# comment\n[server]\nhost = "127.0.0.1"\nprot = 9\n')
    message = refusal(Overrides(config=str(path)))
    assert (
        f"server.prot: Extra inputs are not permitted; did you mean port? ({path}, line 4)"
        in message
    )


def test_a_misspelt_key_is_told_the_nearest_one_its_table_takes(tmp_path: Path) -> None:
    path = tmp_path / "gateway.toml"
    path.write_text(
        "sever = 1\n"
        "[[backends]]\n"
        'name = "a"\n'
        'url = "http://127.0.0.1:8000/v1"\n'
        'modles = ["x"]\n'
        "[[routes]]\n"
        'name = "r"\n'
        "[[routes.candidates]]\n"
        'backend = "a"\n'
        'model = "m"\n'
        "[routes.candidates.capabilities]\n"
        "image = false\n"
        '[mcp_servers."docs"]\n'
        'url = "http://mcp.internal/mcp"\n'
        "header_env = {}\n"
        "[auth.oidc]\n"
        'isuer = "https://idp.example"\n'
        "[websocket]\n"
        "xyzzy = 1\n"
    )
    message = refusal(Overrides(config=str(path)))
    assert (
        f"  sever: Extra inputs are not permitted; did you mean server? ({path}, line 1)" in message
    )
    assert "backends.0.modles: Extra inputs are not permitted; did you mean models?" in message
    assert (
        "routes.0.candidates.0.capabilities.image: Extra inputs are not permitted; "
        "did you mean images?" in message
    )
    assert "mcp_servers.docs.header_env: Extra inputs are not permitted; did you mean" in message
    assert "auth.oidc.isuer: Extra inputs are not permitted; did you mean issuer?" in message
    assert f"websocket.xyzzy: Extra inputs are not permitted ({path}, line 19)" in message


def test_a_backends_setting_is_found_in_its_own_table(tmp_path: Path) -> None:
    path = tmp_path / "gateway.toml"
    path.write_text(
        "[[backends]]\n"
        'name = "a"\n'
        'url = "http://127.0.0.1:8000/v1"\n'
        'models = ["x"]\n'
        "\n"
        "[[backends]]\n"
        'name = "b"\n'
        'url = "http://127.0.0.1:8001/v1"\n'
        'api = "chats"\n'
    )
    message = refusal(Overrides(config=str(path)))
    assert "backends.1.api: Input should be" in message
    assert f"({path}, line 9)" in message


def test_a_nested_table_and_a_top_level_key_are_found(tmp_path: Path) -> None:
    path = tmp_path / "gateway.toml"
    path.write_text('sever = 1\n[mcp_servers."docs"]\nurl = "ftp://x"\n')
    message = refusal(Overrides(config=str(path)))
    assert (
        f"sever: Extra inputs are not permitted; did you mean server? ({path}, line 1)" in message
    )
    assert f"({path}, line 3)" in message.split("mcp_servers.docs.url", 1)[1]


def test_an_inline_or_dotted_setting_is_found_on_its_line(tmp_path: Path) -> None:
    path = tmp_path / "gateway.toml"
    path.write_text("loop.max_rounds = 0\nserver = { port = 70000 }\n")
    message = refusal(Overrides(config=str(path)))
    assert (
        f"loop.max_rounds: Input should be greater than or equal to 1 ({path}, line 1)" in message
    )
    assert f"server.port: Input should be less than or equal to 65535 ({path}, line 2)" in message


def test_a_missing_setting_is_named_with_its_tables_line(tmp_path: Path) -> None:
    path = tmp_path / "gateway.toml"
    path.write_text('[server]\nport = 1\n\n[[backends]]\nname = "a"\n')
    message = refusal(Overrides(config=str(path)))
    assert f"backends.0.url: Field required ({path}, line 4)" in message
    path.write_text('[[backends]]\nname = "a"\n\n[server]\nport = 1\n')  # another table after
    assert refusal(Overrides(config=str(path))).endswith(
        f"backends.0.url: Field required ({path}, line 1)"
    )


def test_a_sub_table_of_an_array_of_tables_is_found(tmp_path: Path) -> None:
    """``[backends.headers]`` belongs to the latest ``[[backends]]``; ``[[routes.candidates]]``
    to the latest ``[[routes]]``."""
    path = tmp_path / "gateway.toml"
    backend = '[[backends]]\nname = "a"\nurl = "http://a/v1"\n'
    path.write_text(backend + '[backends.headers]\n"bad name" = "x"\n')
    message = refusal(Overrides(config=str(path)))
    assert message.startswith("invalid configuration:\n  backends.0.headers: Value error, ")
    assert message.endswith(f"({path}, line 4)")
    route = '[[routes]]\nname = "r"\n[[routes.candidates]]\nbackend = "a"\nmodel = "m"\n'
    path.write_text(backend + route + '[[routes.candidates]]\nbackend = "a"\nweight = 0\n')
    message = refusal(Overrides(config=str(path)))
    assert message.endswith(
        f"routes.0.candidates.1.weight: Input should be greater than 0 ({path}, line 11)"
    )


def test_a_table_is_found_before_its_parents_header(tmp_path: Path) -> None:
    path = tmp_path / "gateway.toml"
    path.write_text(
        '[auth.oidc]\ntenant_claim = "org"\nissuer = "http://idp.example"\naudience = "x"\n'
        "[auth]\napi_keys = true\n"
    )
    message = refusal(Overrides(config=str(path)))
    assert message.startswith("invalid configuration:\n  auth.oidc.issuer: Value error, ")
    assert message.endswith(f"({path}, line 3)")


def test_each_refusal_is_a_line_and_a_whole_configs_is_named_config(tmp_path: Path) -> None:
    path = tmp_path / "gateway.toml"
    path.write_text("[server]\nport = 70000\nprot = 1\n")
    assert refusal(Overrides(config=str(path))) == (
        "invalid configuration:\n"
        f"  server.port: Input should be less than or equal to 65535 ({path}, line 2)\n"
        f"  server.prot: Extra inputs are not permitted; did you mean port? ({path}, line 3)"
    )
    routes = "".join(
        f'[[routes]]\nname = "{name}"\ndefault = true\n'
        '[[routes.candidates]]\nbackend = "default"\nmodel = "m"\n'
        for name in ("r", "s")
    )
    path.write_text(routes)
    assert refusal(Overrides(config=str(path))) == (
        "invalid configuration:\n"
        "  config: Value error, only one route may be the default; these are: r, s"
    )


def test_a_setting_on_no_line_is_named_with_the_file_alone(tmp_path: Path) -> None:
    path = tmp_path / "gateway.toml"
    path.write_text("# no [web_search] here\n")
    message = refusal(Overrides(config=str(path)), {"STATEWAY_WEB_SEARCH_PROVIDER": "searxng"})
    assert message.startswith("invalid configuration:\n  web_search: Value error, ")
    assert message.endswith(f"(or STATEWAY_SEARXNG_URL) ({path})")


@pytest.mark.parametrize(
    ("variable", "value", "setting"),
    [
        ("STATEWAY_MAX_BODY_BYTES", "5", "server.max_body_bytes"),
        ("STATEWAY_REQUESTS_PER_MINUTE", "0", "rate_limits.requests_per_minute"),
        ("STATEWAY_LOG_LEVEL", "verbose", "logging.level"),
        ("STATEWAY_TRACING", "maybe", "tracing.enabled"),
        ("STATEWAY_RETENTION", "3x", "storage.retention"),
        ("STATEWAY_DATABASE_TIMEOUT", "soon", "storage.database_timeout"),
        ("STATEWAY_DATABASE_MAX_CONNECTIONS", "0", "storage.max_connections"),
        ("STATEWAY_REDIS_URL", "http://h", "coordination.redis_url"),
        ("STATEWAY_WEBSOCKET_MAX_REQUESTS", "many", "websocket.max_requests"),
        ("STATEWAY_MAX_TOOL_ROUNDS", "0", "loop.max_rounds"),
        ("STATEWAY_WEB_SEARCH_PROVIDER", "bing", "web_search.provider"),
        ("STATEWAY_SEALING_KEY", "short", "security.sealing_key"),
        ("STATEWAY_DATABASE", "mysql://h/db", "storage.database"),
        ("STATEWAY_UPSTREAM", "ftp://h/v1", "backends.0.url"),
        ("STATEWAY_UPSTREAM_API", "chats", "backends.0.api"),
    ],
)
def test_a_variables_setting_is_named_with_the_variable(
    tmp_path: Path, variable: str, value: str, setting: str
) -> None:
    path = tmp_path / "gateway.toml"
    key = setting.rsplit(".", 1)[-1]
    path.write_text(f"# {key} is not set here\n")
    message = refusal(Overrides(config=str(path)), {variable: value})
    [line] = [line for line in message.splitlines() if line.strip().startswith(setting)]
    assert line.endswith(f"(set by {variable})")


def test_a_flags_setting_is_named_with_the_flag() -> None:
    message = refusal(Overrides(database="mysql://h/db"), {"STATEWAY_DATABASE": "mysql://e/db"})
    assert message.endswith("(set by --database)")
    message = refusal(Overrides(upstream="ftp://h/v1"))
    assert message.endswith("(set by --upstream)")


def test_a_setting_the_variable_did_not_set_is_the_files(tmp_path: Path) -> None:
    path = tmp_path / "gateway.toml"
    path.write_text("[server]\nmax_body_bytes = 5\n")
    message = refusal(Overrides(config=str(path)), {"STATEWAY_DRAIN_TIMEOUT": "5"})
    assert message.endswith(f"({path}, line 2)")
