"""Run the real fake upstream in a subprocess, for test suites and benchmarks.

::

    with start_fake_upstream() as base_url:  # e.g. "http://127.0.0.1:43121/v1"
        client = OpenAI(base_url=base_url, api_key="unused")
"""

from __future__ import annotations

import sys
from collections.abc import Iterator
from contextlib import contextmanager
from typing import TypedDict, Unpack

from stateway.fake_upstream.server import ANNOUNCEMENT
from stateway.launch import start_announced


class FakeOptions(TypedDict, total=False):
    """The fake's command-line options (``python -m stateway.fake_upstream --help``)."""

    host: str
    """Default ``127.0.0.1``."""
    port: int
    """Default 0: any free port."""
    model_names: list[str] | None
    keep_alive: int | None
    system_first: bool
    content_required: bool
    """Refuse a message whose content is null, as LM Studio does."""
    reasoning_efforts: tuple[str, ...] | None
    reasoning_field: str | None
    tokenizer: str | None
    max_model_len: int | None
    """A context window told as vLLM tells it."""
    vllm_renderer: bool
    """... and kept as vLLM's renderer keeps it (``--vllm-renderer``)."""
    ctx_size: int | None
    """A context window told as llama.cpp tells it, shared by ``parallel`` slots."""
    parallel: int | None
    min_output_tokens: int | None
    """The least ``max_output_tokens`` the Responses wire takes (hosted OpenAI's: 16)."""


@contextmanager
def start_fake_upstream(
    api_key: str | None = None, *, startup_timeout: float = 30.0, **options: Unpack[FakeOptions]
) -> Iterator[str]:
    """Start ``python -m stateway.fake_upstream`` with ``options``; yield its ``.../v1``
    base URL.

    The server is terminated (killed if it lingers) when the block exits.
    """
    command = fake_upstream_command(api_key, **options)
    with start_announced(command, ANNOUNCEMENT, timeout=startup_timeout) as url:
        yield url


def fake_upstream_command(api_key: str | None = None, **options: Unpack[FakeOptions]) -> list[str]:
    """The command line of the fake with these options (for :func:`stateway.launch.launch`,
    to keep its process id or its stderr)."""
    host, port = options.get("host", "127.0.0.1"), options.get("port", 0)
    command = [sys.executable, "-m", "stateway.fake_upstream", "--host", host, "--port", str(port)]
    if api_key is not None:
        command += ["--api-key", api_key]
    for name in options.get("model_names") or []:
        command += ["--model", name]
    if (keep_alive := options.get("keep_alive")) is not None:
        command += ["--keep-alive", str(keep_alive)]
    if options.get("system_first"):
        command.append("--system-first")
    if options.get("content_required"):
        command.append("--content-required")
    for effort in options.get("reasoning_efforts") or ():
        command += ["--reasoning-effort", effort]
    if (field := options.get("reasoning_field")) is not None:
        command += ["--reasoning-field", field]
    if options.get("vllm_renderer"):
        command.append("--vllm-renderer")
    if (tokenizer := options.get("tokenizer")) is not None:
        command += ["--tokenizer", tokenizer]
    for option in ("max_model_len", "ctx_size", "parallel", "min_output_tokens"):
        if (value := options.get(option)) is not None:
            command += ["--" + option.replace("_", "-"), str(value)]
    return command
