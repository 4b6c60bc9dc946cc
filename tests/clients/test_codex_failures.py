"""The real Codex CLI when the model server fails mid-turn, through the gateway, offline.

Codex takes every ``response.output_item.done`` as final: it runs a call done and keeps a
message done in its history, which it resends. A stream the upstream cut off must end in
``response.failed`` with the item it cut left open, so that Codex neither runs a call cut
off mid-arguments nor resends half an answer as the model's when it retries the turn.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.clients.codex import run_codex
from tests.clients.offline import OfflineGateway
from tests.clients.test_codex import COMMAND

pytestmark = pytest.mark.clients


@pytest.mark.parametrize(
    "prompt",
    [
        "Run it [[tool:exec_command:" + json.dumps({"cmd": COMMAND}) + "]] [[cut:3]]",
        "Say it [[words:20]] [[cut:3]]",
    ],
    ids=["call", "message"],
)
def test_a_turn_cut_off_mid_item_is_retried_with_nothing_of_it(
    codex_binary: Path, gateway: OfflineGateway, prompt: str, tmp_path: Path
) -> None:
    """The fake cuts every stream of this turn three chunks in: in the middle of the
    call's arguments, or of the answer. Codex retries once, with the same input (nothing
    of the failed stream in it), then reports the failure; it ran no command and showed
    no answer."""
    run = run_codex(codex_binary, gateway, prompt, "fake-model", tmp_path, stream_retries=1)

    assert run.returncode != 0, run.describe()
    assert run.events[-1]["type"] == "turn.failed", run.describe()
    assert "closed the stream before finishing" in run.events[-1]["error"]["message"]
    completed = [e["item"] for e in run.events if e.get("type") == "item.completed"]
    assert [item for item in completed if item["type"] != "error"] == [], run.describe()
    assert "failed to parse function arguments" not in run.stderr
    first, retry = run.bodies()
    assert retry["input"] == first["input"]


def test_a_quota_used_up_mid_turn_stops_codex_with_its_quota_message(
    codex_binary: Path, gateway: OfflineGateway, tmp_path: Path
) -> None:
    """The model server ends the stream, output already sent, with hosted OpenAI's
    ``insufficient_quota``: the gateway's ``response.failed`` passes that code on (not
    folded into ``invalid_prompt``), so Codex stops the turn as it does for hosted, with its
    quota message, and does not resend it."""
    prompt = "Say it [[words:20]] [[fail:3]] [[code:insufficient_quota]]"
    run = run_codex(codex_binary, gateway, prompt, "fake-model", tmp_path, stream_retries=1)

    assert run.returncode != 0, run.describe()
    assert run.events[-1]["type"] == "turn.failed", run.describe()
    assert "Quota exceeded" in run.events[-1]["error"]["message"], run.describe()
    assert len(run.bodies()) == 1
