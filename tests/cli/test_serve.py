"""``stateway serve``'s start-up: what it describes, warns of and refuses (auth, hosts,
upstream URLs, variables)."""

import errno
import io
import logging
import socket
import sqlite3
import sys
import time
import urllib.error
import urllib.request
from contextlib import closing
from pathlib import Path

import pytest

from stateway import cli, subcommands
from stateway.app.gateway import GatewayParts
from stateway.config import Config, Overrides, load_config
from stateway.core.errors import StorageError
from stateway.fake_upstream.launch import start_fake_upstream
from stateway.launch import launch
from stateway.reload import Compiled
from tests.cli.commands import stateway, stateway_here


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


def test_a_start_up_failing_after_the_database_opened_closes_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The key check failing (the database failing as its keys are read): serving ends
    reporting it, and the store it opened is closed, not left to the loop's end."""
    import stateway.app

    opened = stateway.app.open_gateway
    closed: list[bool] = []

    async def opening(compiled: Compiled, flags: Overrides) -> GatewayParts:
        parts = await opened(compiled, flags)
        store_close = parts.store.aclose

        async def close() -> None:
            closed.append(True)
            await store_close()

        monkeypatch.setattr(parts.store, "aclose", close)
        return parts

    async def failing(config: Config, keys: object) -> None:
        raise StorageError("The database failed as its keys were read")

    monkeypatch.setattr(stateway.app, "open_gateway", opening)
    monkeypatch.setattr(subcommands, "_warn_without_active_keys", failing)
    monkeypatch.setattr(subcommands, "bind_socket", lambda host, port: socket.socket())
    monkeypatch.setattr(subcommands, "configure_logging", lambda form, level: None)

    code = cli.main(["serve", "--database", f"sqlite:///{tmp_path}/x.db"])

    assert code == 1
    assert closed


def test_a_start_up_failing_after_the_lease_was_registered_gives_it_back(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A step after the lease's registration failing (the key check, here): serving
    ends reporting it, the lease's beat stops and its row is removed, not left for the
    other replicas to judge once it expires."""

    async def failing(config: Config, keys: object) -> None:
        raise StorageError("The database failed as its keys were read")

    monkeypatch.setattr(subcommands, "_warn_without_active_keys", failing)
    monkeypatch.setattr(subcommands, "bind_socket", lambda host, port: socket.socket())
    monkeypatch.setattr(subcommands, "configure_logging", lambda form, level: None)
    database = tmp_path / "x.db"

    code = cli.main(["serve", "--database", f"sqlite:///{database}"])

    assert code == 1
    with closing(sqlite3.connect(database)) as connection:
        assert connection.execute("select owner from run_owners").fetchall() == []


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


def start_up_log(tmp_path: Path, scheme: str) -> tuple[str, str]:
    """What ``serve`` logged at start-up over the fake upstream's URL without ``/v1``,
    its ``http://`` written as ``scheme`` (credentials, say), once its check of the
    upstream failed; and that URL."""
    log_path = tmp_path / "stderr.log"
    with start_fake_upstream() as fake, log_path.open("w") as stderr:
        root = fake.removesuffix("/v1").replace("http://", scheme)
        command = [
            sys.executable, "-m", "stateway", "serve", "--port", "0",
            "--database", f"sqlite:///{tmp_path}/x.db", "--upstream", root,
        ]  # fmt: skip
        with launch(command, "listening on ", stderr=stderr):
            for _ in range(200):
                if "GET /models failed" in log_path.read_text():
                    break
                time.sleep(0.05)
    return log_path.read_text(), root


def test_serve_warns_without_an_upstream_urls_password(tmp_path: Path) -> None:
    logged, _ = start_up_log(tmp_path, "http://ops:s3cret-pass@")
    assert "GET /models failed at start-up" in logged
    assert "http://ops:***@127.0.0.1:" in logged
    assert "s3cret-pass" not in logged


def test_serve_warns_at_start_up_about_an_upstream_url_without_its_base_path(
    tmp_path: Path,
) -> None:
    """vLLM's URL given without ``/v1``: every request would be a 404 ``model_not_found``,
    which says nothing about the URL; the start-up check says it."""
    logged, root = start_up_log(tmp_path, "http://")
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
    result = stateway_here("check-config", "--config", str(config), env=env)
    assert result.returncode == 0, result.stderr
    assert result.stderr.splitlines() == [
        "stateway: warning: STATEWAY_FOO is no setting's variable (ignored)",
        "stateway: warning: STATEWAY_PROT is no setting's variable (ignored); "
        "did you mean STATEWAY_PORT?",
        "stateway: warning: STATEWAY_UPSTREAM_URL is no setting's variable (ignored); "
        "did you mean STATEWAY_UPSTREAM?",
    ]
    assert stateway("check-config").stderr == ""  # a process of its own: nothing else said
