"""Codex when the model's answer fills its context window, through the gateway, offline.

llama-server takes any ``max_tokens`` (Codex sends none) and stops an answer where prompt
and output fill its slot, a ``length`` finish. The fake keeps a slot's window as
llama-server keeps it (``--ctx-size``, words counted as tokens), and the gateway learns it
from the fake's listing: a shell call prints 600 lines of ten words, then the model's next
answer (9,000 words asked for) is cut where the window is full, in the run that made the
call or in a resumed session's later run.

Responses has no incomplete reason for a full window, and hosted OpenAI's windows hold the
input and the whole output, so it refuses a request whose answer cannot fit
(``context_length_exceeded``): the gateway fails the response so, announcing nothing of the
cut answer done. Codex 0.171.0 ends the turn ("Codex ran out of room in the model's context
window"), shows and keeps nothing of the cut answer, and counts its context as full: its
window (95% of ``model_context_window``, else of its fallback's) less the tokens its session
has used so far. The next prompt is answered, compacted first when that count is past its
limit (a session young enough), with or without a window configured; else sent with the
history as it was before the cut answer, which fit.

Told ``incomplete`` (``max_output_tokens``), as the gateway answered before, Codex showed
the cut answer and ended the turn ("Incomplete response returned, reason:
max_output_tokens", not retried), but kept the cut answer in its history and counted it
only in the session's total, not as the context's size: it never compacted, and every later
prompt was over the window, refused ("ran out of room"), with or without a window set.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.clients.codex import CodexRun, run_codex
from tests.clients.offline import STRICT_TEMPLATE, OfflineGateway, offline_gateway

pytestmark = pytest.mark.clients

MODEL = "fake-model"
WINDOW = 12000
"""The fake's slot, in words: Codex's instructions (~3,000) and the shell's output (~5,000)
leave an answer ~4,000, and Codex's summarizing request room."""
WINDOW_SET = (f"model_context_window={WINDOW}", "model_auto_compact_token_limit=9000")
"""What README tells a user of a small window to set (its limit about three quarters of the
window, as README's example)."""
PRINT = json.dumps({"cmd": 'yes "x x x x x x x x x x" | head -n 600'})
CUT = "w9 w10 w11"
"""Of the cut answer (``w1 w2 ...``), and of nothing else a session here holds."""
RAN_OUT = "Codex ran out of room in the model's context window"
COMPACT_PROMPT = "You are performing a CONTEXT CHECKPOINT COMPACTION."
"""How Codex's own summarizing request (under a provider not named ``OpenAI``) begins its
last user message."""
SUMMARY = "Another language model started to solve this problem"
"""How the message holding the summary of a session Codex compacted begins."""


@pytest.fixture(scope="module")
def slot(namespace: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[OfflineGateway]:
    """The gateway over a fake Chat upstream keeping a slot of :data:`WINDOW` as
    llama-server keeps it, once the gateway has learned the window from its listing."""
    directory = tmp_path_factory.mktemp("gateway-slot-codex")
    options = (*STRICT_TEMPLATE, "--ctx-size", str(WINDOW))
    with offline_gateway(namespace, "chat", directory, fake_options=options) as gateway:
        gateway.await_window(WINDOW, MODEL)
        yield gateway


def _codex(
    binary: Path,
    gateway: OfflineGateway,
    prompt: str,
    workdir: Path,
    settings: tuple[str, ...],
    resume: str | None = None,
) -> tuple[CodexRun, list[dict[str, Any]]]:
    """One recorded ``codex exec`` run (or ``resume``), and the events of the gateway's
    streamed answers to it."""
    offset = gateway.answers_size()
    run = run_codex(
        binary, gateway, prompt, MODEL, workdir, config=settings, keep=True, resume=resume
    )
    bodies = gateway.answers_since(offset, run.requests)
    events = [
        json.loads(line[6:])
        for body in bodies
        for line in body.splitlines()
        if line.startswith("data: {")
    ]
    return run, events


def _assert_refused(run: CodexRun, events: list[dict[str, Any]]) -> None:
    """The answer filled the window: the response failed as a context too long, its usage
    the whole window, and Codex ended the turn showing nothing of it."""
    assert run.returncode != 0, run.describe()
    assert all(request["status"] == 200 for request in run.requests), run.requests
    [failed] = [event["response"] for event in events if event["type"] == "response.failed"]
    assert failed["error"]["code"] == "context_length_exceeded", failed["error"]
    assert failed["usage"]["total_tokens"] == WINDOW, failed["usage"]
    assert not any(event["type"] == "response.incomplete" for event in events)
    assert run.events[-1]["type"] == "turn.failed", run.describe()
    assert RAN_OUT in run.events[-1]["error"]["message"], run.describe()
    assert run.items("agent_message") == [], run.describe()


def _assert_answered(run: CodexRun, gateway: OfflineGateway) -> None:
    """The next prompt answered, without the cut answer anywhere in what Codex sent."""
    assert run.returncode == 0, f"{run.describe()}\n{gateway.gateway_log.read_text()}"
    assert [item["text"] for item in run.items("agent_message")] == ["w1 w2 w3"]
    assert all(request["status"] == 200 for request in run.requests), run.requests
    for body in run.bodies():
        assert CUT not in json.dumps(body["input"]), run.describe()


@pytest.mark.parametrize("settings", [(), WINDOW_SET], ids=["defaults", "window-set"])
def test_an_answer_filling_the_window_after_a_tool_call_ends_the_turn_and_then_compacts(
    codex_binary: Path, slot: OfflineGateway, tmp_path: Path, settings: tuple[str, ...]
) -> None:
    """A session's first turn: Codex counts its context as its whole window, past any limit,
    so the next prompt is compacted first (its own summarizing request) and answered from
    the summary, in the same run."""
    prompt = f"Run it [[words:9000]] [[tool:exec_command:{PRINT}]]"
    run, events = _codex(codex_binary, slot, prompt, tmp_path, settings)

    _assert_refused(run, events)
    assert run.items("command_execution"), run.describe()

    after, _ = _codex(codex_binary, slot, "Next [[words:3]]", tmp_path, settings, run.thread_id)

    _assert_answered(after, slot)
    summarizing, answering = after.bodies()
    assert COMPACT_PROMPT in json.dumps(summarizing["input"][-1]), after.describe()
    assert SUMMARY in json.dumps(answering["input"]), after.describe()


def test_an_answer_filling_the_window_of_a_resumed_session_ends_the_turn_and_goes_on(
    codex_binary: Path, slot: OfflineGateway, tmp_path: Path
) -> None:
    """Past its first turn, the tokens a session has used pass the window: Codex counts its
    context as nothing and does not compact, but the next prompt, sent with the history as
    it was before the cut answer, fits, and is answered by one request."""
    prompt = f"Run it [[words:2]] [[tool:exec_command:{PRINT}]]"
    first, _ = _codex(codex_binary, slot, prompt, tmp_path, WINDOW_SET)
    assert [item["text"] for item in first.items("agent_message")] == ["w1 w2"], first.describe()

    thread = first.thread_id
    run, events = _codex(codex_binary, slot, "Go on [[words:9000]]", tmp_path, WINDOW_SET, thread)

    _assert_refused(run, events)

    after, _ = _codex(codex_binary, slot, "Next [[words:3]]", tmp_path, WINDOW_SET, thread)

    _assert_answered(after, slot)
    assert len(after.bodies()) == 1, after.describe()
