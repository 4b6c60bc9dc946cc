"""A background response's ``queued`` phase with the official SDK, as hosted: created and
answered ``queued``, streamed ``response.created`` (queued), ``response.queued``, then
``response.in_progress`` once its run starts working, which is when its first upstream
call takes a connection slot; a run waiting for one (the backend's every slot busy) stays
``queued``, read as such, and cancelled from there. A foreground stream goes on as before:
no ``response.queued``; a foreground request whose client leaves while it waits gives its
place back at once."""

from __future__ import annotations

import asyncio
import contextlib
import time
import urllib.request
import uuid
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager
from typing import Any

import openai
import pytest
from anthropic import AsyncAnthropic
from openai import AsyncOpenAI
from openai.types.responses import ResponseStreamEvent
from pydantic import TypeAdapter

from tests.e2e.configured import RunningGateway, configured_gateway

MODEL = "fake-model"
EVENTS: TypeAdapter[ResponseStreamEvent] = TypeAdapter(ResponseStreamEvent)
ANNOUNCED = [
    ("response.created", "queued"),
    ("response.queued", "queued"),
    ("response.in_progress", "in_progress"),
]

Event = dict[str, Any]


@pytest.fixture(scope="module")
def one_slot(
    fake_upstream: str, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[RunningGateway]:
    backend = {"url": fake_upstream, "max_connections": 1, "pool_timeout": 60}
    with configured_gateway(tmp_path_factory.mktemp("queue"), backend) as gateway:
        yield gateway


@pytest.fixture
def client(one_slot: RunningGateway) -> AsyncOpenAI:
    return AsyncOpenAI(base_url=one_slot.url + "/v1", api_key="unused", max_retries=0)


def upstream_saw(fake_upstream: str, marker: str) -> bool:
    root = fake_upstream.removesuffix("/v1")
    with urllib.request.urlopen(root + "/_fake/requests") as response:
        return marker in response.read().decode()


@asynccontextmanager
async def slot_taken(client: AsyncOpenAI) -> AsyncIterator[None]:
    """The backend's one connection slot held by a foreground stream until the block
    ends (its client leaves: the run is cancelled, its upstream call closed)."""
    stream = await client.responses.create(
        model=MODEL, input="[[slow:100]] [[words:600]]", stream=True
    )
    try:
        async for event in stream:
            if event.type == "response.output_text.delta":
                break  # its call holds the slot
        yield
    finally:
        await stream.close()


def checked(events: list[Any]) -> list[Event]:
    """Each event dumped, and validated strictly by the SDK's own union of them."""
    dumped: list[Event] = [event.model_dump(mode="json") for event in events]
    for event in dumped:
        EVENTS.validate_python(event, strict=True)
    return dumped


def announced(events: list[Event]) -> list[tuple[str, str]]:
    return [(e["type"], e["response"]["status"]) for e in events if "response" in e]


async def watched(client: AsyncOpenAI, response_id: str, after: int | None = None) -> list[Event]:
    if after is None:
        stream = await client.responses.retrieve(response_id, stream=True)
    else:
        stream = await client.responses.retrieve(response_id, stream=True, starting_after=after)
    return checked([event async for event in stream])


async def test_a_background_response_waiting_for_a_slot_is_queued_until_it_gets_one(
    client: AsyncOpenAI, one_slot: RunningGateway
) -> None:
    async with slot_taken(client):
        created = await client.responses.create(
            model=MODEL, input="[[slow:200]] [[words:5]]", background=True
        )
        assert (created.status, created.background, created.output) == ("queued", True, [])
        stream = await client.responses.retrieve(created.id, stream=True)
        events = aiter(stream)
        early = checked([await anext(events) for _ in range(2)])
        assert announced(early) == ANNOUNCED[:2]
        assert (await client.responses.retrieve(created.id)).status == "queued"
        assert one_slot.stored(created.id)["status"] == "queued"
    started = checked([await anext(events)])  # once the slot is free
    assert announced(started) == ANNOUNCED[2:]
    first = checked([await anext(events)])  # 200 ms after its call was seated
    assert (await client.responses.retrieve(created.id)).status == "in_progress"
    assert one_slot.stored(created.id)["status"] == "in_progress"  # its row, updated
    rest = checked([event async for event in events])
    live = early + started + first + rest
    assert announced(live)[:3] == ANNOUNCED
    assert live[-1]["type"] == "response.completed"
    assert [e["sequence_number"] for e in live] == list(range(len(live)))
    assert (await client.responses.retrieve(created.id)).status == "completed"
    assert one_slot.stored(created.id)["status"] == "completed"
    assert await watched(client, created.id) == live
    for after in range(len(live) - 1):  # resumed from any position: what was live
        assert await watched(client, created.id, after) == live[after + 1 :]


async def test_a_queued_response_is_cancelled_before_it_reaches_the_upstream(
    client: AsyncOpenAI, one_slot: RunningGateway, fake_upstream: str
) -> None:
    marker = uuid.uuid4().hex
    async with slot_taken(client):
        created = await client.responses.create(
            model=MODEL, input=f"{marker} [[words:5]]", background=True
        )
        assert created.status == "queued"
        cancelled = await client.responses.cancel(created.id)
        assert (cancelled.status, cancelled.output) == ("cancelled", [])
    assert (await client.responses.retrieve(created.id)).status == "cancelled"
    assert one_slot.stored(created.id)["status"] == "cancelled"
    log = await watched(client, created.id)
    assert [e["type"] for e in log] == ["response.created", "response.queued", "response.failed"]
    assert log[-1]["response"]["status"] == "cancelled"
    assert not await asyncio.to_thread(upstream_saw, fake_upstream, marker)


async def test_a_queued_response_deleted_ends_cancelled_and_never_reaches_the_upstream(
    client: AsyncOpenAI, one_slot: RunningGateway, fake_upstream: str
) -> None:
    """Its watcher is told it ended (cancelled), its row ends so rather than staying
    queued, and the slot it waited for goes to the next request."""
    marker = uuid.uuid4().hex
    async with slot_taken(client):
        created = await client.responses.create(
            model=MODEL, input=f"{marker} [[words:5]]", background=True
        )
        assert created.status == "queued"
        stream = await client.responses.retrieve(created.id, stream=True)
        await client.responses.delete(created.id)
        log = checked([event async for event in stream])
        with pytest.raises(openai.NotFoundError):
            await client.responses.retrieve(created.id)
    assert [e["type"] for e in log] == ["response.created", "response.queued", "response.failed"]
    assert log[-1]["response"]["status"] == "cancelled"
    assert one_slot.stored(created.id)["status"] == "cancelled"
    assert not await asyncio.to_thread(upstream_saw, fake_upstream, marker)
    assert (await client.responses.create(model=MODEL, input="next")).status == "completed"


async def test_a_background_stream_goes_through_queued_and_a_foreground_one_does_not(
    client: AsyncOpenAI, one_slot: RunningGateway
) -> None:
    background = await client.responses.create(
        model=MODEL, input="[[words:3]]", background=True, stream=True
    )
    streamed = checked([event async for event in background])
    assert announced(streamed)[:3] == ANNOUNCED
    response_id = streamed[0]["response"]["id"]
    assert one_slot.stored(response_id)["status"] == "completed"
    assert await watched(client, response_id) == streamed

    foreground = await client.responses.create(model=MODEL, input="[[words:3]]", stream=True)
    plain = checked([event async for event in foreground])
    assert announced(plain)[:2] == [
        ("response.created", "in_progress"),
        ("response.in_progress", "in_progress"),
    ]
    assert "response.queued" not in [e["type"] for e in plain]


async def queue_depth(url: str) -> float:
    def read() -> float:
        with urllib.request.urlopen(url + "/metrics") as response:
            for line in response.read().decode().splitlines():
                if line.startswith("stateway_upstream_queue_depth "):
                    return float(line.split()[1])
        raise AssertionError("no stateway_upstream_queue_depth metric")

    return await asyncio.to_thread(read)


async def until_queue_depth(url: str, depth: float) -> None:
    deadline = time.monotonic() + 10
    while await queue_depth(url) != depth:
        assert time.monotonic() < deadline, f"the queue never held {depth:g}"
        await asyncio.sleep(0.02)


@pytest.mark.parametrize(
    "frontend", ["responses", "responses-stream", "chat", "chat-stream", "messages"]
)
async def test_a_request_whose_client_leaves_while_it_waits_gives_its_place_back(
    client: AsyncOpenAI, one_slot: RunningGateway, fake_upstream: str, frontend: str
) -> None:
    """A client that leaves while its request waits for the backend's one slot: the
    waiting place is given back at once (the slot still held meanwhile), and the request
    never reaches the model server once the slot comes free."""
    marker = uuid.uuid4().hex
    claude = AsyncAnthropic(base_url=one_slot.url, api_key="unused", max_retries=0)
    messages: Any = [{"role": "user", "content": f"{marker} [[words:5]]"}]

    async def ask() -> None:
        stream = frontend.endswith("-stream")
        if frontend.startswith("responses"):
            answer: Any = await client.responses.create(
                model=MODEL, input=f"{marker} [[words:5]]", stream=stream
            )
        elif frontend.startswith("chat"):
            answer = await client.chat.completions.create(
                model=MODEL, messages=messages, stream=stream
            )
        else:
            answer = await claude.messages.create(model=MODEL, max_tokens=16, messages=messages)
        if stream:
            async for _ in answer:
                pass

    async with slot_taken(client):
        asking = asyncio.create_task(ask())
        await until_queue_depth(one_slot.url, 1)
        asking.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await asking
        await until_queue_depth(one_slot.url, 0)
    await claude.close()
    answered = await client.responses.create(model=MODEL, input="[[words:2]]")
    assert answered.status == "completed"
    assert not await asyncio.to_thread(upstream_saw, fake_upstream, marker)
