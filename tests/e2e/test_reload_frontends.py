"""Config reloads through the real ``stateway serve`` while every frontend streams: a
``SIGHUP`` that removes the backends in use, and one refused before it, leave each
stream (and a request waiting to fail over) on the generation it was admitted under."""

from __future__ import annotations

import asyncio
import json
import os
import signal
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import aiohttp
import pytest

from stateway.fake_upstream.launch import start_fake_upstream
from tests.e2e.reloading import await_status, marker, sdk, serving, sighup
from tests.e2e.routing import fake_requests


@pytest.fixture(scope="module")
def second_upstream() -> Iterator[str]:
    with start_fake_upstream() as url:
        yield url


FIRST_BYTE_WAIT = 2.0
"""``first_byte_timeout`` of generation 1's first candidate: what a pending failover waits
for, well past a reload's own time."""
PACED = "[[slow:100]] [[words:20]]"


def pair_routes(first: str, second: str) -> str:
    """Generation 1: route ``pair`` over ``a`` (strict first byte) then ``b``, and ``solo``
    on ``a`` alone (the Chat Completions fast path)."""
    return f"""
[[backends]]
name = "a"
url = "{first}"
first_byte_timeout = {FIRST_BYTE_WAIT}
[[backends]]
name = "b"
url = "{second}"
api = "responses"

[[routes]]
name = "pair"
[[routes.candidates]]
backend = "a"
model = "g1-a"
[[routes.candidates]]
backend = "b"
model = "g1-b"
priority = 1

[[routes]]
name = "solo"
[[routes.candidates]]
backend = "a"
model = "g1-solo"
"""


def replaced_routes(upstream: str) -> str:
    """Generation 2: backends ``a`` and ``b`` gone, both routes on ``c``."""
    return f"""
[[backends]]
name = "c"
url = "{upstream}"

[[routes]]
name = "pair"
[[routes.candidates]]
backend = "c"
model = "g2-c"

[[routes]]
name = "solo"
[[routes.candidates]]
backend = "c"
model = "g2-c"
"""


def wire_request(frontend: str, model: str, text: str) -> tuple[str, dict[str, Any]]:
    messages = [{"role": "user", "content": text}]
    match frontend:
        case "responses":
            return "/v1/responses", {"model": model, "input": text, "stream": True}
        case "chat":
            return "/v1/chat/completions", {"model": model, "messages": messages, "stream": True}
        case _:
            body = {"model": model, "messages": messages, "max_tokens": 64, "stream": True}
            return "/v1/messages", body


STREAM_END = {"responses": "response.completed", "chat": "[DONE]", "messages": "message_stop"}
"""What each frontend's successful stream ends with."""


def ending(text: str) -> str:
    """An event stream's last event: its ``type``, or ``[DONE]``."""
    last = [line for line in text.splitlines() if line.startswith("data: ")][-1]
    data = last.removeprefix("data: ")
    return data if data == "[DONE]" else str(json.loads(data)["type"])


async def test_sighup_removing_the_backends_leaves_every_frontends_streams_whole(
    tmp_path: Path, fake_upstream: str, second_upstream: str
) -> None:
    """Streams of each frontend (Chat both translated and relayed by the fast path) are
    under way, and one request waits for its first candidate's first byte, when a reload
    fails (the file gone) and then one removes both backends they use. Each stream
    finishes on generation 1; the waiting one fails over to generation 1's second
    candidate; new requests go to generation 2."""
    with serving(tmp_path, pair_routes(fake_upstream, second_upstream)) as gateway:
        streams = [
            ("responses", "pair"),
            ("chat", "pair"),
            ("chat", "solo"),  # the fast path: one Chat candidate, no gateway tools
            ("messages", "pair"),
        ]

        async def stream(path: str, body: dict[str, Any], admitted: asyncio.Event) -> str:
            async with (
                aiohttp.ClientSession() as session,
                session.post(gateway.url + path, json=body) as response,
            ):
                assert response.status == 200
                text = ""
                async for line in response.content:
                    text += line.decode()
                    if "w1 " in text:
                        admitted.set()
                return text

        admitted = [asyncio.Event() for _ in streams]
        tasks = []
        for (frontend, model), event in zip(streams, admitted, strict=True):
            path, body = wire_request(frontend, model, f"{marker()} {PACED}")
            tasks.append(asyncio.create_task(stream(path, body, event)))
        waiting = marker()
        path, body = wire_request("responses", "pair", f"{waiting} [[silence:10000]] [[only:g1-a]]")
        pending = asyncio.create_task(stream(path, body, asyncio.Event()))
        await asyncio.gather(*(event.wait() for event in admitted))
        for _ in range(600):  # bounded: until the first candidate holds the request
            if fake_requests(fake_upstream, waiting):
                break
            await asyncio.sleep(0.01)

        (tmp_path / "stateway.toml").unlink()  # mid-rewrite, say: refused, nothing changes
        os.kill(gateway.pid, signal.SIGHUP)
        failed = await asyncio.to_thread(
            await_status, gateway, lambda s: s["last_error"] is not None
        )
        assert "cannot read config file" in failed["last_error"]
        assert (failed["generation"], failed["retiring"]) == (1, [])
        assert "config reload failed; generation 1 serves on" in gateway.log.read_text()

        sighup(gateway, tmp_path, replaced_routes(second_upstream))
        reloaded = await asyncio.to_thread(await_status, gateway, lambda s: s["generation"] == 2)
        assert reloaded["last_error"] is None
        assert reloaded["retiring"] == [1]
        assert not pending.done()  # still waiting for its first byte on generation 1

        finished = await asyncio.gather(*tasks)
        for (frontend, _), text in zip(streams, finished, strict=True):
            assert "w20" in text, text
            assert ending(text) == STREAM_END[frontend], text
            assert '"error":{' not in text
        failed_over = await pending
        assert ending(failed_over) == "response.completed"
        assert f"Hello! You said: {waiting}" in failed_over
        assert [r["body"]["model"] for r in fake_requests(second_upstream, waiting)] == ["g1-b"]

        fresh = marker()
        with sdk(gateway) as client:
            assert client.responses.create(model="pair", input=fresh).status == "completed"
        assert [r["body"]["model"] for r in fake_requests(second_upstream, fresh)] == ["g2-c"]
        await asyncio.to_thread(await_status, gateway, lambda s: s["retiring"] == [])
