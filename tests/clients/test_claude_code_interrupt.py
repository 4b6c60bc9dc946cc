"""Claude Code interrupted mid-answer (SIGINT, a user's Ctrl-C, in print mode), then
continued (``claude -p --continue``): the session it saved holds the part of the answer
that had streamed, and the continued request — carrying that partial assistant text, then
Claude Code's ``[Request interrupted by user]`` turn — is accepted, and the model is given
the partial text as its own earlier answer (``[[echo]]`` shows its context)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.clients.claude_code import MESSAGES_PATH, interrupt_claude, run_claude
from tests.clients.offline import OfflineGateway

pytestmark = pytest.mark.clients

WORDS = 300
"""The answer interrupted: ``w1 ... w300``, 30 ms a word (9 s), cut once ``w20`` streamed."""


def test_an_interrupted_answer_is_continued_with_its_partial_text(
    claude_binary: Path, claude_gateway: OfflineGateway, tmp_path: Path
) -> None:
    prompt = f"Count [[words:{WORDS}]] [[slow:30]]"
    interrupted = interrupt_claude(claude_binary, claude_gateway, prompt, tmp_path, once='"w20 "')
    # Claude Code closes the cut stream itself: a ``message_stop`` naming the abandoned
    # blocks. Its ``result`` line (``terminal_reason: aborted_streaming``) follows, except
    # when it exits on the signal first: seen about once in 40 runs on a loaded machine
    # (exit 0, the stream's close the last line; the session is saved all the same).
    assert '"abandoned_blocks"' in interrupted.stdout, interrupted.describe()
    if interrupted.result is not None and interrupted.result.get("type") == "result":
        assert interrupted.result.get("terminal_reason") == "aborted_streaming", (
            interrupted.describe()
        )
    [sent] = interrupted.requests
    assert (sent["path"], sent["status"]) == (MESSAGES_PATH, 200)

    run = run_claude(
        claude_binary, claude_gateway, "Go on [[echo]]", tmp_path, extra_args=("--continue",)
    )
    log = claude_gateway.gateway_log.read_text()
    assert run.returncode == 0, f"{run.describe()}\ngateway log:\n{log}"
    assert [r["status"] for r in run.requests] == [200], f"{run.describe()}\ngateway log:\n{log}"
    assert run.result is not None
    assert run.result["is_error"] is False, run.describe()

    [body] = run.bodies()
    assert body["messages"][0] == sent["body"]["messages"][0]  # the same session
    texts = [
        (message["role"], " ".join(block["text"] for block in message["content"]))
        for message in body["messages"][2:]
    ]
    (role, partial), (_, notice) = texts[:2]
    assert role == "assistant"
    words = partial.split()
    assert words == [f"w{n}" for n in range(1, len(words) + 1)], partial  # the answer's start
    assert 20 <= len(words) < WORDS, partial
    assert notice == "[Request interrupted by user]"
    assert texts[-1] == ("user", "Go on [[echo]]")
    # The model's context: the partial answer as its own, then the interruption.
    seen = [line.strip() for line in run.result["result"].splitlines()]
    interruption = seen.index("user: [Request interrupted by user]")
    assert seen[interruption - 1] == "assistant: " + " ".join(words), json.dumps(seen[-6:])
