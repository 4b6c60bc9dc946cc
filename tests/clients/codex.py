"""Running the real Codex CLI (``codex exec --json``) against an :class:`OfflineGateway`.

Codex runs with its default settings except what keeps it offline and pointed at us: a
custom provider (``OPENAI_BASE_URL`` is ignored) with no retries, ``analytics.enabled=false``
and ``features.plugins=false`` (both phone home otherwise). ``--dangerously-bypass-
approvals-and-sandbox`` lets its shell tool run without asking. Each run gets its own
``HOME`` (also its ``CODEX_HOME``) and working directory; a run that outlives its timeout
is killed with its whole process group (the npm launcher and the native binary) and
fails the test.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from tests.clients.offline import OfflineGateway, inside

VERSION = "0.171.0"
DEFAULT_MODEL = "gpt-6.2-sol"
"""The model Codex 0.171.0 asks for when none is configured."""
TIMEOUT_S = 60.0
_API_KEY = "sk-codex-test"
_FOREIGN_ENV = ("CODEX_", "OPENAI_")
"""Variables of the developer's own Codex or OpenAI setup, never passed on."""


@dataclass(frozen=True)
class CodexRun:
    returncode: int
    events: list[dict[str, Any]]
    """``--json`` output: one event per line."""
    stderr: str
    requests: list[dict[str, Any]]
    """What Codex sent the gateway during this run (the recording hop's lines)."""

    def items(self, kind: str) -> list[dict[str, Any]]:
        """Completed items of one ``type`` (``agent_message``, ``command_execution``...)."""
        return [
            event["item"]
            for event in self.events
            if event.get("type") == "item.completed" and event["item"].get("type") == kind
        ]

    def bodies(self) -> list[dict[str, Any]]:
        """The bodies of Codex's ``POST /v1/responses`` requests, in order."""
        return [
            request["body"]
            for request in self.requests
            if request["method"] == "POST" and request["path"] == "/v1/responses"
        ]

    @property
    def thread_id(self) -> str:
        """The session's id (``thread.started``), which ``resume`` names."""
        return next(e["thread_id"] for e in self.events if e.get("type") == "thread.started")

    def describe(self) -> str:
        """Everything a failure message needs."""
        lines = [json.dumps(event) for event in self.events]
        return f"exit {self.returncode}\n" + "\n".join(lines) + f"\nstderr:\n{self.stderr}"


def run_codex(
    binary: Path,
    gateway: OfflineGateway,
    prompt: str,
    model: str | None,
    workdir: Path,
    *,
    websockets: bool = False,
    provider_name: str = "gw",
    config: tuple[str, ...] = (),
    images: tuple[Path, ...] = (),
    stream_retries: int = 0,
    keep: bool = False,
    resume: str | None = None,
) -> CodexRun:
    """``codex exec`` one prompt; ``model`` None keeps Codex's built-in default model;
    ``websockets``: the provider ``supports_websockets`` (Codex's WebSocket mode);
    ``provider_name``: the provider's ``name`` (``OpenAI`` turns on Codex's remote
    compaction); ``config``: more ``-c KEY=VALUE`` settings; ``images``: files attached
    to the prompt (``--image``); ``stream_retries``: the provider's ``stream_max_retries``
    (how often Codex resends a turn whose stream failed); ``keep``: the session is recorded
    (no ``--ephemeral``), for a later run in the same ``workdir`` to ``resume`` by its
    :attr:`CodexRun.thread_id` (``codex exec resume``; that run is recorded too)."""
    home = workdir / "codex-home"
    home.mkdir(exist_ok=True)
    provider = (
        f'{{name="{provider_name}",base_url="{gateway.url}/v1",wire_api="responses",'
        f'env_key="GW_API_KEY",request_max_retries=0,stream_max_retries={stream_retries}'
        + (",supports_websockets=true}" if websockets else "}")
    )
    command = [str(binary), "exec", "--json", "--skip-git-repo-check"]
    if not (keep or resume):
        command.append("--ephemeral")
    command += ["--dangerously-bypass-approvals-and-sandbox"]
    command += ["-c", "model_provider=gw", "-c", f"model_providers.gw={provider}"]
    command += ["-c", "analytics.enabled=false", "-c", "features.plugins=false"]
    if model is not None:
        command += ["-c", f"model={model}"]
    for setting in config:
        command += ["-c", setting]
    if resume is not None:  # before the images: resume takes its own --image
        command += ["resume", resume]
    for image in images:
        command += ["--image", str(image)]
    env = {k: v for k, v in os.environ.items() if not k.startswith(_FOREIGN_ENV)}
    # A HOME of its own, as Claude Code gets: the login shells Codex runs commands in
    # then read no profile of this machine's (pyenv's rehash there writes to a shared
    # directory and, with tests running side by side, prints its failures into the output).
    env.update(HOME=str(home), CODEX_HOME=str(home), GW_API_KEY=_API_KEY)
    offset = gateway.log_size()
    process = subprocess.Popen(
        inside(gateway.namespace, [*command, "--", prompt]),  # --image takes many values
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        cwd=workdir,
        env=env,
        start_new_session=True,
    )
    try:
        stdout, stderr = process.communicate(timeout=TIMEOUT_S)
    except subprocess.TimeoutExpired:
        os.killpg(process.pid, signal.SIGKILL)
        stdout, stderr = process.communicate()
        pytest.fail(f"codex exec hung for {TIMEOUT_S}s:\n{stdout}\n{stderr}", pytrace=False)
    events = [json.loads(line) for line in stdout.splitlines() if line.startswith("{")]
    return CodexRun(process.returncode, events, stderr, gateway.requests_since(offset))
