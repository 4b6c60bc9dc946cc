"""llama.cpp's own ``llama-server``, on loopback: the pinned build (installed once into a
cache outside the repository by ``scripts/install-llama-server``) serving the tiny model
of :mod:`tests.llama_server.tiny_model`, as users run it in front of the gateway
(``--jinja``: the model's chat template, its tool calls and reasoning parsed)."""

from __future__ import annotations

import os
import shutil
import subprocess
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import NoReturn

import pytest

from stateway.launch import launch

REPO = Path(__file__).resolve().parents[2]
INSTALL = REPO / "scripts" / "install-llama-server"
ANNOUNCEMENT = "listening on "
MODEL = "tiny-llama"
"""The name the server lists its model by (``--alias``); it serves it whatever a request
names."""
CTX_SIZE = 2048
PARALLEL = 2
SLOT_WINDOW = CTX_SIZE // PARALLEL
"""What one request may fill: llama-server divides ``--ctx-size`` among its ``--parallel``
slots. A token is a byte here, so a prompt with a tool declared is ~350."""


def unavailable(reason: str) -> NoReturn:
    """Skip, with ``reason`` — except in CI (``CI`` set), where these tests must run."""
    if os.environ.get("CI"):
        pytest.fail(f"{reason}; CI must run the llama-server tests", pytrace=False)
    pytest.skip(f"{reason} (deselect with -m 'not llama_server')")


def built_llama_server() -> Path:
    """The executable ``scripts/install-llama-server`` built into the cache (``make test``
    and ``make llama-server`` build it, once: minutes, longer than a test may take); or
    the one ``STATEWAY_LLAMA_SERVER`` names (another build of llama.cpp to try)."""
    chosen = os.environ.get("STATEWAY_LLAMA_SERVER")
    if chosen:
        return Path(chosen)
    result = subprocess.run(
        [str(INSTALL), "--check"], capture_output=True, text=True, timeout=30, check=False
    )
    if result.returncode == 0:
        return Path(result.stdout.strip())
    missing = [tool for tool in ("cmake", "c++") if shutil.which(tool) is None]
    if missing:
        unavailable(f"{' and '.join(missing)} missing, so llama-server cannot be built")
    unavailable("llama-server is not built yet: 'make llama-server' builds it (once)")


@contextmanager
def llama_server(
    binary: Path,
    model: Path,
    options: Sequence[str] = ("--ctx-size", str(CTX_SIZE), "--parallel", str(PARALLEL)),
    prefix: Sequence[str] = (),
) -> Iterator[str]:
    """``llama-server`` serving ``model`` on a free loopback port, greedy (``--temp 0``)
    and on one thread; yields its ``http://127.0.0.1:PORT``. Its log goes to stdout, where
    it announces its address once the model is loaded. ``prefix``: what runs the command
    (``nsenter`` into the client tests' network namespace, say)."""
    command = [str(binary), "--model", str(model), "--alias", MODEL, "--jinja"]
    command += ["--host", "127.0.0.1", "--port", "0", "--threads", "1", "--temp", "0"]
    command += ["--no-warmup", "--no-webui", *options]
    merged = [*prefix, "sh", "-c", 'exec "$0" "$@" 2>&1', *command]
    with launch(merged, ANNOUNCEMENT, timeout=60) as launched:
        yield launched.url
