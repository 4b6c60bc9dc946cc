"""Exactly-once commands end to end: the real ``stateway serve`` and fake upstream, the
official ``openai`` SDK sending ``Idempotency-Key``; then two gateway processes sharing
PostgreSQL and Redis, deduplicating together and cancelling each other's runs."""

from __future__ import annotations

import asyncio
import uuid
from typing import Any

import openai
import pytest
from openai import AsyncOpenAI

from stateway.launch import Launched
from tests.e2e.test_background import collect, dump
from tests.e2e.test_durability import gateway
from tests.e2e.test_upstream_mapping import upstream_requests

MODEL = "fake-model"


def sdk(url: str) -> AsyncOpenAI:
    return AsyncOpenAI(base_url=url + "/v1", api_key="sk-test", max_retries=0)


def keyed(key: str) -> dict[str, str]:
    return {"Idempotency-Key": key}


def sent_upstream(fake_upstream: str, marker: str) -> int:
    """How many upstream requests carried ``marker`` in their input."""
    return sum(marker in str(r["body"]) for r in upstream_requests(fake_upstream))


async def test_twenty_concurrent_creates_with_one_key_run_once(
    gateway: str, fake_upstream: str
) -> None:
    client = sdk(gateway)
    marker = uuid.uuid4().hex
    key = keyed(marker)
    text = f"{marker} [[slow:20]] [[words:5]]"

    raws = await asyncio.gather(
        *(
            client.responses.with_raw_response.create(model=MODEL, input=text, extra_headers=key)
            for _ in range(20)
        )
    )

    assert {raw.status_code for raw in raws} == {200}
    bodies = {raw.content for raw in raws}
    assert len(bodies) == 1
    assert raws[0].parse().status == "completed"
    assert sent_upstream(fake_upstream, marker) == 1


async def test_the_same_key_with_another_body_is_a_409(gateway: str) -> None:
    client = sdk(gateway)
    key = keyed(uuid.uuid4().hex)
    await client.responses.create(model=MODEL, input="first", extra_headers=key)
    with pytest.raises(openai.ConflictError) as caught:
        await client.responses.create(model=MODEL, input="second", extra_headers=key)
    assert caught.value.code == "idempotency_key_reused"


async def test_a_retried_stream_gets_the_same_response_and_events(
    gateway: str, fake_upstream: str
) -> None:
    client = sdk(gateway)
    marker = uuid.uuid4().hex
    key = keyed(marker)

    async def stream() -> list[dict[str, Any]]:
        events = await client.responses.create(
            model=MODEL, input=f"{marker} [[words:8]]", stream=True, extra_headers=key
        )
        return await collect(events)

    first = await stream()
    again = await stream()
    assert first[-1]["type"] == "response.completed"
    assert again == first
    assert sent_upstream(fake_upstream, marker) == 1


async def test_a_stream_refused_before_its_output_is_retried_not_replayed(
    gateway: str, fake_upstream: str
) -> None:
    """A keyed stream answered with its HTTP error is a failure: its retry runs again
    (and gets the error again), rather than a 200 replay of the failed response's log."""
    client = sdk(gateway)
    marker = uuid.uuid4().hex
    key = keyed(marker)

    for _ in range(2):
        with pytest.raises(openai.APIStatusError) as caught:
            await client.responses.create(
                model=MODEL, input=f"{marker} [[error:500]]", stream=True, extra_headers=key
            )
        assert caught.value.status_code == 502

    assert sent_upstream(fake_upstream, marker) == 2


@pytest.fixture(scope="module")
def shared(
    redis_url: str, postgres_url: str, fake_upstream: str, tmp_path_factory: pytest.TempPathFactory
) -> Any:
    """Two gateway processes over one PostgreSQL database and one Redis key prefix, shared
    by the module's tests: each sends its own markers and idempotency keys."""
    env = {"STATEWAY_REDIS_URL": redis_url, "STATEWAY_REDIS_KEY_PREFIX": f"t{uuid.uuid4().hex}:"}
    log = tmp_path_factory.mktemp("shared") / "gateway.log"
    with (
        gateway(fake_upstream, postgres_url, log, env) as first,
        gateway(fake_upstream, postgres_url, log, env) as second,
    ):
        yield first, second


Pair = tuple[Launched, Launched]


@pytest.mark.postgres
@pytest.mark.redis
async def test_two_processes_sharing_redis_run_a_command_once(
    shared: Pair, fake_upstream: str
) -> None:
    clients = [sdk(process.url) for process in shared]
    marker = uuid.uuid4().hex
    key = keyed(marker)
    text = f"{marker} [[slow:20]] [[words:5]]"

    raws = await asyncio.gather(
        *(
            clients[n % 2].responses.with_raw_response.create(
                model=MODEL, input=text, extra_headers=key
            )
            for n in range(20)
        )
    )

    assert {raw.status_code for raw in raws} == {200}
    assert len({raw.content for raw in raws}) == 1
    assert sent_upstream(fake_upstream, marker) == 1


@pytest.mark.postgres
@pytest.mark.redis
async def test_a_stream_retried_on_the_other_process_replays_from_the_stored_log(
    shared: Pair, fake_upstream: str
) -> None:
    owner, other = (sdk(process.url) for process in shared)
    marker = uuid.uuid4().hex
    key = keyed(marker)
    text = f"{marker} [[slow:10]] [[words:10]]"

    first = await collect(
        await owner.responses.create(model=MODEL, input=text, stream=True, extra_headers=key)
    )
    again = await collect(
        await other.responses.create(model=MODEL, input=text, stream=True, extra_headers=key)
    )

    assert again == first
    assert sent_upstream(fake_upstream, marker) == 1


@pytest.mark.postgres
@pytest.mark.redis
async def test_a_cancel_sent_to_the_other_process_cancels_the_run(shared: Pair) -> None:
    owner, other = (sdk(process.url) for process in shared)
    created = await owner.responses.create(
        model=MODEL, input="[[slow:200]] [[words:100]]", background=True
    )

    cancelled = await other.responses.cancel(created.id)

    assert cancelled.status == "cancelled"
    seen = await owner.responses.retrieve(created.id)
    assert seen.status == "cancelled"
    events = [dump(e) async for e in await owner.responses.retrieve(created.id, stream=True)]
    assert events[-1]["response"]["status"] == "cancelled"
