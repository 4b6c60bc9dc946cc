"""SIGTERM with requests in flight: drain, then end what remains in the error shape; a
WebSocket session's response in flight streams to its end, then its socket closes (1001)."""

from __future__ import annotations

import asyncio
import os
import signal
import sqlite3
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import aiohttp
import anthropic
import openai
import orjson
from anthropic import AsyncAnthropic
from openai import AsyncOpenAI
from websockets.asyncio.client import connect

from stateway.core.errors import ServerShuttingDown
from tests.e2e.test_durability import (
    Events,
    body,
    gateway,
    sse_events,
    streaming,
    wait_until_gone,
)

DRAIN = 2.0
SLOW = "[[slow:200]] [[words:100]]"
"""About 20 s of streamed output: certainly still running when the drain window closes."""
SLOW_WHOLE = "[[slow:20000]] [[words:3]]"
"""A non-stream upstream reply is one chunk, delayed 20 s."""
QUICK = "[[slow:400]] [[words:3]]"
"""About 1.6 s: finishes inside the drain window."""


def stored(path: Path, sql: str) -> list[tuple[Any, ...]]:
    with sqlite3.connect(path) as connection:
        return connection.execute(sql).fetchall()


def upstream_calls(pid: int, upstream: str) -> int:
    """Established connections from process ``pid`` to the upstream's port (from /proc)."""
    port = f"{urlsplit(upstream).port:04X}"
    inodes = set()
    for fd in Path(f"/proc/{pid}/fd").iterdir():
        target = os.readlink(fd) if fd.is_symlink() else ""
        if target.startswith("socket:["):
            inodes.add(target[8:-1])
    count = 0
    for line in Path(f"/proc/{pid}/net/tcp").read_text().splitlines()[1:]:
        fields = line.split()
        if fields[2].endswith(":" + port) and fields[3] == "01" and fields[9] in inodes:
            count += 1
    return count


async def within_30_s(
    holds: Callable[[], Awaitable[bool]], failure: str, pause: float = 0.05
) -> None:
    """Bounded wait for ``holds`` (checked every ``pause`` seconds); ``failure`` after 30 s."""
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        if await holds():
            return
        await asyncio.sleep(pause)
    raise AssertionError(failure)


async def wait_for_upstream_calls(pid: int, upstream: str, count: int) -> None:
    async def started() -> bool:
        return upstream_calls(pid, upstream) >= count

    await within_30_s(started, f"{count} upstream calls did not start within 30 s")


async def test_sigterm_drains_then_ends_every_request_in_the_error_shape(
    fake_upstream: str, tmp_path: Path
) -> None:
    database = tmp_path / "stateway.db"
    log = tmp_path / "gateway.log"
    env = {"STATEWAY_DRAIN_TIMEOUT": str(DRAIN)}
    sigterm_at: list[float] = []

    async def non_stream(session: aiohttp.ClientSession) -> tuple[float, int, Any]:
        async with session.post("/v1/responses", json=body(SLOW_WHOLE)) as reply:
            return time.monotonic(), reply.status, orjson.loads(await reply.read())

    async def stream(session: aiohttp.ClientSession, text: str) -> tuple[float, int, Any]:
        async with session.post("/v1/responses", json=body(text, stream=True)) as reply:
            events = [event async for event in sse_events(reply.content)]
            return time.monotonic(), reply.status, events

    with gateway(fake_upstream, f"sqlite:///{database}", log, env) as server:
        async with aiohttp.ClientSession(server.url) as session:
            quick = asyncio.create_task(stream(session, QUICK))
            slow = [asyncio.create_task(non_stream(session)) for _ in range(25)]
            slow += [asyncio.create_task(stream(session, SLOW)) for _ in range(25)]
            await wait_for_upstream_calls(server.pid, fake_upstream, 51)
            assert not quick.done(), "the quick stream must still be running at SIGTERM"
            sigterm_at.append(time.monotonic())
            os.kill(server.pid, signal.SIGTERM)
            answers = await asyncio.wait_for(asyncio.gather(*slow), DRAIN + 10)
            quick_answer = await quick
        wait_until_gone(server.pid, within=10)
        gone_at = time.monotonic()

    # drained: the quick stream finished normally inside the window
    assert quick_answer[2][-1]["type"] == "response.completed"
    for finished_at, status, answer in answers:
        assert finished_at - sigterm_at[0] < DRAIN + 5
        if isinstance(answer, dict):  # non-stream: a 503 in the OpenAI error shape
            assert status == 503, answer
            assert set(answer["error"]) == {"message", "type", "param", "code"}
            assert answer["error"]["code"] == "server_shutting_down"
        else:  # stream: response.failed, with that code, as the last event
            assert status == 200
            assert answer[-1]["type"] == "response.failed"
            assert answer[-1]["response"]["error"]["code"] == "server_shutting_down"
            assert sum(e["type"].startswith("response.") and "ed" in e["type"] for e in answer)
    assert gone_at - sigterm_at[0] < DRAIN + 10

    assert stored(database, "SELECT count(*) FROM responses WHERE status = 'in_progress'") == [(0,)]
    bodies = [orjson.loads(b) for (b,) in stored(database, "SELECT body FROM responses")]
    ended = [b for b in bodies if b["status"] == "failed"]
    assert len(ended) == 50
    assert {b["error"]["code"] for b in ended} == {"server_shutting_down"}
    text = log.read_text()
    assert "Traceback" not in text
    assert "Internal Server Error" not in text
    # said when it began and ended, at info
    began = f"INFO stateway.serving: shutting down (drain window {DRAIN:g}s): 51 requests and"
    assert f"{began} 51 runs in flight" in text
    assert "INFO stateway.serving: shut down: 50 ended as server_shutting_down" in text


async def wait_until_refused(url: str) -> None:
    """Bounded wait for the listening socket to close: the drain has begun (the server
    stops listening, then drains its WebSocket sessions, in one step)."""
    address = urlsplit(url)

    async def refused() -> bool:
        try:
            _, writer = await asyncio.open_connection(address.hostname, address.port)
        except OSError:
            return True
        writer.close()
        return False

    await within_30_s(refused, "the gateway kept listening after SIGTERM", pause=0.02)


async def test_sigterm_drains_websocket_sessions_then_closes_them_with_1001(
    fake_upstream: str, tmp_path: Path
) -> None:
    """The response in flight streams to its end, a frame sent during the drain gets a
    503 error frame, then the socket is closed with 1001."""
    log = tmp_path / "gateway.log"
    env = {"STATEWAY_DRAIN_TIMEOUT": "60"}
    database = f"sqlite:///{tmp_path / 'stateway.db'}"
    in_flight = {"type": "response.create", "model": "fake-model"}
    with gateway(fake_upstream, database, log, env) as server:
        url = server.url.replace("http://", "ws://") + "/v1/responses"
        async with connect(url, max_size=None) as ws:
            await ws.send(
                orjson.dumps({**in_flight, "input": "[[slow:200]] [[words:30]]"}).decode()
            )
            frames = [orjson.loads(await ws.recv())]
            while frames[-1]["type"] != "response.output_text.delta":
                frames.append(orjson.loads(await ws.recv()))
            os.kill(server.pid, signal.SIGTERM)
            await wait_until_refused(server.url)
            await ws.send(
                orjson.dumps({**in_flight, "input": "too late", "stream_id": "x"}).decode()
            )
            frames += [orjson.loads(message) async for message in ws]
            close_code = ws.close_code
        wait_until_gone(server.pid, within=30)

    [refused] = [f for f in frames if f["type"] == "error"]
    assert (refused["status"], refused["error"]["code"]) == (503, "server_shutting_down")
    assert refused["stream_id"] == "x"
    events = [f for f in frames if f["type"] != "error"]
    assert [e["sequence_number"] for e in events] == list(range(len(events)))
    assert events[-1]["type"] == "response.completed"
    assert sum(e["type"] == "response.created" for e in events) == 1  # "too late" never ran
    assert close_code == 1001
    assert "Traceback" not in log.read_text()


async def test_a_second_sigint_ends_requests_at_once_in_the_error_shape(
    fake_upstream: str, tmp_path: Path
) -> None:
    """Ctrl+C twice quits without the drain window, yet a stream still gets its ending."""
    log = tmp_path / "gateway.log"
    env = {"STATEWAY_DRAIN_TIMEOUT": "30"}
    with gateway(fake_upstream, f"sqlite:///{tmp_path / 'stateway.db'}", log, env) as server:
        async with streaming(server.url, SLOW) as (_, events):
            os.kill(server.pid, signal.SIGINT)
            await wait_until_refused(server.url)
            os.kill(server.pid, signal.SIGINT)
            rest = await asyncio.wait_for(collect(events), 10)
        wait_until_gone(server.pid, within=10)

    assert rest[-1]["type"] == "response.failed"
    assert rest[-1]["response"]["error"]["code"] == "server_shutting_down"
    text = log.read_text()
    assert "Traceback" not in text
    assert "shutting down (drain window 30s): 1 request and 1 run in flight" in text
    assert "shut down: 1 ended as server_shutting_down" in text


async def collect(events: Events) -> list[dict[str, Any]]:
    return [event async for event in events]


RELAYED_BODY = "[[stall:20000]] [[words:3]] relayed-body"
"""A relayed non-stream answer whose headers came and whose body is 20 s late."""
RELAYED_STREAM = "[[slow:200]] [[words:100]] relayed-stream"
"""A relayed stream: about 20 s of chunks."""
RELAYED_SILENT = "[[silence:20000]] [[words:3]] relayed-silent"
"""A relayed request whose status line is 20 s late."""


def chat(text: str, **fields: Any) -> dict[str, Any]:
    return {"model": "fake-model", "messages": [{"role": "user", "content": text}], **fields}


async def upstream_log(upstream: str) -> list[dict[str, Any]]:
    async with (
        aiohttp.ClientSession() as session,
        session.get(upstream.removesuffix("/v1") + "/_fake/requests") as reply,
    ):
        data: list[dict[str, Any]] = (await reply.json())["data"]
        return data


def asked(logged: list[dict[str, Any]], text: str) -> list[dict[str, Any]]:
    return [r for r in logged if r["body"].get("messages", [{}])[-1].get("content") == text]


async def wait_for_upstream(upstream: str, texts: list[str], *, disconnected: bool) -> None:
    """Bounded wait for the fake upstream to log a request for each of ``texts`` (and,
    with ``disconnected``, to see each one's client leave)."""

    async def seen() -> bool:
        logged = await upstream_log(upstream)
        asks = [asked(logged, text) for text in texts]
        return all(r and (not disconnected or r[-1].get("disconnected")) for r in asks)

    failure = f"the upstream did not see {texts} (disconnected: {disconnected})"
    await within_30_s(seen, failure)


async def test_sigterm_ends_relayed_chat_answers_in_the_chat_error_shape(
    fake_upstream: str, tmp_path: Path
) -> None:
    """The fast path's relays still in flight after the drain window (a body awaited, a
    stream mid-body, a status line awaited) end as ``server_shutting_down`` in the Chat
    error shape, and their upstream requests are closed."""
    log = tmp_path / "gateway.log"
    env = {"STATEWAY_DRAIN_TIMEOUT": str(DRAIN)}
    url = "/v1/chat/completions"

    async def whole(session: aiohttp.ClientSession, text: str, **fields: Any) -> Any:
        try:
            async with session.post(url, json=chat(text, **fields)) as reply:
                return reply.status, await reply.read()
        except aiohttp.ClientError as exc:
            return "cut", repr(exc)

    with gateway(fake_upstream, f"sqlite:///{tmp_path / 'stateway.db'}", log, env) as server:
        async with aiohttp.ClientSession(server.url) as session:
            body_awaited = asyncio.create_task(whole(session, RELAYED_BODY))
            status_awaited = asyncio.create_task(whole(session, RELAYED_SILENT, stream=True))
            async with session.post(url, json=chat(RELAYED_STREAM, stream=True)) as reply:
                assert reply.status == 200
                opening = [await reply.content.readline()]
                while b'"content":"w1' not in opening[-1]:
                    opening.append(await reply.content.readline())
                await wait_for_upstream(
                    fake_upstream, [RELAYED_BODY, RELAYED_SILENT], disconnected=False
                )
                os.kill(server.pid, signal.SIGTERM)
                try:
                    rest: Any = await asyncio.wait_for(reply.content.read(), DRAIN + 10)
                except aiohttp.ClientError as exc:
                    rest = repr(exc)
            answers = await asyncio.wait_for(
                asyncio.gather(body_awaited, status_awaited), DRAIN + 10
            )
        wait_until_gone(server.pid, within=10)

    for status, answer in answers:  # before the status line went out: a 503, Chat's shape
        assert status == 503, answer
        error = orjson.loads(answer)["error"]
        assert set(error) == {"message", "type", "param", "code"}
        assert error["code"] == "server_shutting_down"
    # mid-stream: the Chat stream's own error line, after what was relayed
    assert isinstance(rest, bytes), rest
    last = [line for line in rest.split(b"\n") if line.startswith(b"data: ")][-1]
    assert orjson.loads(last[6:])["error"]["code"] == "server_shutting_down"
    await wait_for_upstream(
        fake_upstream, [RELAYED_BODY, RELAYED_STREAM, RELAYED_SILENT], disconnected=True
    )
    text = log.read_text()
    assert "Traceback" not in text
    assert "Internal Server Error" not in text
    # relays are no runs, yet ended as server_shutting_down all the same
    assert "shutting down (drain window 2s): 3 requests and 0 runs in flight" in text
    assert "shut down: 3 ended as server_shutting_down" in text
    # expected endings: no warning of them, nor of the relays' reads the gateway ended
    assert "the connection to model server" not in text
    assert "WARNING stateway.surfaces" not in text


TRANSLATED_STREAM = "[[slow:200]] [[words:100]]"
"""About 20 s of streamed output, translated (the gateway's run, not a relay)."""


def messages(text: str, **fields: Any) -> dict[str, Any]:
    return {"model": "fake-model", "max_tokens": 500, **chat(text), **fields}


async def wait_for_upstream_asks(upstream: str, markers: list[str]) -> None:
    """Bounded wait for the fake upstream to log a Responses request (each translated)
    naming each of ``markers``."""

    async def seen() -> bool:
        logged = await upstream_log(upstream)
        asks = [orjson.dumps(r["body"]) for r in logged if r["path"] == "/v1/responses"]
        return all(any(marker.encode() in body for body in asks) for marker in markers)

    await within_30_s(seen, f"the upstream did not see {markers}")


async def read_past_first_text(reply: aiohttp.ClientResponse, text: bytes) -> None:
    """Read a stream's lines until one carrying output (``text``) has come."""
    line = await reply.content.readline()
    while text not in line:
        assert line, "the stream ended before its first output"
        line = await reply.content.readline()


async def test_sigterm_ends_translated_chat_and_messages_answers_in_their_error_shapes(
    fake_upstream: str, tmp_path: Path
) -> None:
    """Chat Completions over a Responses backend (translated, not relayed) and Anthropic
    Messages, still running when the drain window closes: a stream ends with its
    protocol's error frame (Chat's ``data: {"error"}`` line, without ``[DONE]``; Messages'
    ``event: error`` of type ``api_error``, as a shutting-down 503 is answered, without
    ``message_stop``), which each SDK raises; a non-stream request gets a 503 in its
    protocol's error shape."""
    log = tmp_path / "gateway.log"
    env = {"STATEWAY_DRAIN_TIMEOUT": str(DRAIN), "STATEWAY_UPSTREAM_API": "responses"}
    chat_url, messages_url = "/v1/chat/completions", "/v1/messages"

    async def whole(session: aiohttp.ClientSession, url: str, payload: Any) -> Any:
        async with session.post(url, json=payload) as reply:
            return reply.status, orjson.loads(await reply.read())

    async def chat_sdk(url: str, started: asyncio.Event) -> openai.APIError | None:
        async with AsyncOpenAI(base_url=url + "/v1", api_key="x", max_retries=0) as sdk:
            stream = await sdk.chat.completions.create(
                model="fake-model",
                messages=[{"role": "user", "content": f"{TRANSLATED_STREAM} chat-sdk"}],
                stream=True,
            )
            try:
                async for _chunk in stream:
                    started.set()
            except openai.APIError as exc:
                return exc
        return None

    async def messages_sdk(url: str, started: asyncio.Event) -> anthropic.APIError | None:
        async with AsyncAnthropic(base_url=url, api_key="x", max_retries=0) as sdk:
            stream = await sdk.messages.create(
                model="fake-model",
                max_tokens=500,
                messages=[{"role": "user", "content": f"{TRANSLATED_STREAM} messages-sdk"}],
                stream=True,
            )
            try:
                async for event in stream:
                    if event.type == "content_block_delta":
                        started.set()
            except anthropic.APIError as exc:
                return exc
        return None

    with gateway(fake_upstream, f"sqlite:///{tmp_path / 'stateway.db'}", log, env) as server:
        async with aiohttp.ClientSession(server.url) as session:
            chat_whole = asyncio.create_task(
                whole(session, chat_url, chat(f"{SLOW_WHOLE} chat-whole"))
            )
            messages_whole = asyncio.create_task(
                whole(session, messages_url, messages(f"{SLOW_WHOLE} messages-whole"))
            )
            started = [asyncio.Event(), asyncio.Event()]
            sdk_ends = [
                asyncio.create_task(chat_sdk(server.url, started[0])),
                asyncio.create_task(messages_sdk(server.url, started[1])),
            ]
            chat_body = chat(f"{TRANSLATED_STREAM} chat-raw", stream=True)
            messages_body = messages(f"{TRANSLATED_STREAM} messages-raw", stream=True)
            async with (
                session.post(chat_url, json=chat_body) as chat_reply,
                session.post(messages_url, json=messages_body) as messages_reply,
            ):
                assert (chat_reply.status, messages_reply.status) == (200, 200)
                await read_past_first_text(chat_reply, b'"content":"w1')
                await read_past_first_text(messages_reply, b'"text_delta"')

                async def streaming() -> bool:
                    return all(event.is_set() for event in started)

                await within_30_s(streaming, "the SDK streams did not start within 30 s")
                markers = ["chat-whole", "messages-whole", "chat-raw", "chat-sdk"]
                await wait_for_upstream_asks(fake_upstream, markers)
                os.kill(server.pid, signal.SIGTERM)
                chat_rest = await asyncio.wait_for(chat_reply.content.read(), DRAIN + 10)
                messages_rest = await asyncio.wait_for(messages_reply.content.read(), DRAIN + 10)
            answers = await asyncio.wait_for(asyncio.gather(chat_whole, messages_whole), DRAIN + 10)
            chat_raised, messages_raised = await asyncio.wait_for(
                asyncio.gather(*sdk_ends), DRAIN + 10
            )
        wait_until_gone(server.pid, within=10)

    # Chat: a 503 in the OpenAI shape; a stream's last line its error, with no [DONE]
    (chat_status, chat_answer), (messages_status, messages_answer) = answers
    assert chat_status == 503, chat_answer
    assert set(chat_answer["error"]) == {"message", "type", "param", "code"}
    assert chat_answer["error"]["code"] == "server_shutting_down"
    lines = [line for line in chat_rest.split(b"\n") if line.startswith(b"data: ")]
    assert b"data: [DONE]" not in lines
    error = orjson.loads(lines[-1][6:])["error"]
    assert set(error) == {"message", "type", "param", "code"}
    assert (error["type"], error["code"]) == ("server_error", "server_shutting_down")
    assert isinstance(chat_raised, openai.APIError), chat_raised
    assert chat_raised.code == "server_shutting_down"
    # Messages: a 503 in Anthropic's shape; a stream's last event an error, no message_stop
    assert messages_status == 503, messages_answer
    assert messages_answer["type"] == "error"
    assert messages_answer["error"]["type"] == "api_error"
    frames = [frame for frame in messages_rest.split(b"\n\n") if frame.strip()]
    assert not any(b"event: message_stop" in frame for frame in frames)
    name, data = frames[-1].split(b"\n", 1)
    assert name == b"event: error"
    assert orjson.loads(data.removeprefix(b"data: ")) == {
        "type": "error",
        "error": {"type": "api_error", "message": ServerShuttingDown().message},
    }
    assert isinstance(messages_raised, anthropic.APIStatusError), messages_raised
    assert messages_raised.body == orjson.loads(data.removeprefix(b"data: "))
    text = log.read_text()
    assert "Traceback" not in text
    assert "Internal Server Error" not in text
