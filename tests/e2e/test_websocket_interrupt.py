"""``response.interrupt`` over a WebSocket: Codex (a provider named ``OpenAI``, its default
model) steers a turn by interrupting the response under way, ``{"type":
"response.interrupt", "response_id", "mode": "discard_partial_items"}``, reading that
response to its end on the same socket, then continuing it by ``previous_response_id``
with the new input. The response ends ``incomplete`` (``interrupted``) at once, with the
items it had completed and without the one it was writing; the upstream call stops. The
frame was an ``unknown_frame_type`` error: Codex reconnected and sent everything again,
and the interrupted response ran on to its end."""

from __future__ import annotations

import json
from typing import Any

from websockets.asyncio.client import ClientConnection, connect

from tests.e2e.test_upstream_mapping import clear, upstream_requests

MODEL = "fake-model"
Frame = dict[str, Any]
_ENDS = ("response.completed", "response.incomplete", "response.failed", "error")


async def _send(connection: ClientConnection, **frame: Any) -> None:
    await connection.send(json.dumps(frame))


async def _until(connection: ClientConnection, done: Any) -> list[Frame]:
    frames: list[Frame] = []
    while True:
        frame = json.loads(await connection.recv())
        frames.append(frame)
        if done(frame):
            return frames


def _create(text: str, **fields: Any) -> Frame:
    return {"type": "response.create", "model": MODEL, "input": text, "store": False, **fields}


async def test_an_interrupted_response_ends_at_once_with_what_it_completed(
    gateway: str, fake_upstream: str
) -> None:
    clear(fake_upstream)
    url = gateway.replace("http://", "ws://") + "/v1/responses"
    async with connect(url, max_size=None) as connection:
        await _send(connection, **_create("Go [[reason:plan-a]] [[words:200]] [[slow:50]]"))
        begun = await _until(connection, lambda f: f["type"] == "response.output_text.delta")
        response_id = begun[0]["response"]["id"]
        await _send(
            connection,
            type="response.interrupt",
            response_id=response_id,
            mode="discard_partial_items",
        )
        rest = await _until(connection, lambda f: f["type"] in _ENDS)

        end = rest[-1]
        assert end["type"] == "response.incomplete", end
        assert end["response"]["incomplete_details"] == {"reason": "interrupted"}
        assert [item["type"] for item in end["response"]["output"]] == ["reasoning"]
        done = [f["item"]["type"] for f in begun + rest if f["type"] == "response.output_item.done"]
        assert done == ["reasoning"]  # the message being written is never done
        texts = [f for f in rest if f["type"] == "response.output_text.delta"]
        assert len(texts) < 50  # stopped at once, not written to its end

        # continued on the same socket from what it completed, as Codex continues it
        await _send(connection, **_create("Next [[tail:3]]", previous_response_id=response_id))
        frames = await _until(connection, lambda f: f["type"] in _ENDS)
    assert frames[-1]["type"] == "response.completed", frames[-1]
    [message] = [i for i in frames[-1]["response"]["output"] if i["type"] == "message"]
    seen = message["content"][0]["text"].splitlines()
    # the partial answer is not in the context (a Chat upstream has no place for reasoning
    # without a message after it)
    assert seen[0] == "user: Go [[reason:plan-a]] [[words:200]] [[slow:50]]"
    assert seen[-1] == "user: Next [[tail:3]]"
    assert not any(line.startswith("assistant") for line in seen), seen
    first = upstream_requests(fake_upstream)[0]
    assert first.get("disconnected") is True  # the upstream call was stopped


async def test_an_interrupt_for_no_running_response_is_left_unanswered(gateway: str) -> None:
    url = gateway.replace("http://", "ws://") + "/v1/responses"
    async with connect(url, max_size=None) as connection:
        await _send(connection, **_create("Hi"))
        created = await _until(connection, lambda f: f["type"] in _ENDS)
        finished = created[-1]["response"]["id"]
        for response_id in (finished, "resp_unknown"):
            await _send(
                connection,
                type="response.interrupt",
                response_id=response_id,
                mode="discard_partial_items",
            )
        await _send(connection, type="response.interrupt", response_id=finished, mode="keep")
        refused = json.loads(await connection.recv())  # only the bad frame is answered
    assert refused["type"] == "error"
    assert (refused["status"], refused["error"]["param"]) == (400, "mode")
