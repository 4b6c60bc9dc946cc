"""Two ``stateway serve`` processes started together on one fresh database, as replicas of
a deployment come up: both migrate it at start-up (taking turns), both serve, and they
share what the first start stores: the schema, the sealing key, each other's responses."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import ExitStack
from pathlib import Path
from typing import Any

import pytest
from openai import OpenAI

from stateway.launch import start_gateway


@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def fresh_database(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    if request.param == "sqlite":
        return f"sqlite:///{tmp_path}/stateway.db"
    url: str = request.getfixturevalue("fresh_postgres_url")
    return url


@pytest.fixture
def two_gateways(fake_upstream: str, fresh_database: str) -> Iterator[list[OpenAI]]:
    args = ["--upstream", fake_upstream, "--database", fresh_database]
    gateways = [start_gateway(args) for _ in range(2)]
    urls: list[str | None] = [None, None]
    failures: list[BaseException] = []

    def start(index: int) -> None:
        try:
            urls[index] = gateways[index].__enter__()
        except BaseException as exc:  # noqa: BLE001  # reported by the assertion below
            failures.append(exc)

    starting = [threading.Thread(target=start, args=(index,)) for index in range(2)]
    for thread in starting:
        thread.start()
    for thread in starting:
        thread.join()
    with ExitStack() as stack:
        for gateway, url in zip(gateways, urls, strict=True):
            if url is not None:
                stack.push(gateway)
        assert not failures, failures
        clients = [
            stack.enter_context(OpenAI(base_url=f"{url}/v1", api_key="k", max_retries=0))
            for url in urls
        ]
        yield clients


def test_two_processes_starting_together_on_a_fresh_database_both_serve_it(
    two_gateways: list[OpenAI],
) -> None:
    first, second = two_gateways
    asked = first.responses.create(model="m", input="My dog is Rex. [[words:2]]")
    assert second.responses.retrieve(asked.id).output_text == "w1 w2"
    echoed = second.responses.create(model="m", input="[[echo]]", previous_response_id=asked.id)
    assert "user: My dog is Rex." in echoed.output_text

    thought = first.responses.create(
        model="m",
        input="[[reason:sealed thoughts]] hi",
        store=False,
        include=["reasoning.encrypted_content"],
    )
    turn: list[Any] = [item.model_dump(exclude_none=True) for item in thought.output]
    assert turn[0]["type"] == "reasoning"
    assert turn[0]["encrypted_content"]
    opened = second.responses.create(  # sealed by the first, opened by the second: one key
        model="m",
        store=False,
        input=[
            {"role": "user", "content": "hi"},
            *turn,
            {"role": "user", "content": "[[echo]]"},
        ],
    )
    assert "reasoning: sealed thoughts" in opened.output_text
