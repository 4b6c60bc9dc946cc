"""WebSocket mode through the official ``openai`` SDK's ``responses.connect()``, against
the real ``stateway serve`` and the fake upstream (SQLite and PostgreSQL, both upstream
API shapes)."""

from __future__ import annotations

import uuid
from typing import Any

from openai import AsyncOpenAI, OpenAI
from openai.lib.responses_websocket import (
    AsyncResponsesWebSocketSession,
    ResponsesWebSocketLimits,
)

from tests.e2e.routing import fake_requests

MODEL = "fake-model"
Event = Any


async def until_done(connection: Any, lanes: int = 1) -> list[Event]:
    """Every event until ``lanes`` responses ended (or an error frame per lane)."""
    events: list[Event] = []
    ended = 0
    while ended < lanes:
        event = await connection.recv()
        events.append(event)
        if event.type in ("response.completed", "response.failed", "error"):
            ended += 1
    return events


def check_numbered(events: list[Event]) -> None:
    assert events[0].type == "response.created"
    assert [e.sequence_number for e in events] == list(range(len(events)))


def output_text(events: list[Event]) -> str:
    return str(events[-1].response.output_text)


async def test_create_streams_the_sse_events_and_the_response_is_stored(
    async_client: AsyncOpenAI, client: OpenAI
) -> None:
    async with async_client.responses.connect() as connection:
        await connection.response.create(model=MODEL, input="hi there")
        events = await until_done(connection)
    check_numbered(events)
    assert events[-1].type == "response.completed"
    assert output_text(events) == "Hello! You said: hi there"
    assert "response.output_text.delta" in {e.type for e in events}
    assert all(getattr(e, "stream_id", None) is None for e in events)
    stored = client.responses.retrieve(events[-1].response.id)
    assert stored.status == "completed"
    assert stored.output_text == "Hello! You said: hi there"


async def test_store_false_continues_on_the_socket_by_previous_response_id(
    async_client: AsyncOpenAI, client: OpenAI
) -> None:
    async with async_client.responses.connect() as connection:
        await connection.response.create(model=MODEL, input="the word is kumquat", store=False)
        first = (await until_done(connection))[-1].response
        await connection.response.create(
            model=MODEL, input="[[echo]]", store=False, previous_response_id=first.id
        )
        second = await until_done(connection)
        third_input = "[[echo]] again"
        await connection.response.create(
            model=MODEL,
            input=third_input,
            store=False,
            previous_response_id=second[-1].response.id,
        )
        third = await until_done(connection)
    assert second[-1].type == "response.completed"
    assert "the word is kumquat" in output_text(second)
    assert "Hello! You said: the word is kumquat" in output_text(second)
    assert "the word is kumquat" in output_text(third)
    # not stored: only this socket knew it
    async with async_client.responses.connect() as other:
        await other.response.create(model=MODEL, input="x", previous_response_id=first.id)
        [error] = await until_done(other)
    assert error.type == "error"
    assert error.status == 400
    assert error.error.code == "previous_response_not_found"


async def test_lanes_run_side_by_side_and_each_event_carries_its_stream_id(
    async_client: AsyncOpenAI,
) -> None:
    async with async_client.responses.connect() as connection:
        await connection.response.create(
            model=MODEL, input="[[slow:300]] [[words:8]]", stream_id="slow"
        )
        await connection.response.create(model=MODEL, input="quick", stream_id="fast")
        events = await until_done(connection, lanes=2)
    by_lane: dict[str, list[Event]] = {"slow": [], "fast": []}
    for event in events:
        by_lane[event.stream_id].append(event)
    for lane in by_lane.values():
        check_numbered(lane)
        assert lane[-1].type == "response.completed"
    assert events[-1].stream_id == "slow"  # the quick one did not wait behind it
    assert output_text(by_lane["fast"]) == "Hello! You said: quick"


async def test_a_lane_runs_its_requests_in_order(async_client: AsyncOpenAI) -> None:
    async with async_client.responses.connect() as connection:
        await connection.response.create(model=MODEL, input="[[slow:100]] one", stream_id="a")
        await connection.response.create(model=MODEL, input="two", stream_id="a")
        events = await until_done(connection, lanes=2)
    texts = [e.response.output_text for e in events if e.type == "response.completed"]
    assert texts == ["Hello! You said: one", "Hello! You said: two"]


async def test_prewarm_runs_no_inference_and_its_input_is_the_next_turns_context(
    async_client: AsyncOpenAI, fake_upstream: str
) -> None:
    marker = f"base-instructions-{uuid.uuid4().hex}"
    developer = {"role": "developer", "content": f"You are Codex. {marker}"}
    async with async_client.responses.connect() as connection:
        await connection.response.create(
            model=MODEL, input=[developer], store=False, generate=False
        )
        prewarm = await until_done(connection)
        assert fake_requests(fake_upstream, marker) == []
        await connection.response.create(
            model=MODEL,
            input="[[echo]]",
            store=False,
            previous_response_id=prewarm[-1].response.id,
        )
        turn = await until_done(connection)
    assert [e.type for e in prewarm] == [
        "response.created",
        "response.in_progress",
        "response.completed",
    ]
    check_numbered(prewarm)
    assert prewarm[-1].response.output == []
    assert marker in output_text(turn)
    assert len(fake_requests(fake_upstream, marker)) == 1


async def test_error_frames_leave_the_connection_usable(async_client: AsyncOpenAI) -> None:
    async with async_client.responses.connect() as connection:
        await connection.response.create(
            model=MODEL, input="x", previous_response_id="resp_unknown", stream_id="a"
        )
        [missing] = await until_done(connection)
        await connection.send({"type": "response.create", "input": "no model"})  # type: ignore[typeddict-item]
        [invalid] = await until_done(connection)
        await connection.response.steer(input="faster", previous_response_id="resp_x")
        steer = await connection.recv()
        await connection.response.create(model=MODEL, input="still here")
        events = await until_done(connection)
    assert (missing.status, missing.error.code) == (400, "previous_response_not_found")
    assert missing.stream_id == "a"
    assert (invalid.status, invalid.error.code) == (400, "missing_required_parameter")
    assert invalid.error.message
    assert (steer.type, steer.error.code) == ("response.steer.failed", "response_not_found")
    assert output_text(events) == "Hello! You said: still here"


async def test_a_create_frames_image_options_are_decoded_as_a_posts(
    async_client: AsyncOpenAI,
) -> None:
    """``image`` on a ``response.create`` frame: echoed as the policy in effect, and
    ``enabled`` refused with the create's error."""
    async with async_client.responses.connect() as connection:
        await connection.response.create(
            model=MODEL, input="look", image={"context_compression": "auto"}
        )
        events = await until_done(connection)
        await connection.response.create(
            model=MODEL, input="look", image={"context_compression": "enabled"}
        )
        [refused] = await until_done(connection)
    created, done = events[0].response, events[-1].response
    assert created.image is not None
    assert created.image.context_compression == "disabled"
    assert done.image is not None
    assert done.image.context_compression == "disabled"
    assert (refused.status, refused.error.code) == (400, "unsupported_value")
    assert refused.error.param == "image.context_compression"


async def test_a_command_id_retried_on_a_new_socket_streams_the_first_response(
    async_client: AsyncOpenAI, fake_upstream: str
) -> None:
    command_id = f"cmd-{uuid.uuid4().hex}"
    frame = {"type": "response.create", "model": MODEL, "input": f"once {command_id}"}
    async with async_client.responses.connect() as connection:
        await connection.send({**frame, "command_id": command_id})  # type: ignore[typeddict-item]
        first = await until_done(connection)
    async with async_client.responses.connect() as connection:
        await connection.send({**frame, "command_id": command_id, "stream_id": "r"})  # type: ignore[typeddict-item]
        retried = await until_done(connection)
        await connection.send({**frame, "input": "other", "command_id": command_id})  # type: ignore[typeddict-item]
        [reused] = await until_done(connection)
    assert first[-1].type == "response.completed"
    assert retried[-1].type == "response.completed"
    assert retried[-1].response.id == first[-1].response.id
    assert [e.type for e in retried] == [e.type for e in first]
    check_numbered(retried)
    assert len(fake_requests(fake_upstream, f"once {command_id}")) == 1
    assert (reused.status, reused.error.code) == (409, "idempotency_key_reused")


async def test_a_fork_that_fails_on_another_lane_leaves_the_source_lanes_parent(
    async_client: AsyncOpenAI,
) -> None:
    """As hosted (the SDK's WebSocket guide): a same-lane continuation that fails evicts the
    parent it continued, but an errored cross-lane fork preserves the shared parent for the
    source lane, so a ``store: false`` chain goes on. Before, any failed continuation
    evicted it, and the source lane's next turn was ``previous_response_not_found``."""
    async with async_client.responses.connect() as connection:
        await connection.response.create(
            model=MODEL, input="the word is kumquat", store=False, stream_id="source"
        )
        parent = (await until_done(connection))[-1].response.id
        await connection.response.create(
            model=MODEL,
            input="[[error:400]]",
            store=False,
            stream_id="fork",
            previous_response_id=parent,
        )
        fork = await until_done(connection)
        await connection.response.create(
            model=MODEL,
            input="[[echo]]",
            store=False,
            stream_id="source",
            previous_response_id=parent,
        )
        source = await until_done(connection)
        await connection.response.create(
            model=MODEL,
            input="[[error:400]]",
            store=False,
            stream_id="source",
            previous_response_id=source[-1].response.id,
        )
        failed = await until_done(connection)
        await connection.response.create(
            model=MODEL,
            input="again",
            store=False,
            stream_id="source",
            previous_response_id=source[-1].response.id,
        )
        [evicted] = await until_done(connection)
    assert fork[-1].type in ("response.failed", "error")
    assert source[-1].type == "response.completed", source[-1]
    assert "the word is kumquat" in output_text(source)
    assert failed[-1].type in ("response.failed", "error")
    assert (evicted.type, evicted.error.code) == ("error", "previous_response_not_found")


async def test_a_continuation_whose_body_is_refused_evicts_its_parent_as_a_failed_one(
    async_client: AsyncOpenAI,
) -> None:
    """As hosted (the SDK's WebSocket guide: a same-lane continuation "returning a 4xx or
    5xx" evicts its parent): a continuation refused for its body (a 400 before any run)
    forgets the ``store: false`` parent it named, as one whose run failed does; a fork
    from another lane refused so leaves the parent to its lane. Before, a refused body
    left the parent kept, and the chain went on from it."""
    async with async_client.responses.connect() as connection:
        await connection.response.create(
            model=MODEL, input="the word is fig", store=False, stream_id="source"
        )
        parent = (await until_done(connection))[-1].response.id
        refused = {"model": MODEL, "input": "x", "store": False, "temperature": 5}
        await connection.response.create(**refused, stream_id="fork", previous_response_id=parent)
        [fork] = await until_done(connection)
        await connection.response.create(
            model=MODEL,
            input="[[echo]]",
            store=False,
            stream_id="source",
            previous_response_id=parent,
        )
        source = await until_done(connection)
        child = source[-1].response.id
        await connection.response.create(**refused, stream_id="source", previous_response_id=child)
        [same_lane] = await until_done(connection)
        await connection.response.create(
            model=MODEL,
            input="again",
            store=False,
            stream_id="source",
            previous_response_id=child,
        )
        [evicted] = await until_done(connection)
    assert (fork.status, fork.error.code) == (400, "decimal_above_max_value")
    assert "the word is fig" in output_text(source)
    assert (same_lane.status, same_lane.error.code) == (400, "decimal_above_max_value")
    assert (evicted.type, evicted.error.code) == ("error", "previous_response_not_found")


async def test_the_sdks_lane_helper_takes_a_lane_of_the_longest_name_it_allows(
    async_client: AsyncOpenAI,
) -> None:
    """The SDK's ``AsyncResponsesWebSocketSession`` lets a lane be named with up to 256
    ASCII letters, digits, underscores, hyphens or periods, as hosted takes them; the
    gateway refused 256 as too long. A name hosted refuses is ``invalid_stream_id``."""
    lane_name = "lane." + "x" * 251
    limits = ResponsesWebSocketLimits(
        max_lanes=4,
        max_events_per_lane=256,
        max_events=512,
        max_bytes_per_lane=1 << 22,
        max_bytes=1 << 23,
    )
    async with async_client.responses.connect() as connection:
        await connection.send(
            {"type": "response.create", "model": MODEL, "input": "x", "stream_id": "a b"}  # type: ignore[typeddict-item]
        )
        [refused] = await until_done(connection)
        async with AsyncResponsesWebSocketSession(connection, limits=limits) as session:
            lane = session.lane(lane_name)
            await lane.send({"type": "response.create", "model": MODEL, "input": "long lane"})
            response = await lane.get_final_response()
    assert response.status == "completed"
    assert response.output_text == "Hello! You said: long lane"
    assert (refused.status, refused.error.code) == (400, "invalid_stream_id")
    assert refused.stream_id is None
