import dataclasses
import math
import tomllib
import typing
from pathlib import Path

import pytest
from pydantic import ValidationError

from stateway.app.generation import build_backend
from stateway.backends.admission import WaitingRoom
from stateway.config import (
    Config,
    ConfigError,
    Overrides,
    admin_key,
    backend_api_key,
    load_config,
)
from stateway.config_section import Section
from stateway.durations import duration_seconds, duration_text
from stateway.server_config import ServerConfig
from stateway.surfaces.auth.credentials import MAX_CREDENTIAL

EMPTY_ENV: dict[str, str] = {}


def write(tmp_path: Path, text: str) -> str:
    path = tmp_path / "stateway.toml"
    path.write_text(text)
    return str(path)


def test_defaults() -> None:
    config = load_config(Overrides(), EMPTY_ENV)
    assert (config.server.host, config.server.port) == ("127.0.0.1", 8080)
    [backend] = config.backends
    assert backend.url == "http://127.0.0.1:8000/v1"
    assert backend.api == "chat"
    assert backend.catch_all
    assert config.database_url.startswith("sqlite:///")
    assert config.database_url.endswith("stateway.db")


def test_file_declares_named_backends(tmp_path: Path) -> None:
    path = write(
        tmp_path,
        """
[server]
port = 9000
[storage]
database = "postgresql://u@h/db"
[[backends]]
name = "vllm"
url = "http://gpu:8000/v1/"
models = ["qwen"]
[[backends]]
name = "cloud"
url = "https://api.example.com/v1"
api = "responses"
models = {"big" = "big-2026-01"}
""",
    )
    config = load_config(Overrides(config=path), EMPTY_ENV)
    assert config.server.port == 9000
    assert config.database_url == "postgresql://u@h/db"
    vllm, cloud = config.backends
    assert vllm.url == "http://gpu:8000/v1"
    assert vllm.model_map == {"qwen": "qwen"}
    assert cloud.model_map == {"big": "big-2026-01"}
    assert not cloud.catch_all


def test_precedence_flags_over_env_over_file(tmp_path: Path) -> None:
    path = write(tmp_path, "[server]\nport = 1111\nhost = '0.0.0.0'\n")
    env = {"STATEWAY_PORT": "2222", "STATEWAY_CONFIG": path, "STATEWAY_DATABASE": "sqlite:///e.db"}
    config = load_config(Overrides(port=3333), env)
    assert config.server.port == 3333
    assert config.server.host == "0.0.0.0"
    assert config.storage.database == "sqlite:///e.db"
    assert load_config(Overrides(), env).server.port == 2222


def test_a_variable_or_flag_keeps_the_files_other_settings_of_its_table(tmp_path: Path) -> None:
    """Each is overlaid onto its table: the rest of the table, and a misspelt key in it,
    stay as the file has them."""
    text = (
        '[storage]\ndatabase = "sqlite:///f.db"\nretention = "30d"\ndatabase_timeout = 9\n'
        "[tools]\nmax_concurrent_calls = 3\n"
    )
    path = write(tmp_path, text)
    env = {"STATEWAY_DATABASE_TIMEOUT": "7", "STATEWAY_TOOL_TIMEOUT_S": "8"}
    config = load_config(Overrides(config=path), env)
    assert (config.storage.database, config.storage.retention) == ("sqlite:///f.db", 30 * 86400)
    assert (config.storage.database_timeout, config.tools.max_concurrent_calls) == (7, 3)
    config = load_config(Overrides(config=path), {"STATEWAY_RETENTION": "1d"})
    assert (config.storage.database, config.storage.retention) == ("sqlite:///f.db", 86400)
    config = load_config(Overrides(config=path, database="sqlite:///g.db"), EMPTY_ENV)
    assert (config.storage.database, config.storage.database_timeout) == ("sqlite:///g.db", 9)
    path = write(tmp_path, 'database_timeout = 1\n[security]\nsealing_kye = "x"\n')
    key = {"STATEWAY_SEALING_KEY": "AAECAwQFBgcICQoLDA0ODxAREhMUFRYXGBkaGxwdHh8="}
    with pytest.raises(ConfigError, match=r"security\.sealing_kye: Extra inputs"):
        load_config(Overrides(config=path), key)


def test_a_file_that_is_no_toml_is_refused_naming_it(tmp_path: Path) -> None:
    path = write(tmp_path, "not toml [")
    with pytest.raises(ConfigError) as refused:
        load_config(Overrides(config=path), EMPTY_ENV)
    assert str(refused.value).startswith(f"config file {path} is not valid TOML: ")


def test_upstream_flag_replaces_file_backends(tmp_path: Path) -> None:
    path = write(tmp_path, "[[backends]]\nname='a'\nurl='http://a/v1'\nmodels=['x']\n")
    config = load_config(
        Overrides(config=path, upstream="http://b/v1", upstream_api="responses"), EMPTY_ENV
    )
    [backend] = config.backends
    assert (backend.name, backend.url, backend.api, backend.catch_all) == (
        "default",
        "http://b/v1",
        "responses",
        True,
    )


@pytest.mark.parametrize(
    ("text", "fragment"),
    [
        ("[server]\nport = 'x'\n", "server.port"),
        ("[server]\nprot = 1\n", "server.prot"),
        ("[[backends]]\nname='a'\nurl='ftp://x'\n", "backends.0.url"),
        ("[[backends]]\nname='a'\nurl='http://x'\napi='grpc'\n", "backends.0.api"),
        (
            "[[backends]]\nname='a'\nurl='http://x'\n[[backends]]\nname='a'\nurl='http://y'\n",
            "unique",
        ),
        ("not toml [", "not valid TOML"),
        # Each passed check-config, to fail every request using it.
        ('[mcp_servers.docs]\nurl = "http://mcp:99999/mcp"\n', "mcp_servers.docs.url"),
        ('[mcp_servers.docs]\nurl = "http:///mcp"\n', "mcp_servers.docs.url"),
        ('[web_search]\nprovider = "searxng"\nsearxng_url = "searx:8888"\n', "searxng_url"),
        ('[web_search]\nsearxng_url = "http://searx:88888"\n', "web_search.searxng_url"),
        ('[web_search]\nbase_url = "proxy.internal"\n', "web_search.base_url"),
        ("[[backends]]\nname='a'\nurl='http://x'\nheaders={'X A'='v'}\n", "not an HTTP token"),
        (
            '[[backends]]\nname="a"\nurl="http://x"\nheaders={"X-A"="v\\nInjected: 1"}\n',
            "header 'X-A': the value must be printable ASCII",
        ),
    ],
)
def test_invalid_files_give_readable_errors(tmp_path: Path, text: str, fragment: str) -> None:
    with pytest.raises(ConfigError, match=fragment.replace(".", r"\.").replace("[", r"\[")):
        load_config(Overrides(config=write(tmp_path, text)), EMPTY_ENV)


@pytest.mark.parametrize(
    ("text", "env"),
    [
        ("server = 5\n", {}),
        ("tools = 5\n", {"STATEWAY_TOOL_TIMEOUT_S": "5"}),
        ("storage = 'x'\n", {"STATEWAY_DATABASE": "sqlite:///e.db"}),
        (
            "security = []\n",
            {"STATEWAY_SEALING_KEY": "AAECAwQFBgcICQoLDA0ODxAREhMUFRYXGBkaGxwdHh8="},
        ),
        ("coordination = 1\n", {"STATEWAY_REDIS_URL": "redis://127.0.0.1:6379/0"}),
        ("health = true\n", {}),
    ],
)
def test_a_section_that_is_no_table_is_a_readable_error(
    tmp_path: Path, text: str, env: dict[str, str]
) -> None:
    section = text.split(" ")[0]
    kind = type(tomllib.loads(text)[section]).__name__
    with pytest.raises(
        ConfigError, match=rf"{section}: must be a table \(\[{section}\]\), not {kind}$"
    ):
        load_config(Overrides(config=write(tmp_path, text)), env)


def test_a_file_that_is_not_utf8_is_a_readable_error(tmp_path: Path) -> None:
    path = tmp_path / "stateway.toml"
    path.write_bytes(b"# caf\xe9 (latin-1)\n[server]\nport = 9000\n")
    with pytest.raises(ConfigError, match="not valid TOML: not UTF-8"):
        load_config(Overrides(config=str(path)), EMPTY_ENV)


def test_a_file_saved_with_a_byte_order_mark_is_read(tmp_path: Path) -> None:
    """Windows editors (Notepad, PowerShell's ``Out-File -Encoding utf8``) open a UTF-8
    file with one; tomllib read it as "Invalid statement (at line 1, column 1)"."""
    path = tmp_path / "stateway.toml"
    path.write_bytes("\ufeff[server]\nport = 9000\nprot = 1\n".encode())
    with pytest.raises(ConfigError, match=r"server\.prot: .*stateway\.toml, line 3\)"):
        load_config(Overrides(config=str(path)), EMPTY_ENV)
    path.write_bytes("\ufeff[server]\nport = 9000\n".encode())
    assert load_config(Overrides(config=str(path)), EMPTY_ENV).server.port == 9000


def test_missing_file_and_bad_env() -> None:
    with pytest.raises(ConfigError, match="cannot read"):
        load_config(Overrides(config="/nonexistent/stateway.toml"), EMPTY_ENV)
    with pytest.raises(ConfigError, match="STATEWAY_MAX_BODY_BYTES"):
        load_config(Overrides(), {"STATEWAY_MAX_BODY_BYTES": "lots"})
    with pytest.raises(ConfigError, match="STATEWAY_PORT must be an integer"):
        load_config(Overrides(), {"STATEWAY_PORT": "eighty"})
    with pytest.raises(ConfigError, match="STATEWAY_MAX_TOOL_ROUNDS must be an integer, got 'x'"):
        load_config(Overrides(), {"STATEWAY_MAX_TOOL_ROUNDS": "x"})
    with pytest.raises(ConfigError, match="STATEWAY_TOOL_TIMEOUT_S must be a number, got 'x'"):
        load_config(Overrides(), {"STATEWAY_TOOL_TIMEOUT_S": "x"})


def test_api_key_comes_from_the_named_variable() -> None:
    config = load_config(Overrides(upstream_api_key_env="MY_KEY"), EMPTY_ENV)
    [backend] = config.backends
    assert backend_api_key(backend, {"MY_KEY": "sk-1"}) == "sk-1"
    with pytest.raises(ConfigError, match="MY_KEY is not set"):
        backend_api_key(backend, {})


@pytest.mark.parametrize(
    ("text", "fragment"),
    [
        (
            "[[backends]]\nname='a'\nurl='http://a/v1'\nmodels=['m']\n"
            "[[backends]]\nname='b'\nurl='http://b/v1'\nmodels=['m']\n",
            "model 'm' is served by both",
        ),
        (
            "[[backends]]\nname='a'\nurl='http://a/v1'\n[[backends]]\nname='b'\nurl='http://b/v1'\n",
            "only one backend may serve every model",
        ),
        ("[storage]\ndatabase = 'sqlite:///:memory:'\n", "In-memory SQLite"),
        ("[storage]\ndatabase = 'postgresql://u@h:abc/db'\n", "Could not parse"),
    ],
)
def test_ambiguous_or_unusable_configs_are_refused(
    tmp_path: Path, text: str, fragment: str
) -> None:
    with pytest.raises(ConfigError, match=fragment):
        load_config(Overrides(config=write(tmp_path, text)), EMPTY_ENV)


def test_upstream_flags_without_upstream_do_not_silently_vanish(tmp_path: Path) -> None:
    path = write(tmp_path, "[[backends]]\nname='a'\nurl='http://a/v1'\n")
    with pytest.raises(ConfigError) as refused:
        load_config(Overrides(config=path, upstream_api="responses"), EMPTY_ENV)
    assert str(refused.value) == (
        "--upstream-api applies to --upstream, but the configuration file declares its "
        "backends; set it on a backend there instead"
    )


def test_a_setting_given_by_a_flag_is_refused_naming_the_flag() -> None:
    with pytest.raises(ConfigError) as refused:
        load_config(Overrides(upstream="http://a/v1", upstream_api_key_env="X Y"), EMPTY_ENV)
    assert str(refused.value).endswith("(set by --upstream-api-key-env)")


def test_the_keys_are_read_from_the_process_environment_by_default(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    config = load_config(
        Overrides(upstream_api_key_env="STATEWAY_TEST_KEY"), {"STATEWAY_TEST_ADMIN": "a"}
    )
    config = config.model_copy(
        update={"admin": config.admin.model_copy(update={"api_key_env": "STATEWAY_TEST_ADMIN"})}
    )
    monkeypatch.setenv("STATEWAY_TEST_KEY", "sk-1")
    monkeypatch.setenv("STATEWAY_TEST_ADMIN", "adm")
    [backend] = config.backends
    assert (backend_api_key(backend), admin_key(config)) == ("sk-1", "adm")
    assert admin_key(config, EMPTY_ENV) is None  # the mapping given, not the process's


@pytest.mark.parametrize(
    "key",
    ["two words", "key\n", " key", "k\u00e9y", "k\x7fy", "k" * (MAX_CREDENTIAL + 1)],
    ids=["space", "line-break", "leading-space", "non-ascii", "control", "too-long"],
)
def test_an_admin_key_no_request_could_send_is_refused_unshown(key: str) -> None:
    """A request's credential is 1 to ``MAX_CREDENTIAL`` visible ASCII characters: an
    admin key with a space, a line break, a character beyond ASCII would never match
    one, and every admin route would answer 401 with nothing to say why. Refused where
    it is read (at start-up, on a reload), naming the variable, never the key."""
    config = load_config(Overrides(), EMPTY_ENV)

    with pytest.raises(ConfigError) as refused:
        admin_key(config, {"STATEWAY_ADMIN_KEY": key})

    assert str(refused.value) == (
        "environment variable STATEWAY_ADMIN_KEY (admin.api_key_env) holds a key no request"
        f" can send: a credential is 1 to {MAX_CREDENTIAL} visible ASCII characters (no"
        " space, no line break)"
    )


def test_an_admin_key_as_long_as_a_credential_may_be_is_taken() -> None:
    config = load_config(Overrides(), EMPTY_ENV)
    key = "~!" * (MAX_CREDENTIAL // 2)
    assert admin_key(config, {"STATEWAY_ADMIN_KEY": key}) == key


def test_hardening_settings_have_defaults_and_env_variables() -> None:
    config = load_config(Overrides(), EMPTY_ENV)
    server = config.server
    assert server.drain_timeout == 30.0
    assert server.request_body_timeout == 30.0
    assert (server.max_header_bytes, server.header_timeout) == (64 * 1024, 30.0)
    assert server.max_input_items == 10_000
    assert server.max_queued_requests == 1024
    [backend] = config.backends
    assert backend.total_timeout == 1800.0
    assert backend.effective_first_byte_timeout == backend.read_timeout
    assert backend.first_token_timeout is None
    assert backend.max_response_bytes == 16 * 1024 * 1024
    env = {
        "STATEWAY_DRAIN_TIMEOUT": "2.5",
        "STATEWAY_REQUEST_BODY_TIMEOUT": "3",
        "STATEWAY_MAX_HEADER_BYTES": "8192",
        "STATEWAY_HEADER_TIMEOUT": "0.5",
        "STATEWAY_MAX_INPUT_ITEMS": "7",
        "STATEWAY_MAX_QUEUED_REQUESTS": "0",
        "STATEWAY_ALLOWED_HOSTS": "gw.internal, localhost",
    }
    server = load_config(Overrides(), env).server
    assert (server.drain_timeout, server.request_body_timeout) == (2.5, 3.0)
    assert (server.max_header_bytes, server.header_timeout) == (8192, 0.5)
    assert (server.max_input_items, server.max_queued_requests) == (7, 0)
    assert server.effective_allowed_hosts == {"gw.internal", "localhost"}
    with pytest.raises(ConfigError, match="STATEWAY_DRAIN_TIMEOUT"):
        load_config(Overrides(), {"STATEWAY_DRAIN_TIMEOUT": "soon"})


def test_allowed_hosts_default_to_loopback_names_only_on_loopback(tmp_path: Path) -> None:
    loopback = load_config(Overrides(), EMPTY_ENV).server.effective_allowed_hosts
    assert loopback is not None
    assert {"127.0.0.1", "localhost"} <= loopback
    assert "evil.example" not in loopback
    assert load_config(Overrides(host="0.0.0.0"), EMPTY_ENV).server.effective_allowed_hosts is None
    path = write(tmp_path, '[server]\nallowed_hosts = ["*"]\n')
    assert load_config(Overrides(config=path), EMPTY_ENV).server.effective_allowed_hosts is None


@pytest.mark.parametrize(
    ("host", "own"),
    [
        ("LOCALHOST", "localhost"),
        ("localhost.", "localhost."),
        ("IP6-Localhost", "ip6-localhost"),
        ("0:0:0:0:0:0:0:1", "[0:0:0:0:0:0:0:1]"),
        ("[0::1]", "[0::1]"),
        ("127.9.9.9", "127.9.9.9"),
    ],
)
def test_every_spelling_of_a_loopback_address_keeps_the_host_check(host: str, own: str) -> None:
    """Serving a loopback address without auth is allowed however it is written (the
    exposure check's rule); each such spelling answers only loopback names, not any: the
    usual ones and its own, as a request's ``Host`` names it (lower-case, an IPv6 address
    in brackets)."""
    allowed = load_config(Overrides(host=host), EMPTY_ENV).server.effective_allowed_hosts
    assert allowed is not None, host
    assert {"127.0.0.1", "localhost", "[::1]", own} <= allowed
    assert "evil.example" not in allowed
    assert "" not in allowed


def test_an_empty_allowed_host_admits_no_request_without_a_host(tmp_path: Path) -> None:
    """An empty entry is dropped: kept, it would be the name of a request sending no
    ``Host`` at all."""
    path = write(tmp_path, '[server]\nallowed_hosts = ["", " ", "gw.internal"]\n')
    server = load_config(Overrides(config=path), EMPTY_ENV).server
    assert server.effective_allowed_hosts == {"gw.internal"}
    assert (
        ServerConfig(allowed_hosts=None).effective_allowed_hosts
        == ServerConfig().effective_allowed_hosts
    )


@pytest.mark.parametrize(
    ("text", "env", "source"),
    [
        ("[server]\nallowed_hosts = []\n", {}, "stateway.toml, line 2"),
        ('[server]\nallowed_hosts = [" "]\n', {}, "stateway.toml, line 2"),
        ("", {"STATEWAY_ALLOWED_HOSTS": ","}, "set by STATEWAY_ALLOWED_HOSTS"),
    ],
)
def test_allowed_hosts_naming_no_host_is_refused(
    tmp_path: Path, text: str, env: dict[str, str], source: str
) -> None:
    """It passed check-config, and the gateway then answered every request 421: '*' is
    any host, and leaving the setting out the default."""
    with pytest.raises(ConfigError) as refused:
        load_config(Overrides(config=write(tmp_path, text)), env)
    assert "server.allowed_hosts: Value error, names no host" in str(refused.value)
    assert str(refused.value).endswith(f"{source})")


@pytest.mark.parametrize(
    ("written", "served"),
    [
        ("Gateway.Internal", "gateway.internal"),
        ("gateway.internal:8080", "gateway.internal"),
        ("10.0.0.5:443", "10.0.0.5"),
        ("::1", "[::1]"),
        ("[fe80::1]:8080", "[fe80::1]"),
        ("[fe80::1]", "[fe80::1]"),
        ("[::1", "[::1"),  # no closing bracket: kept as written, never emptied
    ],
)
def test_an_allowed_host_is_its_name_whatever_port_it_is_written_with(
    written: str, served: str
) -> None:
    """The Host check compares a request's host name without its port (and an IPv6 one in
    brackets, as a Host header writes it): an entry written with a port, or a bare IPv6
    address, is that name, not one no request could match."""
    for env in ({"STATEWAY_ALLOWED_HOSTS": written}, {"STATEWAY_ALLOWED_HOSTS": f"x, {written}"}):
        allowed = load_config(Overrides(), env).server.effective_allowed_hosts
        assert allowed is not None
        assert served in allowed, (written, allowed)


def test_cors_origins_are_written_as_browsers_send_them(tmp_path: Path) -> None:
    """An entry is compared with a request's ``Origin`` as it is: lower-case, no final
    ``/``, no default port. Unset, none is listed (no CORS headers)."""
    assert load_config(Overrides(), EMPTY_ENV).server.cors_origins == []
    path = write(
        tmp_path,
        '[server]\ncors_origins = ["https://App.example.com:443/", "http://localhost:5173", ""]\n',
    )
    server = load_config(Overrides(config=path), EMPTY_ENV).server
    assert server.cors_origins == ["https://app.example.com", "http://localhost:5173"]
    env = {"STATEWAY_CORS_ORIGINS": "http://[::1]:80, app://obsidian.md,"}
    server = load_config(Overrides(config=path), env).server
    assert server.cors_origins == ["http://[::1]", "app://obsidian.md"]
    assert load_config(Overrides(), {"STATEWAY_CORS_ORIGINS": "*"}).server.cors_origins == ["*"]


@pytest.mark.parametrize(
    "entry",
    [
        "https://app.example.com/chat",
        "null",
        "https://*.example.com",
        "localhost:5173",
        "https://user@app.example.com",
        "https://app.example.com:99999",
        "https://app?x",
    ],
)
def test_an_entry_that_is_no_origin_is_refused_naming_its_source(
    tmp_path: Path, entry: str
) -> None:
    """Kept, it would match no browser's ``Origin``: the page would fail its preflight
    with nothing said."""
    path = write(tmp_path, f'[server]\nport = 1\ncors_origins = ["{entry}"]\n')
    with pytest.raises(ConfigError, match=r"server\.cors_origins.*line 3"):
        load_config(Overrides(config=path), EMPTY_ENV)
    with pytest.raises(ConfigError, match="set by STATEWAY_CORS_ORIGINS"):
        load_config(Overrides(), {"STATEWAY_CORS_ORIGINS": entry})


def test_backend_timeouts_are_validated(tmp_path: Path) -> None:
    path = write(
        tmp_path,
        '[[backends]]\nname = "a"\nurl = "http://x/v1"\nfirst_byte_timeout = 5\n'
        "pool_idle_timeout = 2\npool_timeout = 1\nmax_response_bytes = 2048\n"
        "first_token_timeout = 2.5\n",
    )
    [backend] = load_config(Overrides(config=path), EMPTY_ENV).backends
    assert backend.effective_first_byte_timeout == 5.0
    assert (backend.pool_idle_timeout, backend.pool_timeout) == (2.0, 1.0)
    assert backend.first_token_timeout == 2.5
    for setting in ("total_timeout = 0", "first_token_timeout = 0", "first_token_timeout = -1"):
        bad = write(tmp_path, f'[[backends]]\nname = "a"\nurl = "http://x/v1"\n{setting}\n')
        with pytest.raises(ConfigError, match=setting.split()[0]):
            load_config(Overrides(config=bad), EMPTY_ENV)


def test_guided_decoding_is_off_unless_a_backend_names_its_style(tmp_path: Path) -> None:
    table = '[[backends]]\nname = "vllm"\nurl = "http://gpu:8000/v1"\n'
    config = load_config(Overrides(config=write(tmp_path, table)), EMPTY_ENV)
    assert config.backends[0].guided_decoding is None
    path = write(tmp_path, table + 'guided_decoding = "vllm"\n')
    assert load_config(Overrides(config=path), EMPTY_ENV).backends[0].guided_decoding == "vllm"
    with pytest.raises(ConfigError, match="guided_decoding"):
        load_config(
            Overrides(config=write(tmp_path, table + 'guided_decoding = "xgr"\n')), EMPTY_ENV
        )


def test_reasoning_efforts_list_the_levels_a_chat_server_takes(tmp_path: Path) -> None:
    table = '[[backends]]\nname = "vllm"\nurl = "http://gpu:8000/v1"\n'
    config = load_config(Overrides(config=write(tmp_path, table)), EMPTY_ENV)
    assert config.backends[0].reasoning_efforts is None  # every effort as asked
    path = write(tmp_path, table + 'reasoning_efforts = ["low", "medium", "high"]\n')
    backend = load_config(Overrides(config=path), EMPTY_ENV).backends[0]
    assert backend.reasoning_efforts == ["low", "medium", "high"]
    path = write(tmp_path, table + 'reasoning_efforts = ["none", "high"]\n')  # besides none
    assert load_config(Overrides(config=path), EMPTY_ENV).backends[0].reasoning_efforts == [
        "none",
        "high",
    ]


@pytest.mark.parametrize(
    ("value", "fragment"),
    [
        ('["low", "extreme"]', "backends.0.reasoning_efforts.1: Input should be 'none', 'minimal'"),
        ("[]", "backends.0.reasoning_efforts: List should have at least 1 item"),
        ('["high", "low", "high"]', "'high' listed more than once"),
        ('["none"]', "must name a level of reasoning besides 'none'"),
        ('"high"', "backends.0.reasoning_efforts: Input should be a valid"),
    ],
)
def test_unusable_reasoning_efforts_are_refused_by_name(
    tmp_path: Path, value: str, fragment: str
) -> None:
    table = (
        f'[[backends]]\nname = "vllm"\nurl = "http://gpu:8000/v1"\nreasoning_efforts = {value}\n'
    )
    with pytest.raises(ConfigError) as refused:
        load_config(Overrides(config=write(tmp_path, table)), EMPTY_ENV)
    assert fragment in str(refused.value)


def test_think_tags_are_read_only_when_a_chat_backend_asks(tmp_path: Path) -> None:
    table = '[[backends]]\nname = "vllm"\nurl = "http://gpu:8000/v1"\n'
    config = load_config(Overrides(config=write(tmp_path, table)), EMPTY_ENV)
    assert config.backends[0].think_tags is False  # content as the model wrote it
    path = write(tmp_path, table + "think_tags = true\n")
    assert load_config(Overrides(config=path), EMPTY_ENV).backends[0].think_tags is True
    path = write(tmp_path, table + 'think_tags = "opened"\n')
    assert load_config(Overrides(config=path), EMPTY_ENV).backends[0].think_tags == "opened"


@pytest.mark.parametrize(
    ("lines", "fragment"),
    [
        ('think_tags = "maybe"\n', "think_tags: Input should be False, True or 'opened'"),
        ('think_tags = "open"\n', "think_tags: Input should be False, True or 'opened'"),
        ('api = "responses"\nthink_tags = "opened"\n', "only a chat upstream's content is read"),
        ('api = "responses"\nthink_tags = true\n', "only a chat upstream's content is read"),
        ('api = "anthropic"\nthink_tags = true\n', "only a chat upstream's content is read"),
    ],
)
def test_unusable_think_tags_are_refused_by_name(tmp_path: Path, lines: str, fragment: str) -> None:
    table = '[[backends]]\nname = "vllm"\nurl = "http://gpu:8000/v1"\n' + lines
    with pytest.raises(ConfigError) as refused:
        load_config(Overrides(config=write(tmp_path, table)), EMPTY_ENV)
    assert fragment in str(refused.value)


@pytest.mark.parametrize(
    ("lines", "fragment"),
    [
        ('api = "responses"\nthinking_switch = "enable_thinking"\n', "only a chat upstream's"),
        ('api = "anthropic"\nthinking_switch = "thinking"\n', "only a chat upstream's"),
        ('thinking_switch = ""\n', "thinking_switch: String should have at least 1 character"),
    ],
)
def test_an_unusable_thinking_switch_is_refused_by_name(
    tmp_path: Path, lines: str, fragment: str
) -> None:
    base = '[[backends]]\nname = "vllm"\nurl = "http://gpu:8000/v1"\n'
    with pytest.raises(ConfigError) as refused:
        load_config(Overrides(config=write(tmp_path, base + lines)), EMPTY_ENV)
    assert fragment in str(refused.value)
    path = write(tmp_path, base + 'thinking_switch = "enable_thinking"\n')
    assert load_config(Overrides(config=path), EMPTY_ENV).backends[0].thinking_switch == (
        "enable_thinking"
    )


def test_an_anthropic_backend_caches_implicitly_unless_it_opts_out(tmp_path: Path) -> None:
    table = '[[backends]]\nname = "claude"\nurl = "http://a/v1"\napi = "anthropic"\n'
    config = load_config(Overrides(config=write(tmp_path, table)), EMPTY_ENV)
    assert config.backends[0].prompt_cache_mode == "implicit"  # as hosted OpenAI caches
    path = write(tmp_path, table + 'prompt_cache_mode = "explicit"\n')
    assert load_config(Overrides(config=path), EMPTY_ENV).backends[0].prompt_cache_mode == (
        "explicit"
    )


@pytest.mark.parametrize(
    ("lines", "fragment"),
    [
        ('api = "anthropic"\nprompt_cache_mode = "always"\n', "backends.0.prompt_cache_mode"),
        ('prompt_cache_mode = "explicit"\n', "only an anthropic upstream is marked"),
        ('api = "responses"\nprompt_cache_mode = "implicit"\n', "only an anthropic upstream"),
    ],
)
def test_a_prompt_cache_mode_off_anthropic_is_refused_by_name(
    tmp_path: Path, lines: str, fragment: str
) -> None:
    table = '[[backends]]\nname = "b"\nurl = "http://b/v1"\n' + lines
    with pytest.raises(ConfigError) as refused:
        load_config(Overrides(config=write(tmp_path, table)), EMPTY_ENV)
    assert fragment in str(refused.value)


KEY = "AAECAwQFBgcICQoLDA0ODxAREhMUFRYXGBkaGxwdHh8="  # bytes 0..31
OTHER_KEY = "HxwdHh8AAQIDBAUGBwgJCgsMDQ4PEBESExQVFhcYGRo="


def test_sealing_key_from_file_or_environment(tmp_path: Path) -> None:
    assert load_config(Overrides(), EMPTY_ENV).security.sealing_key is None
    path = write(tmp_path, f'[security]\nsealing_key = "{KEY}"\n')
    assert load_config(Overrides(config=path), EMPTY_ENV).security.sealing_key == KEY
    env = {"STATEWAY_SEALING_KEY": OTHER_KEY}
    assert load_config(Overrides(config=path), env).security.sealing_key == OTHER_KEY


@pytest.mark.parametrize(
    ("key", "fragment"),
    [
        ("not base64 at all!", "not valid base64"),
        ("AAECAwQFBgcICQoLDA0ODw==", "must decode to 32 bytes, not 16"),
    ],
)
def test_unusable_sealing_keys_are_refused_without_echoing_them(key: str, fragment: str) -> None:
    with pytest.raises(ConfigError) as refused:
        load_config(Overrides(), {"STATEWAY_SEALING_KEY": key})
    assert "security.sealing_key" in str(refused.value)
    assert fragment in str(refused.value)
    assert key not in str(refused.value)


def test_context_window_is_a_positive_backend_setting(tmp_path: Path) -> None:
    path = write(tmp_path, '[[backends]]\nname = "b"\nurl = "http://h/v1"\ncontext_window = 8192\n')
    assert load_config(Overrides(config=path), EMPTY_ENV).backends[0].context_window == 8192
    bad = write(tmp_path, '[[backends]]\nname = "b"\nurl = "http://h/v1"\ncontext_window = 0\n')
    with pytest.raises(ConfigError, match="context_window"):
        load_config(Overrides(config=bad), EMPTY_ENV)


@pytest.mark.parametrize(
    ("url", "setting", "least"),
    [
        ("https://api.openai.com/v1", "", 16),
        ("https://API.openai.com:443/v1", "", 16),
        ("https://api.openai.com/v1", "min_output_tokens = 1\n", 1),
        ("http://gpu:8000/v1", "", 1),
        ("http://gpu:8000/v1", "min_output_tokens = 32\n", 32),
        ("https://api.openai.com.example/v1", "", 1),
    ],
)
async def test_the_least_output_budget_is_hosted_openais_only_on_its_host(
    tmp_path: Path, url: str, setting: str, least: int
) -> None:
    table = f'[[backends]]\nname = "b"\nurl = "{url}"\napi = "responses"\n{setting}'
    backend = load_config(Overrides(config=write(tmp_path, table)), EMPTY_ENV).backends[0]
    assert backend.least_output_tokens() == least
    built = build_backend(backend, WaitingRoom(1))
    try:
        assert built.min_output_tokens == least
    finally:
        await built.aclose()


@pytest.mark.parametrize(
    ("url", "setting", "runs"),
    [
        ("https://api.anthropic.com/v1", "", True),
        ("https://api.anthropic.com/v1", "safeguards = false\n", False),
        ("http://gpu:8000/v1", "", False),
        ("http://gpu:8000/v1", "safeguards = true\n", True),
        ("https://api.anthropic.com.example/v1", "", False),
    ],
)
def test_safeguards_are_sent_by_default_only_to_anthropics_api(
    tmp_path: Path, url: str, setting: str, runs: bool
) -> None:
    table = f'[[backends]]\nname = "b"\nurl = "{url}"\napi = "anthropic"\n{setting}'
    backend = load_config(Overrides(config=write(tmp_path, table)), EMPTY_ENV).backends[0]
    assert backend.runs_safeguards() is runs


@pytest.mark.parametrize(
    ("setting", "sampling"),
    [
        ("", "all"),
        ('anthropic_version = "2026-10-21"\n', "none"),
        ('anthropic_version = "2027-01-01"\n', "none"),
        ('anthropic_version = "2026-10-21"\nsampling = "one"\n', "one"),
        ('sampling = "none"\n', "none"),
    ],
)
def test_sampling_is_left_out_by_default_only_from_api_versions_without_it(
    tmp_path: Path, setting: str, sampling: str
) -> None:
    """Anthropic's API version 2026-10-21 has no ``temperature``, ``top_p`` or ``top_k``."""
    table = f'[[backends]]\nname = "b"\nurl = "http://gpu:8000/v1"\napi = "anthropic"\n{setting}'
    backend = load_config(Overrides(config=write(tmp_path, table)), EMPTY_ENV).backends[0]
    assert backend.sent_sampling() == sampling


def test_sampling_is_refused_for_other_upstreams(tmp_path: Path) -> None:
    table = '[[backends]]\nname = "b"\nurl = "http://gpu:8000/v1"\nsampling = "none"\n'
    with pytest.raises(ConfigError, match="sampling"):
        load_config(Overrides(config=write(tmp_path, table)), EMPTY_ENV)


def test_cache_salt_is_off_unless_a_backend_salts_per_tenant(tmp_path: Path) -> None:
    table = '[[backends]]\nname = "vllm"\nurl = "http://gpu:8000/v1"\n'
    config = load_config(Overrides(config=write(tmp_path, table)), EMPTY_ENV)
    assert config.backends[0].cache_salt is None
    for api in ("chat", "responses"):
        path = write(tmp_path, table + f'api = "{api}"\ncache_salt = "tenant"\n')
        assert load_config(Overrides(config=path), EMPTY_ENV).backends[0].cache_salt == "tenant"


@pytest.mark.parametrize("value", ['"request"', '"Tenant"', '""', "true"])
def test_an_unknown_cache_salt_is_refused_by_name(tmp_path: Path, value: str) -> None:
    table = f'[[backends]]\nname = "vllm"\nurl = "http://gpu:8000/v1"\ncache_salt = {value}\n'
    with pytest.raises(ConfigError) as refused:
        load_config(Overrides(config=write(tmp_path, table)), EMPTY_ENV)
    assert "backends.0.cache_salt: Input should be 'tenant'" in str(refused.value)


def test_an_anthropic_backend_cannot_salt_its_cache(tmp_path: Path) -> None:
    table = (
        '[[backends]]\nname = "claude"\nurl = "https://api.anthropic.com/v1"\n'
        'api = "anthropic"\ncache_salt = "tenant"\n'
    )
    with pytest.raises(ConfigError) as refused:
        load_config(Overrides(config=write(tmp_path, table)), EMPTY_ENV)
    message = str(refused.value)
    assert "backends.0.cache_salt:" in message
    assert "the Messages API has no cache_salt field" in message


def test_an_idle_connection_outlives_the_clients_own_idle_expiry_by_default() -> None:
    """httpx (so the openai and anthropic SDKs) reuses a connection idle up to 5 s, and
    load balancers keep theirs 60 s: the gateway must not close one first."""
    assert ServerConfig().keep_alive_timeout > 60


@pytest.mark.parametrize(
    ("url", "shown"),
    [
        ("http://127.0.0.1:8000/v1", "http://127.0.0.1:8000/v1"),
        ("https://ops@gpu.internal/v1", "https://ops@gpu.internal/v1"),  # a user alone
        ("https://ops:pw@gpu.internal/v1", "https://ops:***@gpu.internal/v1"),
        ("https://ops:p@ss:w@gpu.internal:8443", "https://ops:***@gpu.internal:8443"),
        ("https://:pw@gpu.internal/v1/@x", "https://:***@gpu.internal/v1/@x"),
    ],
)
def test_a_backends_url_is_shown_without_its_password(url: str, shown: str) -> None:
    [backend] = load_config(Overrides(upstream=url), {}).backends
    assert backend.url == url
    assert backend.shown_url == shown


@pytest.mark.parametrize(
    "url",
    [
        "https://res.openai.azure.com/openai/deployments/gpt?api-version=2024-02-01",
        "https://gpu.internal/v1?key=s3cret-query-key",
        "https://gpu.internal/v1#s3cret-fragment",
    ],
)
def test_a_backends_url_with_a_query_or_fragment_is_refused(url: str) -> None:
    """Every call goes to ``url`` + its path (``/chat/completions``): a query there would
    take the path in, and the call would go elsewhere, said valid by check-config."""
    with pytest.raises(ConfigError) as refused:
        load_config(Overrides(upstream=url), EMPTY_ENV)
    message = str(refused.value)
    assert "backends.0.url: Value error, must not carry a query (?...) or a fragment" in message
    assert "s3cret" not in message


@pytest.mark.parametrize(
    "url",
    [
        "http://u:s3cret-password@/v1",
        "https://:s3cret-password@gpu.internal:99999/v1",
        "http://gpu.internal:port/v1",
        "http:///v1",
    ],
)
def test_a_backends_url_without_a_host_or_port_to_reach_is_refused(url: str) -> None:
    """Said valid, it would fail every call (and the HTTP client's error, logged, shows
    the URL whole, its password too)."""
    with pytest.raises(ConfigError) as refused:
        load_config(Overrides(upstream=url), EMPTY_ENV)
    message = str(refused.value)
    assert "backends.0.url: Value error, must name a host" in message
    assert "s3cret" not in message


@pytest.mark.parametrize(
    ("value", "seconds"),
    [('"30d"', 30 * 86400), ('"12h"', 43200), ('" 90m "', 5400), ("3600", 3600), ('"45"', 45)],
)
def test_retention_is_a_duration_or_seconds(tmp_path: Path, value: str, seconds: int) -> None:
    path = write(tmp_path, f"[storage]\nretention = {value}\n")
    assert load_config(Overrides(config=path), EMPTY_ENV).storage.retention == seconds
    assert load_config(Overrides(), {"STATEWAY_RETENTION": value.strip('"')}).storage.retention == (
        seconds
    )
    assert load_config(Overrides(), EMPTY_ENV).storage.retention is None


@pytest.mark.parametrize(
    ("seconds", "shown"),
    [
        (30 * 86400, "30d"),
        (14 * 86400, "2w"),
        (5400, "90m"),
        (3601, "3601s"),
        (1.5, "1.5s"),
        (86400, "1d"),  # exactly one of a unit is that unit
        (60, "1m"),
    ],
)
def test_a_duration_is_shown_in_its_largest_whole_unit(seconds: float, shown: str) -> None:
    assert duration_text(seconds) == shown
    assert shown.endswith(".5s") or duration_seconds(shown) == seconds


@pytest.mark.parametrize("value", ['"soon"', '"30 days"', "0", '"0d"', "-5", '"inf"', "inf"])
def test_an_unusable_retention_is_refused_by_name(tmp_path: Path, value: str) -> None:
    with pytest.raises(ConfigError, match=r"storage\.retention"):
        load_config(Overrides(config=write(tmp_path, f"[storage]\nretention = {value}\n")), {})


def _number_settings(
    model: type[Section], numbers: tuple[type, ...], prefix: str = ""
) -> list[tuple[type[Section], str]]:
    """Every setting of ``model``'s tables, nested tables' included, taking one of
    ``numbers`` (``float``, ``float | None``), with the table holding it."""
    found = []
    for name, field in model.model_fields.items():
        kinds = [field.annotation]
        for kind in kinds:
            kinds += typing.get_args(kind)
        if any(number in kinds for number in numbers):
            found.append((model, prefix + name))
        for kind in kinds:
            if isinstance(kind, type) and issubclass(kind, Section) and kind is not model:
                found += _number_settings(kind, numbers, f"{prefix}{name}.")
    return found


_FLOAT_SETTINGS = _number_settings(Config, (float,))
_NUMBER_SETTINGS = _number_settings(Config, (int, float))


@pytest.mark.parametrize("value", [math.inf, math.nan])
@pytest.mark.parametrize(("table", "setting"), _FLOAT_SETTINGS, ids=[s for _, s in _FLOAT_SETTINGS])
def test_no_number_setting_takes_infinity_or_nan(
    table: type[Section], setting: str, value: float
) -> None:
    """``drain_timeout = inf`` passed check-config, and serving failed to start on it
    (OverflowError): "no limit" is not a number the gateway can wait or count with."""
    key = setting.rsplit(".", 1)[-1]
    with pytest.raises(ValidationError) as refused:
        table.model_validate({key: value})
    assert any(error["loc"] == (key,) for error in refused.value.errors())


@pytest.mark.parametrize("value", [True, False])
@pytest.mark.parametrize(
    ("table", "setting"), _NUMBER_SETTINGS, ids=[s for _, s in _NUMBER_SETTINGS]
)
def test_no_number_setting_takes_true_or_false(
    table: type[Section], setting: str, value: bool
) -> None:
    """``retention = true`` was taken as 1 (every response deleted a second after it was
    made), ``port = true`` as port 1: a boolean is no count, size or duration."""
    key = setting.rsplit(".", 1)[-1]
    with pytest.raises(ValidationError) as refused:
        table.model_validate({key: value})
    refusal = ((key,), "Input should be a number, not a boolean")
    assert refusal in [(error["loc"], error["msg"]) for error in refused.value.errors()]


def test_a_boolean_given_for_a_number_is_refused_naming_the_setting(tmp_path: Path) -> None:
    path = write(tmp_path, "[storage]\nretention = true\n")
    with pytest.raises(ConfigError) as refused:
        load_config(Overrides(config=path), EMPTY_ENV)
    assert str(refused.value) == (
        "invalid configuration:\n"
        f"  storage.retention: Input should be a number, not a boolean ({path}, line 2)"
    )


@pytest.mark.parametrize(
    ("text", "flags", "setting"),
    [
        (
            '[[backends]]\nname = "a"\nurl = "http://a/v1"\napi_key_env = "sk-proj-SECRET42"\n',
            Overrides(),
            "backends.0.api_key_env",
        ),
        (
            "",
            Overrides(upstream="http://a/v1", upstream_api_key_env="sk-ant-SECRET42"),
            "backends.0.api_key_env",
        ),
        (
            '[mcp_servers.docs]\nurl = "http://mcp/mcp"\n'
            'headers_env = { Authorization = "Bearer SECRET42" }\n',
            Overrides(),
            "mcp_servers.docs.headers_env.Authorization",
        ),
        ('[web_search]\napi_key_env = "tvly-SECRET42"\n', Overrides(), "web_search.api_key_env"),
        ('[admin]\napi_key_env = "adm in SECRET42"\n', Overrides(), "admin.api_key_env"),
    ],
)
def test_a_key_given_where_its_variables_name_goes_is_refused_unshown(
    tmp_path: Path, text: str, flags: Overrides, setting: str
) -> None:
    """The key itself given as ``api_key_env`` was printed (and logged on a reload) as
    "environment variable sk-... is not set"."""
    flags = dataclasses.replace(flags, config=write(tmp_path, text))
    with pytest.raises(ConfigError) as refused:
        load_config(flags, EMPTY_ENV)
    assert "SECRET42" not in str(refused.value)
    assert f"{setting}: Value error, must be an environment variable's name" in str(refused.value)


# Keys whose alphabet is a variable name's: each would be printed as "environment variable
# <key> is not set" (fake keys, shaped as each provider's).
_NAME_SHAPED_KEYS = [
    "gsk_" + "aB3dE5fG7hJ9kL1mN3pQ5rS7tV9wX1yZ3aB5cD7eF9gH1jK3lM5n",  # Groq
    "hf_" + "aBcDeFgHiJkLmNoPqRsTuVwXyZ0123456789",  # Hugging Face
    "ghp_" + "0123456789abcdefABCDEF0123456789abcd",  # GitHub
    "github_pat_" + "11ABCDEFG0123456789_abcdefghijklmnopqrstuvwxyz0123456789AB",
    "r8_" + "aBcDeFgHiJkLmNoPqRsTuVwXyZ0123456789ab",  # Replicate
    "fw_" + "3aBcDeFgHiJkLmNoPqRsTuVw",  # Fireworks
    "AIza" + "SyA1b2C3d4E5f6G7h8I9j0K1l2M3n4O5p6Q",  # Google
    "abcdef0123456789" * 4,  # a hex key (Together)
    "aB3dE5fG7hJ9kL1mN3pQ5rS7tV9wX1yZ",  # 32 letters and digits (Mistral)
]


@pytest.mark.parametrize("key", _NAME_SHAPED_KEYS)
def test_a_key_shaped_as_a_variable_name_is_refused_unshown(tmp_path: Path, key: str) -> None:
    """A key of letters, digits and ``_`` only (Groq's ``gsk_...``) passed as a variable's
    name, and "environment variable gsk_... is not set" printed it."""
    text = f'[[backends]]\nname = "a"\nurl = "http://a/v1"\napi_key_env = "{key}"\n'
    with pytest.raises(ConfigError) as refused:
        load_config(Overrides(config=write(tmp_path, text)), EMPTY_ENV)
    assert key not in str(refused.value)
    assert "backends.0.api_key_env: Value error, must be an environment variable's name" in str(
        refused.value
    )


@pytest.mark.parametrize(
    "name",
    [
        "OPENAI_API_KEY",
        "STATEWAY_ADMIN_KEY",
        "my_groq_key",
        "GROQ_API_KEY_2",
        "ANTHROPIC_API_KEY_FOR_THE_PRODUCTION_CLUSTER_2026",
        "VeryLongCamelCaseVariableName",
        "hf_token",
        "gh_pat",
        "AIzaKey",
    ],
)
def test_a_variable_name_is_taken(tmp_path: Path, name: str) -> None:
    text = f'[[backends]]\nname = "a"\nurl = "http://a/v1"\napi_key_env = "{name}"\n'
    config = load_config(Overrides(config=write(tmp_path, text)), {name: "k"})
    assert config.backends[0].api_key_env == name
