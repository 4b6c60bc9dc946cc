"""A real ``stateway serve`` process with a configuration file, its log and its SQLite
database at hand, for tests of per-backend settings."""

from __future__ import annotations

import json
import sqlite3
import sys
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from stateway.launch import GATEWAY_ANNOUNCEMENT, launch


@dataclass(frozen=True)
class RunningGateway:
    url: str
    pid: int
    log: Path
    """The gateway's stderr."""
    database: Path

    def stored(self, response_id: str) -> dict[str, Any]:
        """The stored state of a response, read from the database itself."""
        with sqlite3.connect(self.database) as db:
            row = db.execute("SELECT body FROM responses WHERE id = ?", (response_id,)).fetchone()
        assert row is not None, f"{response_id} is not stored"
        body: dict[str, Any] = json.loads(row[0])
        return body

    def peak_rss_kib(self) -> int:
        """The process's peak resident memory (VmHWM), in KiB."""
        for line in Path(f"/proc/{self.pid}/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1])
        raise AssertionError("no VmHWM in /proc status")


def _toml(table: Mapping[str, Any]) -> str:
    return "".join(f"{key} = {_value(value)}\n" for key, value in table.items())


def _value(value: Any) -> str:
    """A TOML value: tables inline, the rest as JSON writes it (TOML reads it alike)."""
    if isinstance(value, Mapping):
        return "{" + ", ".join(f"{json.dumps(k)} = {_value(v)}" for k, v in value.items()) + "}"
    if isinstance(value, list):
        return "[" + ", ".join(_value(v) for v in value) + "]"
    return json.dumps(value)


@contextmanager
def configured_gateway(
    directory: Path,
    backend: Mapping[str, Any],
    server: Mapping[str, Any] | None = None,
    env: Mapping[str, str] | None = None,
    tables: str = "",
) -> Iterator[RunningGateway]:
    """Serve one catch-all ``[[backends]]`` table (``name = "default"`` unless given),
    after the TOML ``tables`` (``[auth]``, ...)."""
    config = directory / "stateway.toml"
    text = "[server]\n" + _toml(server or {}) + tables
    text += '[[backends]]\nname = "default"\nmodels = []\n' + _toml(backend)
    config.write_text(text)
    database = directory / "gateway.db"
    log = directory / "gateway.log"
    command = [sys.executable, "-m", "stateway", "serve", "--port", "0"]
    command += ["--config", str(config), "--database", f"sqlite:///{database}"]
    with (
        log.open("w") as stderr,
        launch(command, GATEWAY_ANNOUNCEMENT, env=env, stderr=stderr, timeout=60) as launched,
    ):
        yield RunningGateway(launched.url, launched.pid, log, database)
