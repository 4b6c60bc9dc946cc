"""``[storage] retention`` with the real ``openai`` SDK: a response older than it is gone
(a 404; a ``previous_response_id`` naming it a 400), a background run is kept while it
runs however old it gets, and conversations are kept until deleted; a deleted one is
erased with its items.

SQLite only, on purpose: a sweep deletes every old enough response in the database, and
the PostgreSQL database the suite shares holds every other test's rows.
"""

from __future__ import annotations

import sqlite3
import time
import urllib.request
from collections.abc import Iterator
from contextlib import closing
from pathlib import Path

import openai
import pytest
from openai import OpenAI

from stateway.launch import start_gateway

MODEL = "fake-model"
DELETED = "stateway_responses_deleted_total "
PURGED = "stateway_conversations_purged_total "


@pytest.fixture(scope="module")
def database(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("retention") / "stateway.db"


@pytest.fixture(scope="module")
def client(fake_upstream: str, database: Path) -> Iterator[OpenAI]:
    args = ["--upstream", fake_upstream, "--database", f"sqlite:///{database}"]
    env = {"STATEWAY_RETENTION": "1s"}  # swept each second
    with (
        start_gateway(args, env=env) as url,
        OpenAI(base_url=url + "/v1", api_key="k", max_retries=0) as client,
    ):
        yield client


def gone(client: OpenAI, response_id: str, within: float = 15.0) -> bool:
    deadline = time.monotonic() + within
    while time.monotonic() < deadline:
        try:
            client.responses.retrieve(response_id)
        except openai.NotFoundError:
            return True
        time.sleep(0.2)
    return False


def test_a_response_older_than_the_retention_is_gone(client: OpenAI) -> None:
    first = client.responses.create(model=MODEL, input="hello")
    assert gone(client, first.id)
    assert counted(client, DELETED) >= 1
    with pytest.raises(openai.BadRequestError) as refused:
        client.responses.create(model=MODEL, input="again", previous_response_id=first.id)
    assert refused.value.code == "previous_response_not_found"


def counted(client: OpenAI, metric: str) -> float:
    root = str(client.base_url).removesuffix("/").removesuffix("/v1")
    with urllib.request.urlopen(root + "/metrics", timeout=10) as answer:
        metrics = answer.read().decode()
    [line] = [line for line in metrics.splitlines() if line.startswith(metric)]
    return float(line.split()[1])


def test_a_background_run_is_kept_while_it_runs(client: OpenAI) -> None:
    started = client.responses.create(
        model=MODEL, input="[[slow:100]] [[words:40]]", background=True
    )
    time.sleep(2.5)  # past the retention, swept twice
    assert client.responses.retrieve(started.id).status == "in_progress"
    deadline = time.monotonic() + 30
    status = "in_progress"
    while status == "in_progress" and time.monotonic() < deadline:
        try:
            status = client.responses.retrieve(started.id).status
        except openai.NotFoundError:
            status = "deleted"  # finished, then swept before this look
        time.sleep(0.1)
    assert status in ("completed", "deleted")
    assert gone(client, started.id)


def test_conversations_are_kept(client: OpenAI) -> None:
    conversation = client.conversations.create(items=[{"role": "user", "content": "keep me"}])
    answer = client.responses.create(model=MODEL, input="[[echo]]", conversation=conversation.id)
    assert gone(client, answer.id)
    kept = client.conversations.items.list(conversation.id)
    assert len(kept.data) == 3  # the item, and the turn's input and output
    follow = client.responses.create(model=MODEL, input="[[echo]]", conversation=conversation.id)
    assert "keep me" in follow.output_text


def test_a_deleted_conversation_is_erased_with_its_items(client: OpenAI, database: Path) -> None:
    """Not only hidden: its rows, and its items' content with them, leave the database at
    the next sweep."""
    conversation = client.conversations.create(items=[{"role": "user", "content": "erase me"}])
    client.responses.create(model=MODEL, input="[[echo]] and me", conversation=conversation.id)
    client.conversations.delete(conversation.id)
    deadline = time.monotonic() + 15
    while stored(database, conversation.id) != (0, 0):
        assert time.monotonic() < deadline, "the deleted conversation was never erased"
        time.sleep(0.2)
    assert counted(client, PURGED) >= 1


def stored(database: Path, conversation_id: str) -> tuple[int, int]:
    """The rows of the conversation, and of its items."""
    with closing(sqlite3.connect(f"file:{database}?mode=ro", uri=True)) as connection:
        [(rows,)] = connection.execute(
            "SELECT count(*) FROM conversations WHERE id = ?", (conversation_id,)
        )
        [(items,)] = connection.execute(
            "SELECT count(*) FROM conversation_items WHERE conversation_id = ?",
            (conversation_id,),
        )
    return rows, items
