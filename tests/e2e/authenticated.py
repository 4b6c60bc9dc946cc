"""Real ``stateway serve`` processes with auth configured, and API keys made the way an
operator makes them (``stateway keys create`` against the gateway's database), the
command run by the test's own process (:func:`keys_command`)."""

from __future__ import annotations

import io
import subprocess
import sys
from collections.abc import Iterator, Mapping
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager, redirect_stderr, redirect_stdout
from dataclasses import dataclass
from pathlib import Path

from stateway import cli
from stateway.identity.keys import looks_like_key
from stateway.launch import GATEWAY_ANNOUNCEMENT, child_env, launch

API_KEYS = "[auth]\napi_keys = true\nkey_cache_ttl = 0.5\n"
"""A gateway taking API keys; revocations reach it within half a second."""


@dataclass(frozen=True)
class AuthGateway:
    url: str
    log: Path
    """The gateway's stderr."""
    database: str

    def create_key(self, tenant: str, *extra: str) -> str:
        return create_key(self.database, tenant, *extra)


def stateway(*args: str) -> subprocess.CompletedProcess[str]:
    """``stateway ARGS`` as a process of its own, as an operator runs it."""
    return subprocess.run(
        [sys.executable, "-m", "stateway", *args],
        capture_output=True,
        text=True,
        env=child_env(),
        timeout=120,
        check=False,
    )


def keys_command(*args: str) -> subprocess.CompletedProcess[str]:
    """``stateway keys ARGS`` run by this process: the command's own code, as
    ``python -m stateway`` runs it (:func:`stateway.cli.main`), what it prints captured.

    A process of its own spends a second or two importing before the command starts (a
    loaded machine's test waited ten for the two a revocation took); :func:`stateway`
    starts one where running the command as an operator does is what a test is about.
    On a thread of its own: the command's ``asyncio.run`` refuses a running event loop.
    """
    out, err = io.StringIO(), io.StringIO()
    with ThreadPoolExecutor(1) as thread, redirect_stdout(out), redirect_stderr(err):
        code = thread.submit(cli.main, ["keys", *args]).result()
    return subprocess.CompletedProcess(
        ["stateway", "keys", *args], code, out.getvalue(), err.getvalue()
    )


def create_key(database: str, tenant: str, *extra: str) -> str:
    """``stateway keys create --tenant TENANT EXTRA...``: the key it prints, alone."""
    created = keys_command("create", "--tenant", tenant, "--database", database, *extra)
    assert created.returncode == 0, created.stderr
    key = created.stdout.strip()
    assert created.stdout == key + "\n"
    assert looks_like_key(key)
    return key


@contextmanager
def auth_gateway(
    directory: Path,
    upstream: str,
    database: str,
    auth: str = API_KEYS,
    env: Mapping[str, str] | None = None,
) -> Iterator[AuthGateway]:
    """The gateway over ``upstream`` (its Chat wire) and ``database``, configured with the
    TOML ``auth`` tables; ``env``: variables it has besides the environment's."""
    config = directory / "stateway.toml"
    config.write_text(auth)
    log = directory / "gateway.log"
    command = [sys.executable, "-m", "stateway", "serve", "--port", "0", "--config", str(config)]
    command += ["--upstream", upstream, "--database", database]
    with (
        log.open("w") as stderr,
        launch(
            command, GATEWAY_ANNOUNCEMENT, env=child_env(env), stderr=stderr, timeout=60
        ) as launched,
    ):
        yield AuthGateway(launched.url, log, database)
