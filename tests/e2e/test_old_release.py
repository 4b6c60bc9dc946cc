"""A database written by older releases, served by this one: upgraded in place.

``old_release/database.sql`` is a SQLite database as two releases left it, the second
killed with a background run in flight; ``old_release/record.py`` made it (from git
worktrees of ``287b8e49`` and ``e09bcac5``; its docstring says what each wrote), and
``old_release/manifest.json`` holds the ids it made and what the old gateway answered.
This release migrates it at start-up, fails the run its dead process left, and must read
every row back and go on from it as the old release would have: the same context given
to the model, the same event logs, the same seals opening, the same keys and tenants.

Record it again (a new release's rows) only to cover a stored shape no release before it
wrote; a new release's own shapes are what the rest of the suite tests.
"""

from __future__ import annotations

import json
import sqlite3
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from openai import NotFoundError, OpenAI

from stateway.launch import child_env, start_gateway

DATA = Path(__file__).resolve().parent / "old_release"
MANIFEST: dict[str, Any] = json.loads((DATA / "manifest.json").read_text())
FIRST: dict[str, Any] = MANIFEST["first"]
SECOND: dict[str, Any] = MANIFEST["second"]
KEYS: dict[str, str] = MANIFEST["keys"]


def configuration(upstream: str) -> str:
    """The old release's backends: one model per upstream API shape, all on the fake."""
    return "[auth]\napi_keys = true\n\n" + "".join(
        f'[[backends]]\nname = "{api}"\nurl = "{upstream}"\napi = "{api}"\n'
        f'models = ["{model}"]\napi_key_env = "UPSTREAM_KEY"\n\n'
        for api, model in (
            ("chat", "fake-model"),
            ("anthropic", "claude-fake"),
            ("responses", "resp-fake"),
        )
    )


@pytest.fixture(scope="module")
def database(tmp_path_factory: pytest.TempPathFactory) -> str:
    path = tmp_path_factory.mktemp("old") / "old.db"
    with sqlite3.connect(path) as db:
        db.executescript((DATA / "database.sql").read_text())
    return f"sqlite:///{path}"


@pytest.fixture(scope="module")
def gateway(
    fake_upstream: str, database: str, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[str]:
    config = tmp_path_factory.mktemp("config") / "stateway.toml"
    config.write_text(configuration(fake_upstream))
    args = ["--config", str(config), "--database", database]
    with start_gateway(args, env={"UPSTREAM_KEY": "upstream-key"}) as url:
        yield url


@pytest.fixture(scope="module")
def sdk(gateway: str) -> Iterator[OpenAI]:
    with OpenAI(base_url=gateway + "/v1", api_key=KEYS["default"], max_retries=0) as client:
        yield client


def text(response: Any) -> str:
    return str(response.output_text)


def echo(sdk: OpenAI, previous: str, model: str = "fake-model") -> str:
    """What the model is given continuing ``previous`` (the fake's ``[[echo]]``)."""
    return text(sdk.responses.create(model=model, input="[[echo]]", previous_response_id=previous))


def stored_ids() -> list[str]:
    ids = [FIRST[name] for name in ("named", "asked", "reasoned", "answered")]
    return ids + [
        SECOND[name]
        for name in (
            "continued",
            "anthropic",
            "responses",
            "image",
            "squashed",
            "compacted",
            "mcp",
            "mcp_failed",
            "searched",
            "background",
            "cancelled",
        )
    ]


def test_the_run_its_dead_process_left_fails_with_the_output_its_log_holds(sdk: OpenAI) -> None:
    response = sdk.responses.retrieve(SECOND["in_flight"])
    assert response.status == "failed"
    assert response.error is not None
    assert response.error.code == "server_restarted"
    assert text(response).startswith("w1 w2 w3")
    replayed = list(sdk.responses.retrieve(response.id, stream=True, starting_after=0))
    assert replayed[-1].type == "response.failed"


@pytest.mark.parametrize("response_id", stored_ids())
def test_every_stored_response_and_its_input_items_read_back(sdk: OpenAI, response_id: str) -> None:
    response = sdk.responses.retrieve(response_id)
    assert response.status in ("completed", "cancelled")
    assert response.output
    assert list(sdk.responses.input_items.list(response_id))
    shown = sdk.responses.retrieve(response_id, include=["reasoning.encrypted_content"])
    assert [item.id for item in shown.output] == [item.id for item in response.output]


def test_a_deleted_response_stays_deleted(sdk: OpenAI) -> None:
    with pytest.raises(NotFoundError):
        sdk.responses.retrieve(SECOND["deleted"])


@pytest.mark.parametrize(
    ("previous", "model", "expected"),
    [
        (FIRST["asked"], "fake-model", FIRST["echo_asked"]),
        (FIRST["reasoned"], "fake-model", FIRST["echo_reasoned"]),
        (FIRST["answered"], "fake-model", FIRST["echo_answered"]),
        (SECOND["continued"], "fake-model", SECOND["echo_continued"]),
        (SECOND["anthropic"], "claude-fake", SECOND["echo_anthropic"]),
        (SECOND["responses"], "resp-fake", SECOND["echo_responses"]),
        (SECOND["compacted"], "fake-model", SECOND["echo_compacted"]),
        (SECOND["mcp_failed"], "fake-model", SECOND["echo_mcp_failed"]),
        (SECOND["searched"], "fake-model", SECOND["echo_searched"]),
    ],
    ids=[
        "chain",
        "reasoning",
        "tool-output",
        "chain-across-releases",
        "anthropic-signature",
        "responses-blob",
        "compaction",
        "mcp-error",
        "web-search",
    ],
)
def test_a_chain_goes_on_with_the_context_the_old_release_gave(
    sdk: OpenAI, previous: str, model: str, expected: str
) -> None:
    """The Anthropic signature and the Responses blob are stored as they came (before
    seals were sealed over): the fake upstream takes back only its own."""
    assert echo(sdk, previous, model) == expected


@pytest.mark.parametrize(
    ("name", "model", "thought"),
    [("anthropic", "claude-fake", "signed thoughts"), ("responses", "resp-fake", "blob thoughts")],
)
def test_a_reference_to_reasoning_stored_with_its_upstreams_seal_keeps_it(
    sdk: OpenAI, name: str, model: str, thought: str
) -> None:
    """The stored item a reference names is the tenant's own, as a chain's items are: its
    upstream's seal as it came reaches the upstream (an Anthropic upstream takes no
    thinking without its signature)."""
    reference = {"type": "item_reference", "id": SECOND[f"{name}_reasoning"]}
    answer = sdk.responses.create(
        model=model,
        store=False,
        input=[
            {"role": "user", "content": "hi"},
            reference,  # type: ignore[list-item]
            {"role": "user", "content": "[[echo]]"},
        ],
    )
    assert f"reasoning: {thought}" in text(answer)


def test_the_conversation_lists_its_items_and_goes_on(sdk: OpenAI) -> None:
    """A turn of the old release appended its ``compaction_trigger`` too: no conversation
    item type is one, so it is not listed (the SDK would read it as a message)."""
    conversation = SECOND["conversation"]
    items = list(sdk.conversations.items.list(conversation, order="asc"))
    assert [item.type for item in items] == ["message"] * 4 + ["compaction"] + ["message"] * 2
    with pytest.raises(NotFoundError):
        sdk.conversations.items.retrieve(SECOND["doomed"], conversation_id=conversation)
    turn = sdk.responses.create(model="fake-model", input="[[echo]]", conversation=conversation)
    seen = text(turn)
    assert "user: My dog is Rex." in seen
    assert "Summary of the conversation:" in seen
    assert "user: after" in seen
    assert "doomed" not in seen


def test_a_background_log_replays_as_the_old_release_streamed_it(sdk: OpenAI) -> None:
    logged: list[dict[str, Any]] = SECOND["events"]
    response_id = SECOND["background"]

    def replay(after: int) -> list[dict[str, Any]]:
        with sdk.responses.retrieve(response_id, stream=True, starting_after=after) as events:
            return [event.model_dump(mode="json", exclude_unset=True) for event in events]

    assert replay(0) == logged
    middle = logged[len(logged) // 2]["sequence_number"]
    assert replay(middle) == [e for e in logged if e["sequence_number"] > middle]
    cancelled = list(sdk.responses.retrieve(SECOND["cancelled"], stream=True, starting_after=0))
    assert len(cancelled) == SECOND["cancelled_events"]
    assert cancelled[-1].type == "response.failed"  # no event says cancelled
    assert cancelled[-1].response.status == "cancelled"


def test_the_seals_the_old_release_gave_clients_still_open(sdk: OpenAI) -> None:
    """Sealed with the key the old release generated into the database."""
    sealed = sdk.responses.create(
        model="fake-model",
        store=False,
        input=[
            {"role": "user", "content": "hi"},
            *SECOND["sealed"],
            {"role": "user", "content": "[[echo]]"},
        ],
    )
    assert "reasoning: sealed thoughts" in text(sealed)
    compacted = sdk.responses.create(
        model="fake-model",
        store=False,
        input=[*SECOND["window"], {"role": "user", "content": "[[echo]]"}],
    )
    assert "Summary of the conversation:\nuser: a b c" in text(compacted)


def test_the_keys_and_tenants_are_kept(gateway: str, sdk: OpenAI, database: str) -> None:
    theirs = MANIFEST["other_tenant"]
    with pytest.raises(NotFoundError):
        sdk.responses.retrieve(theirs)
    with OpenAI(base_url=gateway + "/v1", api_key=KEYS["globex"], max_retries=0) as globex:
        assert globex.responses.retrieve(theirs).status == "completed"
    listed = subprocess.run(
        [sys.executable, "-m", "stateway", "keys", "list", "--json", "--database", database],
        env=child_env(),
        capture_output=True,
        text=True,
        check=True,
    )
    tenants = sorted(key["tenant"] for key in json.loads(listed.stdout))
    assert tenants == ["default", "globex"]
    usage = sdk.get("/usage", cast_to=object, options={"params": {"start_time": 0}})
    assert isinstance(usage, dict)
    assert {bucket["tenant"] for bucket in usage["data"]} == {"default"}


def test_the_usage_the_old_release_stored_is_counted_by_model(sdk: OpenAI, database: str) -> None:
    """The usage query reads columns the gateway's first sweep fills in from each stored
    body (the old release kept the counts in the body alone; until it has, the query
    reads the bodies): the finished responses the old release stored have them."""
    read = "SELECT count(*) FROM responses WHERE model IS NULL AND status <> 'in_progress'"
    for _ in range(200):
        with sqlite3.connect(database.removeprefix("sqlite:///")) as db:
            [(unfilled,)] = db.execute(read).fetchall()
        if not unfilled:
            break
        time.sleep(0.05)
    assert unfilled == 0
    end = int(sdk.responses.retrieve(SECOND["in_flight"]).created_at) + 1  # its last response
    usage = sdk.get(
        "/usage", cast_to=object, options={"params": {"start_time": 0, "end_time": end}}
    )
    assert isinstance(usage, dict)
    counted = {
        bucket["model"]: (bucket["responses"], bucket["input_tokens"], bucket["output_tokens"])
        for bucket in usage["data"]
    }
    assert counted["claude-fake"] == (2, 13, 20)
    assert counted["resp-fake"] == (2, 15, 21)
    assert counted["fake-model"][1:] > (0, 0)
    assert set(counted) == {"fake-model", "claude-fake", "resp-fake"}
