"""Real ``stateway serve`` processes with auth configured, and API keys made the way an
operator makes them (``stateway keys create`` against the gateway's database)."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

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
    return subprocess.run(
        [sys.executable, "-m", "stateway", *args],
        capture_output=True,
        text=True,
        env=child_env(),
        timeout=120,
        check=False,
    )


def create_key(database: str, tenant: str, *extra: str) -> str:
    """``stateway keys create --tenant TENANT EXTRA...``: the key it prints, alone."""
    created = stateway("keys", "create", "--tenant", tenant, "--database", database, *extra)
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
