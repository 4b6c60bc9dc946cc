"""Start the servers under test as subprocesses, keeping their PIDs (for RSS, CPU, py-spy).

:func:`stateway.launch.launch` starts each one and waits for its announcement line; the
benchmark keeps the process id and sends stderr to a log file.
"""

from __future__ import annotations

import sys
import tempfile
from collections.abc import Iterator, Mapping, Sequence
from contextlib import AbstractContextManager, contextmanager
from dataclasses import dataclass
from pathlib import Path

from bench.passthrough import ANNOUNCEMENT as PASSTHROUGH_ANNOUNCEMENT
from stateway.fake_upstream.server import ANNOUNCEMENT as FAKE_ANNOUNCEMENT
from stateway.launch import GATEWAY_ANNOUNCEMENT, launch


@dataclass(frozen=True, slots=True)
class Server:
    """A running server: its URL (as announced) and its process id."""

    name: str
    url: str
    pid: int


@contextmanager
def start_server(
    name: str,
    command: Sequence[str],
    announcement: str,
    log_dir: Path,
    *,
    timeout: float = 60.0,
    env: Mapping[str, str] | None = None,
) -> Iterator[Server]:
    """Start ``command`` (with ``env`` added to the environment); yield once it prints
    ``announcement`` URL; stop it on exit. Its stderr goes to ``LOG_DIR/NAME.stderr.log``."""
    log_path = log_dir / f"{name}.stderr.log"
    with (
        log_path.open("w") as log,
        launch(command, announcement, env=env, timeout=timeout, stderr=log) as launched,
    ):
        yield Server(name, launched.url, launched.pid)


def fake_upstream(log_dir: Path) -> AbstractContextManager[Server]:
    """The fake model server; its URL is the ``.../v1`` base URL."""
    command = [sys.executable, "-m", "stateway.fake_upstream", "--host", "127.0.0.1"]
    return start_server("fake", [*command, "--port", "0"], FAKE_ANNOUNCEMENT, log_dir)


def passthrough(upstream_base_url: str, log_dir: Path) -> AbstractContextManager[Server]:
    """The bare hop (:mod:`bench.passthrough`) in front of ``upstream_base_url``."""
    command = [sys.executable, "-m", "bench.passthrough", "--upstream", upstream_base_url]
    return start_server("floor", [*command, "--port", "0"], PASSTHROUGH_ANNOUNCEMENT, log_dir)


def gateway(
    name: str,
    upstream_base_url: str,
    database: Path | str,
    log_dir: Path,
    *,
    config: Path | None = None,
) -> AbstractContextManager[Server]:
    """``stateway serve`` on a chat upstream and a SQLite file, or a database URL (and a
    config file)."""
    command = [
        sys.executable,
        "-m",
        "stateway",
        "serve",
        "--port",
        "0",
        "--upstream",
        upstream_base_url,
        "--upstream-api",
        "chat",
        "--database",
        database if isinstance(database, str) else f"sqlite:///{database}",
    ]
    if config is not None:
        command += ["--config", str(config)]
    return start_server(name, command, GATEWAY_ANNOUNCEMENT, log_dir)


@contextmanager
def gateway_on_fake(database: str | None) -> Iterator[Server]:
    """A gateway over the fake model server, in a scratch folder for their logs, storing
    in ``database`` (a URL), or in a fresh SQLite file there."""
    with tempfile.TemporaryDirectory(prefix="stateway-bench-") as tmp:
        work = Path(tmp)
        with (
            fake_upstream(work) as fake,
            gateway("gateway", fake.url, database or work / "bench.db", work) as server,
        ):
            yield server
