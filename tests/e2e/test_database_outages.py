"""PostgreSQL ending every connection of a serving gateway (a server restart, an
administrator's ``pg_terminate_backend``, a proxy recycling them): the real ``stateway
serve`` on a database of its own, driven by the official ``openai`` SDK. What runs goes on
and is stored whole, what comes next is answered, and ``/ready`` stays ready.

And PostgreSQL gone silent (a network partition, a frozen host: connections open, no
answer ever): what needs it fails within ``[storage] database_timeout``, in the API's own
error shape, instead of waiting for ever; the gateway serves again once it answers."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager
from pathlib import Path

import aiohttp
import asyncpg
import openai
import pytest
from openai import AsyncOpenAI

from stateway.launch import Launched
from tests.e2e.test_background import dump
from tests.e2e.test_durability import gateway
from tests.support.switch import Switch

pytestmark = pytest.mark.postgres

MODEL = "fake-model"
RUNNING = "[[slow:100]] [[words:40]]"
"""Some 4 s of output: long enough to have its connections ended under it, twice."""


@pytest.fixture
def served(fresh_postgres_url: str, fake_upstream: str, tmp_path: Path) -> Iterator[Launched]:
    with gateway(fake_upstream, fresh_postgres_url, tmp_path / "gateway.log") as launched:
        yield launched


def sdk(url: str) -> AsyncOpenAI:
    return AsyncOpenAI(base_url=url + "/v1", api_key="sk-test", max_retries=0)


async def end_connections(database_url: str) -> int:
    """End every other connection to the gateway's database, once each is gone."""
    admin = await asyncpg.connect(database_url, timeout=5)
    try:
        ended = await admin.fetch(
            "SELECT pg_terminate_backend(pid, 5000) FROM pg_stat_activity"
            " WHERE datname = current_database() AND pid <> pg_backend_pid()"
        )
    finally:
        await admin.close()
    return len(ended)


async def test_runs_and_requests_outlive_their_database_connections_ended(
    served: Launched, fresh_postgres_url: str
) -> None:
    client = sdk(served.url)
    first = await client.responses.create(model=MODEL, input="hi")
    # Many reads at once: the pool holds several connections, all to be ended.
    await asyncio.gather(*(client.responses.retrieve(first.id) for _ in range(30)))
    background = await client.responses.create(model=MODEL, input=RUNNING, background=True)
    stream = await client.responses.create(model=MODEL, input=RUNNING, stream=True)
    streamed = []
    async for event in stream:
        streamed.append(event)
        if len([e for e in streamed if e.type == "response.output_text.delta"]) in (10, 25):
            assert await end_connections(fresh_postgres_url) >= 1
            # At once: answered on new connections, none failing on an ended one.
            created = await asyncio.gather(
                *(client.responses.create(model=MODEL, input="hi") for _ in range(5))
            )
            assert [r.status for r in created] == ["completed"] * 5
            async with (
                aiohttp.ClientSession() as session,
                session.get(served.url + "/ready") as ready,
            ):
                assert ready.status == 200, await ready.text()

    assert streamed[-1].type == "response.completed"
    stored = await client.responses.retrieve(streamed[-1].response.id)
    assert stored.status == "completed"
    assert stored.output_text == "".join(
        e.delta for e in streamed if e.type == "response.output_text.delta"
    )
    replayed = [dump(e) async for e in await client.responses.retrieve(background.id, stream=True)]
    assert replayed[-1]["type"] == "response.completed"
    assert [e["sequence_number"] for e in replayed] == list(range(len(replayed)))
    assert (await client.responses.retrieve(background.id)).status == "completed"


@asynccontextmanager
async def serving(
    upstream: str, database: str, log: Path, env: dict[str, str]
) -> AsyncIterator[Launched]:
    """:func:`gateway`, started and stopped on a thread: the switch in front of its
    database forwards on this loop, which must go on while it migrates and shuts down."""
    started = gateway(upstream, database, log, env)
    launched = await asyncio.to_thread(started.__enter__)
    try:
        yield launched
    finally:
        await asyncio.to_thread(started.__exit__, None, None, None)


async def ready(url: str) -> int:
    async with aiohttp.ClientSession() as session, session.get(url + "/ready") as answer:
        return answer.status


async def test_a_database_gone_silent_fails_what_needs_it_in_time_then_serves_again(
    fresh_postgres_url: str, fake_upstream: str, tmp_path: Path
) -> None:
    env = {"STATEWAY_DATABASE_TIMEOUT": "1"}
    async with (
        Switch(fresh_postgres_url) as switch,
        serving(fake_upstream, switch.url, tmp_path / "gateway.log", env) as served,
    ):
        client = sdk(served.url)
        await client.responses.create(model=MODEL, input="hi")
        background = await client.responses.create(model=MODEL, input=RUNNING, background=True)
        watched = await client.responses.retrieve(background.id, stream=True)
        stream = await client.responses.create(model=MODEL, input=RUNNING, stream=True)
        streamed = [await anext(stream)]  # response.created: its row is stored
        switch.silence()

        async with asyncio.timeout(60):  # each fails within a second or two, none hangs
            with pytest.raises(openai.InternalServerError) as refused:
                await client.responses.create(model=MODEL, input="hi")
            assert await ready(served.url) == 503
            streamed += [event async for event in stream]
            replayed = [dump(event) async for event in watched]
        assert refused.value.status_code == 503
        assert isinstance(refused.value.body, dict)
        assert refused.value.body["type"] == "server_error"
        assert refused.value.response.headers["retry-after"] == "5"  # an outage's wait
        for ended in (dump(streamed[-1]), replayed[-1]):  # not stored: every client is told
            assert ended["type"] == "response.failed"
            assert ended["response"]["error"]["message"] == "The response could not be stored."

        switch.on()  # the connections open meanwhile stay silent: none is used again
        async with asyncio.timeout(60):
            answered = await client.responses.create(model=MODEL, input="hi")
            assert answered.status == "completed"
            assert await ready(served.url) == 200
            for response_id in (streamed[-1].response.id, background.id):
                assert (await client.responses.retrieve(response_id)).status == "failed"
