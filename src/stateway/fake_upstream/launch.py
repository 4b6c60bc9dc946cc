"""Run the real fake upstream in a subprocess, for test suites and benchmarks.

::

    with start_fake_upstream() as base_url:  # e.g. "http://127.0.0.1:43121/v1"
        client = OpenAI(base_url=base_url, api_key="unused")
"""

from __future__ import annotations

import sys
from collections.abc import Iterator
from contextlib import contextmanager

from stateway.fake_upstream.server import ANNOUNCEMENT
from stateway.launch import start_announced


@contextmanager
def start_fake_upstream(
    api_key: str | None = None,
    *,
    host: str = "127.0.0.1",
    port: int = 0,
    model_names: list[str] | None = None,
    keep_alive: int | None = None,
    system_first: bool = False,
    reasoning_efforts: tuple[str, ...] | None = None,
    tokenizer: str | None = None,
    startup_timeout: float = 30.0,
) -> Iterator[str]:
    """Start ``python -m stateway.fake_upstream --port PORT`` (0: any free port); yield its
    ``.../v1`` base URL.

    The server is terminated (killed if it lingers) when the block exits.
    """
    command = fake_upstream_command(
        api_key,
        host=host,
        port=port,
        model_names=model_names,
        keep_alive=keep_alive,
        system_first=system_first,
        reasoning_efforts=reasoning_efforts,
        tokenizer=tokenizer,
    )
    with start_announced(command, ANNOUNCEMENT, timeout=startup_timeout) as url:
        yield url


def fake_upstream_command(
    api_key: str | None = None,
    *,
    host: str = "127.0.0.1",
    port: int = 0,
    model_names: list[str] | None = None,
    keep_alive: int | None = None,
    system_first: bool = False,
    reasoning_efforts: tuple[str, ...] | None = None,
    tokenizer: str | None = None,
) -> list[str]:
    """The command line of the fake with these options (for :func:`stateway.launch.launch`,
    to keep its process id or its stderr)."""
    command = [sys.executable, "-m", "stateway.fake_upstream", "--host", host, "--port", str(port)]
    if api_key is not None:
        command += ["--api-key", api_key]
    for name in model_names or []:
        command += ["--model", name]
    if keep_alive is not None:
        command += ["--keep-alive", str(keep_alive)]
    if system_first:
        command.append("--system-first")
    for effort in reasoning_efforts or ():
        command += ["--reasoning-effort", effort]
    if tokenizer is not None:
        command += ["--tokenizer", tokenizer]
    return command
