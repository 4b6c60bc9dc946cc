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
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from tests.clients.offline import OfflineGateway, inside

VERSION = "2.1.332"
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
    home, cwd = workdir / "home", workdir / "cwd"
    home.mkdir(exist_ok=True)
    cwd.mkdir(exist_ok=True)
    command = [str(binary), "-p", prompt, "--model", "fake-model", "--output-format", "json"]
    if allowed_tools:
        command += ["--allowedTools", ",".join(allowed_tools)]
    command += extra_args
    env = {k: v for k, v in os.environ.items() if not k.startswith(_FOREIGN_ENV)}
    env.update(
        HOME=str(home),
        ANTHROPIC_BASE_URL=gateway.url,
        ANTHROPIC_AUTH_TOKEN=TOKEN,
        CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC="1",
        CLAUDE_CODE_MAX_RETRIES="0",
    )
    env.update(extra_env or {})
    offset = gateway.log_size()
    process = subprocess.Popen(
        inside(gateway.namespace, command),
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        cwd=cwd,
        env=env,
        start_new_session=True,
    )
    try:
        stdout, stderr = process.communicate(timeout=TIMEOUT_S)
    except subprocess.TimeoutExpired:
        os.killpg(process.pid, signal.SIGKILL)
        stdout, stderr = process.communicate()
        pytest.fail(f"claude -p hung for {TIMEOUT_S}s:\n{stdout}\n{stderr}", pytrace=False)
    return ClaudeRun(
        process.returncode, _result(stdout), stdout, stderr, gateway.requests_since(offset)
    )


def _result(stdout: str) -> dict[str, Any] | None:
    try:
        parsed = json.loads(stdout)
    except ValueError:
        return None
    return parsed if isinstance(parsed, dict) else None
