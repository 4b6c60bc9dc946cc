"""Running the real Claude Code CLI (``claude -p --output-format json``) against an
:class:`OfflineGateway`.

Claude Code runs with its default settings except what points it at us and keeps it quiet:
``ANTHROPIC_BASE_URL`` (no ``/v1``), a token in ``ANTHROPIC_AUTH_TOKEN`` (sent as a
bearer), ``CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC=1`` (no telemetry, update checks or
catalogs) and ``CLAUDE_CODE_MAX_RETRIES=0``. Each run gets its own ``HOME`` (Claude Code
keeps its settings and sessions there) and a working directory outside any git checkout
(Claude Code puts ``git status`` into its prompt otherwise). It refuses
``--dangerously-skip-permissions`` as root, which the offline namespace needs, so a tool
is let run by ``--allowedTools``. A run that outlives its timeout is killed with its whole
process group and fails the test.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import threading
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from tests.clients.offline import OfflineGateway, inside

VERSION = "2.1.337"
TIMEOUT_S = 60.0
TOKEN = "sk-claude-code-test"
MESSAGES_PATH = "/v1/messages?beta=true"
_FOREIGN_ENV = ("ANTHROPIC_", "CLAUDE")
"""Variables of the developer's own Claude Code setup (or of a Claude Code session running
these tests: ``CLAUDECODE``), never passed on."""


@dataclass(frozen=True)
class ClaudeRun:
    returncode: int
    result: dict[str, Any] | None
    """The ``--output-format json`` result object (None if stdout held none)."""
    stdout: str
    stderr: str
    requests: list[dict[str, Any]]
    """What Claude Code sent the gateway during this run, with each answer's ``status``
    (the recording hop's lines)."""

    def bodies(self) -> list[dict[str, Any]]:
        """The bodies of its ``POST /v1/messages`` requests, in order."""
        return [
            request["body"]
            for request in self.requests
            if request["method"] == "POST" and request["path"] == MESSAGES_PATH
        ]

    def describe(self) -> str:
        """Everything a failure message needs."""
        sent = [(r["method"], r["path"], r["status"]) for r in self.requests]
        return f"exit {self.returncode}\nrequests {sent}\n{self.stdout}\nstderr:\n{self.stderr}"


def run_claude(
    binary: Path,
    gateway: OfflineGateway,
    prompt: str,
    workdir: Path,
    allowed_tools: Sequence[str] = (),
    extra_env: Mapping[str, str] | None = None,
    extra_args: Sequence[str] = (),
) -> ClaudeRun:
    """``claude -p PROMPT`` once, as the model ``fake-model`` (``extra_env``: settings of
    Claude Code's own, added to its environment; ``extra_args``: more of its options)."""
    options = ["--output-format", "json"]
    if allowed_tools:
        options += ["--allowedTools", ",".join(allowed_tools)]
    options += extra_args
    offset = gateway.log_size()
    process = _start(binary, gateway, prompt, workdir, options, extra_env)
    stdout, stderr = _finish(process)
    return ClaudeRun(
        process.returncode, _result(stdout), stdout, stderr, gateway.requests_since(offset)
    )


def interrupt_claude(
    binary: Path, gateway: OfflineGateway, prompt: str, workdir: Path, once: str
) -> ClaudeRun:
    """``claude -p PROMPT`` streaming its events (``--output-format stream-json`` with
    partial messages), sent SIGINT (a user's Ctrl-C) once a line of its output holds
    ``once``; its ``result`` is the last event (None if there was none)."""
    options = ("--output-format", "stream-json", "--verbose", "--include-partial-messages")
    offset = gateway.log_size()
    process = _start(binary, gateway, prompt, workdir, options)
    assert process.stdout is not None
    seen = []
    # A run that never prints ``once`` nor ends is killed, which ends the loop.
    watchdog = threading.Timer(TIMEOUT_S, os.killpg, (process.pid, signal.SIGKILL))
    watchdog.start()
    try:
        for line in process.stdout:
            seen.append(line)
            if once in line:
                break
    finally:
        watchdog.cancel()
    process.send_signal(signal.SIGINT)  # nsenter execs claude: the pid is its own
    stdout, stderr = _finish(process)
    lines = [*seen, *stdout.splitlines(keepends=True)]
    last = _result(lines[-1]) if lines else None
    return ClaudeRun(
        process.returncode, last, "".join(lines), stderr, gateway.requests_since(offset)
    )


def _start(
    binary: Path,
    gateway: OfflineGateway,
    prompt: str,
    workdir: Path,
    options: Sequence[str],
    extra_env: Mapping[str, str] | None = None,
) -> subprocess.Popen[str]:
    home, cwd = workdir / "home", workdir / "cwd"
    home.mkdir(exist_ok=True)
    cwd.mkdir(exist_ok=True)
    command = [str(binary), "-p", prompt, "--model", "fake-model", *options]
    env = {k: v for k, v in os.environ.items() if not k.startswith(_FOREIGN_ENV)}
    env.update(
        HOME=str(home),
        ANTHROPIC_BASE_URL=gateway.url,
        ANTHROPIC_AUTH_TOKEN=TOKEN,
        CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC="1",
        CLAUDE_CODE_MAX_RETRIES="0",
    )
    env.update(extra_env or {})
    return subprocess.Popen(
        inside(gateway.namespace, command),
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        cwd=cwd,
        env=env,
        start_new_session=True,
    )


def _finish(process: subprocess.Popen[str]) -> tuple[str, str]:
    """The rest of the run's output; a run that outlives its timeout is killed and fails
    the test."""
    try:
        return process.communicate(timeout=TIMEOUT_S)
    except subprocess.TimeoutExpired:
        os.killpg(process.pid, signal.SIGKILL)
        stdout, stderr = process.communicate()
        pytest.fail(f"claude -p hung for {TIMEOUT_S}s:\n{stdout}\n{stderr}", pytrace=False)


def _result(stdout: str) -> dict[str, Any] | None:
    try:
        parsed = json.loads(stdout)
    except ValueError:
        return None
    return parsed if isinstance(parsed, dict) else None
