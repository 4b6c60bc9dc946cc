"""Background responses with the official SDK: answered at once, watched and resumed from
any position with identical events, cancelled mid-run (the upstream request closed)."""

from __future__ import annotations

import asyncio
import time
import uuid
from typing import Any

import aiohttp
import openai
import orjson
import pytest
from openai import AsyncOpenAI, OpenAI

MODEL = "fake-model"
SLOW = "[[slow:40]] [[words:40]]"
"""About 1.6 s of output, one word per event."""

Event = dict[str, Any]


def dump(event: Any) -> Event:
    return event.model_dump(mode="json")  # type: ignore[no-any-return]


async def collect(stream: Any) -> list[Event]:
    return [dump(event) async for event in stream]


async def watch(client: AsyncOpenAI, response_id: str, after: int | None = None) -> list[Event]:
    if after is None:
        return await collect(await client.responses.retrieve(response_id, stream=True))
    stream = await client.responses.retrieve(response_id, stream=True, starting_after=after)
    return await collect(stream)


async def test_resuming_from_any_position_replays_what_a_live_watcher_saw(
    async_client: AsyncOpenAI,
) -> None:
    created = await async_client.responses.create(model=MODEL, input=SLOW, background=True)
    assert (created.status, created.background, created.output) == ("queued", True, [])
    live: list[Event] = []
    started = asyncio.Event()

    async def follow() -> None:
        async for event in await async_client.responses.retrieve(created.id, stream=True):
            live.append(dump(event))
            if len(live) == 10:
                started.set()

    following = asyncio.create_task(follow())
    await started.wait()
    positions = [0, len(live) // 2, live[-1]["sequence_number"]]
    running = [asyncio.create_task(watch(async_client, created.id, n)) for n in positions]
    await following
    assert live[-1]["type"] == "response.completed"
    assert [e["sequence_number"] for e in live] == list(range(len(live)))
    announced = [(e["type"], e["response"]["status"]) for e in live[:3]]
    assert announced == [
        ("response.created", "queued"),
        ("response.queued", "queued"),
        ("response.in_progress", "in_progress"),
    ]
    assert live[0]["response"]["background"] is True

    for n, seen in zip(positions, await asyncio.gather(*running), strict=True):
        assert seen == live[n + 1 :], f"resumed while running after {n}"
    assert (await async_client.responses.retrieve(created.id)).status == "completed"
    assert await watch(async_client, created.id) == live
    for n in [*positions, live[-1]["sequence_number"]]:
        assert await watch(async_client, created.id, n) == live[n + 1 :], f"after {n}, ended"


async def test_a_background_stream_survives_its_client_leaving(
    async_client: AsyncOpenAI,
) -> None:
    stream = await async_client.responses.create(
        model=MODEL, input=SLOW, background=True, stream=True
    )
    first: list[Event] = []
    async for event in stream:
        first.append(dump(event))
        if event.type == "response.output_text.delta":
            break
    await stream.close()
    response_id = first[0]["response"]["id"]

    rest = await watch(async_client, response_id, first[-1]["sequence_number"])

    assert rest[-1]["type"] == "response.completed"
    assert first + rest == await watch(async_client, response_id)
    done = await async_client.responses.retrieve(response_id)
    assert (done.status, done.background) == ("completed", True)
    assert done.output_text.split() == [f"w{n}" for n in range(1, 41)]


async def upstream_saw_leave(fake_upstream: str, marker: str) -> bool:
    async with (
        aiohttp.ClientSession() as session,
        session.get(fake_upstream.removesuffix("/v1") + "/_fake/requests") as reply,
    ):
        logged = orjson.loads(await reply.read())["data"]
    mine = [r for r in logged if marker.encode() in orjson.dumps(r["body"])]
    assert mine, "the upstream saw the request"
    return bool(mine[-1].get("disconnected"))


async def test_cancel_stops_a_running_background_response(
    async_client: AsyncOpenAI, fake_upstream: str
) -> None:
    marker = f"cancel-{uuid.uuid4().hex}"
    created = await async_client.responses.create(
        model=MODEL, input=f"{marker} [[slow:100]] [[words:300]]", background=True
    )
    watched: list[Event] = []
    output_started = asyncio.Event()

    async def follow() -> None:
        async for event in await async_client.responses.retrieve(created.id, stream=True):
            watched.append(dump(event))
            if event.type == "response.output_text.delta":
                output_started.set()

    following = asyncio.create_task(follow())
    await output_started.wait()

    cancelled = await async_client.responses.cancel(created.id)

    assert (cancelled.id, cancelled.status, cancelled.background) == (
        created.id,
        "cancelled",
        True,
    )
    assert cancelled.output[0].status == "incomplete"  # type: ignore[union-attr]
    assert 0 < len(cancelled.output_text.split()) < 300
    await following
    assert watched[-1]["response"]["status"] == "cancelled"
    deadline = time.monotonic() + 10
    while not await upstream_saw_leave(fake_upstream, marker):
        assert time.monotonic() < deadline, "the upstream request was not closed"
        await asyncio.sleep(0.05)
    stored = await async_client.responses.retrieve(created.id)
    assert (stored.status, stored.output_text) == ("cancelled", cancelled.output_text)
    again = await async_client.responses.cancel(created.id)
    assert (again.status, again.output_text) == ("cancelled", cancelled.output_text)


async def output_started(client: AsyncOpenAI, text: str) -> str:
    """A background response's id, once its run has output (its watch left at that)."""
    created = await client.responses.create(model=MODEL, input=text, background=True)
    async for event in await client.responses.retrieve(created.id, stream=True):
        if event.type == "response.output_text.delta":
            break
    return created.id


async def test_two_cancels_at_once_answer_the_one_end_stored(async_client: AsyncOpenAI) -> None:
    response_id = await output_started(async_client, "[[slow:100]] [[words:300]]")

    first, second = await asyncio.gather(
        async_client.responses.cancel(response_id), async_client.responses.cancel(response_id)
    )

    stored = await async_client.responses.retrieve(response_id)
    assert stored.status == "cancelled"
    for answer in (first, second):
        assert (answer.status, answer.output_text) == ("cancelled", stored.output_text)


async def test_a_cancel_racing_a_delete_leaves_the_response_deleted(
    async_client: AsyncOpenAI,
) -> None:
    """Whichever comes first, the DELETE is answered, the cancel is the cancelled
    response or a 404, and the response is gone (its run ended, not left running)."""
    response_id = await output_started(async_client, "[[slow:100]] [[words:300]]")

    cancelled, deleted = await asyncio.gather(
        async_client.responses.cancel(response_id),
        async_client.responses.delete(response_id),
        return_exceptions=True,
    )

    assert not isinstance(deleted, BaseException), deleted
    if isinstance(cancelled, BaseException):
        assert isinstance(cancelled, openai.NotFoundError), cancelled
    else:
        assert cancelled.status == "cancelled"
    with pytest.raises(openai.NotFoundError):
        await async_client.responses.retrieve(response_id)
    with pytest.raises(openai.NotFoundError):
        await async_client.responses.cancel(response_id)


def test_cancelling_a_finished_background_response_returns_it_unchanged(client: OpenAI) -> None:
    created = client.responses.create(model=MODEL, input="[[words:3]]", background=True)
    stream = client.responses.retrieve(created.id, stream=True)
    assert [e.type for e in stream][-1] == "response.completed"

    cancelled = client.responses.cancel(created.id)

    assert (cancelled.status, cancelled.output_text) == ("completed", "w1 w2 w3")
    assert client.responses.retrieve(created.id).status == "completed"


def test_what_cannot_be_cancelled_or_streamed_is_refused(client: OpenAI) -> None:
    foreground = client.responses.create(model=MODEL, input="hi")
    with pytest.raises(openai.BadRequestError) as refused:
        client.responses.cancel(foreground.id)
    assert "Only responses created with background=true can be cancelled." in str(refused.value)
    with pytest.raises(openai.BadRequestError) as refused:
        client.responses.retrieve(foreground.id, stream=True)
    assert refused.value.body["param"] == "stream"  # type: ignore[index]
    with pytest.raises(openai.NotFoundError):
        client.responses.cancel("resp_unknown")
    with pytest.raises(openai.NotFoundError):
        client.responses.retrieve("resp_unknown", stream=True)
    with pytest.raises(openai.BadRequestError) as refused:
        client.responses.create(model=MODEL, input="hi", background=True, store=False)
    assert refused.value.body["param"] == "background"  # type: ignore[index]


def test_a_starting_after_outside_the_log_is_refused(client: OpenAI) -> None:
    created = client.responses.create(model=MODEL, input="[[words:2]]", background=True)
    events = list(client.responses.retrieve(created.id, stream=True))
    last = events[-1].sequence_number
    for after in (last + 1, -1):
        with pytest.raises(openai.BadRequestError) as refused:
            client.responses.retrieve(created.id, stream=True, starting_after=after)
        assert refused.value.body["param"] == "starting_after"  # type: ignore[index]
    assert list(client.responses.retrieve(created.id, stream=True, starting_after=last)) == []


async def test_a_call_cut_short_by_a_cancel_is_not_shown_to_the_model_later(
    async_client: AsyncOpenAI, fake_upstream: str
) -> None:
    """Cancelled while the model writes a tool call, the response keeps the call
    ``incomplete``; continuing it with a new message (not an output) is allowed, and the
    model is not sent a call without its output, which no upstream accepts."""
    marker = f"cut-{uuid.uuid4().hex}"
    arguments = orjson.dumps({"q": "x" * 400}).decode()
    lookup: Any = {"type": "function", "name": "lookup", "parameters": {"type": "object"}}
    created = await async_client.responses.create(
        model=MODEL,
        input=f"{marker} [[slow:50]] [[tool:lookup:{arguments}]]",
        tools=[lookup],
        background=True,
    )
    async for event in await async_client.responses.retrieve(created.id, stream=True):
        if event.type == "response.function_call_arguments.delta":
            break
    cancelled = await async_client.responses.cancel(created.id)
    [cut] = cancelled.output
    assert (cut.type, cut.status) == ("function_call", "incomplete")

    later = f"later-{uuid.uuid4().hex}"
    answer = await async_client.responses.create(
        model=MODEL, input=later, previous_response_id=created.id, tools=[lookup]
    )
    assert answer.status == "completed"
    root = fake_upstream.removesuffix("/v1")
    async with aiohttp.ClientSession() as session, session.get(root + "/_fake/requests") as reply:
        logged = orjson.loads(await reply.read())["data"]
    [sent] = [r["body"] for r in logged if later.encode() in orjson.dumps(r["body"])]
    context = orjson.dumps(sent.get("input") or sent["messages"]).decode()
    assert marker in context
    assert "function_call" not in context
    assert "tool_calls" not in context


async def test_polling_a_running_response_shows_its_text_so_far(
    async_client: AsyncOpenAI,
) -> None:
    created = await async_client.responses.create(
        model=MODEL, input="[[slow:100]] [[words:40]]", background=True
    )
    deltas = 0
    async for event in await async_client.responses.retrieve(created.id, stream=True):
        deltas += event.type == "response.output_text.delta"
        if deltas == 3:
            break
    polled = await async_client.responses.retrieve(created.id)
    assert polled.status == "in_progress"
    assert polled.output_text.startswith("w1 w2 w3")
    await async_client.responses.cancel(created.id)
