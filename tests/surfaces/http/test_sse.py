"""The SSE response: what it holds while it streams."""

from __future__ import annotations

import asyncio
import gc
import logging
import time
import weakref
from collections.abc import AsyncGenerator, Awaitable, Callable

import pytest
from starlette.responses import Response
from starlette.types import Message, Scope

from stateway.core.errors import CredentialRevoked, GatewayError, NotFound, UpstreamError
from stateway.core.principal import Principal
from stateway.surfaces.auth.authenticator import IDENTITY, Identity
from stateway.surfaces.http import sse
from stateway.surfaces.http.sse import SSEResponse


class Refusal:
    """How a stream that fails before it opens is answered; stands for what such an
    answer needs (a Messages request's whole body, to name a block at fault)."""

    def __call__(self, error: GatewayError) -> Response:
        raise AssertionError("the stream opened: no refusal is answered")


@pytest.mark.usefixtures("young_heap")
async def test_what_a_refusal_needs_is_let_go_once_the_stream_opens() -> None:
    """A stream's refusal is answered only before its status line goes out: what it
    holds (a request body of megabytes) is not kept for the rest of the stream."""
    opened, finish = asyncio.Event(), asyncio.Event()
    refusal = Refusal()
    watched = weakref.ref(refusal)

    async def frames() -> AsyncGenerator[tuple[bytes, bool], None]:
        yield b"data: {}\n\n", False
        await finish.wait()
        yield b"", True

    async def opening() -> None:
        return None

    async def receive() -> Message:
        await asyncio.Event().wait()
        raise AssertionError

    async def send(message: Message) -> None:
        if message["type"] == "http.response.body":
            opened.set()

    response = SSEResponse(frames(), lambda: None, opening=opening, error_response=refusal)
    del refusal
    scope = {"type": "http", "method": "POST", "path": "/"}
    serving = asyncio.create_task(response(scope, receive, send))
    await opened.wait()
    gc.collect()
    assert watched() is None, "the refusal is let go while the stream goes on"
    finish.set()
    await serving


PLAIN: Scope = {"type": "http", "method": "POST", "path": "/"}
"""A request's scope under a credential that cannot end (no auth configured)."""


def expiring(seconds: float) -> Scope:
    """A request's scope, authenticated by a token expiring in ``seconds``."""
    identity = Identity(
        Principal("acme", "user"), authenticated=True, expires_at=time.time() + seconds
    )
    return {"type": "http", "method": "POST", "path": "/", IDENTITY: identity}


def ending(error: GatewayError) -> bytes:
    return b"event: error\ndata: " + error.code.encode() + b" " + str(error).encode() + b"\n\n"


async def never_leaves() -> Message:
    await asyncio.Event().wait()
    raise AssertionError


async def test_a_stream_whose_credential_expires_ends_with_its_error_frame() -> None:
    """Wherever it waits (here for a frame that never comes), a stream whose credential
    stops holding stops as if its client had left (its run cancelled: ``on_disconnect``,
    once, though the client then leaves too), then ends with its protocol's error
    frame, the body finished."""
    sent: list[Message] = []
    left: list[None] = []
    gone = asyncio.Event()

    async def frames() -> AsyncGenerator[tuple[bytes, bool], None]:
        yield b"data: 0\n\n", False
        await asyncio.Event().wait()
        yield b"", True  # never reached

    async def send(message: Message) -> None:
        sent.append(message)
        if message.get("more_body") is False:
            gone.set()
            await asyncio.sleep(0.01)  # the client leaves as it reads the error frame

    async def receive() -> Message:
        await gone.wait()
        return {"type": "http.disconnect"}

    response = SSEResponse(frames(), lambda: left.append(None), ending=ending)
    await asyncio.wait_for(response(expiring(0.05), receive, send), 5)

    assert left == [None]
    assert sent[0]["status"] == 200
    bodies = [(m["body"], m["more_body"]) for m in sent[1:]]
    assert bodies == [
        (b"data: 0\n\n", True),
        (b"event: error\ndata: invalid_api_key The token has expired.\n\n", False),
    ]


async def test_a_stream_whose_credential_expires_before_it_opens_is_refused() -> None:
    """The status line not sent yet, the refusal is the 401 itself (the route's error
    answer), not a stream; without an error answer the error is raised to the app's."""

    async def frames() -> AsyncGenerator[tuple[bytes, bool], None]:
        yield b"", True  # never reached

    async def opening() -> None:
        await asyncio.Event().wait()  # no output yet

    sent, answered = await refused_before_opening(opening, expiring(0.05))
    [error] = answered
    assert isinstance(error, CredentialRevoked)
    assert (sent[0]["status"], sent[1]["body"]) == (401, b"invalid_api_key")

    async def send(message: Message) -> None:
        sent.append(message)

    unanswered = SSEResponse(frames(), lambda: None, opening=opening, ending=ending)
    with pytest.raises(CredentialRevoked, match="expired"):
        await asyncio.wait_for(unanswered(expiring(0.05), never_leaves, send), 5)


async def test_a_credential_ending_while_a_keep_alive_is_written_still_ends_the_stream() -> None:
    """A keep-alive comment whose write waits for a slow client, and a frame waiting
    behind it, when the credential stops holding: the error frame still ends the stream;
    nothing is raised into the server (which would log the stream as an application's
    failure and leave the client no word of why it ended)."""
    sent: list[Message] = []
    writing, reading = asyncio.Event(), asyncio.Event()

    async def frames() -> AsyncGenerator[tuple[bytes, bool], None]:
        yield b"data: 0\n\n", False
        await writing.wait()
        yield b"data: 1\n\n", False  # waits for the comment to go out first
        await asyncio.Event().wait()
        yield b"", True  # never reached

    async def send(message: Message) -> None:
        if message.get("body") == b": keep-alive\n\n":
            writing.set()
            await reading.wait()  # the client reads again a while after the expiry
        sent.append(message)

    response = SSEResponse(frames(), lambda: None, keepalive=0.01, ending=ending)
    serving = asyncio.create_task(response(expiring(0.05), never_leaves, send))
    await asyncio.sleep(0.1)
    reading.set()
    await asyncio.wait_for(serving, 5)

    bodies = [m["body"] for m in sent[1:]]
    assert bodies[-1].startswith(b"event: error\ndata: invalid_api_key")
    assert sent[-1]["more_body"] is False


async def test_an_error_frame_the_client_does_not_read_is_given_up_and_logged(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """A client that reads nothing more is waited for a while only: the connection is
    then left unfinished (closed), and the log says which stream and how long."""
    monkeypatch.setattr(sse, "ENDING_WAIT", 0.05)
    sent: list[Message] = []

    async def frames() -> AsyncGenerator[tuple[bytes, bool], None]:
        yield b"data: 0\n\n", False
        raise NotFound("Response with id 'r' was deleted while it was streamed.")

    async def send(message: Message) -> None:
        if message.get("more_body") is False:
            await asyncio.Event().wait()  # a full socket buffer: never written
        sent.append(message)

    response = SSEResponse(frames(), lambda: None, ending=ending)
    with caplog.at_level(logging.WARNING, logger=sse.__name__):
        await asyncio.wait_for(response(expiring(3600), never_leaves, send), 5)
    assert [m.get("body") for m in sent[1:]] == [b"data: 0\n\n"]
    [record] = caplog.records
    assert record.getMessage() == (
        "left a stream unfinished (not_found): its client did not read the last frame "
        "within 0.05 seconds"
    )


async def test_a_stream_ends_with_one_error_frame_and_leaves_its_run_once() -> None:
    """A stream already ending with an error frame (its response deleted) is not ended
    again when its credential expires meanwhile, nor left twice when its client then
    goes: one error frame, ``on_disconnect`` called once."""
    sent: list[Message] = []
    left: list[None] = []
    gone = asyncio.Event()

    async def frames() -> AsyncGenerator[tuple[bytes, bool], None]:
        yield b"data: 0\n\n", False
        raise NotFound("Response with id 'r' was deleted while it was streamed.")

    async def send(message: Message) -> None:
        sent.append(message)
        if message.get("more_body") is False:
            await asyncio.sleep(0.1)  # read slowly: the credential expires meanwhile
            gone.set()
            await asyncio.sleep(0.01)  # then the client leaves

    async def receive() -> Message:
        await gone.wait()
        return {"type": "http.disconnect"}

    response = SSEResponse(frames(), lambda: left.append(None), ending=ending)
    await asyncio.wait_for(response(expiring(0.02), receive, send), 5)
    assert [m.get("body") for m in sent[1:]] == [
        b"data: 0\n\n",
        b"event: error\ndata: not_found Response with id 'r' was deleted while it was "
        b"streamed.\n\n",
    ]
    assert left == [None]


async def test_a_stream_under_an_expiring_credential_failing_before_it_opens_is_refused() -> None:
    """Watched for its credential's end, a stream whose run fails before any output is
    still answered with the failure's own HTTP error (the route's answer), not a
    stream."""

    async def opening() -> None:
        raise UpstreamError("The model server failed.", status=502)

    sent, _ = await refused_before_opening(opening, expiring(3600))
    assert (sent[0]["status"], sent[1]["body"]) == (502, b"upstream_error")


async def test_a_silent_stream_sends_its_idle_frame_on_each_interval() -> None:
    """Nothing sent for a whole interval: the idle frame (a Messages ``ping`` here) goes
    out, again each interval the silence lasts, and the stream then goes on."""
    sent: list[Message] = []

    async def frames() -> AsyncGenerator[tuple[bytes, bool], None]:
        yield b"data: 0\n\n", False
        await asyncio.sleep(0.01)
        yield b"data: 0.5\n\n", False  # within the interval: the timer waits on from it
        await asyncio.sleep(0.2)  # the model thinks
        yield b"data: 1\n\n", True

    async def send(message: Message) -> None:
        sent.append(message)

    ping = b"event: ping\ndata: {}\n\n"
    response = SSEResponse(frames(), lambda: None, keepalive=0.03, idle_frame=ping)
    await asyncio.wait_for(response(PLAIN, never_leaves, send), 5)
    bodies = [(m["body"], m["more_body"]) for m in sent[1:]]
    assert bodies[:2] == [(b"data: 0\n\n", True), (b"data: 0.5\n\n", True)]
    assert bodies[-1] == (b"data: 1\n\n", False)
    assert len(bodies[2:-1]) >= 2
    assert set(bodies[2:-1]) == {(ping, True)}


async def test_frames_ending_without_a_last_one_still_finish_the_body() -> None:
    sent: list[Message] = []

    async def frames() -> AsyncGenerator[tuple[bytes, bool], None]:
        yield b"data: 0\n\n", False

    async def send(message: Message) -> None:
        sent.append(message)

    await asyncio.wait_for(SSEResponse(frames(), lambda: None)(PLAIN, never_leaves, send), 5)
    assert sent[1:] == [
        {"type": "http.response.body", "body": b"data: 0\n\n", "more_body": True},
        {"type": "http.response.body", "body": b"", "more_body": False},
    ]


async def test_a_keep_alive_being_written_goes_out_whole_before_the_error_frame() -> None:
    """The credential stops holding while a keep-alive comment waits for a slow client:
    the comment goes out first, then the error frame ends the stream."""
    sent: list[Message] = []
    reading = asyncio.Event()

    async def frames() -> AsyncGenerator[tuple[bytes, bool], None]:
        yield b"data: 0\n\n", False
        await asyncio.Event().wait()
        yield b"", True  # never reached

    async def send(message: Message) -> None:
        if message.get("body") == b": keep-alive\n\n":
            await reading.wait()  # the client reads again a while after the expiry
        sent.append(message)

    response = SSEResponse(frames(), lambda: None, keepalive=0.01, ending=ending)
    serving = asyncio.create_task(response(expiring(0.05), never_leaves, send))
    await asyncio.sleep(0.1)
    reading.set()
    await asyncio.wait_for(serving, 5)
    bodies = [m["body"] for m in sent[1:]]
    assert bodies[:2] == [b"data: 0\n\n", b": keep-alive\n\n"]
    assert bodies[-1].startswith(b"event: error\ndata: invalid_api_key")


async def test_a_keep_alive_that_cannot_be_written_ends_the_stream_as_a_client_gone() -> None:
    """A write failing (the connection reset) is the client gone: ``on_disconnect`` is
    called, once, the stream stops, and nothing is raised into the server."""
    sent: list[bytes] = []
    left: list[None] = []

    async def frames() -> AsyncGenerator[tuple[bytes, bool], None]:
        yield b"data: 0\n\n", False
        await asyncio.sleep(0.2)
        yield b"data: 1\n\n", True

    async def send(message: Message) -> None:
        if message.get("body") == b": keep-alive\n\n":
            raise OSError("connection reset")
        sent.append(message.get("body", b""))

    response = SSEResponse(frames(), lambda: left.append(None), keepalive=0.03)
    await asyncio.wait_for(response(PLAIN, never_leaves, send), 5)
    assert sent == [b"", b"data: 0\n\n"]  # the status line's message, then the first frame
    assert left == [None]


async def refused_before_opening(
    opening: Callable[[], Awaitable[None]], scope: Scope
) -> tuple[list[Message], list[GatewayError]]:
    """A stream under ``scope`` that ends before it opens (``opening`` never returns, or
    fails), answered by the route's error answer (its code, with its status): what was
    sent, and the errors answered."""
    answered: list[GatewayError] = []

    async def frames() -> AsyncGenerator[tuple[bytes, bool], None]:
        yield b"", True  # never reached

    def refusal(error: GatewayError) -> Response:
        answered.append(error)
        return Response(error.code, status_code=error.status)

    sent: list[Message] = []

    async def send(message: Message) -> None:
        sent.append(message)

    response = SSEResponse(
        frames(), lambda: None, opening=opening, error_response=refusal, ending=ending
    )
    await asyncio.wait_for(response(scope, never_leaves, send), 5)
    return sent, answered
