"""``stateway check-config``: what it accepts, refuses and describes, as serving would."""

from pathlib import Path

import pytest

from stateway import cli
from tests.cli.commands import stateway, stateway_here


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
    result = stateway_here("check-config", "--config", str(path))
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
    result = stateway_here("check-config", "--config", str(path))
    assert result.returncode == 0, result.stderr
    assert "route assistant: a/a-model (weight 2, priority 0)" in result.stdout
    assert "alias smart -> assistant" in result.stdout
    assert "upstream a: http://127.0.0.1:8000/v1 (chat API; its routes' models)" in result.stdout
    path.write_text(text.replace("backend = 'a'", "backend = 'gone'"))
    rejected = stateway_here("check-config", "--config", str(path))
    assert rejected.returncode != 0
    assert "unknown backend 'gone'" in rejected.stderr
    assert "Traceback" not in rejected.stderr


def test_check_config_reports_a_missing_key_variable() -> None:
    result = stateway_here("check-config", "--upstream-api-key-env", "STATEWAY_TEST_UNSET_KEY")
    assert result.returncode != 0
    assert "STATEWAY_TEST_UNSET_KEY is not set" in result.stderr


def test_the_reload_endpoint_without_its_credential_is_refused_at_start(tmp_path: Path) -> None:
    path = tmp_path / "admin.toml"
    path.write_text("[admin]\nreload_endpoint = true\napi_key_env = 'STATEWAY_TEST_UNSET_ADMIN'\n")
    for run, command in ((stateway_here, ["check-config"]), (stateway, ["serve", "--port", "0"])):
        result = run(*command, "--config", str(path))
        assert result.returncode == 2
        assert "STATEWAY_TEST_UNSET_ADMIN (admin.api_key_env) is not set" in result.stderr
        assert "Traceback" not in result.stderr


def test_check_config_refuses_a_malformed_sealing_key() -> None:
    key = "c2hvcnQ="  # "short"
    result = stateway_here("check-config", env={"STATEWAY_SEALING_KEY": key})
    assert result.returncode == 2
    assert "security.sealing_key" in result.stderr
    assert "32 bytes" in result.stderr
    assert key not in result.stderr
    assert "Traceback" not in result.stderr


def test_check_config_refuses_a_public_address_without_auth_as_serving_does(
    tmp_path: Path,
) -> None:
    """check-config tells whether serving will start: a file's public host without auth
    is refused by both, alike; with ``--insecure-no-auth`` check-config accepts it and says
    who may call."""
    path = tmp_path / "public.toml"
    path.write_text("[server]\nhost = '0.0.0.0'\n")
    database = f"sqlite:///{tmp_path}/x.db"
    for run, command in ((stateway_here, ["check-config"]), (stateway, ["serve", "--port", "0"])):
        refused = run(*command, "--config", str(path), "--database", database)
        assert refused.returncode == 2, command
        assert "refusing to serve 0.0.0.0 without auth" in refused.stderr
        assert "Traceback" not in refused.stderr

    allowed = stateway_here("check-config", "--config", str(path), "--insecure-no-auth")

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

    listed = stateway_here("check-config", "--config", str(path), "--database", database)
    anyone = stateway_here(
        "check-config", "--database", database, env={"STATEWAY_CORS_ORIGINS": "*"}
    )

    assert listed.returncode == 0, listed.stderr
    assert "browsers: the web pages of http://localhost:5173 may call (CORS)" in listed.stdout
    assert "warning" not in listed.stderr
    assert anyone.returncode == 0, anyone.stderr
    assert "browsers: any web page may call (CORS)" in anyone.stdout
    assert 'warning: cors_origins = ["*"] without auth' in anyone.stderr


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
    for run, command in ((stateway_here, ["check-config"]), (stateway, ["serve", "--port", "0"])):
        refused = run(*command, "--database", database, env=env)
        assert refused.returncode == 2, command
        assert named in refused.stderr
        assert "Traceback" not in refused.stderr


def test_check_config_says_who_may_call(tmp_path: Path) -> None:
    path = tmp_path / "auth.toml"
    path.write_text(
        "[auth]\napi_keys = true\n[auth.oidc]\nissuer = 'https://idp.example'\n"
        "audience = 'stateway'\ntenant_claim = 'org'\n"
    )
    described = stateway_here("check-config", "--config", str(path))
    plain = stateway_here("check-config")

    assert described.returncode == 0, described.stderr
    assert (
        "auth: API keys and OIDC tokens from https://idp.example (tenant claim 'org')"
        in described.stdout
    )
    assert "auth: none (every caller is the default tenant; loopback only)" in plain.stdout


def test_check_config_names_where_a_refused_setting_came_from(tmp_path: Path) -> None:
    path = tmp_path / "gateway.toml"
    path.write_text('[server]\nhost = "127.0.0.1"\nprot = 9\n')
    result = stateway_here(
        "check-config", "--config", str(path), env={"STATEWAY_MAX_BODY_BYTES": "5"}
    )
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
    refused = stateway_here(
        "check-config", "--host", "0.0.0.0", "--port", "9000", "--database", database
    )
    assert refused.returncode == 2
    assert "refusing to serve 0.0.0.0 without auth" in refused.stderr
    accepted = stateway_here("check-config", "--host", "127.0.0.1", "--port", "9000")
    assert accepted.returncode == 0, accepted.stderr
    out_of_range = stateway_here("check-config", "--port", "70000")
    assert out_of_range.returncode == 2
    assert "server.port: Input should be less than or equal to 65535 (set by --port)" in (
        out_of_range.stderr
    )
