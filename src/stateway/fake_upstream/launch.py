"""Run the real fake upstream in a subprocess, for test suites and benchmarks.

::

    with start_fake_upstream() as base_url:  # e.g. "http://127.0.0.1:43121/v1"
        client = OpenAI(base_url=base_url, api_key="unused")
"""

from __future__ import annotations

import os
import queue
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import IO

import stateway
from stateway.fake_upstream.server import ANNOUNCEMENT


@contextmanager
def start_fake_upstream(
    api_key: str | None = None,
    *,
    host: str = "127.0.0.1",
    model_names: list[str] | None = None,
    startup_timeout: float = 30.0,
) -> Iterator[str]:
    """Start ``python -m stateway.fake_upstream --port 0``; yield its ``.../v1`` base URL.

    The server is terminated (killed if it lingers) when the block exits.
    """
    command = [sys.executable, "-m", "stateway.fake_upstream", "--host", host, "--port", "0"]
    if api_key is not None:
        command += ["--api-key", api_key]
    for name in model_names or []:
        command += ["--model", name]
    process = subprocess.Popen(
        command,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        text=True,
        env=_child_env(),
    )
    assert process.stdout is not None
    lines: queue.Queue[str | None] = queue.Queue()
    pump = threading.Thread(target=_pump, args=(process.stdout, lines), daemon=True)
    pump.start()
    try:
        yield _await_announcement(process, lines, startup_timeout)
    finally:
        _stop(process, pump)


def _child_env() -> dict[str, str]:
    """The environment, with this ``stateway`` importable even if it is not installed."""
    env = dict(os.environ)
    source_root = str(Path(stateway.__file__).resolve().parent.parent)
    existing = env.get("PYTHONPATH")
    env["PYTHONPATH"] = source_root + (os.pathsep + existing if existing else "")
    return env


def _await_announcement(
    process: subprocess.Popen[str], lines: queue.Queue[str | None], timeout: float
) -> str:
    deadline = time.monotonic() + timeout
    try:
        while (line := lines.get(timeout=max(0.0, deadline - time.monotonic()))) is not None:
            if line.startswith(ANNOUNCEMENT):
                return line[len(ANNOUNCEMENT) :].strip()
    except queue.Empty:
        raise RuntimeError(f"fake upstream did not start within {timeout}s") from None
    raise RuntimeError(f"fake upstream exited early with code {process.wait()}")


def _pump(stream: IO[str], lines: queue.Queue[str | None]) -> None:
    """Forward stdout lines, and keep draining so the child never blocks on a full pipe."""
    for line in stream:
        lines.put(line)
    lines.put(None)


def _stop(process: subprocess.Popen[str], pump: threading.Thread) -> None:
    if process.poll() is None:
        process.terminate()
        try:
            process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
    pump.join(timeout=5)  # it ends at EOF, once the server has exited
    if process.stdout is not None and not pump.is_alive():
        process.stdout.close()
