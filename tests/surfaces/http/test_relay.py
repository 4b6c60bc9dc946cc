"""A relayed answer (:class:`RelayResponse`) is closed before its body's last message goes
out: what the relay holds (its concurrent request's slot, free on every replica once
closed) is given back before its client can learn that the answer ended."""

from __future__ import annotations

import asyncio
import time

import pytest
from starlette.types import Message, Scope

from stateway.core.errors import CredentialRevoked, GatewayError, UpstreamError
from stateway.core.principal import Principal
from stateway.protocols.chat.stream import encode_error_chunk
from stateway.surfaces.auth.authenticator import IDENTITY, Identity
from stateway.surfaces.http.relay import RelayResponse
from stateway.surfaces.http.sse import UNBUFFERED
from tests.surfaces.http.test_chat import FakeRelay

EVENTS = {"content-type": "text/event-stream"}
CUT = UpstreamError("cut", code="upstream_stream_cut")


@pytest.mark.parametrize(
    ("headers", "chunks", "whole"),
    [
        (EVENTS, [b"data: {}\n\n", b"data: [DONE]\n\n"], False),  # a stream to its end
        (EVENTS, [b"data: {}\n\n", CUT], False),  # a stream cut: its error line last
        ({"content-type": "application/json"}, [b"{", b"}"], True),  # a whole answer
        ({"content-type": "application/json"}, [b"{", b"}"], False),  # any other body
    ],
    ids=["stream", "cut stream", "whole", "other body"],
)
async def test_a_relay_is_closed_before_the_last_message_of_its_answer(
    headers: dict[str, str], chunks: list[bytes | GatewayError], whole: bool
) -> None:
    relay = FakeRelay(200, headers, chunks, None, whole=whole)  # type: ignore[arg-type]
    closed_before: list[bool] = []

    async def send(message: Message) -> None:
        if message["type"] == "http.response.body":
            closed_before.append(relay.closed.is_set())

    async def receive() -> Message:
        raise AssertionError("not read")

    answer = await RelayResponse(relay).held()  # type: ignore[arg-type]
    await answer({"type": "http"}, receive, send)
    assert closed_before[-1], "closed before the last message"
    assert not any(closed_before[:-1]), "and not before any other"


async def relayed(relay: FakeRelay, scope: Scope | None = None) -> list[Message]:
    """The messages ``relay``'s answer sends (to a request of ``scope``)."""
    sent: list[Message] = []

    async def send(message: Message) -> None:
        sent.append(message)

    async def receive() -> Message:
        raise AssertionError("not read")

    answer = await RelayResponse(relay).held()  # type: ignore[arg-type]
    await answer(scope or {"type": "http"}, receive, send)
    return sent


@pytest.mark.parametrize(
    ("headers", "chunks"),
    [
        (EVENTS, [b"data: {}\n\n", b"data: [DONE]\n\n"]),
        ({"content-type": "application/json"}, [b"{", b"}"]),
    ],
    ids=["stream", "other body"],
)
async def test_only_the_last_message_of_a_relayed_body_ends_it(
    headers: dict[str, str], chunks: list[bytes | GatewayError]
) -> None:
    """Each chunk goes on with more to come; only the last message ends the body (a
    server answers no message after that one)."""
    sent = await relayed(FakeRelay(200, headers, chunks, None))  # type: ignore[arg-type]
    start, *body, last = sent
    assert start["type"] == "http.response.start"
    assert [m["body"] for m in body] == chunks
    assert all(m["more_body"] is True for m in body)
    assert last["more_body"] is False


async def test_a_stream_failing_before_its_first_event_sends_its_error_line_alone() -> None:
    """No event went out before it: the error line needs no line break before it."""
    sent = await relayed(FakeRelay(200, EVENTS, [CUT], None))  # type: ignore[list-item]
    body = b"".join(m.get("body", b"") for m in sent[1:])
    assert body == encode_error_chunk(CUT)


async def test_an_empty_body_that_is_no_stream_is_relayed_empty() -> None:
    relay = FakeRelay(502, {"content-type": "application/json"}, [], None)
    sent = await relayed(relay)
    assert (sent[0]["status"], b"".join(m.get("body", b"") for m in sent[1:])) == (502, b"")


def token(expires_in: float) -> Scope:
    """A request's scope, authenticated by a token expiring in ``expires_in`` seconds."""
    identity = Identity(
        Principal("acme", "user"), authenticated=True, expires_at=time.time() + expires_in
    )
    return {"type": "http", IDENTITY: identity}


async def test_a_stream_relayed_under_an_expiring_token_goes_out_as_it_came() -> None:
    """Watched for its credential's end meanwhile (which does not come), each event goes
    on as it came, after the upstream's headers and the unbuffered one."""
    chunks = [b"data: {}\n\n", b"data: [DONE]\n\n"]
    sent = await relayed(FakeRelay(200, EVENTS, chunks, None), token(3600))
    start, *body, last = sent
    assert (b"content-type", b"text/event-stream") in start["headers"]
    assert all(header in start["headers"] for header in UNBUFFERED)
    assert body == [{"type": "http.response.body", "body": c, "more_body": True} for c in chunks]
    assert last == {"type": "http.response.body", "body": b"", "more_body": False}


async def test_a_stream_whose_token_expires_ends_with_its_error_line() -> None:
    """The upstream says nothing more meanwhile: the credential's end cuts it off."""
    relay = FakeRelay(200, EVENTS, [b"data: {}\n\n"], asyncio.Event())  # its gate never set
    sent = await relayed(relay, token(-1))
    body = b"".join(m.get("body", b"") for m in sent[1:])
    assert body == b"data: {}\n\n" + encode_error_chunk(CredentialRevoked("The token has expired."))
    assert relay.closed.is_set()
