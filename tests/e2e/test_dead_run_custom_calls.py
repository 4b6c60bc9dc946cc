"""A background run killed (SIGKILL) while the model writes a custom tool's call (Codex's
freeform ``apply_patch``): the next start fails it ``server_restarted`` and keeps the call
with the input its log shows, as a cancel would have kept it. The real ``stateway serve``
over SQLite, in front of the fake upstream on each wire that streams such a call."""

from __future__ import annotations

import json
import os
import signal
from pathlib import Path

import pytest
from openai import AsyncOpenAI

from tests.e2e.test_background import watch
from tests.e2e.test_background_durability import until_logged
from tests.e2e.test_durability import gateway, wait_until_gone

PATCH = "***_Begin_Patch\n***_Add_File:_notes.txt\n" + "".join(f"+line_{n:03}\n" for n in range(60))
"""A patch long enough to stream in many pieces (the fake model's directives take no
spaces)."""
APPLY_PATCH = {"type": "custom", "name": "apply_patch", "description": "Apply a patch."}


@pytest.mark.parametrize("api", ["chat", "responses"])
async def test_a_killed_run_keeps_what_its_custom_call_had_written(
    fake_upstream: str, tmp_path: Path, api: str
) -> None:
    database = f"sqlite:///{tmp_path / 'stateway.db'}"
    log = tmp_path / "gateway.log"
    env = {**os.environ, "STATEWAY_UPSTREAM_API": api}
    directive = f"[[slow:60]] [[tool:apply_patch:{json.dumps({'input': PATCH})}]]"
    with gateway(fake_upstream, database, log, env) as first:
        client = AsyncOpenAI(base_url=first.url + "/v1", api_key="sk-test", max_retries=0)
        created = await client.responses.create(
            model="fake-model", input=directive, tools=[APPLY_PATCH], background=True
        )
        await until_logged(database, created.id, 8)  # the call added, some input streamed
        os.kill(first.pid, signal.SIGKILL)
        wait_until_gone(first.pid)

    with gateway(fake_upstream, database, log, env) as second:
        client = AsyncOpenAI(base_url=second.url + "/v1", api_key="sk-test", max_retries=0)
        replay = await watch(client, created.id)
        said = "".join(
            e["delta"] for e in replay if e["type"] == "response.custom_tool_call_input.delta"
        )
        assert said, "some of its input was stored before the kill"
        failed = replay[-1]["response"]
        assert failed["error"]["code"] == "server_restarted"
        [call] = failed["output"]
        assert (call["type"], call["name"], call["status"]) == (
            "custom_tool_call",
            "apply_patch",
            "incomplete",
        )
        assert call["input"] == said
        assert PATCH.startswith(said)
        stored = (await client.responses.retrieve(created.id)).model_dump(mode="json")
        assert stored["output"] == failed["output"]
