"""A Chat Completions request sent with an ``Idempotency-Key`` keeps the fast path, end to
end: the real ``stateway serve`` before a canned upstream (the one of
:mod:`tests.e2e.test_chat_fast_path`, which keeps each body as its bytes) and before the
fake upstream (its scripted cuts). The key changes nothing of what the model is asked
(vendor fields and all, ``n: 2`` too), nor of the first answer's bytes; a retry gets
those bytes without asking the upstream again, whole or streamed, unless the relay ended
badly (an upstream error status, a stream cut or failed part-way, a client that left):
then nothing is remembered and the retry is relayed again."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Iterator
from typing import Any

import aiohttp
import orjson
import pytest

from tests.e2e.test_chat_fast_path import (
    CANNED_FRAMES,
    CANNED_JSON,
    TEAPOT,
    Setup,
    canned_gateway,
)
from tests.e2e.test_upstream_mapping import upstream_requests

CHAT = "/v1/chat/completions"


@pytest.fixture(scope="module")
def setup(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Setup]:
    with canned_gateway(tmp_path_factory.mktemp("keyed")) as running:
        yield running


@pytest.fixture
def chat_gateway(gateways: Any) -> str:
    """The shared gateway before the fake upstream, speaking Chat Completions to it: a
    plain Chat backend, whose requests take the fast path."""
    url: str = gateways("sqlite-chat")
    return url


async def exchange(url: str, body: bytes, key: str | None) -> tuple[int, bytes]:
    headers = {"Content-Type": "application/json"}
    if key is not None:
        headers["Idempotency-Key"] = key
    async with (
        aiohttp.ClientSession() as session,
        session.post(url + CHAT, data=body, headers=headers) as reply,
    ):
        return reply.status, await reply.read()


def sent(model: str, marker: str, **fields: Any) -> bytes:
    """A body as a client might write it: its own spacing, vendor fields, a message name."""
    message = {"role": "user", "content": f"hi {marker}", "name": "ann"}
    body = {"model": model, "messages": [message], **fields}
    return orjson.dumps(body, option=orjson.OPT_INDENT_2)


def asked(setup: Setup, marker: str) -> list[bytes]:
    return [body for body in setup.upstream.bodies if marker.encode() in body]


VENDOR = {"chat_template_kwargs": {"enable_thinking": False}, "top_k": 7, "n": 2, "logprobs": True}


@pytest.mark.parametrize("stream", [False, True])
async def test_a_keyed_request_is_relayed_as_an_unkeyed_one(setup: Setup, stream: bool) -> None:
    marker = uuid.uuid4().hex
    model = "stream" if stream else "json"
    body = sent(model, marker, stream=stream, **VENDOR)

    unkeyed = await exchange(setup.gateway.url, body, None)
    keyed = await exchange(setup.gateway.url, body, marker)

    canned = b"".join(CANNED_FRAMES) if stream else CANNED_JSON
    assert unkeyed == keyed == (200, canned)  # n: 2 is the upstream's to judge, not a 400
    assert asked(setup, marker) == [body, body]  # the very bytes the client sent, twice


@pytest.mark.parametrize("stream", [False, True])
async def test_a_retry_gets_the_first_answers_bytes_without_asking_again(
    setup: Setup, stream: bool
) -> None:
    marker = uuid.uuid4().hex
    body = sent("stream" if stream else "json", marker, stream=stream, top_k=3)

    answers = [await exchange(setup.gateway.url, body, marker) for _ in range(3)]

    canned = b"".join(CANNED_FRAMES) if stream else CANNED_JSON
    assert answers == [(200, canned)] * 3
    assert len(asked(setup, marker)) == 1


async def test_retries_arriving_meanwhile_wait_for_the_first(setup: Setup) -> None:
    marker = uuid.uuid4().hex
    body = sent("stream", marker, stream=True)

    answers = await asyncio.gather(*(exchange(setup.gateway.url, body, marker) for _ in range(10)))

    assert set(answers) == {(200, b"".join(CANNED_FRAMES))}
    assert len(asked(setup, marker)) == 1


async def test_an_upstream_error_is_relayed_and_not_remembered(setup: Setup) -> None:
    marker = uuid.uuid4().hex
    body = sent("teapot", marker)

    answers = [await exchange(setup.gateway.url, body, marker) for _ in range(2)]

    assert answers == [(418, TEAPOT)] * 2
    assert len(asked(setup, marker)) == 2


async def test_a_client_that_leaves_closes_the_upstream_request_and_leaves_nothing(
    setup: Setup,
) -> None:
    """Unlike a translated keyed run, which goes on for its retry: a relayed answer is the
    client's connection to the upstream's, and ends with it."""
    marker = uuid.uuid4().hex
    setup.upstream.left.clear()
    headers = {"Content-Type": "application/json", "Idempotency-Key": marker}
    async with (
        aiohttp.ClientSession() as session,
        session.post(
            setup.gateway.url + CHAT, data=sent("hang", marker, stream=True), headers=headers
        ) as reply,
    ):
        assert await reply.content.readuntil(b"\n\n") == CANNED_FRAMES[0]
        reply.connection.close()  # type: ignore[union-attr]
    assert await asyncio.to_thread(setup.upstream.left.wait, 30)
    setup.upstream.left.clear()

    body = sent("stream", marker, stream=True)  # another request: the key was let go
    assert await exchange(setup.gateway.url, body, marker) == (200, b"".join(CANNED_FRAMES))


@pytest.mark.parametrize("script", ["[[cut:2]]", "[[fail:2]]", "[[error:500]]"])
async def test_a_relay_that_ended_badly_is_not_remembered(
    chat_gateway: str, fake_upstream: str, script: str
) -> None:
    marker = uuid.uuid4().hex
    body = sent("fake-model", f"{marker} [[words:6]] {script}", stream=True)

    first = await exchange(chat_gateway, body, marker)
    second = await exchange(chat_gateway, body, marker)

    if script == "[[error:500]]":
        assert first[0] == second[0] == 500
    else:  # relayed part-way, then the relay's error line
        assert first[0] == second[0] == 200
        assert first[1].rstrip().rsplit(b"\n\n", 1)[-1].startswith(b'data: {"error"')
    relayed = [r for r in upstream_requests(fake_upstream) if marker in str(r["body"])]
    assert len(relayed) == 2
    assert relayed[0]["body"] == orjson.loads(body)  # relayed untouched, name and all
