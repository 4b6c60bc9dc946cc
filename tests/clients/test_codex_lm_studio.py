"""The real Codex CLI, offline, through the gateway over a Chat server that refuses an
assistant message of tool calls alone sent with ``content`` null, as LM Studio does
(the fake upstream's ``--content-required``): the backend left to its default
``tool_call_content``, Codex's shell tool round trip succeeds, the round that sends the
call back asked once more with ``""`` after the server's refusal."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.clients.codex import run_codex
from tests.clients.offline import STRICT_TEMPLATE, OfflineGateway, offline_gateway
from tests.clients.test_codex import COMMAND, OUTPUT

pytestmark = pytest.mark.clients


@pytest.fixture(scope="module")
def lm_studio_gateway(
    namespace: str, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[OfflineGateway]:
    """The gateway over a Chat upstream refusing ``content`` null in LM Studio's words."""
    directory = tmp_path_factory.mktemp("gateway-lm-studio")
    options = (*STRICT_TEMPLATE, "--content-required")
    with offline_gateway(namespace, "chat", directory, fake_options=options) as running:
        yield running


def _calls_contents(requests: list[dict[str, Any]]) -> list[list[Any]]:
    """Per Chat call the upstream was sent, the content of each assistant message of
    tool calls."""
    return [
        [m.get("content") for m in sent["body"]["messages"] if m.get("tool_calls")]
        for sent in requests
        if sent["path"] == "/v1/chat/completions"
    ]


def test_a_shell_tool_round_trip_over_a_server_refusing_null_content(
    codex_binary: Path, lm_studio_gateway: OfflineGateway, tmp_path: Path
) -> None:
    lm_studio_gateway.take_upstream_requests()  # only this run's
    arguments = json.dumps({"cmd": COMMAND})
    prompt = f"Run it [[tool:exec_command:{arguments}]]"
    run = run_codex(codex_binary, lm_studio_gateway, prompt, "fake-model", tmp_path)

    assert run.returncode == 0, run.describe()
    assert not [e for e in run.events if e.get("type") in ("error", "turn.failed")]
    assert run.events[-1]["type"] == "turn.completed", run.describe()
    [command] = run.items("command_execution")
    assert command["aggregated_output"] == OUTPUT + "\n"
    [message] = run.items("agent_message")
    assert message["text"].startswith("Tool said: ")
    assert OUTPUT in message["text"]
    # The call's round, then the output's: refused with null, asked again with "".
    assert _calls_contents(lm_studio_gateway.take_upstream_requests()) == [[], [None], [""]]
