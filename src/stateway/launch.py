"""Run stateway's own servers as subprocesses, for test suites and benchmarks.

Each server prints one line announcing its URL once it listens (``--port 0`` picks a free
port); :func:`start_announced` starts a command, waits for that line and yields the URL,
and stops the process when the block exits.

::

    with start_gateway(["--upstream", upstream_url]) as url:   # "http://127.0.0.1:PORT"
        ...
"""

from __future__ import annotations

import os
import queue
import subprocess
import sys
import threading
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import IO

import stateway

GATEWAY_ANNOUNCEMENT = "listening on "


@contextmanager
def start_gateway(
    args: Sequence[str], *, env: Mapping[str, str] | None = None, startup_timeout: float = 60.0
) -> Iterator[str]:
    """``stateway serve --port 0 ARGS``; yields ``http://HOST:PORT`` (no ``/v1``)."""
    command = [sys.executable, "-m", "stateway", "serve", "--port", "0", *args]
    with start_announced(command, GATEWAY_ANNOUNCEMENT, env=env, timeout=startup_timeout) as url:
        yield url


@contextmanager
def start_announced(
    command: Sequence[str],
    announcement: str,
    *,
    env: Mapping[str, str] | None = None,
    timeout: float = 30.0,
) -> Iterator[str]:
    """Start ``command``; yield what follows ``announcement`` on its first line holding it."""
    with launch(command, announcement, env=env, timeout=timeout) as launched:
        yield launched.url


@dataclass(frozen=True, slots=True)
class Launched:
    url: str
    pid: int


@contextmanager
def launch(
    command: Sequence[str],
    announcement: str,
    *,
    env: Mapping[str, str] | None = None,
    timeout: float = 30.0,
    stderr: IO[str] | None = None,
) -> Iterator[Launched]:
    """Like :func:`start_announced`, also giving the process id; ``stderr`` may be
    redirected (to a log file, say)."""
    process = subprocess.Popen(
        list(command),
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=stderr,
        text=True,
        env=child_env(env),
    )
    try:
        yield Launched(_await_announcement(process, announcement, timeout), process.pid)
    finally:
        _stop(process)


def child_env(extra: Mapping[str, str] | None = None) -> dict[str, str]:
    """The environment, with this ``stateway`` importable even if it is not installed."""
    env = dict(os.environ)
    source_root = str(Path(stateway.__file__).resolve().parent.parent)
    existing = env.get("PYTHONPATH")
    env["PYTHONPATH"] = source_root + (os.pathsep + existing if existing else "")
    env.update(extra or {})
    return env


def _await_announcement(process: subprocess.Popen[str], announcement: str, timeout: float) -> str:
    assert process.stdout is not None
    lines: queue.Queue[str | None] = queue.Queue()
    threading.Thread(target=_pump, args=(process.stdout, lines), daemon=True).start()
    try:
        while (line := lines.get(timeout=timeout)) is not None:
            position = line.find(announcement)
            if position >= 0:
                return line[position + len(announcement) :].strip()
    except queue.Empty:
        raise RuntimeError(f"{command_name(process)} did not start within {timeout}s") from None
    raise RuntimeError(f"{command_name(process)} exited early with code {process.wait()}")


def command_name(process: subprocess.Popen[str]) -> str:
    args = process.args
    return " ".join(args) if isinstance(args, list) else str(args)


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
