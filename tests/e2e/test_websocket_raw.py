"""WebSocket mode with a raw ``websockets`` client: caps, bad frames, resume by sequence
number, and a client that stops reading (closed with 4429 while its run completes)."""

from __future__ import annotations

import asyncio
import json
import socket
import sqlite3
import time
import uuid
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import pytest
from openai import OpenAI
from websockets.asyncio.client import ClientConnection, connect
from websockets.client import ClientProtocol
from websockets.exceptions import InvalidStatus
from websockets.frames import Frame as FrameEvent
from websockets.frames import Opcode
from websockets.protocol import State
from websockets.uri import parse_uri

from tests.e2e.test_durability import gateway

MODEL = "fake-model"
FRAME_LIMIT = 64 * 1024
Frame = dict[str, Any]


@dataclass(frozen=True)
class Server:
    url: str
    log: Path
    database: Path


@pytest.fixture(scope="module")
def server(fake_upstream: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    directory = tmp_path_factory.mktemp("ws")
    env = {
        "STATEWAY_WEBSOCKET_MAX_REQUESTS": "3",
        "STATEWAY_WEBSOCKET_MAX_LANES": "2",
        "STATEWAY_WEBSOCKET_MAX_FRAME_BYTES": str(FRAME_LIMIT),
    }
    database = directory / "stateway.db"
    log = directory / "gateway.log"
    with gateway(fake_upstream, f"sqlite:///{database}", log, env) as launched:
        yield Server(launched.url, log, database)


@asynccontextmanager
async def socket_to(server: Server, **options: Any) -> AsyncIterator[ClientConnection]:
    url = server.url.replace("http://", "ws://") + "/v1/responses"
    async with connect(url, max_size=None, **options) as connection:
        yield connection


async def send(connection: ClientConnection, **frame: Any) -> None:
    await connection.send(json.dumps(frame))


async def until_done(connection: ClientConnection, count: int = 1) -> list[Frame]:
    frames: list[Frame] = []
    ended = 0
    while ended < count:
        frame = json.loads(await connection.recv())
        frames.append(frame)
        if frame["type"] in ("response.completed", "response.failed", "error"):
            ended += 1
    return frames


def create(text: str, **fields: Any) -> Frame:
    return {"type": "response.create", "model": MODEL, "input": text, **fields}


async def test_caps_answer_429_at_once_and_keep_nothing(server: Server) -> None:
    async with socket_to(server) as ws:
        await send(ws, **create("[[slow:200]] [[words:3]]", stream_id="a"))
        await send(ws, **create("[[slow:200]] [[words:3]]", stream_id="b"))
        await send(ws, **create("lane c", stream_id="c"))  # a third lane
        await send(ws, **create("a two", stream_id="a"))
        await send(ws, **create("a three", stream_id="a"))  # a fourth request
        frames = await until_done(ws, 5)
        await send(ws, **create("lane c later", stream_id="c"))
        later = await until_done(ws)
    errors = [f for f in frames if f["type"] == "error"]
    assert [(e["status"], e["stream_id"]) for e in errors] == [(429, "c"), (429, "a")]
    assert "lanes" in errors[0]["error"]["message"]
    assert "requests" in errors[1]["error"]["message"]
    completed = [f for f in frames if f["type"] == "response.completed"]
    assert len(completed) == 3
    assert later[-1]["response"]["output"][0]["content"][0]["text"].endswith("lane c later")


async def test_an_upgrade_from_another_sites_page_is_refused(server: Server) -> None:
    """A browser lets any page open a WebSocket (no CORS): one whose ``Origin`` is not the
    gateway's own is refused; the gateway's own origin, and clients that send none, pass."""
    with pytest.raises(InvalidStatus) as refused:
        async with socket_to(server, origin="https://evil.example"):
            pass
    assert refused.value.response.status_code == 403
    body = json.loads(refused.value.response.body or b"{}")
    assert body["error"]["code"] == "origin_not_allowed"
    async with socket_to(server, origin=server.url) as ws:  # a page the gateway served
        await send(ws, **create("same site"))
        frames = await until_done(ws)
    assert frames[-1]["type"] == "response.completed"


@pytest.mark.parametrize(
    ("frame", "status", "code"),
    [
        ("not json", 400, "invalid_json"),
        (b"\x00binary", 400, "unsupported_frame"),
        ('{"type": "response.cancel"}', 400, "unknown_frame_type"),
        ("[]", 400, "invalid_type"),
        ('{"type": 5}', 400, "invalid_type"),
        (json.dumps(create("x" * FRAME_LIMIT)), 413, "frame_too_large"),
        ('{"type": "response.resume", "response_id": "resp_nope"}', 404, "not_found"),
    ],
)
async def test_bad_frames_get_an_error_frame_and_the_connection_stays_usable(
    server: Server, frame: str | bytes, status: int, code: str
) -> None:
    async with socket_to(server) as ws:
        await send(ws, **create("[[slow:100]] [[words:3]]", stream_id="other"))
        await ws.send(frame)
        await send(ws, **create("after"))
        frames = await until_done(ws, 3)
    [error] = [f for f in frames if f["type"] == "error"]
    assert (error["status"], error["error"]["code"]) == (status, code)
    assert error["error"]["message"]
    completed = [f for f in frames if f["type"] == "response.completed"]
    assert len(completed) == 2  # the other lane and the next frame


@pytest.mark.parametrize("how", ["in-one-write", "continuing-a-stored-one"])
def test_a_create_sent_just_before_the_client_closes_runs_to_its_end(
    server: Server, how: str
) -> None:
    """A closed socket cancels nothing (ADR 0010), not even a request still being
    admitted: before, the close cancelled it before its run started, and it never ran
    (read in the same write as the frame, before its lane's task began; or while its
    admission read the response it continues). Its client never saw its id: the response
    is found in the store by its metadata."""
    client = OpenAI(base_url=server.url + "/v1", api_key="sk-test", max_retries=0)
    marker = uuid.uuid4().hex
    frame = create("[[words:3]]", metadata={"marker": marker})
    if how == "in-one-write":
        with StalledClient(server.url) as closing:
            closing.send_and_close(frame)
            assert closing.read_to_close() == ([], 1000)
    else:
        frame["previous_response_id"] = client.responses.create(model=MODEL, input="first").id
        asyncio.run(sent_then_closed(server, frame))
    deadline = time.monotonic() + 10
    while (body := stored_with(server, marker)) is None or body["status"] != "completed":
        assert time.monotonic() < deadline, f"never completed: {body}"
        time.sleep(0.05)
    assert client.responses.retrieve(body["id"]).output_text


async def sent_then_closed(server: Server, frame: Frame) -> None:
    async with socket_to(server) as ws:
        await send(ws, **frame)


def stored_with(server: Server, marker: str) -> dict[str, Any] | None:
    """The stored response whose metadata holds ``marker``, if any."""
    with sqlite3.connect(server.database) as db:
        rows = db.execute(
            "SELECT body FROM responses WHERE body LIKE ?", (f"%{marker}%",)
        ).fetchall()
    assert len(rows) <= 1
    return json.loads(rows[0][0]) if rows else None


async def test_resume_by_sequence_number_and_beyond_the_log(server: Server) -> None:
    async with socket_to(server) as ws:  # a command id's log is stored, for a retry
        await send(ws, **create("[[words:5]]", command_id="resume-me"))
        original = await until_done(ws)
    response_id = original[0]["response"]["id"]
    async with socket_to(server) as ws:
        await send(ws, type="response.resume", response_id=response_id, starting_after=2)
        resumed = await until_done(ws)
        await send(ws, type="response.resume", response_id=response_id, starting_after=999)
        [beyond] = await until_done(ws)
        await send(ws, type="response.resume", response_id=response_id, stream_id="z")
        whole = await until_done(ws)
    assert resumed == original[3:]
    assert (beyond["status"], beyond["error"]["param"]) == (400, "starting_after")
    assert [f["sequence_number"] for f in whole] == list(range(len(original)))
    assert {f["stream_id"] for f in whole} == {"z"}


async def test_resuming_after_the_terminal_event_is_refused_not_left_waiting(
    server: Server,
) -> None:
    """A socket has no end of stream: a resume after the last event of a response that
    ended would send nothing, and its client would wait for ever. It is refused instead,
    saying the response ended there (the client has its terminal event)."""
    async with socket_to(server) as ws:
        await send(ws, **create("[[words:3]]", command_id="resume-at-the-end"))
        original = await until_done(ws)
    response_id, last = original[0]["response"]["id"], original[-1]["sequence_number"]
    async with socket_to(server) as ws:
        await send(
            ws, type="response.resume", response_id=response_id, starting_after=last, stream_id="r"
        )
        [refused] = await asyncio.wait_for(until_done(ws), 10)
        await send(ws, type="response.resume", response_id=response_id, starting_after=last - 1)
        [terminal] = await until_done(ws)
    assert refused["type"] == "error"
    assert (refused["status"], refused["stream_id"]) == (400, "r")
    error = refused["error"]
    assert (error["code"], error["param"]) == ("invalid_value", "starting_after")
    assert f"{last} is the last event" in error["message"], error["message"]
    assert "completed" in error["message"]
    assert terminal == original[-1]


async def test_a_response_streamed_to_its_end_keeps_no_log_to_resume(server: Server) -> None:
    """Storing every turn's log would cost every turn; a lane that streamed all of it
    needs none (docs/websocket.md). Its stored response still reads as usual."""
    async with socket_to(server) as ws:
        await send(ws, **create("[[words:3]]"))
        original = await until_done(ws)
        response_id = original[0]["response"]["id"]
        await send(ws, type="response.resume", response_id=response_id, starting_after=2)
        [refused] = await until_done(ws)
    assert (refused["status"], refused["error"]["code"]) == (400, "unsupported_parameter")
    client = OpenAI(base_url=server.url + "/v1", api_key="sk-test", max_retries=0)
    assert client.responses.retrieve(response_id).status == "completed"


@pytest.mark.parametrize(
    "text",
    [
        # 8 MB in 16 KiB pieces, ~2 ms apart, then the same text in each closing event:
        # much more than the kernel buffers hold while the client does not read
        "[[slow:2]] [[huge:8000000]]",
        # at once: the run has ended before the connection is closed, and the log its
        # lane keeps then is stored before the close frame goes out
        "[[huge:8000000]]",
    ],
    ids=["closed-while-running", "closed-after-the-end"],
)
def test_a_client_that_stops_reading_is_closed_with_4429_and_the_run_completes(
    server: Server, text: str
) -> None:
    client = OpenAI(base_url=server.url + "/v1", api_key="sk-test", max_retries=0)
    closing = "closing a WebSocket connection (4429)"
    closed_before = server.log.read_text().count(closing)
    with StalledClient(server.url) as stalled:
        stalled.send(create(text))
        response_id = stalled.first()["response"]["id"]
        deadline = time.monotonic() + 90
        while server.log.read_text().count(closing) == closed_before:
            assert time.monotonic() < deadline, "the slow client was never closed"
            time.sleep(0.05)
        while client.responses.retrieve(response_id).status != "completed":
            assert time.monotonic() < deadline, "the run did not complete"
            time.sleep(0.05)
        received, close_code = stalled.read_to_close()
    assert close_code == 4429
    assert received[-1]["type"] != "response.completed"
    last = received[-1]["sequence_number"]
    assert [f["sequence_number"] for f in received] == list(range(last + 1))
    rest = asyncio.run(resumed(server, response_id, last))
    assert "sequence_number" in rest[0], rest[0]
    assert rest[0]["sequence_number"] == last + 1
    assert rest[-1]["type"] == "response.completed"


async def resumed(server: Server, response_id: str, after: int) -> list[Frame]:
    async with socket_to(server) as ws:
        await send(ws, type="response.resume", response_id=response_id, starting_after=after)
        return await until_done(ws)


class StalledClient:
    """A WebSocket client over a blocking socket with a tiny receive buffer, which reads
    only when asked (``websockets``' sans-I/O protocol frames it)."""

    def __init__(self, url: str) -> None:
        address = urlsplit(url)
        self._socket = socket.socket()
        self._socket.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
        self._socket.connect((address.hostname, address.port))
        self._socket.settimeout(30)
        uri = parse_uri(url.replace("http://", "ws://") + "/v1/responses")
        self._protocol = ClientProtocol(uri, max_size=None)
        self._protocol.send_request(self._protocol.connect())
        self._flush()
        self._messages: list[Frame] = []
        self._parts: list[bytes] = []
        while self._protocol.state is not State.OPEN:
            self._read()

    def __enter__(self) -> StalledClient:
        return self

    def __exit__(self, *_: object) -> None:
        self._socket.close()

    def send(self, frame: Frame) -> None:
        self._protocol.send_text(json.dumps(frame).encode())
        self._flush()

    def send_and_close(self, frame: Frame) -> None:
        """``frame`` then the close frame, in one write: the server reads both at once."""
        self._protocol.send_text(json.dumps(frame).encode())
        self._protocol.send_close(1000)
        self._socket.sendall(b"".join(self._protocol.data_to_send()))

    def first(self) -> Frame:
        while not self._messages:
            self._read()
        return self._messages[0]

    def read_to_close(self) -> tuple[list[Frame], int | None]:
        while self._protocol.state is not State.CLOSED:
            self._read()
        return self._messages, self._protocol.close_code

    def _read(self) -> None:
        data = self._socket.recv(1 << 20)
        if not data:
            self._protocol.receive_eof()
        else:
            self._protocol.receive_data(data)
        for event in self._protocol.events_received():
            if isinstance(event, FrameEvent) and event.opcode in (Opcode.TEXT, Opcode.CONT):
                self._parts.append(event.data)
                if event.fin:
                    self._messages.append(json.loads(b"".join(self._parts)))
                    self._parts = []
        self._flush()

    def _flush(self) -> None:
        for data in self._protocol.data_to_send():
            if data:
                self._socket.sendall(data)


async def test_resuming_a_response_without_an_event_log_is_refused(server: Server) -> None:
    client = OpenAI(base_url=server.url + "/v1", api_key="sk-test", max_retries=0)
    plain = client.responses.create(model=MODEL, input="over HTTP")
    async with socket_to(server) as ws:
        await send(ws, type="response.resume", response_id=plain.id)
        [error] = await until_done(ws)
    assert (error["status"], error["error"]["code"]) == (400, "unsupported_parameter")


async def test_permessage_deflate_is_declined_unless_configured(
    server: Server, fake_upstream: str, tmp_path: Path
) -> None:
    """The client offers it (``websockets`` does by default; the openai SDK only given
    a ``max_size``); by default it is declined, which keeps an idle connection small
    ([websocket] compression, docs/websocket.md)."""
    async with socket_to(server) as ws:
        assert ws.response is not None
        assert "Sec-WebSocket-Extensions" not in ws.response.headers
        await send(ws, **create("plain"))
        assert (await until_done(ws))[-1]["type"] == "response.completed"

    env = {"STATEWAY_WEBSOCKET_COMPRESSION": "true"}
    database = tmp_path / "stateway.db"
    with gateway(fake_upstream, f"sqlite:///{database}", tmp_path / "gateway.log", env) as launched:
        compressing = Server(launched.url, tmp_path / "gateway.log", database)
        async with socket_to(compressing) as ws:
            assert ws.response is not None
            extensions = ws.response.headers.get("Sec-WebSocket-Extensions", "")
            assert extensions.startswith("permessage-deflate")
            await send(ws, **create("compressed"))
            assert (await until_done(ws))[-1]["type"] == "response.completed"


async def test_a_stored_response_continuing_an_unstored_one_stores_its_whole_context(
    server: Server,
) -> None:
    """``store: true`` continuing a ``store: false`` response of the socket: the store has
    no chain to the unstored one, so the stored response holds the context it ran on, and a
    continuation over HTTP (or another socket) sees the first turn too."""
    async with socket_to(server) as ws:
        await send(ws, **create("first turn", store=False))
        first = (await until_done(ws))[-1]["response"]["id"]
        await send(ws, **create("second turn", store=True, previous_response_id=first))
        second = (await until_done(ws))[-1]["response"]["id"]
    client = OpenAI(base_url=server.url + "/v1", api_key="sk-test", max_retries=0)
    third = client.responses.create(model=MODEL, input="[[echo]]", previous_response_id=second)
    assert "first turn" in third.output_text
    assert "second turn" in third.output_text


@pytest.mark.parametrize(
    ("command_id", "code"), [("", "empty_string"), ("c" * 256, "string_above_max_length")]
)
async def test_a_command_id_out_of_range_is_refused_at_once(
    server: Server, command_id: str, code: str
) -> None:
    """As an ``Idempotency-Key`` over HTTP (1 to 255 characters): a 400 naming it, when the
    frame comes, not once its lane is free, and counted against no cap."""
    async with socket_to(server) as ws:
        await send(ws, **create("[[slow:300]] [[words:3]]", stream_id="a"))
        for _ in range(3):  # past the connection's 3 requests, were they admitted
            await send(ws, **create("x", stream_id="a", command_id=command_id))
        frames = await until_done(ws, 4)
    kinds = [frame["type"] for frame in frames]
    assert kinds.index("response.completed") == len(kinds) - 1
    errors = [frame for frame in frames if frame["type"] == "error"]
    assert len(errors) == 3
    assert errors[0] == {
        "type": "error",
        "status": 400,
        "error": {
            "type": "invalid_request_error",
            "code": code,
            "message": errors[0]["error"]["message"],
            "param": "command_id",
        },
        "stream_id": "a",
    }


async def test_codexs_response_processed_acknowledgement_is_taken_without_an_answer(
    server: Server,
) -> None:
    """Codex (its ``responses_websocket_response_processed`` feature) acknowledges each
    completed turn with ``{"type": "response.processed", "response_id"}`` and reads no
    answer to it: its next turn reads the socket from there. An ``unknown_frame_type``
    error frame was the first frame that turn read, and failed it."""
    async with socket_to(server) as ws:
        await send(ws, **create("first", store=False))
        first = (await until_done(ws))[-1]["response"]["id"]
        await send(ws, type="response.processed", response_id=first)
        await send(ws, type="response.processed", response_id="resp_unknown_here")
        await send(ws, **create("[[echo]]", store=False, previous_response_id=first))
        turn = await until_done(ws)
        await send(ws, type="response.processed")  # no response_id: a 400, as any frame's
        [refused] = await until_done(ws)
    assert turn[0]["type"] == "response.created"
    assert turn[-1]["type"] == "response.completed"
    assert "first" in turn[-1]["response"]["output"][0]["content"][0]["text"]
    assert (refused["status"], refused["error"]["code"]) == (400, "missing_required_parameter")
    assert refused["error"]["param"] == "response_id"
