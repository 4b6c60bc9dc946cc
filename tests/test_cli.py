import errno
import io
import json
import logging
import os
import signal
import socket
import sqlite3
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest

from stateway import __version__, cli, subcommands
from stateway.config import Overrides, load_config
from stateway.fake_upstream.launch import start_fake_upstream
from stateway.launch import child_env, launch, start_announced
from stateway.storage.sql.migrator import HEAD_REVISION


def stateway(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "stateway", *args],
        capture_output=True,
        text=True,
        env=child_env(env),
        timeout=60,
        check=False,
    )


@pytest.mark.parametrize("command", ["serve", "check-config"])
def test_the_upstream_flags_are_described_alike(
    command: str, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit):
        cli.main([command, "--help"])
    shown = " ".join(capsys.readouterr().out.split())
    for described in (
        "--upstream UPSTREAM model server base URL including /v1",
        "upstream API shape",
        "environment variable holding the upstream key",
    ):
        assert described in shown


def test_check_config_accepts_a_valid_file(tmp_path: Path) -> None:
    path = tmp_path / "ok.toml"
    path.write_text(
        "[[backends]]\nname = 'local'\nurl = 'http://127.0.0.1:8000/v1'\nmodels = ['m']\n"
    )
    result = stateway(
        "check-config", "--config", str(path), "--database", f"sqlite:///{tmp_path}/x.db"
    )
    assert result.returncode == 0, result.stderr
    assert "upstream local: http://127.0.0.1:8000/v1 (chat API; m)" in result.stdout
    assert "configuration is valid" in result.stdout


def test_check_config_rejects_an_invalid_file_readably(tmp_path: Path) -> None:
    path = tmp_path / "bad.toml"
    path.write_text("[server]\nport = 'eighty'\n")
    result = stateway("check-config", "--config", str(path))
    assert result.returncode != 0
    assert "server.port" in result.stderr
    assert "Traceback" not in result.stderr


def test_check_config_describes_routes_and_rejects_an_unknown_backend(tmp_path: Path) -> None:
    path = tmp_path / "routes.toml"
    text = "[[backends]]\nname = 'a'\nurl = 'http://127.0.0.1:8000/v1'\n"
    text += "[aliases]\nsmart = 'assistant'\n"
    text += "[[routes]]\nname = 'assistant'\n[[routes.candidates]]\nbackend = 'a'\n"
    text += "model = 'a-model'\nweight = 2\n"
    path.write_text(text)
    result = stateway("check-config", "--config", str(path))
    assert result.returncode == 0, result.stderr
    assert "route assistant: a/a-model (weight 2, priority 0)" in result.stdout
    assert "alias smart -> assistant" in result.stdout
    assert "upstream a: http://127.0.0.1:8000/v1 (chat API; its routes' models)" in result.stdout
    path.write_text(text.replace("backend = 'a'", "backend = 'gone'"))
    rejected = stateway("check-config", "--config", str(path))
    assert rejected.returncode != 0
    assert "unknown backend 'gone'" in rejected.stderr
    assert "Traceback" not in rejected.stderr


def test_check_config_reports_a_missing_key_variable() -> None:
    result = stateway("check-config", "--upstream-api-key-env", "STATEWAY_TEST_UNSET_KEY")
    assert result.returncode != 0
    assert "STATEWAY_TEST_UNSET_KEY is not set" in result.stderr


def test_the_reload_endpoint_without_its_credential_is_refused_at_start(tmp_path: Path) -> None:
    path = tmp_path / "admin.toml"
    path.write_text("[admin]\nreload_endpoint = true\napi_key_env = 'STATEWAY_TEST_UNSET_ADMIN'\n")
    for command in (["check-config"], ["serve", "--port", "0"]):
        result = stateway(*command, "--config", str(path))
        assert result.returncode == 2
        assert "STATEWAY_TEST_UNSET_ADMIN (admin.api_key_env) is not set" in result.stderr
        assert "Traceback" not in result.stderr


def test_migrate_creates_the_schema(tmp_path: Path) -> None:
    database = f"sqlite:///{tmp_path}/m.db"
    first = stateway("migrate", "--database", database)
    assert first.returncode == 0, first.stderr
    assert (tmp_path / "m.db").exists()
    assert stateway("migrate", "--database", database).returncode == 0


def test_migrate_needs_the_database_not_the_serving_secrets(tmp_path: Path) -> None:
    """A migration job (a deploy step, an init container) is given the database, not the
    upstream keys, MCP headers or admin credential the file names: those are checked when
    serving (and by check-config), while the file itself is still validated."""
    path = tmp_path / "gateway.toml"
    text = f"[storage]\ndatabase = 'sqlite:///{tmp_path}/m.db'\n"
    text += "[admin]\nreload_endpoint = true\napi_key_env = 'STATEWAY_TEST_UNSET_ADMIN'\n"
    text += "[mcp_servers.docs]\nurl = 'http://127.0.0.1:9/mcp'\n"
    text += "headers_env = { Authorization = 'STATEWAY_TEST_UNSET_MCP' }\n"
    text += "[[backends]]\nname = 'openai'\nurl = 'https://api.openai.com/v1'\n"
    text += "api_key_env = 'STATEWAY_TEST_UNSET_KEY'\n"
    path.write_text(text)
    result = stateway("migrate", "--config", str(path))
    assert result.returncode == 0, result.stderr
    assert (tmp_path / "m.db").exists()
    path.write_text(text + "bogus = 1\n")
    rejected = stateway("migrate", "--config", str(path))
    assert rejected.returncode == 2
    assert "backends.0.bogus" in rejected.stderr


def test_serve_refuses_a_bad_database_url() -> None:
    result = stateway("serve", "--port", "0", "--database", "mysql://x/y")
    assert result.returncode != 0
    assert "Traceback" not in result.stderr


def test_unreachable_database_is_a_readable_error() -> None:
    result = stateway("migrate", "--database", "postgresql://nobody@127.0.0.1:9/none")
    assert result.returncode == 1
    assert result.stderr.startswith(
        "stateway: PostgreSQL database none on 127.0.0.1:9 as nobody: Storage failed while"
        " migrating the database. ("
    )
    assert "Traceback" not in result.stderr


def test_fake_upstream_subcommand_serves() -> None:
    command = [sys.executable, "-m", "stateway", "fake-upstream", "--port", "0"]
    with (
        start_announced(command, "listening on ") as url,
        urllib.request.urlopen(url.removesuffix("/v1") + "/health") as health,
    ):
        assert health.status == 200


def test_fake_upstream_subcommand_takes_a_strict_chat_template() -> None:
    command = [sys.executable, "-m", "stateway", "fake-upstream", "--port", "0"]
    messages = [{"role": "user", "content": "hi"}, {"role": "system", "content": "late"}]
    body = json.dumps({"model": "m", "messages": messages}).encode()
    with start_announced([*command, "--system-first"], "listening on ") as url:
        request = urllib.request.Request(
            url + "/chat/completions", data=body, headers={"content-type": "application/json"}
        )
        with pytest.raises(urllib.error.HTTPError) as refused:
            urllib.request.urlopen(request)
        refused.value.close()
    assert refused.value.code == 400


def test_an_unwritable_database_directory_is_a_readable_error(tmp_path: Path) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("")
    result = stateway("migrate", "--database", f"sqlite:///{blocker}/sub/x.db")
    assert result.returncode == 1
    assert result.stderr.startswith(
        f"stateway: SQLite database at {blocker}/sub/x.db: cannot create its directory "
        f"{blocker}/sub (Not a directory: {blocker}/sub)"
    )
    assert "Traceback" not in result.stderr


def test_serve_announces_database_upstreams_and_address(tmp_path: Path) -> None:
    command = [
        sys.executable, "-m", "stateway", "serve", "--port", "0",
        "--database", f"sqlite:///{tmp_path}/banner.db", "--upstream", "http://127.0.0.1:9/v1",
    ]  # fmt: skip
    process = subprocess.Popen(
        command, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True, env=child_env()
    )
    try:
        assert process.stdout is not None
        lines = []
        for line in process.stdout:
            lines.append(line.strip())
            if "listening on http://127.0.0.1:" in line:
                break
    finally:
        process.terminate()
        process.wait(timeout=30)
    assert f"database: SQLite database at {tmp_path}/banner.db" in lines
    assert "upstream default: http://127.0.0.1:9/v1 (chat API; every model)" in lines
    assert lines[-1].startswith(f"stateway {__version__} listening on http://127.0.0.1:")


def test_check_config_refuses_a_malformed_sealing_key() -> None:
    key = "c2hvcnQ="  # "short"
    result = stateway("check-config", env={"STATEWAY_SEALING_KEY": key})
    assert result.returncode == 2
    assert "security.sealing_key" in result.stderr
    assert "32 bytes" in result.stderr
    assert key not in result.stderr
    assert "Traceback" not in result.stderr


def test_serve_refuses_an_unusable_stored_sealing_key(tmp_path: Path) -> None:
    database = f"sqlite:///{tmp_path}/s.db"
    assert stateway("migrate", "--database", database).returncode == 0
    with sqlite3.connect(tmp_path / "s.db") as db:
        db.execute("INSERT INTO gateway_secrets VALUES ('sealing_key', 'c2hvcnQ=', 0)")
    result = stateway("serve", "--port", "0", "--database", database)
    assert result.returncode == 2
    assert "sealing key stored in the database is unusable" in result.stderr
    assert "Traceback" not in result.stderr


def _left_running(path: Path) -> None:
    """A response a dead process of this host left in progress in the database at
    ``path``, its instructions a prompt the log must not show."""
    dead = f"{socket.gethostname()} 999999999 0"
    body = {"id": "resp_left", "created_at": 1, "model": "m", "status": "in_progress"}
    body["instructions"] = "a secret prompt"
    with sqlite3.connect(path) as db:
        db.execute(
            "INSERT INTO responses (tenant_id, id, status, created_at, body, owner)"
            " VALUES ('default', 'resp_left', 'in_progress', 1, ?, ?)",
            (json.dumps(body), dead),
        )


def _refusing(path: Path, table: str) -> None:
    """Every insert and update of ``table`` in the database at ``path`` refused."""
    with sqlite3.connect(path) as db:
        for when in ("INSERT", "UPDATE"):
            db.execute(
                f"CREATE TRIGGER refused_{when} BEFORE {when} ON {table}"
                " BEGIN SELECT RAISE(ABORT, 'refused'); END"
            )


def test_a_storage_failure_as_serving_starts_is_a_readable_error(tmp_path: Path) -> None:
    """The write serving starts with refused (this process's lease): the database and
    what it said, as any start-up failure of the database, without a traceback or the
    statement and its parameters."""
    path = tmp_path / "s.db"
    database = f"sqlite:///{path}"
    assert stateway("migrate", "--database", database).returncode == 0
    _refusing(path, "run_owners")

    result = stateway("serve", "--port", "0", "--database", database)

    assert result.returncode == 1, result.stderr
    assert result.stderr.endswith(
        f"stateway: SQLite database at {path}: Storage rejected the data while registering"
        " a run owner. (IntegrityError: refused)\n"
    )
    assert "Traceback" not in result.stderr
    assert "INSERT" not in result.stderr
    assert "UPDATE" not in result.stderr


def test_a_left_response_whose_end_is_refused_is_logged_and_serving_starts(
    tmp_path: Path,
) -> None:
    """A response a dead process of this host left running, whose end the database
    refuses for its data (refused again at every start): it is left in progress, named in
    an error line without a traceback, the statement or its parameters (a prompt), and
    serving starts."""
    path = tmp_path / "s.db"
    database = f"sqlite:///{path}"
    assert stateway("migrate", "--database", database).returncode == 0
    _left_running(path)
    _refusing(path, "responses")
    command = [sys.executable, "-m", "stateway", "serve", "--port", "0", "--database", database]
    log_path = tmp_path / "stderr.log"
    with log_path.open("w") as stderr, launch(command, "listening on ", stderr=stderr):
        pass
    logged = log_path.read_text()
    assert "the database refused the end of response resp_left" in logged
    assert "Traceback" not in logged
    assert "a secret prompt" not in logged
    assert "INSERT" not in logged
    assert "UPDATE" not in logged


def test_serving_api_keys_with_none_active_warns_how_to_make_one(tmp_path: Path) -> None:
    """``[auth] api_keys = true`` and no key made yet: every request would be a 401."""
    config = tmp_path / "stateway.toml"
    config.write_text("[auth]\napi_keys = true\n")
    database = f"sqlite:///{tmp_path}/x.db"
    command = [
        sys.executable, "-m", "stateway", "serve", "--port", "0", "--config", str(config),
        "--database", database, "--upstream", "http://127.0.0.1:9/v1",
    ]  # fmt: skip
    warning = "no active API key in the database: every request is refused (401) until one"
    log_path = tmp_path / "stderr.log"
    with log_path.open("w") as stderr, launch(command, "listening on ", stderr=stderr):
        pass
    assert warning in log_path.read_text()
    assert "stateway keys create --tenant TENANT" in log_path.read_text()

    made = stateway(
        "keys", "create", "--tenant", "acme", "--config", str(config), "--database", database
    )
    assert made.returncode == 0, made.stderr
    with log_path.open("w") as stderr, launch(command, "listening on ", stderr=stderr):
        pass
    assert warning not in log_path.read_text()


def test_serving_a_public_address_without_auth_is_refused_naming_auth(tmp_path: Path) -> None:
    served = stateway(
        "serve", "--host", "0.0.0.0", "--port", "0", "--database", f"sqlite:///{tmp_path}/x.db"
    )

    assert served.returncode == 2
    assert "without auth" in served.stderr
    assert "[auth] api_keys = true" in served.stderr
    assert "--insecure-no-auth" in served.stderr
    assert "Traceback" not in served.stderr


def test_insecure_no_auth_serves_a_public_address_with_a_warning_about_auth(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    bound: list[str] = []

    def bind(host: str, port: int) -> socket.socket:
        bound.append(host)
        raise OSError(errno.EADDRNOTAVAIL, "not bound in tests")

    monkeypatch.setattr(subcommands, "bind_socket", bind)
    monkeypatch.setattr(subcommands, "configure_logging", lambda form, level: None)  # keep caplog's
    database = f"sqlite:///{tmp_path}/x.db"

    with caplog.at_level(logging.WARNING, logger="stateway"):
        code = cli.main(
            ["serve", "--host", "0.0.0.0", "--insecure-no-auth", "--database", database]
        )

    assert code == 1  # the (refused) bind came after the warning
    assert bound == ["0.0.0.0"]
    [warning] = [r for r in caplog.records if r.levelno == logging.WARNING]
    assert "without auth" in warning.getMessage()


def test_check_config_refuses_a_public_address_without_auth_as_serving_does(
    tmp_path: Path,
) -> None:
    """check-config tells whether serving will start: a file's public host without auth
    is refused by both, alike; with ``--insecure-no-auth`` check-config accepts it and says
    who may call."""
    path = tmp_path / "public.toml"
    path.write_text("[server]\nhost = '0.0.0.0'\n")
    database = f"sqlite:///{tmp_path}/x.db"
    for command in (["check-config"], ["serve", "--port", "0"]):
        refused = stateway(*command, "--config", str(path), "--database", database)
        assert refused.returncode == 2, command
        assert "refusing to serve 0.0.0.0 without auth" in refused.stderr
        assert "Traceback" not in refused.stderr

    allowed = stateway("check-config", "--config", str(path), "--insecure-no-auth")

    assert allowed.returncode == 0, allowed.stderr
    assert "(every caller is the default tenant; any address: --insecure-no-auth)" in (
        allowed.stdout
    )
    assert "configuration is valid" in allowed.stdout


def test_check_config_names_the_pages_that_may_call_and_warns_of_any_without_auth(
    tmp_path: Path,
) -> None:
    path = tmp_path / "browsers.toml"
    path.write_text('[server]\ncors_origins = ["http://localhost:5173/"]\n')
    database = f"sqlite:///{tmp_path}/x.db"

    listed = stateway("check-config", "--config", str(path), "--database", database)
    anyone = stateway("check-config", "--database", database, env={"STATEWAY_CORS_ORIGINS": "*"})

    assert listed.returncode == 0, listed.stderr
    assert "browsers: the web pages of http://localhost:5173 may call (CORS)" in listed.stdout
    assert "warning" not in listed.stderr
    assert anyone.returncode == 0, anyone.stderr
    assert "browsers: any web page may call (CORS)" in anyone.stdout
    assert 'warning: cors_origins = ["*"] without auth' in anyone.stderr


def test_serving_any_page_without_auth_is_logged_as_a_warning(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    def bind(host: str, port: int) -> socket.socket:
        raise OSError(errno.EADDRNOTAVAIL, "not bound in tests")

    monkeypatch.setattr(subcommands, "bind_socket", bind)
    monkeypatch.setattr(subcommands, "configure_logging", lambda form, level: None)  # keep caplog's
    monkeypatch.setenv("STATEWAY_CORS_ORIGINS", "*")

    with caplog.at_level(logging.WARNING, logger="stateway"):
        code = cli.main(["serve", "--database", f"sqlite:///{tmp_path}/x.db"])

    assert code == 1  # the (refused) bind came after the warning
    [warning] = [r for r in caplog.records if r.levelno == logging.WARNING]
    assert 'cors_origins = ["*"] without auth' in warning.getMessage()


@pytest.mark.parametrize(
    ("protocol", "named"),
    [
        ("grpc", "pip install opentelemetry-exporter-otlp-proto-grpc"),
        ("http/json", "OTEL_EXPORTER_OTLP_PROTOCOL 'http/json'"),
    ],
)
def test_check_config_refuses_tracing_that_serving_refuses(
    protocol: str, named: str, tmp_path: Path
) -> None:
    """Traces over a protocol whose exporter is not installed (gRPC's is in no extra) or
    that no exporter speaks: refused by check-config as by serving, naming the remedy."""
    env = {"STATEWAY_TRACING": "true", "OTEL_EXPORTER_OTLP_PROTOCOL": protocol}
    database = f"sqlite:///{tmp_path}/x.db"
    for command in (["check-config"], ["serve", "--port", "0"]):
        refused = stateway(*command, "--database", database, env=env)
        assert refused.returncode == 2, command
        assert named in refused.stderr
        assert "Traceback" not in refused.stderr


def test_check_config_says_who_may_call(tmp_path: Path) -> None:
    path = tmp_path / "auth.toml"
    path.write_text(
        "[auth]\napi_keys = true\n[auth.oidc]\nissuer = 'https://idp.example'\n"
        "audience = 'stateway'\ntenant_claim = 'org'\n"
    )
    described = stateway("check-config", "--config", str(path))
    plain = stateway("check-config")

    assert described.returncode == 0, described.stderr
    assert (
        "auth: API keys and OIDC tokens from https://idp.example (tenant claim 'org')"
        in described.stdout
    )
    assert "auth: none (every caller is the default tenant; loopback only)" in plain.stdout


def test_the_start_up_description_says_when_no_auth_serves_beyond_loopback() -> None:
    """``--insecure-no-auth`` on a public address: the auth line must not claim loopback."""
    config = load_config(Overrides(host="0.0.0.0"), {})
    exposed, bound = io.StringIO(), io.StringIO()

    subcommands._describe(config, exposed, beyond_loopback=True)
    subcommands._describe(config, bound)

    assert "loopback only" not in exposed.getvalue()
    assert "any address: --insecure-no-auth" in exposed.getvalue()
    assert "auth: none (every caller is the default tenant; loopback only)" in bound.getvalue()


def test_the_start_up_description_masks_an_upstream_urls_password() -> None:
    """A URL's user and password reach the server (as Basic credentials); the banner
    shows the user, never the password."""
    flags = Overrides(upstream="http://ops:s3cret-pass@127.0.0.1:9/v1")
    out = io.StringIO()

    subcommands._describe(load_config(flags, {}), out)

    assert "s3cret-pass" not in out.getvalue()
    assert "upstream default: http://ops:***@127.0.0.1:9/v1 (chat API; every model)" in (
        out.getvalue().splitlines()
    )


def test_serve_warns_without_an_upstream_urls_password(tmp_path: Path) -> None:
    log_path = tmp_path / "stderr.log"
    with start_fake_upstream() as fake, log_path.open("w") as stderr:
        root = fake.removesuffix("/v1").replace("http://", "http://ops:s3cret-pass@")
        command = [
            sys.executable, "-m", "stateway", "serve", "--port", "0",
            "--database", f"sqlite:///{tmp_path}/x.db", "--upstream", root,
        ]  # fmt: skip
        with launch(command, "listening on ", stderr=stderr):
            for _ in range(200):
                if "GET /models failed" in log_path.read_text():
                    break
                time.sleep(0.05)
    logged = log_path.read_text()
    assert "GET /models failed at start-up" in logged
    assert "http://ops:***@127.0.0.1:" in logged
    assert "s3cret-pass" not in logged


def test_serve_warns_at_start_up_about_an_upstream_url_without_its_base_path(
    tmp_path: Path,
) -> None:
    """vLLM's URL given without ``/v1``: every request would be a 404 ``model_not_found``,
    which says nothing about the URL; the start-up check says it."""
    log_path = tmp_path / "stderr.log"
    with start_fake_upstream() as fake, log_path.open("w") as stderr:
        root = fake.removesuffix("/v1")
        command = [
            sys.executable, "-m", "stateway", "serve", "--port", "0",
            "--database", f"sqlite:///{tmp_path}/x.db", "--upstream", root,
        ]  # fmt: skip
        with launch(command, "listening on ", stderr=stderr):
            for _ in range(200):
                if "GET /models failed" in log_path.read_text():
                    break
                time.sleep(0.05)
    logged = log_path.read_text()
    assert f"upstream default at {root}: GET /models failed at start-up" in logged
    assert "with its version path?" in logged
    assert "http://HOST:PORT/v1" in logged


def test_serve_is_quiet_about_an_upstream_that_answers(tmp_path: Path) -> None:
    log_path = tmp_path / "stderr.log"
    with start_fake_upstream() as fake, log_path.open("w") as stderr:
        command = [
            sys.executable, "-m", "stateway", "serve", "--port", "0",
            "--database", f"sqlite:///{tmp_path}/x.db", "--upstream", fake,
        ]  # fmt: skip
        with launch(command, "listening on ", stderr=stderr) as served:
            with urllib.request.urlopen(served.url + "/v1/models") as listing:
                assert b"fake-model" in listing.read()
            time.sleep(0.5)  # the check's own GET /models has long been answered
    assert "GET /models failed" not in log_path.read_text()


def test_a_loopback_address_written_in_capitals_still_refuses_a_foreign_host(
    tmp_path: Path,
) -> None:
    """``--host LOCALHOST`` binds loopback, so serves without auth: its Host check (the
    DNS-rebinding guard) is loopback names, as for ``localhost``, not any name."""
    command = [
        sys.executable, "-m", "stateway", "serve", "--host", "LOCALHOST", "--port", "0",
        "--database", f"sqlite:///{tmp_path}/x.db", "--upstream", "http://127.0.0.1:9/v1",
    ]  # fmt: skip
    log_path = tmp_path / "stderr.log"
    with log_path.open("w") as stderr, launch(command, "listening on ", stderr=stderr) as served:
        foreign = urllib.request.Request(
            served.url + "/v1/models", headers={"Host": "evil.example"}
        )
        with pytest.raises(urllib.error.HTTPError) as refused:
            urllib.request.urlopen(foreign)
        assert refused.value.code == 421
        own = urllib.request.Request(served.url + "/health", headers={"Host": "localhost"})
        with urllib.request.urlopen(own) as answered:
            assert answered.status == 200


def test_an_allowed_host_written_with_its_port_is_served(tmp_path: Path) -> None:
    """``STATEWAY_ALLOWED_HOSTS=gw.internal:8080`` serves ``Host: gw.internal:8080`` (the
    port is ignored, as README's table says), not a 421 for every request."""
    command = [
        sys.executable, "-m", "stateway", "serve", "--port", "0",
        "--database", f"sqlite:///{tmp_path}/x.db", "--upstream", "http://127.0.0.1:9/v1",
    ]  # fmt: skip
    env = {"STATEWAY_ALLOWED_HOSTS": "gw.internal:8080"}
    log_path = tmp_path / "stderr.log"
    with (
        log_path.open("w") as stderr,
        launch(command, "listening on ", env=env, stderr=stderr) as served,
    ):
        named = urllib.request.Request(served.url + "/health", headers={"Host": "gw.internal:8080"})
        with urllib.request.urlopen(named) as answered:
            assert answered.status == 200
        other = urllib.request.Request(served.url + "/health", headers={"Host": "evil.example"})
        with pytest.raises(urllib.error.HTTPError) as refused:
            urllib.request.urlopen(other)
        assert refused.value.code == 421


def test_a_sqlite_file_that_cannot_be_opened_is_a_readable_error(tmp_path: Path) -> None:
    # aiosqlite's worker thread, left behind by a failed connect, printed a traceback
    # about a closed event loop after the message (most runs: checked several times).
    (tmp_path / "directory.db").mkdir()
    for _ in range(4):
        result = stateway("migrate", "--database", f"sqlite:///{tmp_path}/directory.db")
        assert result.returncode == 1
        assert result.stderr.startswith(
            f"stateway: SQLite database at {tmp_path}/directory.db: Storage failed while migrating"
        )
        assert "Traceback" not in result.stderr


def interruptible(command: list[str]) -> subprocess.Popen[str]:
    """``command`` started with SIGINT at its default, as from a terminal: a runner that
    starts the suite in the background (``cmd &`` in a script) has it ignored, which a
    child inherits, and uvicorn's re-raised SIGINT would then end it with status 0."""
    return subprocess.Popen(
        command,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=child_env(),
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
    )


@pytest.mark.parametrize("sent", [signal.SIGINT, signal.SIGTERM])
def test_a_stop_signal_ends_serve_by_that_signal_without_a_traceback(
    tmp_path: Path, sent: signal.Signals
) -> None:
    """As uvicorn does: a shell or Docker reports SIGTERM as status 143, systemd counts it
    a clean stop."""
    command = [
        sys.executable, "-m", "stateway", "serve", "--port", "0",
        "--database", f"sqlite:///{tmp_path}/int.db", "--upstream", "http://127.0.0.1:9/v1",
    ]  # fmt: skip
    process = interruptible(command)
    assert process.stdout is not None
    while "listening on" not in process.stdout.readline():
        assert process.poll() is None
    process.send_signal(sent)
    _, stderr = process.communicate(timeout=30)
    assert process.returncode == -sent
    assert "Traceback" not in stderr
    assert "KeyboardInterrupt" not in stderr


_INTERRUPTED_AT = {
    # importing what serving runs: the second or more before anything is served
    "imports": """
import importlib.abc
class Interrupting(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path, target=None):
        if name == "stateway.subcommands":
            os.kill(os.getpid(), signal.SIGINT)
        return None
sys.meta_path.insert(0, Interrupting())
""",
    # migrating: the database is waited for
    "migrating": """
from stateway import subcommands
migrate = subcommands.migrate
async def interrupted(url):
    os.kill(os.getpid(), signal.SIGINT)
    await migrate(url)
subcommands.migrate = interrupted
""",
    # the last of start-up before uvicorn takes the signals (the loop's, meanwhile)
    "before uvicorn": """
from stateway import subcommands
subcommands._tune_gc = lambda: os.kill(os.getpid(), signal.SIGINT)
""",
}


@pytest.mark.parametrize("moment", list(_INTERRUPTED_AT))
def test_ctrl_c_while_serve_starts_ends_it_by_sigint_without_a_traceback(
    tmp_path: Path, moment: str
) -> None:
    """An operator who sees a wrong flag and presses Ctrl+C at once gets their prompt back
    quietly, whenever in start-up it lands."""
    arguments = [
        "serve", "--port", "0", "--database", f"sqlite:///{tmp_path}/int.db",
        "--upstream", "http://127.0.0.1:9/v1",
    ]  # fmt: skip
    script = (
        "import os, signal, sys\n"
        + _INTERRUPTED_AT[moment]
        + f"from stateway import cli\nsys.exit(cli.main({arguments!r}))\n"
    )
    process = interruptible([sys.executable, "-c", script])
    stdout, stderr = process.communicate(timeout=60)
    assert "listening on" not in stdout
    assert "Traceback" not in stderr
    assert "KeyboardInterrupt" not in stderr
    assert process.returncode == -signal.SIGINT


@pytest.mark.parametrize("command", ["serve", "fake-upstream"])
def test_a_port_in_use_is_a_readable_error(tmp_path: Path, command: str) -> None:
    """The second ``make fake-upstream``, or vLLM already on its port: no traceback."""
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        arguments = [command, "--port", str(port)]
        if command == "serve":
            arguments += ["--database", f"sqlite:///{tmp_path}/x.db"]
        result = stateway(*arguments)
    assert result.returncode == 1
    assert "Traceback" not in result.stderr
    assert result.stderr.splitlines()[-1] == (
        f"stateway: cannot listen on 127.0.0.1:{port}: Address already in use (another "
        "process listens there: stop it, or choose another port; 0 picks a free one)"
    )


def test_sigint_ends_the_fake_upstream_without_a_traceback() -> None:
    command = [sys.executable, "-m", "stateway", "fake-upstream", "--port", "0"]
    process = interruptible(command)
    assert process.stdout is not None
    while "listening on" not in process.stdout.readline():
        assert process.poll() is None
    process.send_signal(signal.SIGINT)
    _, stderr = process.communicate(timeout=30)
    assert process.returncode == -signal.SIGINT
    assert "Traceback" not in stderr


def test_a_database_failure_names_the_database_then_says_what_it_said(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """One clean line: which database, then its error (whatever punctuation ends it)."""
    database = f"sqlite:///{tmp_path}/newer.db"
    assert cli.main(["migrate", "--database", database]) == 0
    with sqlite3.connect(tmp_path / "newer.db") as db:
        db.execute("UPDATE alembic_version SET version_num = '9999_future'")
    capsys.readouterr()

    assert cli.main(["migrate", "--database", database]) == 1
    assert capsys.readouterr().err == (
        f"stateway: SQLite database at {tmp_path}/newer.db: The database is at schema revision"
        f" '9999_future', which stateway {__version__} does not know (its newest is"
        f" '{HEAD_REVISION}'): a newer stateway has migrated it. Serve it with that version"
        " (a schema is never downgraded on start-up).\n"
    )


def test_the_start_up_description_shows_redis_rate_limits_and_retention() -> None:
    """What replicas share and what they enforce, each on its own line when set; Redis's
    password masked as an upstream URL's is."""
    env = {
        "STATEWAY_REDIS_URL": "redis://ops:s3cret-pass@10.0.0.5:6379/0",
        "STATEWAY_REQUESTS_PER_MINUTE": "60",
        "STATEWAY_TOKENS_PER_MINUTE": "100000",
        "STATEWAY_CONCURRENT_REQUESTS": "4",
        "STATEWAY_RETENTION": "30d",
    }
    out = io.StringIO()

    subcommands._describe(load_config(Overrides(), env), out)

    lines = out.getvalue().splitlines()
    assert "s3cret-pass" not in out.getvalue()
    assert "retention: stored responses kept 30d" in lines
    assert "redis: redis://ops:***@10.0.0.5:6379/0 (key prefix 'stateway:')" in lines
    assert (
        "rate limits per principal: 60 requests/min, 100000 tokens/min, 4 concurrent requests"
    ) in lines


def test_the_start_up_description_leaves_out_what_is_not_set() -> None:
    env = {"STATEWAY_TOKENS_PER_MINUTE": "500"}
    out = io.StringIO()

    subcommands._describe(load_config(Overrides(), env), out)

    assert "rate limits per principal: 500 tokens/min" in out.getvalue().splitlines()
    assert "redis" not in out.getvalue()
    assert "retention" not in out.getvalue()


@pytest.mark.parametrize(
    ("url", "shown"),
    [
        ("redis://:s3cret-pass@cache:6379", "redis://:***@cache:6379"),
        ("rediss://cache:6380/1", "rediss://cache:6380/1"),
        (
            "unix:///run/redis.sock?db=1&password=s3cret-pass",
            "unix:///run/redis.sock?db=1&password=***",
        ),
    ],
)
def test_the_start_up_description_masks_a_redis_password_however_given(
    url: str, shown: str
) -> None:
    out = io.StringIO()

    subcommands._describe(load_config(Overrides(), {"STATEWAY_REDIS_URL": url}), out)

    assert f"redis: {shown} (key prefix 'stateway:')" in out.getvalue().splitlines()


def test_a_stateway_variable_that_sets_nothing_is_warned_of(tmp_path: Path) -> None:
    """A typo'd variable was ignored in silence, the default served in its place."""
    config = tmp_path / "stateway.toml"
    config.write_text(
        '[[backends]]\nname = "up"\nurl = "http://127.0.0.1:8000/v1"\n'
        'api_key_env = "STATEWAY_VLLM_KEY"\n'
    )
    env = {
        "STATEWAY_UPSTREAM_URL": "http://gpu:8000/v1",  # for STATEWAY_UPSTREAM
        "STATEWAY_PROT": "9000",  # for STATEWAY_PORT
        "STATEWAY_FOO": "1",  # near no variable
        "STATEWAY_VLLM_KEY": "sk-x",  # the file names it: read
        "STATEWAY_MAX_BODY_BYTES": "65536",  # a setting's
        "STATEWAY_TEST_POSTGRES_URL": "postgresql://x",  # the test suite's
    }
    result = stateway("check-config", "--config", str(config), env=env)
    assert result.returncode == 0, result.stderr
    assert result.stderr.splitlines() == [
        "stateway: warning: STATEWAY_FOO is no setting's variable (ignored)",
        "stateway: warning: STATEWAY_PROT is no setting's variable (ignored); "
        "did you mean STATEWAY_PORT?",
        "stateway: warning: STATEWAY_UPSTREAM_URL is no setting's variable (ignored); "
        "did you mean STATEWAY_UPSTREAM?",
    ]
    assert stateway("check-config").stderr == ""


def test_output_into_a_closed_pipe_ends_quietly() -> None:
    """``stateway check-config | head -1``, ``stateway keys list | head``: a reader that
    left before the output ends is no traceback."""
    read, write = os.pipe()
    os.close(read)  # the reader gone before anything is written
    with os.fdopen(write, "w") as stdout:
        result = subprocess.run(
            [sys.executable, "-m", "stateway", "check-config"],
            stdout=stdout,
            stderr=subprocess.PIPE,
            text=True,
            env=child_env(),
            timeout=60,
            check=False,
        )
    assert "Traceback" not in result.stderr
    assert "BrokenPipeError" not in result.stderr
    assert result.returncode == 1


def test_check_config_names_where_a_refused_setting_came_from(tmp_path: Path) -> None:
    path = tmp_path / "gateway.toml"
    path.write_text('[server]\nhost = "127.0.0.1"\nprot = 9\n')
    result = stateway("check-config", "--config", str(path), env={"STATEWAY_MAX_BODY_BYTES": "5"})
    assert result.returncode == 2
    assert (
        f"server.prot: Extra inputs are not permitted; did you mean port? ({path}, line 3)"
        in result.stderr
    )
    assert "(set by STATEWAY_MAX_BODY_BYTES)" in result.stderr
    assert "Traceback" not in result.stderr


def test_check_config_takes_serves_command_line(tmp_path: Path) -> None:
    """An operator checks the command line serving will be given: its --host (refused
    beyond loopback without auth, as serving refuses it) and --port included."""
    database = f"sqlite:///{tmp_path}/x.db"
    refused = stateway(
        "check-config", "--host", "0.0.0.0", "--port", "9000", "--database", database
    )
    assert refused.returncode == 2
    assert "refusing to serve 0.0.0.0 without auth" in refused.stderr
    accepted = stateway("check-config", "--host", "127.0.0.1", "--port", "9000")
    assert accepted.returncode == 0, accepted.stderr
    out_of_range = stateway("check-config", "--port", "70000")
    assert out_of_range.returncode == 2
    assert "server.port: Input should be less than or equal to 65535 (set by --port)" in (
        out_of_range.stderr
    )
