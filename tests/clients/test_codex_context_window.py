"""Codex when its session outgrows the model's context window, through the gateway,
offline.

Codex reads no window from the gateway: for a model it does not know it assumes a large
one, and it compacts only at ``model_auto_compact_token_limit`` (or 90% of
``model_context_window``), which a user of a small model sets. A refusal of a context too
long (``context_length_exceeded``) ends its turn: it does not compact on it. The fake keeps
a window as vLLM keeps it (``--max-model-len``, words counted as tokens) and lists the
model Codex asks for, so the gateway learns the window.

With a provider named ``OpenAI`` Codex compacts remotely (a ``compaction_trigger`` item),
and does so mid-turn with the tool outputs that took it past its limit: the history it asks
the gateway to summarize may be over the window itself. The gateway fits its summary call
to the window, leaving the oldest items out, and the compaction succeeds.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from stateway.core.compaction.prompt import SUMMARY_PREFIX, SUMMARY_PROMPT
from stateway.fake_upstream.chat import parse_chat_request
from stateway.fake_upstream.conversation import content_text
from tests.clients.codex import run_codex
from tests.clients.offline import STRICT_TEMPLATE, OfflineGateway, offline_gateway

pytestmark = pytest.mark.clients

MODEL = "gpt-5.5"
WINDOW = 14500
"""In words: Codex's instructions (~4,300) and one output of :data:`ROUND` fit, with room
for the summary; two outputs do not."""
ROUND = (
    "f=$HOME/rounds; n=$(( $(cat $f 2>/dev/null || echo 0) + 1 )); echo $n > $f; "
    'echo round-$n; yes "x x x x x x x x x x" | head -n 600'
)
"""Prints ``round-N`` (N counting its runs), then 6,000 words."""


@pytest.fixture(scope="module")
def windowed(namespace: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[OfflineGateway]:
    """The gateway over a fake Chat upstream listing :data:`MODEL` with a window of
    :data:`WINDOW`, and keeping it."""
    directory = tmp_path_factory.mktemp("gateway-windowed-codex")
    options = (*STRICT_TEMPLATE, "--max-model-len", str(WINDOW), "--model", MODEL)
    with offline_gateway(namespace, "chat", directory, fake_options=options) as gateway:
        yield gateway


def _words(body: dict[str, Any]) -> int:
    """The prompt's tokens as the fake counts them."""
    return parse_chat_request(body).conversation.prompt_tokens


def test_a_remote_compaction_over_the_window_is_summarized_from_what_fits(
    codex_binary: Path, windowed: OfflineGateway, tmp_path: Path
) -> None:
    """The fake calls the shell twice (``[[rounds:2]]``); past its limit after the second
    call, Codex compacts with both outputs, more than the window holds. The summary call
    leaves out the first round, and the model is shown the second's output in the summary
    (what the model sees is checked at the fake: Codex shows the fake's greeting of that
    summary as its answer, but in two runs of some thirty, on a loaded machine, it ended
    the turn without one)."""
    windowed.take_upstream_requests()  # what earlier tests sent
    prompt = "Run it [[rounds:2]] [[tool:exec_command:" + json.dumps({"cmd": ROUND}) + "]]"
    config = ("model_auto_compact_token_limit=10000",)
    run = run_codex(
        codex_binary, windowed, prompt, MODEL, tmp_path, provider_name="OpenAI", config=config
    )

    assert run.returncode == 0, f"{run.describe()}\n{windowed.gateway_log.read_text()}"
    assert all(request["status"] == 200 for request in run.requests), run.requests
    *_, trigger, after = run.bodies()
    assert trigger["input"][-1] == {"type": "compaction_trigger"}
    outputs = [i["output"] for i in trigger["input"] if i["type"] == "function_call_output"]
    assert [output.count("round-") for output in outputs] == [1, 1]
    assert "round-1" in outputs[0]
    assert "round-2" in outputs[1]
    assert [item["type"] for item in after["input"]][-1] == "compaction"

    upstream = [request["body"] for request in windowed.take_upstream_requests()]
    [summarizing] = [
        index
        for index, body in enumerate(upstream)
        if content_text(body["messages"][-1]["content"]) == SUMMARY_PROMPT
    ]
    summarized, answered = upstream[summarizing], upstream[summarizing + 1]
    shown = json.dumps(summarized)
    assert "round-2" in shown
    assert "round-1" not in shown
    first_round = len(outputs[0].split())
    assert _words(summarized) <= WINDOW < _words(summarized) + first_round  # had to go
    summary = content_text(answered["messages"][-1]["content"])  # the model's next context
    assert summary.startswith(SUMMARY_PREFIX)
    assert "round-2" in summary
    assert "round-1" not in summary


def test_a_refusal_of_a_context_too_long_ends_the_turn(
    codex_binary: Path, windowed: OfflineGateway, tmp_path: Path
) -> None:
    """Without a limit set, Codex sends a context over the window; the gateway refuses it
    as the server does (``context_length_exceeded``), and Codex ends the turn: it does not
    compact on the refusal."""
    command = 'yes "x x x x x x x x x x" | head -n 1100'
    prompt = "Run it [[tool:exec_command:" + json.dumps({"cmd": command}) + "]]"
    run = run_codex(codex_binary, windowed, prompt, MODEL, tmp_path)

    assert run.returncode != 0, run.describe()
    assert [request["status"] for request in run.requests] == [200, 400], run.requests
    assert run.events[-1]["type"] == "turn.failed", run.describe()
    assert "ran out of room in the model's context window" in run.events[-1]["error"]["message"]
    assert not any(
        item.get("type") == "compaction_trigger" for body in run.bodies() for item in body["input"]
    )
