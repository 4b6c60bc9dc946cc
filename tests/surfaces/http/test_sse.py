"""The SSE response: what it holds while it streams."""

from __future__ import annotations

import asyncio
import gc
import time
import weakref
from collections.abc import AsyncGenerator

import pytest
from starlette.responses import Response
from starlette.types import Message, Scope

from stateway.core.errors import CredentialRevoked, GatewayError
from stateway.core.principal import Principal
from stateway.surfaces.auth.authenticator import IDENTITY, Identity
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
    once), then ends with its protocol's error frame, the body finished."""
    sent: list[Message] = []
    left: list[None] = []

    async def frames() -> AsyncGenerator[tuple[bytes, bool], None]:
        yield b"data: 0\n\n", False
        await asyncio.Event().wait()
        yield b"", True  # never reached

    async def send(message: Message) -> None:
        sent.append(message)

    response = SSEResponse(frames(), lambda: left.append(None), ending=ending)
    await asyncio.wait_for(response(expiring(0.05), never_leaves, send), 5)

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
    answered: list[GatewayError] = []

    async def frames() -> AsyncGenerator[tuple[bytes, bool], None]:
        yield b"", True  # never reached

    async def opening() -> None:
        await asyncio.Event().wait()  # no output yet

    def refusal(error: GatewayError) -> Response:
        answered.append(error)
        return Response(error.code, status_code=error.status)

    sent: list[Message] = []

    async def send(message: Message) -> None:
        sent.append(message)

    response = SSEResponse(
        frames(), lambda: None, opening=opening, error_response=refusal, ending=ending
    )
    await asyncio.wait_for(response(expiring(0.05), never_leaves, send), 5)
    [error] = answered
    assert isinstance(error, CredentialRevoked)
    assert (sent[0]["status"], sent[1]["body"]) == (401, b"invalid_api_key")

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
