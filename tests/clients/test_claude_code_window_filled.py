"""Claude Code when the model's answer fills its context window, through the gateway,
offline.

llama-server takes any ``max_tokens`` (Claude Code asks for 32,000 whatever the window) and
stops an answer where prompt and output fill its slot, a ``length`` finish; the gateway,
knowing the slot's window (learned from the server's listing), answers
``model_context_window_exceeded`` as Anthropic does. The fake keeps a slot's window as
llama-server keeps it (``--ctx-size``, words counted as tokens): a Bash call prints 3,000
lines, then the model's next answer (9,000 words asked for) is cut where the window is
full, in the run that made the call or in a continued session's later run.

Claude Code 2.1.337 takes that stop as it takes ``max_tokens``, an output limit it recovers
from: it asks the model to resume (a synthetic ``Output token limit hit`` message, first
asking for 128,000 output tokens, then again for 32,000), which with the cut answer no
longer fits the window and is refused as too long, in Anthropic's words with the server's
numbers; it compacts (its own summarizing request) and goes on with the turn from the
summary, in the same run, which ends without an error. The session's next prompt
(``--continue``) is answered from the compacted session at once. It did the same when the
gateway answered ``max_tokens`` (before it knew the slot's window); only the error it shows
if its recovery gives up is worded otherwise (the window reached, not its output maximum).
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

WINDOW = 8000
"""The fake's slot, in words: the instructions and tools (~2,500) and a Bash output of 3,000
lines leave an answer ~2,500, and Claude Code's summarizing request room."""
TOO_LONG = re.compile(r"^prompt is too long: (\d+) tokens > 8000 maximum$")
"""What Claude Code 2.1.337 parses its numbers from (its own pattern, less the window)."""
RESUME = "Output token limit hit. Resume directly"
"""How Claude Code's synthetic message asking the model to go on after a cut begins."""
COMPACT_PROMPT = "CRITICAL: Respond with TEXT ONLY."
"""How Claude Code's own summarizing request begins its last user message."""
SUMMARY = "This session is being continued from a previous conversation"
"""How the first message of a session Claude Code compacted begins."""
BASH = json.dumps({"command": "seq 1 3000", "description": "Print numbers"})


@pytest.fixture(scope="module", params=["chat", "anthropic"])
def slot(
    request: pytest.FixtureRequest, namespace: str, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[OfflineGateway]:
    """The gateway over a fake keeping a slot of :data:`WINDOW` as llama-server keeps it,
    over its Chat wire or its Messages wire, once the gateway has learned the window from
    the fake's listing (``meta.n_ctx``), which it asks beside serving."""
    api: str = request.param
    directory = tmp_path_factory.mktemp(f"gateway-slot-{api}")
    options = (*STRICT_TEMPLATE, "--ctx-size", str(WINDOW))
    with offline_gateway(namespace, api, directory, fake_options=options) as gateway:
        gateway.await_window(WINDOW)
        yield gateway


def _claude(
    binary: Path, gateway: OfflineGateway, prompt: str, workdir: Path, *args: str
) -> tuple[ClaudeRun, list[str]]:
    """One ``claude -p`` run (Bash allowed, no setting of Claude Code's), and the bodies of
    the gateway's answers to it."""
    offset = gateway.answers_size()
    run = run_claude(binary, gateway, prompt, workdir, ("Bash",), {}, args)
    return run, gateway.answers_since(offset, run.requests)


def _stops(answers: list[str]) -> list[tuple[str, int]]:
    """Each streamed answer's stop reason, with its prompt and output tokens together."""
    stops = []
    for answer in answers:
        for line in answer.splitlines():
            event: Any = json.loads(line[6:]) if line.startswith("data: {") else {}
            if event.get("type") == "message_delta":
                usage = event["usage"]
                read = usage.get("cache_read_input_tokens") or 0
                total = usage["input_tokens"] + read + usage["output_tokens"]
                stops.append((event["delta"]["stop_reason"], total))
    return stops


def _errors(answers: list[str]) -> list[str]:
    """The messages of the answers that are errors in Anthropic's shape."""
    messages = []
    for answer in answers:
        try:
            body: Any = json.loads(answer)
        except ValueError:
            continue
        if isinstance(body, dict) and body.get("type") == "error":
            messages.append(str(body["error"]["message"]))
    return messages


def _last_message(request: dict[str, Any]) -> str:
    return json.dumps(request["body"]["messages"][-1])


def _assert_went_on(run: ClaudeRun, answers: list[str], gateway: OfflineGateway) -> None:
    """The run's answer filled the window, Claude Code's resume was too long for it, and it
    compacted and ended the turn without an error."""
    assert run.returncode == 0, f"{run.describe()}\n{gateway.gateway_log.read_text()}"
    assert run.result is not None, run.describe()
    assert (run.result["subtype"], run.result["is_error"]) == ("success", False), run.describe()
    stops = _stops(answers)
    assert ("model_context_window_exceeded", WINDOW) in stops, stops
    assert all(reason != "max_tokens" for reason, _ in stops), stops
    # Told to resume (asking for 128,000 output tokens first), the model would need more
    # than the window: refused as Anthropic refuses it, in words Claude Code reads its
    # numbers from
    resumed = [r for r in run.requests if RESUME in _last_message(r)]
    assert resumed, run.describe()
    assert (resumed[0]["status"], resumed[0]["body"]["max_tokens"]) == (400, 128000)
    errors = _errors(answers)
    assert errors, run.describe()
    assert all((said := TOO_LONG.match(e)) and int(said[1]) > WINDOW for e in errors), errors
    summarized = [r["status"] for r in run.requests if COMPACT_PROMPT in _last_message(r)]
    assert 200 in summarized, run.describe()
    assert run.requests[-1]["status"] == 200, run.describe()
    assert SUMMARY in json.dumps(run.requests[-1]["body"]["messages"][0]), run.describe()


def _assert_next_prompt_answered(binary: Path, gateway: OfflineGateway, workdir: Path) -> None:
    """The session's next prompt is answered from the compacted session, at once."""
    run, _ = _claude(binary, gateway, "Next [[words:3]]", workdir, "--continue")
    assert run.result is not None, run.describe()
    assert (run.result["is_error"], run.result["result"]) == (False, "w1 w2 w3"), run.describe()
    [request] = run.requests
    assert request["status"] == 200, run.describe()
    assert SUMMARY in json.dumps(request["body"]["messages"][0]), run.describe()


def test_an_answer_filling_the_window_after_a_tool_call_is_compacted_and_goes_on(
    claude_binary: Path, slot: OfflineGateway, tmp_path: Path
) -> None:
    run, answers = _claude(
        claude_binary, slot, f"Run it [[words:9000]] [[tool:Bash:{BASH}]]", tmp_path
    )

    _assert_went_on(run, answers, slot)
    _assert_next_prompt_answered(claude_binary, slot, tmp_path)


def test_an_answer_filling_the_window_of_a_continued_session_is_compacted_and_goes_on(
    claude_binary: Path, slot: OfflineGateway, tmp_path: Path
) -> None:
    first, _ = _claude(claude_binary, slot, f"Run it [[words:2]] [[tool:Bash:{BASH}]]", tmp_path)
    assert first.result is not None, first.describe()
    assert first.result["result"] == "w1 w2", first.describe()

    run, answers = _claude(claude_binary, slot, "Go on [[words:9000]]", tmp_path, "--continue")

    _assert_went_on(run, answers, slot)
    _assert_next_prompt_answered(claude_binary, slot, tmp_path)
