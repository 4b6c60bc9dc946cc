"""Start the servers under test as subprocesses, keeping their PIDs (for RSS, CPU, py-spy).

:func:`stateway.launch.start_announced` yields only a URL; the benchmark also needs the
process id, so this is the same idea with the PID kept and stderr sent to a log file.
"""

from __future__ import annotations

import queue
import subprocess
import sys
import threading
from collections.abc import Iterator, Sequence
from contextlib import AbstractContextManager, contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import IO

from bench.passthrough import ANNOUNCEMENT as PASSTHROUGH_ANNOUNCEMENT
from stateway.fake_upstream.server import ANNOUNCEMENT as FAKE_ANNOUNCEMENT
from stateway.launch import GATEWAY_ANNOUNCEMENT, child_env


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
) -> Iterator[Server]:
    """Start ``command``; yield once it prints ``announcement`` URL; stop it on exit."""
    log_path = log_dir / f"{name}.stderr.log"
    with log_path.open("w") as log:
        process = subprocess.Popen(
            list(command),
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=log,
            text=True,
            env=child_env(),
        )
        try:
            url = _await_announcement(process, announcement, timeout, log_path)
            yield Server(name, url, process.pid)
        finally:
            _stop(process)


def fake_upstream(log_dir: Path) -> AbstractContextManager[Server]:
    """The fake model server; its URL is the ``.../v1`` base URL."""
    command = [sys.executable, "-m", "stateway.fake_upstream", "--host", "127.0.0.1"]
    return start_server("fake", [*command, "--port", "0"], FAKE_ANNOUNCEMENT, log_dir)


def passthrough(upstream_base_url: str, log_dir: Path) -> AbstractContextManager[Server]:
    """The bare hop (:mod:`bench.passthrough`) in front of ``upstream_base_url``."""
    command = [sys.executable, "-m", "bench.passthrough", "--upstream", upstream_base_url]
    return start_server("floor", [*command, "--port", "0"], PASSTHROUGH_ANNOUNCEMENT, log_dir)


def gateway(
    name: str, upstream_base_url: str, database: Path, log_dir: Path
) -> AbstractContextManager[Server]:
    """``stateway serve`` on a chat upstream and a SQLite file."""
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
        f"sqlite:///{database}",
    ]
    return start_server(name, command, GATEWAY_ANNOUNCEMENT, log_dir)


def _await_announcement(
    process: subprocess.Popen[str], announcement: str, timeout: float, log_path: Path
) -> str:
    assert process.stdout is not None
    lines: queue.Queue[str | None] = queue.Queue()
    threading.Thread(target=_pump, args=(process.stdout, lines), daemon=True).start()
    try:
        while (line := lines.get(timeout=timeout)) is not None:
            position = line.find(announcement)
            if position >= 0:
                return line[position + len(announcement) :].strip()
    except queue.Empty:
        raise RuntimeError(f"{process.args!r} did not start within {timeout}s") from None
    tail = log_path.read_text()[-2000:]
    raise RuntimeError(f"{process.args!r} exited early with code {process.wait()}:\n{tail}")


def _pump(stream: IO[str], lines: queue.Queue[str | None]) -> None:
    """Forward stdout lines, and keep draining so the child never blocks on a full pipe."""
    for line in stream:
        lines.put(line)
    lines.put(None)


def _stop(process: subprocess.Popen[str]) -> None:
    if process.poll() is None:
        process.terminate()
        try:
            process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
    if process.stdout is not None:
        process.stdout.close()
