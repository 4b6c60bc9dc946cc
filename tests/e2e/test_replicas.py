"""Two gateway replicas on one PostgreSQL database and one Redis, as one service: a
background run on A followed live from B (from the start and from the middle, the same
events) and cancelled from B; a resume past what A has logged refused by both; A killed
mid-run and its run failed by B once A's lease expired, keeping the text A had logged; a
chain continued alternately on A and B; one rate limit shared by both, answered in each
frontend's shape, and one limit of concurrent requests; a WebSocket resume on B of a run
A's socket streams told how it ends. The real ``stateway serve`` processes and the
official SDKs."""

from __future__ import annotations

import asyncio
import os
import signal
import time
import uuid
from collections.abc import AsyncIterator, Iterator
from contextlib import ExitStack, asynccontextmanager
from pathlib import Path
from typing import Any

import anthropic
import openai
import pytest
from openai import AsyncOpenAI
from redis.asyncio import Redis

from stateway.core.response import UNFINISHED
from stateway.launch import Launched
from tests.e2e.test_background import dump, upstream_saw_leave, watch
from tests.e2e.test_background_durability import cut_message, partial_text
from tests.e2e.test_durability import gateway, wait_until_gone

pytestmark = [pytest.mark.postgres, pytest.mark.redis]

MODEL = "fake-model"
LONG = "[[slow:100]] [[words:400]]"
"""A run of some 40 seconds: long enough to be watched, then cancelled or cut short."""
Event = dict[str, Any]


def sdk(url: str) -> AsyncOpenAI:
    return AsyncOpenAI(base_url=url + "/v1", api_key="sk-test", max_retries=0)


class Replicas:
    def __init__(self, first: Launched, second: Launched, prefix: str) -> None:
        self.a, self.b = first, second
        self.prefix = prefix


def replicas(
    redis_url: str, postgres_url: str, fake_upstream: str, log: Path, **env: str
) -> Iterator[Replicas]:
    prefix = f"t{uuid.uuid4().hex}:"
    shared = {"STATEWAY_REDIS_URL": redis_url, "STATEWAY_REDIS_KEY_PREFIX": prefix, **env}
    with ExitStack() as stack:
        first = stack.enter_context(gateway(fake_upstream, postgres_url, log, shared))
        second = stack.enter_context(gateway(fake_upstream, postgres_url, log, shared))
        yield Replicas(first, second, prefix)


@pytest.fixture(scope="module")
def pair(
    redis_url: str, postgres_url: str, fake_upstream: str, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Replicas]:
    """Two replicas as configured by default, shared by the module's tests that need no
    other setting: each runs, follows and ends responses of its own."""
    log = tmp_path_factory.mktemp("pair") / "gateway.log"
    yield from replicas(redis_url, postgres_url, fake_upstream, log)


class Follower:
    """A watcher collecting a stream in the background; ``reached(n)`` waits until it
    has ``n`` events."""

    def __init__(self, client: AsyncOpenAI, response_id: str, after: int | None = None) -> None:
        self.events: list[Event] = []
        self._grew = asyncio.Event()
        self.task = asyncio.create_task(self._follow(client, response_id, after))

    async def _follow(self, client: AsyncOpenAI, response_id: str, after: int | None) -> None:
        if after is None:
            stream = await client.responses.retrieve(response_id, stream=True)
        else:
            stream = await client.responses.retrieve(response_id, stream=True, starting_after=after)
        async for event in stream:
            self.events.append(dump(event))
            self._grew.set()

    async def reached(self, count: int) -> None:
        while len(self.events) < count:
            self._grew.clear()
            grew = asyncio.ensure_future(self._grew.wait())
            done, _ = await asyncio.wait(
                [self.task, grew], timeout=60, return_when=asyncio.FIRST_COMPLETED
            )
            grew.cancel()
            assert done, f"no event came within 60 s after {len(self.events)}"
            if self.task in done:
                self.task.result()  # its error, if it failed
                assert len(self.events) >= count, f"the stream ended after {self.events}"

    async def ended(self) -> list[Event]:
        await asyncio.wait_for(self.task, 60)
        return self.events


@asynccontextmanager
async def signalled(redis_url: str, prefix: str) -> AsyncIterator[asyncio.Event]:
    """An event set once a cancel signal goes out on the replicas' channel."""
    client = Redis.from_url(redis_url)
    sent = asyncio.Event()
    async with client.pubsub() as pubsub:
        await pubsub.subscribe(prefix + "cancel")

        async def listen() -> None:
            async for message in pubsub.listen():
                if message["type"] == "message":
                    sent.set()

        listening = asyncio.create_task(listen())
        try:
            yield sent
        finally:
            listening.cancel()
            await asyncio.gather(listening, return_exceptions=True)
    await client.aclose()


async def subscribers(redis_url: str, channel: str) -> int:
    client = Redis.from_url(redis_url)
    try:
        counts = await client.pubsub_numsub(channel)
        return int(counts[0][1])
    finally:
        await client.aclose()


async def test_a_run_on_a_is_followed_live_from_b_and_cancelled_from_b(
    pair: Replicas, redis_url: str
) -> None:
    a, b = sdk(pair.a.url), sdk(pair.b.url)
    created = await a.responses.create(model=MODEL, input=LONG, background=True)
    on_a, from_start = Follower(a, created.id), Follower(b, created.id)
    await from_start.reached(8)

    # B follows the run through its Redis channel, while it still runs on A.
    channel = f"{pair.prefix}events:default\x1f{created.id}"
    assert await subscribers(redis_url, channel) == 1
    assert (await a.responses.retrieve(created.id)).status == "in_progress"
    from_middle = Follower(b, created.id, after=5)
    await from_middle.reached(4)

    cancelled = await b.responses.cancel(created.id)

    assert cancelled.status == "cancelled"
    seen_on_a = await on_a.ended()
    assert await from_start.ended() == seen_on_a
    assert await from_middle.ended() == seen_on_a[6:]
    assert [e["sequence_number"] for e in seen_on_a] == list(range(len(seen_on_a)))
    assert seen_on_a[-1]["response"]["status"] == "cancelled"
    assert await watch(b, created.id) == seen_on_a, "the stored log is what was sent live"
    deadline = time.monotonic() + 30
    while await subscribers(redis_url, channel):  # once its last watcher has left
        assert time.monotonic() < deadline, "B kept following an ended run"
        await asyncio.sleep(0.05)


@pytest.fixture
def short_leases(
    redis_url: str, postgres_url: str, fake_upstream: str, tmp_path: Path
) -> Iterator[Replicas]:
    log = tmp_path / "gateway.log"
    yield from replicas(redis_url, postgres_url, fake_upstream, log, STATEWAY_LEASE_TIMEOUT="1")


async def test_a_run_of_a_killed_replica_is_failed_by_the_other_after_its_lease(
    short_leases: Replicas,
) -> None:
    a, b = sdk(short_leases.a.url), sdk(short_leases.b.url)
    created = await a.responses.create(model=MODEL, input=LONG, background=True)
    following = Follower(b, created.id)
    await following.reached(6)

    os.kill(short_leases.a.pid, signal.SIGKILL)
    wait_until_gone(short_leases.a.pid)

    deadline = time.monotonic() + 30  # the lease is 1 s: failed well within this
    while (stored := await b.responses.retrieve(created.id)).status in UNFINISHED:
        assert time.monotonic() < deadline, "the dead replica's run stayed in progress"
        await asyncio.sleep(0.1)
    assert stored.status == "failed"
    assert stored.error is not None
    assert stored.error.code == "server_restarted"

    events = await following.ended()
    assert [e["sequence_number"] for e in events] == list(range(len(events)))
    assert events[-1]["type"] == "response.failed"
    assert events[-1]["response"]["error"]["code"] == "server_restarted"
    # the text A had logged is the failed response's output, cut off as a cancel cuts it
    text = partial_text(events)
    assert text.startswith("w1")
    cut_message(events[-1]["response"]["output"], text)
    assert stored.model_dump(mode="json")["output"] == events[-1]["response"]["output"]


async def test_a_chain_continues_alternately_on_either_replica(pair: Replicas) -> None:
    clients = [sdk(pair.a.url), sdk(pair.b.url)]
    previous = None
    for turn in range(4):
        response = await clients[turn % 2].responses.create(
            model=MODEL, input=f"turn-{turn} [[echo]]", previous_response_id=previous
        )
        assert response.status == "completed"
        for n in range(turn + 1):
            assert f"turn-{n}" in response.output_text, "each replica sees the whole chain"
        again = await clients[(turn + 1) % 2].responses.retrieve(response.id)
        assert again.output_text == response.output_text
        previous = response.id


@pytest.fixture
def limited(
    redis_url: str, postgres_url: str, fake_upstream: str, tmp_path: Path
) -> Iterator[Replicas]:
    log = tmp_path / "gateway.log"
    yield from replicas(
        redis_url, postgres_url, fake_upstream, log, STATEWAY_REQUESTS_PER_MINUTE="4"
    )


def retry_after(headers: Any) -> int:
    value = headers["retry-after"]
    assert value.isdigit(), "whole seconds"
    return int(value)


async def test_one_rate_limit_is_shared_by_both_replicas_in_each_frontends_shape(
    limited: Replicas,
) -> None:
    a, b = sdk(limited.a.url), sdk(limited.b.url)
    chat = [{"role": "user", "content": "hi"}]
    await a.responses.create(model=MODEL, input="one")
    await b.responses.create(model=MODEL, input="two")
    await a.chat.completions.create(model=MODEL, messages=chat)  # type: ignore[arg-type]
    with anthropic.Anthropic(base_url=limited.b.url, api_key="k", max_retries=0) as claude:
        claude.messages.create(
            model=MODEL, max_tokens=16, messages=[{"role": "user", "content": "four"}]
        )

        with pytest.raises(openai.RateLimitError) as responses_refused:
            await b.responses.create(model=MODEL, input="five")
        with pytest.raises(openai.RateLimitError) as chat_refused:
            await a.chat.completions.create(model=MODEL, messages=chat)  # type: ignore[arg-type]
        with pytest.raises(anthropic.RateLimitError) as messages_refused:
            claude.messages.create(
                model=MODEL, max_tokens=16, messages=[{"role": "user", "content": "six"}]
            )

    for refused in (responses_refused.value, chat_refused.value):
        body = refused.response.json()["error"]
        assert (body["type"], body["code"]) == ("requests", "rate_limit_exceeded")
        assert 1 <= retry_after(refused.response.headers) <= 15
    anthropic_body = messages_refused.value.response.json()
    assert anthropic_body["type"] == "error"
    assert anthropic_body["error"]["type"] == "rate_limit_error"
    assert 1 <= retry_after(messages_refused.value.response.headers) <= 15
    assert (await a.models.list()).data, "what asks no model is not limited"


async def test_a_run_on_a_deleted_from_b_stops(pair: Replicas, fake_upstream: str) -> None:
    """Deleting a running background response on the other replica stops its run there,
    as deleting it on its own replica does: the upstream request is closed, and the
    response stays deleted."""
    a, b = sdk(pair.a.url), sdk(pair.b.url)
    marker = f"deleted-{uuid.uuid4().hex}"
    created = await a.responses.create(model=MODEL, input=f"{marker} {LONG}", background=True)
    follower = Follower(b, created.id)
    await follower.reached(8)

    await b.responses.delete(created.id)

    deadline = time.monotonic() + 15  # the run takes some 40 s when nothing stops it
    while not await upstream_saw_leave(fake_upstream, marker):
        assert time.monotonic() < deadline, "the run went on on the replica running it"
        await asyncio.sleep(0.1)
    for client in (a, b):
        with pytest.raises(openai.NotFoundError):
            await client.responses.retrieve(created.id)
    seen = await follower.ended()
    assert seen[-1]["response"]["status"] == "cancelled"


async def test_a_stream_on_a_deleted_from_b_stops(pair: Replicas, fake_upstream: str) -> None:
    """Deleting a running streamed (not background) response on the other replica stops
    it as deleting it on its own replica does: its stream ends cancelled and its upstream
    request is closed, instead of running to a completed answer nobody can read."""
    a, b = sdk(pair.a.url), sdk(pair.b.url)
    marker = f"deleted-stream-{uuid.uuid4().hex}"
    seen: list[Event] = []
    stream = await a.responses.create(model=MODEL, input=f"{marker} {LONG}", stream=True)
    async for event in stream:
        seen.append(dump(event))
        if len(seen) == 8:
            await b.responses.delete(seen[0]["response"]["id"])
    assert seen[-1]["type"] == "response.failed"
    assert seen[-1]["response"]["status"] == "cancelled"
    assert await upstream_saw_leave(fake_upstream, marker)
    with pytest.raises(openai.NotFoundError):
        await a.responses.retrieve(seen[0]["response"]["id"])


async def refused_from(client: AsyncOpenAI, response_id: str, after: int) -> dict[str, Any]:
    with pytest.raises(openai.BadRequestError) as caught:
        await client.responses.retrieve(response_id, stream=True, starting_after=after)
    error: dict[str, Any] = caught.value.response.json()["error"]
    assert (error["type"], error["param"], error["code"]) == (
        "invalid_request_error",
        "starting_after",
        "invalid_value",
    )
    return error


async def test_a_resume_past_the_log_is_refused_by_either_replica_running_or_finished(
    pair: Replicas,
) -> None:
    """Past what the owner (A) has logged so far is a 400 from B as from A, while the run
    goes on (although it will log that many events later) and once it ended; the last
    event A sent live, whether or not it is stored yet, is resumed from on B."""
    a, b = sdk(pair.a.url), sdk(pair.b.url)
    created = await a.responses.create(model=MODEL, input=LONG, background=True)
    on_a = Follower(a, created.id)
    await on_a.reached(8)

    far = len(on_a.events) + 150  # a 400-word run logs that many events within a minute
    for client in (a, b):
        error = await refused_from(client, created.id, far)
        assert error["message"].startswith(f"Invalid 'starting_after': {far} is past the last")
    latest = on_a.events[-1]["sequence_number"]  # just sent live: likely not stored yet
    resumed = Follower(b, created.id, after=latest)
    await resumed.reached(3)
    assert (await a.responses.retrieve(created.id)).status == "in_progress"

    await b.responses.cancel(created.id)
    seen_on_a = await on_a.ended()
    assert await resumed.ended() == seen_on_a[latest + 1 :]
    last = seen_on_a[-1]["sequence_number"]
    for client in (a, b):
        error = await refused_from(client, created.id, last + 1)
        assert f"(sequence number {last})" in error["message"]
        assert await watch(client, created.id, after=last) == []


async def streamed_with_key(client: AsyncOpenAI, key: str) -> list[Event]:
    stream = await client.responses.create(
        model=MODEL, input="[[words:5]]", stream=True, extra_headers={"Idempotency-Key": key}
    )
    return [dump(event) async for event in stream]


async def test_a_keyed_stream_retried_at_once_on_the_other_replica_streams_the_same(
    pair: Replicas,
) -> None:
    """A streamed create and its retry with the same ``Idempotency-Key`` sent together to
    both replicas: one runs it, the other streams the same response from its start, even
    when it asks before the running replica has stored the response (a 404 otherwise)."""
    a, b = sdk(pair.a.url), sdk(pair.b.url)
    for _ in range(5):  # the retry must land before the row's commit: try a few times
        key = uuid.uuid4().hex
        first, retry = await asyncio.gather(streamed_with_key(a, key), streamed_with_key(b, key))
        assert retry == first
        assert first[-1]["type"] == "response.completed"


@pytest.fixture
def one_at_a_time(
    redis_url: str, postgres_url: str, fake_upstream: str, tmp_path: Path
) -> Iterator[Replicas]:
    log = tmp_path / "gateway.log"
    yield from replicas(
        redis_url, postgres_url, fake_upstream, log, STATEWAY_CONCURRENT_REQUESTS="1"
    )


async def test_one_concurrency_limit_is_shared_by_both_replicas(one_at_a_time: Replicas) -> None:
    a, b = sdk(one_at_a_time.a.url), sdk(one_at_a_time.b.url)
    stream = await a.responses.create(model=MODEL, input="[[slow:100]] [[words:20]]", stream=True)
    assert (await anext(aiter(stream))).type == "response.created"

    with pytest.raises(openai.RateLimitError) as refused:
        await b.responses.create(model=MODEL, input="two")
    assert refused.value.response.json()["error"]["code"] == "rate_limit_exceeded"
    assert refused.value.response.headers["retry-after"] == "1"

    assert [event.type async for event in stream][-1] == "response.completed"
    # The slot is free in Redis before that last event is sent: the next request, sent
    # to the other replica the instant it arrives, is admitted (no retry).
    assert (await b.responses.create(model=MODEL, input="three")).status == "completed"
    assert (await a.responses.create(model=MODEL, input="four")).status == "completed"
    assert (await b.responses.create(model=MODEL, input="five")).status == "completed"


@pytest.fixture
def short_drains(
    redis_url: str, postgres_url: str, fake_upstream: str, tmp_path: Path
) -> Iterator[Replicas]:
    log = tmp_path / "gateway.log"
    yield from replicas(redis_url, postgres_url, fake_upstream, log, STATEWAY_DRAIN_TIMEOUT="1")


async def test_b_stopping_ends_its_waits_on_a_in_their_error_shapes(
    short_drains: Replicas, redis_url: str, tmp_path: Path
) -> None:
    """B's watch of a run on A and its cancel of it wait on A (paused here, so that the
    cancel cannot end): SIGTERM ends both once B's drain window is over, each in its
    error shape, rather than leaving them to uvicorn's last resort (a traceback, the
    connection cut without a word). The run goes on on A, which the cancel reached."""
    a, b = sdk(short_drains.a.url), sdk(short_drains.b.url)
    created = await a.responses.create(model=MODEL, input=LONG, background=True)
    following = Follower(b, created.id)
    await following.reached(6)
    os.kill(short_drains.a.pid, signal.SIGSTOP)
    try:
        async with signalled(redis_url, short_drains.prefix) as sent:
            cancelling = asyncio.create_task(b.responses.cancel(created.id))
            await asyncio.wait_for(sent.wait(), 10)  # then it waits for A, paused
        assert not cancelling.done()
        stopping = time.monotonic()
        os.kill(short_drains.b.pid, signal.SIGTERM)
        with pytest.raises(openai.InternalServerError) as refused:
            await asyncio.wait_for(cancelling, 10)
        with pytest.raises(openai.APIError) as cut:
            await following.ended()
        took = time.monotonic() - stopping
    finally:
        os.kill(short_drains.a.pid, signal.SIGCONT)
    wait_until_gone(short_drains.b.pid, within=20)

    assert refused.value.status_code == 503
    assert refused.value.code == "server_shutting_down"
    assert "the cancel was sent" in refused.value.message
    assert cut.value.code == "server_shutting_down"
    assert took < 4, f"B's waits outlived its 1 s drain window by {took - 1:.1f} s"
    ended = await a.responses.cancel(created.id)  # A heard B's signal, or hears this one
    assert ended.status == "cancelled"
    assert "Traceback" not in (tmp_path / "gateway.log").read_text()


async def test_a_socket_resume_on_b_of_a_run_streamed_on_a_socket_of_a_is_told_how_it_ends(
    pair: Replicas,
) -> None:
    """A WebSocket create's log is stored only when its socket stops streaming it: while
    A's socket streams it to its end, B has no log to follow. A resume sent to B meanwhile
    (the client reconnected through the balancer while A still holds its old socket) is
    told so by an error frame once the run ends, instead of waiting on a silent socket."""
    a, b = sdk(pair.a.url), sdk(pair.b.url)
    async with a.responses.connect() as on_a:
        await on_a.response.create(model=MODEL, input="[[slow:50]] [[words:40]]")
        created = await on_a.recv()
        assert created.type == "response.created"
        async with b.responses.connect() as on_b:
            await on_b.send(
                {"type": "response.resume", "response_id": created.response.id, "starting_after": 0}
            )
            while (await on_a.recv()).type != "response.completed":
                pass
            told = await asyncio.wait_for(on_b.recv(), 15)
    assert told.type == "error"
    assert told.status == 400
    assert (told.error.code, told.error.param) == ("unsupported_parameter", "stream")
    assert f"GET /v1/responses/{created.response.id}" in told.error.message
