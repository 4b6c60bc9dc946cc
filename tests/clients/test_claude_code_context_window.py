"""Claude Code when its session outgrows the model's context window, through the gateway,
offline.

Claude Code takes a model it does not know for one with a window of a million tokens, and
reads no window from the gateway (nor from ``/v1/models``, which it never asks), so it
never compacts on time in front of a server with a small one: it learns the window from the
refusal. The fake keeps a window as vLLM keeps it (``--max-model-len``, words counted as
tokens): a Bash call prints thousands of lines, then a continued session's next prompt
makes the context too long. The gateway's refusal is worded as Anthropic's, ``prompt is
too long: N tokens > M maximum`` with the server's numbers, which Claude Code parses: it
compacts (its own summarizing request, its oldest messages left out by how much the
numbers say is too much) and answers the prompt from its summary, in the same run.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.clients.claude_code import ClaudeRun, run_claude
from tests.clients.offline import STRICT_TEMPLATE, OfflineGateway, offline_gateway

pytestmark = pytest.mark.clients

WINDOW = 7000
"""The fake's window, in words: the instructions and tools (~2,500), a Bash output of 3,000
lines and its answer fit; a 1,500-word prompt more does not."""
TOO_LONG = re.compile(r"^prompt is too long: (\d+) tokens > 7000 maximum$")
"""What Claude Code 2.1.337 parses its numbers from (its own pattern, less the window)."""
COMPACT_PROMPT = "CRITICAL: Respond with TEXT ONLY."
"""How Claude Code's own summarizing request begins its last user message."""


@pytest.fixture(scope="module", params=["chat", "chat-renderer", "anthropic"])
def windowed(
    request: pytest.FixtureRequest, namespace: str, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[tuple[str, OfflineGateway]]:
    """The gateway over a fake keeping a window of :data:`WINDOW`: a vLLM's Chat wire (as
    vLLM before 0.16 refuses output tokens that do not fit, or as its renderer since:
    Claude Code's 32,000 refused before any count, as more than the whole window), or the
    Messages wire (refusing as Anthropic refuses a prompt too long)."""
    wire: str = request.param
    api = wire.removesuffix("-renderer")
    directory = tmp_path_factory.mktemp(f"gateway-windowed-{wire}")
    options = (*STRICT_TEMPLATE, "--max-model-len", str(WINDOW))
    if wire.endswith("-renderer"):
        options = (*options, "--vllm-renderer")
    with offline_gateway(namespace, api, directory, fake_options=options) as gateway:
        yield api, gateway


def _claude(
    binary: Path, gateway: OfflineGateway, prompt: str, workdir: Path, api: str, *args: str
) -> tuple[ClaudeRun, list[str]]:
    """One ``claude -p`` run, and the messages of the errors the gateway answered it."""
    # Claude Code asks for 32,000 output tokens whatever the window: vLLM refuses them
    # beside a prompt that leaves less room, and the gateway asks again for the room there
    # is (as Anthropic's models take it), so no setting of Claude Code's is needed
    env: dict[str, str] = {}
    offset = gateway.answers_size()
    run = run_claude(binary, gateway, prompt, workdir, ("Bash",), env, args)
    answered = gateway.answers_since(offset, run.requests)
    return run, [message for body in answered if (message := _error(body)) is not None]


def _error(answer: str) -> str | None:
    """The message of an answer that is an error in Anthropic's shape (a stream is not)."""
    try:
        body: Any = json.loads(answer)
    except ValueError:
        return None
    if isinstance(body, dict) and body.get("type") == "error":
        return str(body["error"]["message"])
    return None


def test_a_session_too_long_for_the_window_is_compacted_on_the_refusal(
    claude_binary: Path, windowed: tuple[str, OfflineGateway], tmp_path: Path
) -> None:
    api, gateway = windowed
    bash = json.dumps({"command": "seq 1 3000", "description": "Print numbers"})
    first, errors = _claude(
        claude_binary, gateway, f"Run it [[words:2]] [[tool:Bash:{bash}]]", tmp_path, api
    )
    assert first.result is not None, first.describe()
    assert first.result["result"] == "w1 w2", first.describe()
    assert errors == []

    notes = " ".join(f"note{n}" for n in range(1500))
    run, errors = _claude(
        claude_binary, gateway, f"Go on [[words:3]] {notes}", tmp_path, api, "--continue"
    )

    assert run.returncode == 0, f"{run.describe()}\n{gateway.gateway_log.read_text()}"
    assert run.result is not None
    assert (run.result["is_error"], run.result["result"]) == (False, "w1 w2 w3")
    refused, *_ = run.requests
    assert refused["status"] == 400, run.describe()
    said = TOO_LONG.match(errors[0])
    assert said is not None, errors
    assert int(said[1]) > WINDOW
    # Every refusal is of a prompt too long, one Claude Code reads numbers from: none of
    # its max_tokens (lowered to the window's room by the gateway)
    assert all(TOO_LONG.match(e) for e in errors), errors
    assert all(request["status"] in (200, 400) for request in run.requests), run.describe()
    summarizing = [
        request
        for request in run.requests
        if COMPACT_PROMPT in json.dumps(request["body"]["messages"][-1])
        or COMPACT_PROMPT in json.dumps(request["body"]["messages"][-2:])
    ]
    assert any(request["status"] == 200 for request in summarizing), run.describe()
    answered = run.requests[-1]
    assert answered["status"] == 200
    assert len(answered["body"]["messages"]) < len(refused["body"]["messages"])
