"""Record the old-release database of ``test_old_release.py`` (not collected: no ``test_``).

The database is written by two old releases in turn, as a user upgrading in place would
have it, then dumped as SQL text (``database.sql``) beside what the test needs to know of
it (``manifest.json``: ids, and what the old gateway answered):

1. ``287b8e49`` (2026-12-01, schema 0002): responses only, over a Chat upstream.
2. ``e09bcac5`` (2026-12-02, schema 0008), the last release before upstream seals were
   sealed over: an Anthropic upstream's signatures and a Responses upstream's blobs are
   stored as they came; conversation turns appended their ``compaction_trigger``. Served
   with API keys (tenant ``default``, which also holds the first release's rows, and
   ``globex``), three upstream shapes, the test MCP server and the fake search; one
   background run is left in flight when the process is killed (SIGKILL).

Each release is served from a git worktree of its commit, in front of this tree's fake
upstream, MCP server and fake search::

    git worktree add /tmp/old-a 287b8e49 && git worktree add /tmp/old-c e09bcac5
    python -m tests.e2e.old_release.record /tmp/old-a /tmp/old-c
"""

from __future__ import annotations

import json
import os
import signal
import sqlite3
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from pathlib import Path
from typing import Any

from openai import OpenAI

from stateway.fake_upstream.launch import start_fake_upstream
from stateway.launch import GATEWAY_ANNOUNCEMENT, Launched, launch
from tests.support.fake_search import FakeSearch
from tests.support.mcp_server import serve_mcp

HERE = Path(__file__).resolve().parent
WEATHER = {
    "type": "function",
    "name": "get_weather",
    "parameters": {"type": "object", "properties": {"city": {"type": "string"}}},
}
CALC = {
    "type": "mcp",
    "server_label": "calc",
    "require_approval": "never",
    "allowed_tools": ["add", "fail"],
}
PNG = (
    "data:image/png;base64,iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNk"
    "+M9QDwADhgGAWjR9awAAAABJRU5ErkJggg=="
)


def config(upstream: str, mcp_url: str, search_url: str) -> str:
    """The second release's configuration (the test serves the database with its like)."""
    backends = "".join(
        f'[[backends]]\nname = "{name}"\nurl = "{upstream}"\napi = "{api}"\n'
        f'models = ["{model}"]\napi_key_env = "UPSTREAM_KEY"\n\n'
        for name, api, model in (
            ("chat", "chat", "fake-model"),
            ("anth", "anthropic", "claude-fake"),
            ("resp", "responses", "resp-fake"),
        )
    )
    return (
        f'[auth]\napi_keys = true\n\n[mcp_servers.calc]\nurl = "{mcp_url}/mcp"\n\n'
        f'[web_search]\nprovider = "searxng"\nsearxng_url = "{search_url}"\n\n{backends}'
    )


@contextmanager
def old_gateway(tree: Path, args: list[str]) -> Iterator[Launched]:
    command = [sys.executable, "-m", "stateway", "serve", "--port", "0", *args]
    env = {"PYTHONPATH": str(tree / "src"), "UPSTREAM_KEY": "upstream-key"}
    with launch(command, GATEWAY_ANNOUNCEMENT, env=env, timeout=60) as launched:
        yield launched


def key(tree: Path, database: str, tenant: str) -> str:
    run = [sys.executable, "-m", "stateway", "keys", "create", "--tenant", tenant]
    env = {**os.environ, "PYTHONPATH": str(tree / "src")}
    done = subprocess.run(
        [*run, "--database", database], env=env, capture_output=True, text=True, check=True
    )
    return done.stdout.strip()


class Recorder:
    def __init__(self, url: str, api_key: str = "unused") -> None:
        self.sdk = OpenAI(base_url=url + "/v1", api_key=api_key, max_retries=0, timeout=60)

    def post(self, path: str, body: dict[str, Any]) -> dict[str, Any]:
        answer = self.sdk.post(path, body=body, cast_to=object)
        assert isinstance(answer, dict)
        return answer

    def create(self, **body: Any) -> dict[str, Any]:
        return self.post("/responses", body)

    def get(self, path: str, **query: Any) -> dict[str, Any]:
        answer = self.sdk.get(path, cast_to=object, options={"params": query})
        assert isinstance(answer, dict)
        return answer

    def finished(self, response_id: str) -> dict[str, Any]:
        for _ in range(300):
            body = self.get(f"/responses/{response_id}")
            if body["status"] not in ("queued", "in_progress"):
                return body
            time.sleep(0.1)
        raise TimeoutError(response_id)

    def echo(self, previous: str, model: str = "fake-model") -> str:
        """What the model is given continuing ``previous``, as this gateway gives it."""
        made = self.create(model=model, input="[[echo]]", previous_response_id=previous)
        return text(made)

    def events(self, response_id: str) -> list[dict[str, Any]]:
        with self.sdk.responses.retrieve(response_id, stream=True, starting_after=0) as events:
            return [event.model_dump(mode="json", exclude_unset=True) for event in events]


def text(response: dict[str, Any]) -> str:
    return "".join(
        part.get("text", "")
        for item in response["output"]
        if item["type"] == "message"
        for part in item["content"]
    )


def first_release(recorder: Recorder) -> dict[str, Any]:
    named = recorder.create(model="fake-model", input="My name is Ada.")
    asked = recorder.create(
        model="fake-model", input="And my name?", previous_response_id=named["id"]
    )
    reasoned = recorder.create(
        model="fake-model", input="[[reason:first thoughts]] hi", reasoning={"effort": "low"}
    )
    called = recorder.create(
        model="fake-model", input='[[tool:get_weather:{"city":"Oslo"}]]', tools=[WEATHER]
    )
    [call] = [item for item in called["output"] if item["type"] == "function_call"]
    answered = recorder.create(
        model="fake-model",
        previous_response_id=called["id"],
        tools=[WEATHER],
        input=[{"type": "function_call_output", "call_id": call["call_id"], "output": "snow"}],
    )
    return {
        "named": named["id"],
        "asked": asked["id"],
        "reasoned": reasoned["id"],
        "answered": answered["id"],
        "echo_asked": recorder.echo(asked["id"]),
        "echo_reasoned": recorder.echo(reasoned["id"]),
        "echo_answered": recorder.echo(answered["id"]),
    }


def second_release(recorder: Recorder, first: dict[str, Any]) -> dict[str, Any]:
    ids: dict[str, Any] = {}
    ids["continued"] = recorder.create(
        model="fake-model", input="Still there?", previous_response_id=first["asked"]
    )["id"]
    ids["echo_continued"] = recorder.echo(ids["continued"])
    for name, model, script in (
        ("anthropic", "claude-fake", "[[reason:signed thoughts]]"),
        ("responses", "resp-fake", "[[hidden]] [[reason:blob thoughts]]"),
    ):
        made = recorder.create(
            model=model,
            input=f"{script} hi",
            reasoning={"effort": "low", "summary": "auto"},
            include=["reasoning.encrypted_content"],
        )
        ids[name] = made["id"]
        ids[f"{name}_reasoning"] = made["output"][0]["id"]
        ids[f"echo_{name}"] = recorder.echo(made["id"], model)
    ids["image"] = recorder.create(
        model="fake-model",
        input=[
            {
                "role": "user",
                "content": [
                    {"type": "input_text", "text": "What is this?"},
                    {"type": "input_image", "image_url": PNG},
                ],
            }
        ],
    )["id"]
    gone = recorder.create(model="fake-model", input="Forget me.")
    recorder.sdk.responses.delete(gone["id"])
    ids["deleted"] = gone["id"]
    ids["sealed"] = recorder.create(
        model="fake-model",
        input="[[reason:sealed thoughts]] hi",
        store=False,
        include=["reasoning.encrypted_content"],
    )["output"]
    ids.update(conversation(recorder))
    ids.update(compaction(recorder))
    ids.update(gateway_tools(recorder))
    ids.update(background(recorder))
    return ids


def conversation(recorder: Recorder) -> dict[str, Any]:
    made = recorder.post(
        "/conversations",
        {"items": [{"type": "message", "role": "user", "content": "My dog is Rex."}]},
    )
    conversation_id = made["id"]
    recorder.create(model="fake-model", input="[[words:3]] first", conversation=conversation_id)
    added = recorder.post(
        f"/conversations/{conversation_id}/items",
        {"items": [{"type": "message", "role": "user", "content": "doomed"}]},
    )
    doomed = added["data"][0]["id"]
    recorder.sdk.conversations.items.delete(doomed, conversation_id=conversation_id)
    squashed = recorder.create(
        model="fake-model",
        conversation=conversation_id,
        input=[{"role": "user", "content": "squash"}, {"type": "compaction_trigger"}],
    )
    recorder.create(model="fake-model", input="after", conversation=conversation_id)
    return {"conversation": conversation_id, "doomed": doomed, "squashed": squashed["id"]}


def compaction(recorder: Recorder) -> dict[str, Any]:
    long = recorder.create(model="fake-model", input="Part one. [[words:20]]")
    compacted = recorder.create(
        model="fake-model",
        input="Part two.",
        previous_response_id=long["id"],
        context_management=[{"type": "compaction", "compact_threshold": 10}],
    )
    window = recorder.post("/responses/compact", {"model": "fake-model", "input": "a b c"})
    return {
        "compacted": compacted["id"],
        "echo_compacted": recorder.echo(compacted["id"]),
        "window": window["output"],
    }


def gateway_tools(recorder: Recorder) -> dict[str, Any]:
    called = recorder.create(
        model="fake-model", input='[[tool:calc__add:{"a":2,"b":3}]]', tools=[CALC]
    )
    failed = recorder.create(
        model="fake-model", input='[[tool:calc__fail:{"message":"nope"}]]', tools=[CALC]
    )
    searched = recorder.create(
        model="fake-model",
        input='[[tool:web_search:{"query":"stateway"}]]',
        tools=[{"type": "web_search"}],
    )
    return {
        "mcp": called["id"],
        "mcp_failed": failed["id"],
        "searched": searched["id"],
        "echo_mcp_failed": recorder.echo(failed["id"]),
        "echo_searched": recorder.echo(searched["id"]),
    }


def background(recorder: Recorder) -> dict[str, Any]:
    done = recorder.create(
        model="fake-model",
        input="[[reason:in the background]] [[words:3]]",
        background=True,
        reasoning={"effort": "low", "summary": "auto"},
    )
    recorder.finished(done["id"])
    slow = recorder.create(model="fake-model", input="[[slow:100]] [[words:60]]", background=True)
    time.sleep(0.5)
    recorder.sdk.responses.cancel(slow["id"])
    recorder.finished(slow["id"])
    return {
        "background": done["id"],
        "events": recorder.events(done["id"]),
        "cancelled": slow["id"],
        "cancelled_events": len(recorder.events(slow["id"])),
    }


def in_flight(recorder: Recorder) -> dict[str, Any]:
    """A background run left running: its log holds its first words when it is killed."""
    made = recorder.create(
        model="fake-model", input="[[slow:150]] [[words:200]] killed", background=True
    )
    with recorder.sdk.responses.retrieve(made["id"], stream=True, starting_after=0) as events:
        for event in events:
            if event.type == "response.output_text.delta" and event.delta.strip() == "w3":
                break
    time.sleep(1)  # the journal's next batch is written
    return {"in_flight": made["id"]}


def main(first_tree: Path, second_tree: Path) -> None:
    with ExitStack() as stack:
        work = Path(stack.enter_context(tempfile.TemporaryDirectory()))
        path = work / "old.db"
        database = f"sqlite:///{path}"
        upstream = stack.enter_context(start_fake_upstream())
        mcp = stack.enter_context(serve_mcp())
        search = stack.enter_context(FakeSearch())
        with old_gateway(first_tree, ["--upstream", upstream, "--database", database]) as a:
            first = first_release(Recorder(a.url))
        default_key = key(second_tree, database, "default")
        other_key = key(second_tree, database, "globex")
        (work / "old.toml").write_text(config(upstream, mcp.base_url, search.url))
        args = ["--config", str(work / "old.toml"), "--database", database]
        with old_gateway(second_tree, args) as c:
            recorder = Recorder(c.url, default_key)
            second = second_release(recorder, first)
            other = Recorder(c.url, other_key).create(model="fake-model", input="globex only")
            second.update(in_flight(recorder))
            os.kill(c.pid, signal.SIGKILL)
        manifest = {
            "keys": {"default": default_key, "globex": other_key},
            "first": first,
            "second": second,
            "other_tenant": other["id"],
        }
        with sqlite3.connect(path) as db:
            dump = "\n".join(db.iterdump())
    (HERE / "database.sql").write_text(dump + "\n")
    (HERE / "manifest.json").write_text(json.dumps(manifest, indent=1) + "\n")


if __name__ == "__main__":
    main(Path(sys.argv[1]), Path(sys.argv[2]))
