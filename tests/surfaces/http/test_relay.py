"""A relayed answer (:class:`RelayResponse`) is closed before its body's last message goes
out: what the relay holds (its concurrent request's slot, free on every replica once
closed) is given back before its client can learn that the answer ended."""

from __future__ import annotations

import pytest
from starlette.types import Message

from stateway.core.errors import GatewayError, UpstreamError
from stateway.surfaces.http.relay import RelayResponse
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
