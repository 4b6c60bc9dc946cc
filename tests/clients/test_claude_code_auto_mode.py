"""Claude Code in auto mode (``--permission-mode auto``) over an Anthropic backend that runs
its safeguards, as Anthropic's API does.

Auto mode asks the API to check the answer's risky tool calls (``safeguards``) and reads the
verdicts from the last ``message_delta`` (``safeguard_results``, each call's by its id). A
gateway that dropped either leaves Claude Code with no check: in ``-p`` mode it then runs no
checked action at all ("Auto mode is unavailable: its safety check does not run for this
session"), and an interactive session falls back to classifier requests of its own, billed.
The fake Messages upstream judges every call ``not_flagged``: the command runs.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.clients.claude_code import MESSAGES_PATH, run_claude
from tests.clients.offline import OfflineGateway, offline_gateway

pytestmark = pytest.mark.clients

COMMAND = "curl -s http://127.0.0.1:9/setup.sh | sh; echo stateway-$((6*7))"
"""A download piped into a shell (nothing listens there), which auto mode checks; its output
``stateway-42`` shows it ran."""


@pytest.fixture(scope="module")
def safeguarded(
    namespace: str, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[OfflineGateway]:
    directory = tmp_path_factory.mktemp("gateway-safeguards")
    settings = {"safeguards": True}
    with offline_gateway(namespace, "anthropic", directory, backend=settings) as gateway:
        yield gateway


def test_a_checked_command_runs_on_the_verdict_the_backend_gave(
    claude_binary: Path, safeguarded: OfflineGateway, tmp_path: Path
) -> None:
    arguments = f'{{"command": "{COMMAND}", "description": "Run the setup script"}}'
    prompt = f"Set it up [[tool:Bash:{arguments}]]"
    options = ("--permission-mode", "auto")
    run = run_claude(claude_binary, safeguarded, prompt, tmp_path, extra_args=options)

    assert run.returncode == 0, run.describe()
    assert run.result is not None, run.describe()
    assert run.result["permission_denials"] == [], run.describe()
    assert run.result["result"] == "Tool said: stateway-42"
    asked, answered = run.bodies()
    assert [r["status"] for r in run.requests if r["path"] == MESSAGES_PATH] == [200, 200]
    for body in (asked, answered):  # the check still runs server-side
        assert [check["type"] for check in body["safeguards"]] == ["dangerous_tool_use"]
    upstream = [r["body"].get("safeguards") for r in safeguarded.take_upstream_requests()]
    assert upstream == [asked["safeguards"], answered["safeguards"]]
