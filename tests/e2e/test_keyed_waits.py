"""A keyed stream's retry that arrives while the first request runs, end to end: the real
``stateway serve`` (its keep-alive interval lowered) before the fake upstream, read raw
with aiohttp. The retry's stream opens while it waits and gets its protocol's keep-alives
(Chat's SSE comments, Messages' ``ping`` events) before the first ends, then the first's
events; a first that leaves nothing (failed, or a relay its client left) is followed in
the retry's stream by the retry's own answer, or its error event; a retry that leaves
while it waits leaves the key as it was. On each path: a Chat request relayed (the fast
path: a Chat upstream) or translated (a Responses upstream), and a Messages request."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator, Iterator
from contextlib import ExitStack, asynccontextmanager

import aiohttp
import orjson
import pytest

from stateway.app import TESTING_KEEPALIVE_ENV
from stateway.launch import start_gateway
from stateway.protocols.messages.stream import PING
from tests.e2e.test_idempotency import MODEL, sent_upstream

CHAT = "/v1/chat/completions"
MESSAGES = "/v1/messages"
COMMENT = b": keep-alive\n\n"
SLOW = "[[slow:300]] [[words:6]]"
"""A first answer taking seconds, against keep-alives every 50 ms."""

PATHS = [
    pytest.param("chat", CHAT, id="chat-relayed"),
    pytest.param("responses", CHAT, id="chat-translated"),
    pytest.param("chat", MESSAGES, id="messages"),
]


@pytest.fixture(scope="module")
def gateways(
    fake_upstream: str, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[dict[str, str]]:
    """A gateway per upstream API, sending keep-alives every 50 ms."""
    with ExitStack() as running:
        urls = {}
        for api in ("chat", "responses"):
            database = f"sqlite:///{tmp_path_factory.mktemp(api) / 'gw.db'}"
            args = ["--upstream", fake_upstream, "--upstream-api", api, "--database", database]
            env = {TESTING_KEEPALIVE_ENV: "0.05"}
            urls[api] = running.enter_context(start_gateway(args, env=env))
        yield urls


def idle(path: str) -> bytes:
    return COMMENT if path == CHAT else PING


def events(path: str, body: bytes) -> bytes:
    """A stream's body without its keep-alives."""
    return body.replace(idle(path), b"")


@asynccontextmanager
async def opened(
    session: aiohttp.ClientSession, url: str, path: str, text: str, key: str
) -> AsyncIterator[aiohttp.ClientResponse]:
    """A keyed stream asking ``text``, its status line and headers in."""
    body: dict[str, object] = {"model": MODEL, "messages": [{"role": "user", "content": text}]}
    if path == MESSAGES:
        body["max_tokens"] = 64
    headers = {
        "Content-Type": "application/json",
        "Idempotency-Key": key,
        "anthropic-version": "2023-06-01",
    }
    data = orjson.dumps({**body, "stream": True})
    async with session.post(url + path, data=data, headers=headers) as reply:
        yield reply


async def kept_alive(path: str, reply: aiohttp.ClientResponse) -> bytes:
    """The first frame of a waiting retry's stream, once its status line came: a
    keep-alive."""
    assert reply.status == 200
    assert reply.headers["content-type"].startswith("text/event-stream")
    frame = await reply.content.readuntil(b"\n\n")
    assert frame == idle(path)
    return frame


@pytest.mark.parametrize(("api", "path"), PATHS)
async def test_a_waiting_retry_is_kept_alive_then_gets_the_first_answer(
    gateways: dict[str, str], fake_upstream: str, api: str, path: str
) -> None:
    marker = uuid.uuid4().hex
    url = gateways[api]
    text = f"{marker} {SLOW}"
    async with (
        aiohttp.ClientSession() as session,
        opened(session, url, path, text, marker) as first,  # its status in: the key claimed
        opened(session, url, path, text, marker) as retry,
    ):
        waited = await kept_alive(path, retry)
        if path == MESSAGES:
            assert retry.headers["request-id"]
        original, retried = await first.read(), waited + await retry.read()

    assert events(path, retried) == events(path, original)
    assert sent_upstream(fake_upstream, marker) == 1


@pytest.mark.parametrize(("api", "path"), PATHS)
async def test_a_waiting_retry_of_a_first_that_failed_tells_its_own_error_in_its_stream(
    gateways: dict[str, str], fake_upstream: str, api: str, path: str
) -> None:
    """Both fail before any output (the script fails each, after a second): the one that
    waited, its status line gone, ends its stream with its protocol's error event (a
    relayed first is answered with the upstream's status; a translated one's stream
    opens within the second, and ends so too)."""
    marker = uuid.uuid4().hex
    url, text = gateways[api], f"{marker} [[slow:1000]] [[error:500]]"

    async def send() -> tuple[int, bytes]:
        async with (
            aiohttp.ClientSession() as session,
            opened(session, url, path, text, marker) as reply,
        ):
            return reply.status, await reply.read()

    answers = await asyncio.gather(send(), send())  # one claims the key, one waits

    streamed = [body for status, body in answers if status == 200]
    assert any(body.startswith(idle(path)) for body in streamed)  # the one that waited
    for body in streamed:
        last = events(path, body).rstrip(b"\n").rsplit(b"\n\n", 1)[-1]
        if path == CHAT:
            assert last.startswith(b'data: {"error":')
        else:
            assert last.startswith(b"event: error\n")
    assert sent_upstream(fake_upstream, marker) == 2


@pytest.mark.parametrize(("api", "path"), PATHS)
async def test_a_waiting_retry_takes_over_from_a_first_whose_client_left(
    gateways: dict[str, str], fake_upstream: str, api: str, path: str
) -> None:
    """A relayed first ends with its client and leaves nothing: the retry relays the
    request itself, in its stream. A translated first goes on: the retry gets its answer."""
    marker = uuid.uuid4().hex
    url, text = gateways[api], f"{marker} {SLOW}"
    async with (
        aiohttp.ClientSession() as session,
        opened(session, url, path, text, marker) as first,
        opened(session, url, path, text, marker) as retry,
    ):
        waited = await kept_alive(path, retry)
        first.connection.close()  # type: ignore[union-attr]
        retried = waited + await retry.read()

    ending = b"data: [DONE]\n\n" if path == CHAT else b'{"type":"message_stop"}\n\n'
    assert retried.endswith(ending)
    assert b"w6" in retried
    relayed = api == "chat" and path == CHAT
    assert sent_upstream(fake_upstream, marker) == (2 if relayed else 1)


@pytest.mark.parametrize(("api", "path"), PATHS)
async def test_a_retry_leaving_while_it_waits_leaves_the_key_as_it_was(
    gateways: dict[str, str], fake_upstream: str, api: str, path: str
) -> None:
    marker = uuid.uuid4().hex
    url, text = gateways[api], f"{marker} {SLOW}"
    async with aiohttp.ClientSession() as session:
        async with opened(session, url, path, text, marker) as first:
            async with opened(session, url, path, text, marker) as retry:
                await kept_alive(path, retry)
                retry.connection.close()  # type: ignore[union-attr]
            original = await first.read()
        async with opened(session, url, path, text, marker) as again:
            replayed = await again.read()

    assert events(path, replayed) == events(path, original)
    assert sent_upstream(fake_upstream, marker) == 1
