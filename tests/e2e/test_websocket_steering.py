"""Steering (``response.steer``) through the official ``openai`` SDK's
``connection.response.steer``, against the real ``stateway serve`` and the fake upstream:
an automatic successor, pending input while the client owes tool output, and each
failure code (docs/websocket.md#steering)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from openai import AsyncOpenAI, OpenAI

from stateway.launch import start_gateway
from tests.support.mcp_server import serve_mcp

MODEL = "fake-model"
SLOW = "[[slow:200]] [[words:20]]"
"""About 4 s of streamed output: still running when the steers sent at its start arrive."""
LOOKUP = {
    "type": "function",
    "name": "lookup",
    "description": "Look something up.",
    "parameters": {"type": "object", "properties": {"q": {"type": "string"}}},
}
LOCAL_MCP = {"type": "mcp", "server_label": "local", "require_approval": "never"}
Event = Any
TERMINAL = ("response.completed", "response.failed", "response.incomplete")


async def until(connection: Any, done: int, *, steers: int = 0) -> list[Event]:
    """Events until ``done`` responses ended and ``steers`` steering events came."""
    events: list[Event] = []
    ended = told = 0
    while ended < done or told < steers:
        event = await connection.recv()
        events.append(event)
        assert event.type != "error", event
        ended += event.type in TERMINAL
        told += event.type.startswith("response.steer.")
    return events


def numbered_from_zero(events: list[Event]) -> None:
    assert events[0].type == "response.created"
    assert [e.sequence_number for e in events] == list(range(len(events)))


def split_after_terminal(events: list[Event]) -> tuple[list[Event], list[Event]]:
    end = next(i for i, e in enumerate(events) if e.type in TERMINAL) + 1
    return events[:end], events[end:]


async def started(connection: Any) -> str:
    created = await connection.recv()
    assert created.type == "response.created"
    return str(created.response.id)


async def test_a_steer_is_accepted_then_committed_by_an_automatic_successor(
    async_client: AsyncOpenAI,
) -> None:
    async with async_client.responses.connect() as connection:
        await connection.response.create(
            model=MODEL, input=SLOW, instructions="Answer briefly.", stream_id="s"
        )
        parent_id = await started(connection)
        await connection.response.steer(
            input="[[echo]] steer-kumquat", previous_response_id=parent_id
        )
        events = [await connection.recv()]
        while events[-1].type != "response.steer.accepted":
            events.append(await connection.recv())
        async with async_client.responses.connect() as other:  # while the parent runs
            await other.send({"type": "response.resume", "response_id": parent_id})  # type: ignore[typeddict-item]
            replayed = await until(other, done=1)
        events += await until(connection, done=1)  # the parent's rest
        successor = await until(connection, done=1)

    [accepted] = [e for e in events if e.type == "response.steer.accepted"]
    assert accepted.steer.previous_response_id == parent_id
    assert accepted.steer.id
    assert accepted.stream_id == "s"
    parent = events  # its response.created came first, read by started()
    assert [e.sequence_number for e in parent] == list(range(1, len(parent) + 1))
    assert parent[-1].type == "response.completed"
    assert accepted.sequence_number < parent[-1].sequence_number
    # the successor: its own stream from 0, continuing the parent with the steer
    numbered_from_zero(successor)
    assert {e.stream_id for e in successor} == {"s"}
    response = successor[-1].response
    assert successor[-1].type == "response.completed"
    assert response.previous_response_id == parent_id
    assert response.instructions == "Answer briefly."  # its settings inherited
    assert "steer-kumquat" in response.output_text
    assert "w20" in response.output_text  # the parent's whole answer in its context
    # the accepted event is in the parent's log: a resume replays it in place
    assert [e.type for e in replayed[1:]] == [e.type for e in parent]
    assert replayed[accepted.sequence_number].steer.id == accepted.steer.id


async def test_a_steer_waits_while_the_client_owes_tool_output(
    async_client: AsyncOpenAI,
) -> None:
    call = '[[slow:400]] [[tool:lookup:{"q":"fruit"}]]'
    async with async_client.responses.connect() as connection:
        await connection.response.create(model=MODEL, input=call, tools=[LOOKUP], stream_id="t")
        parent_id = await started(connection)
        await connection.response.steer(input="pears-marker", previous_response_id=parent_id)
        first = await until(connection, done=1, steers=2)  # accepted, ..., completed, pending
        await connection.response.steer(
            input=[{"type": "message", "role": "user", "content": "[[echo]] apples-marker"}],
            previous_response_id=parent_id,
        )
        second = await until(connection, done=0, steers=2)  # accepted, pending at once
        completed = next(e for e in first if e.type == "response.completed")
        [function_call] = [i for i in completed.response.output if i.type == "function_call"]
        await connection.response.create(
            model=MODEL,
            tools=[LOOKUP],
            stream_id="t",
            previous_response_id=parent_id,
            input=[
                {"type": "function_call_output", "call_id": function_call.call_id, "output": "42"}
            ],
        )
        continued = await until(connection, done=1)

    types = [e.type for e in first]
    assert types.index("response.steer.accepted") < types.index("response.completed")
    assert types[-2:] == ["response.completed", "response.steer.pending"]
    pending = first[-1]
    assert pending.reason == "waiting_for_required_input"
    assert [stub.model_dump() for stub in pending.required_input] == [
        {"type": "function_call_output", "call_id": function_call.call_id, "name": "lookup"}
    ]
    assert pending.stream_id == "t"
    numbers = [e.sequence_number for e in first + second]
    assert numbers == list(range(1, len(numbers) + 1))  # gapless after the created (0)
    assert [e.type for e in second] == ["response.steer.accepted", "response.steer.pending"]
    assert second[0].steer.id == second[1].steer.id != pending.steer.id
    # the continuation: the queued input, in order, before its own
    numbered_from_zero(continued)
    text = continued[-1].response.output_text
    assert text.index("pears-marker") < text.index("apples-marker")
    assert "42" in text


async def test_each_refusal_is_a_steer_failed_event_with_its_code(
    async_client: AsyncOpenAI, client: OpenAI
) -> None:
    async with async_client.responses.connect() as connection:
        await connection.response.steer(input="lost", previous_response_id="resp_unknown")
        [not_found] = await until(connection, done=0, steers=1)

        await connection.response.create(model=MODEL, input=SLOW, stream_id="f")
        parent_id = await started(connection)
        await connection.response.steer(
            input=[{"role": "assistant", "content": "x"}], previous_response_id=parent_id
        )
        for number in range(17):  # the 17th is one past max_pending_steers
            await connection.response.steer(input=f"s{number}", previous_response_id=parent_id)
        events = await until(connection, done=2)  # the parent, then its successor

        await connection.response.steer(input="late", previous_response_id=parent_id)
        [gone] = await until(connection, done=0, steers=1)  # no longer the lane's response
        successor_id = events[-1].response.id
        await connection.response.steer(input="too late", previous_response_id=successor_id)
        [completed] = await until(connection, done=0, steers=1)

        await connection.response.create(
            model=MODEL,
            input=SLOW,
            stream_id="c",
            context_management=[{"type": "compaction", "compact_threshold": 100000}],
        )
        compacting_id = await started(connection)
        await connection.response.steer(input="x", previous_response_id=compacting_id)
        unsupported = await until(connection, done=1)

        await connection.response.create(
            model=MODEL, input='[[tool:lookup:{"q":"a"}]]', tools=[LOOKUP], stream_id="w"
        )
        waiting_id = await started(connection)
        await until(connection, done=1)
        await connection.response.steer(input="queued", previous_response_id=waiting_id)
        await until(connection, done=0, steers=2)  # accepted, pending
        await connection.response.create(model=MODEL, input="something else", stream_id="w")
        abandoned = await until(connection, done=1)

    def failure(event: Event) -> tuple[str, str]:
        assert event.type == "response.steer.failed"
        assert event.error.type == "invalid_request_error"
        assert event.error.message
        return event.error.code, event.steer.previous_response_id

    assert failure(not_found) == ("response_not_found", "resp_unknown")
    assert (not_found.sequence_number, not_found.steer.input, not_found.steer.id) == (
        0,
        "lost",
        None,
    )

    parent, successor = split_after_terminal(events)
    failed = [e for e in parent if e.type == "response.steer.failed"]
    assert [failure(e)[0] for e in failed] == ["invalid_input", "too_many_pending_steers"]
    assert failed[0].steer.id is None
    assert failed[0].steer.input[0]["role"] == "assistant"
    assert failed[1].steer.input == "s16"
    assert sum(e.type == "response.steer.accepted" for e in parent) == 16
    assert [e.sequence_number for e in parent] == list(range(1, len(parent) + 1))
    assert parent[-1].type == "response.completed"
    numbered_from_zero(successor)
    assert successor[-1].response.previous_response_id == parent_id
    assert successor[-1].response.output_text == "Hello! You said: s15"  # the last steer
    committed = client.responses.input_items.list(successor_id, order="asc")
    texts = [item.content[0].text for item in committed.data if item.type == "message"]
    assert texts == [f"s{number}" for number in range(16)]  # in submission order

    assert failure(gone) == ("response_not_found", parent_id)
    assert failure(completed) == ("response_already_completed", successor_id)
    assert completed.sequence_number == successor[-1].sequence_number + 1
    assert completed.stream_id == "f"

    [refused] = [e for e in unsupported if e.type == "response.steer.failed"]
    assert failure(refused) == ("steering_not_supported", compacting_id)
    assert unsupported[-1].type == "response.completed"

    assert failure(abandoned[0]) == ("response_not_active", waiting_id)
    assert abandoned[0].steer.id
    assert abandoned[0].steer.input == "queued"
    assert abandoned[1].type == "response.created"
    assert abandoned[-1].response.output_text == "Hello! You said: something else"


@pytest.fixture(scope="module")
def mcp_served(fake_upstream: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """A gateway whose responses run a real MCP server's tools (built with the ``mcp``
    SDK); its URL."""
    directory = tmp_path_factory.mktemp("steering-mcp")
    with serve_mcp() as server:
        config = directory / "stateway.toml"
        config.write_text(f'[mcp_servers.local]\nurl = "{server.url}"\n')
        args = ["--config", str(config), "--upstream", fake_upstream]
        args += ["--database", f"sqlite:///{directory / 'stateway.db'}"]
        with start_gateway(args) as url:
            yield url


@pytest.fixture(params=["store", "no-store"])
def mcp_gateway(request: pytest.FixtureRequest, mcp_served: str) -> tuple[AsyncOpenAI, bool]:
    """The SDK on that gateway, and whether its responses are stored."""
    sdk = AsyncOpenAI(base_url=mcp_served + "/v1", api_key="sk-test", max_retries=0)
    return sdk, request.param == "store"


async def test_a_steer_stops_a_tool_loop_at_its_next_round_and_its_successor_continues(
    mcp_gateway: tuple[AsyncOpenAI, bool],
) -> None:
    sdk, store = mcp_gateway
    loop = '[[tool:local__sleep:{"seconds":1}]] [[rounds:4]] go'  # ~4 s of tool rounds
    async with sdk.responses.connect() as connection:
        await connection.response.create(
            model=MODEL, input=loop, tools=[LOCAL_MCP], store=store, stream_id="m"
        )
        parent_id = await started(connection)
        await connection.response.steer(
            input="[[echo]] steer-quince", previous_response_id=parent_id
        )
        parent = await until(connection, done=1)
        successor = await until(connection, done=1)

    ended = parent[-1]
    assert ended.type == "response.incomplete"
    assert ended.response.incomplete_details.reason == "steered"
    calls = [i for i in ended.response.output if i.type == "mcp_call"]
    assert len(calls) == 1  # stopped after its first round, not after four
    assert calls[0].status == "completed"  # every call answered
    assert calls[0].output
    numbered_from_zero(successor)
    assert successor[-1].type == "response.completed"
    response = successor[-1].response
    assert response.previous_response_id == parent_id
    assert "steer-quince" in response.output_text
    assert "local__sleep" in response.output_text  # the steered output in its context
