"""``[storage] retention`` with the real ``openai`` SDK: a response older than it is gone
(a 404; a ``previous_response_id`` naming it a 400), a background run is kept while it
runs however old it gets, and conversations are kept.

SQLite only, on purpose: a sweep deletes every old enough response in the database, and
the PostgreSQL database the suite shares holds every other test's rows.
"""

from __future__ import annotations

import time
import urllib.request
from collections.abc import Iterator

import openai
import pytest
from openai import OpenAI

from stateway.launch import start_gateway

MODEL = "fake-model"
DELETED = "stateway_responses_deleted_total "


@pytest.fixture(scope="module")
def client(fake_upstream: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[OpenAI]:
    database = tmp_path_factory.mktemp("retention") / "stateway.db"
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
    root = str(client.base_url).removesuffix("/").removesuffix("/v1")
    with urllib.request.urlopen(root + "/metrics", timeout=10) as answer:
        metrics = answer.read().decode()
    [counted] = [line for line in metrics.splitlines() if line.startswith(DELETED)]
    assert float(counted.split()[1]) >= 1
    with pytest.raises(openai.BadRequestError) as refused:
        client.responses.create(model=MODEL, input="again", previous_response_id=first.id)
    assert refused.value.code == "previous_response_not_found"


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
