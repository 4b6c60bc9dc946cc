"""Request bodies sent compressed (``Content-Encoding``), end to end through the real
``stateway serve`` before the fake upstream: gzip and deflate bodies are served as the
same bodies sent plain, on every route reading one; one whose decoded size passes the
body limit (a small "bomb") is a 413, a corrupt or truncated one a 400, another coding
a 415 naming what is accepted (``Accept-Encoding``), each in the route's own shape."""

from __future__ import annotations

import gzip
import uuid
import zlib
from collections.abc import Callable
from typing import Any

import aiohttp
import orjson
import pytest

from tests.e2e.conftest import MAX_BODY_BYTES
from tests.e2e.test_mcp_surface import ACCEPT, INITIALIZE

MODEL = "fake-model"
OPENAI_SHAPE = {"message", "type", "param", "code"}
ANTHROPIC = {"anthropic-version": "2023-06-01"}


@pytest.fixture
def served(gateways: Callable[[str], str]) -> str:
    """The shared gateway before the fake's Chat wire (its body limit
    :data:`~tests.e2e.conftest.MAX_BODY_BYTES`)."""
    return gateways("sqlite-chat")


def deflated(body: bytes) -> bytes:
    return zlib.compress(body)


def raw_deflated(body: bytes) -> bytes:
    """Deflate without zlib's wrapping, as some clients send ``deflate``."""
    squeezer = zlib.compressobj(wbits=-15)
    return squeezer.compress(body) + squeezer.flush()


CODINGS: list[tuple[str, Callable[[bytes], bytes]]] = [
    ("gzip", gzip.compress),
    ("x-gzip", gzip.compress),
    ("GZip, identity", gzip.compress),
    ("deflate", deflated),
    ("deflate", raw_deflated),
    ("identity, gzip, deflate", lambda body: deflated(gzip.compress(body))),
]


async def post(
    url: str, data: bytes, coding: str | None, headers: dict[str, str] | None = None
) -> tuple[int, dict[str, str], Any]:
    sent = {"Content-Type": "application/json", **(headers or {})}
    if coding is not None:
        sent["Content-Encoding"] = coding
    async with (
        aiohttp.ClientSession() as session,
        session.post(url, data=data, headers=sent) as reply,
    ):
        return reply.status, dict(reply.headers), orjson.loads(await reply.read())


async def get(url: str) -> Any:
    async with aiohttp.ClientSession() as session, session.get(url) as reply:
        assert reply.status == 200, await reply.text()
        return orjson.loads(await reply.read())


@pytest.mark.parametrize(("coding", "encode"), CODINGS)
async def test_a_compressed_response_create_is_served_and_stored(
    served: str, coding: str, encode: Callable[[bytes], bytes]
) -> None:
    marker = uuid.uuid4().hex
    body = orjson.dumps({"model": MODEL, "input": f"hello {marker}", "store": True})
    status, _, created = await post(served + "/v1/responses", encode(body), coding)
    assert status == 200, created
    assert created["status"] == "completed"
    items = await get(f"{served}/v1/responses/{created['id']}/input_items")
    assert items["data"][0]["content"][0]["text"] == f"hello {marker}"


async def test_a_compressed_chat_completion_is_served(served: str) -> None:
    body = orjson.dumps({"model": MODEL, "messages": [{"role": "user", "content": "hi"}]})
    status, _, answer = await post(served + "/v1/chat/completions", gzip.compress(body), "gzip")
    assert status == 200, answer
    assert answer["object"] == "chat.completion"


@pytest.mark.parametrize(("coding", "encode"), [("gzip", gzip.compress), ("deflate", deflated)])
async def test_a_compressed_message_is_served(
    served: str, coding: str, encode: Callable[[bytes], bytes]
) -> None:
    message = {"role": "user", "content": "hi"}
    body = orjson.dumps({"model": MODEL, "max_tokens": 64, "messages": [message]})
    status, _, answer = await post(served + "/v1/messages", encode(body), coding, ANTHROPIC)
    assert status == 200, answer
    assert answer["type"] == "message"


async def test_a_compressed_mcp_request_is_served(served: str) -> None:
    headers = {**ACCEPT, "Content-Type": "application/json", "Content-Encoding": "gzip"}
    data = gzip.compress(orjson.dumps(INITIALIZE))
    async with aiohttp.ClientSession() as session:
        async with session.post(served + "/mcp", data=data, headers=headers) as response:
            answer = await response.text()
            assert response.status == 200, answer
            assert '"serverInfo"' in answer  # its result, streamed as an event
            session_id = response.headers["mcp-session-id"]
        ended = {"mcp-session-id": session_id, "mcp-protocol-version": "2025-11-25"}
        async with session.delete(served + "/mcp", headers=ended) as closed:
            assert closed.status == 200


async def test_a_key_answers_the_same_body_sent_plain_or_compressed(served: str) -> None:
    """The request's fingerprint is its decoded body's: a retry sent compressed (or not,
    where the first was) is the same request, answered once."""
    key = {"Idempotency-Key": uuid.uuid4().hex}
    body = orjson.dumps({"model": MODEL, "input": "once", "store": True})
    first = await post(served + "/v1/responses", body, None, key)
    again = await post(served + "/v1/responses", gzip.compress(body), "gzip", key)
    assert (first[0], again[0]) == (200, 200)
    assert again[2]["id"] == first[2]["id"]


def bomb() -> bytes:
    """A body decoding to ten times the gateway's body limit, a few kilobytes sent."""
    padding = b" " * (10 * MAX_BODY_BYTES)
    return gzip.compress(b'{"model": "fake-model", "input": "hi"' + padding + b"}")


@pytest.mark.parametrize("path", ["/v1/responses", "/v1/chat/completions", "/mcp"])
async def test_a_body_decoding_past_the_limit_is_a_413(served: str, path: str) -> None:
    data = bomb()
    assert len(data) < MAX_BODY_BYTES // 10
    status, _, answer = await post(served + path, data, "gzip")
    assert status == 413
    assert set(answer["error"]) == OPENAI_SHAPE
    assert answer["error"]["code"] == "request_too_large"


async def test_a_message_decoding_past_the_limit_is_a_413_in_anthropic_shape(
    served: str,
) -> None:
    status, _, answer = await post(served + "/v1/messages", bomb(), "gzip", ANTHROPIC)
    assert status == 413
    assert answer["type"] == "error"
    assert answer["error"]["type"] == "request_too_large"


def truncated(body: bytes) -> bytes:
    whole = gzip.compress(body)
    return whole[: len(whole) // 2]


@pytest.mark.parametrize(
    ("coding", "data"),
    [
        ("gzip", b"not gzip at all"),
        ("gzip", truncated(orjson.dumps({"model": MODEL, "input": "hi" * 100}))),
        ("deflate", b"\x78\x9c not deflate"),
        ("gzip", gzip.compress(b"{}") + b"trailing"),
    ],
    ids=["corrupt-gzip", "truncated-gzip", "corrupt-deflate", "gzip-then-garbage"],
)
async def test_a_corrupt_or_truncated_body_is_a_400(served: str, coding: str, data: bytes) -> None:
    status, _, answer = await post(served + "/v1/responses", data, coding)
    assert status == 400, answer
    assert set(answer["error"]) == OPENAI_SHAPE
    assert answer["error"]["code"] == "invalid_json"
    assert coding in answer["error"]["message"]


@pytest.mark.parametrize("path", ["/v1/responses", "/v1/chat/completions", "/mcp"])
async def test_another_coding_is_a_415_naming_what_is_accepted(served: str, path: str) -> None:
    status, headers, answer = await post(served + path, b"\x8b\x00\x80{}\x03", "br")
    assert status == 415
    assert headers["Accept-Encoding"] == "gzip, deflate"
    assert set(answer["error"]) == OPENAI_SHAPE
    assert answer["error"]["code"] == "unsupported_content_encoding"
    assert "'br'" in answer["error"]["message"]
    assert "gzip" in answer["error"]["message"]


async def test_another_coding_is_a_415_in_anthropic_shape(served: str) -> None:
    status, headers, answer = await post(served + "/v1/messages", b"{}", "zstd", ANTHROPIC)
    assert status == 415
    assert headers["Accept-Encoding"] == "gzip, deflate"
    assert answer["type"] == "error"
    assert answer["error"]["type"] == "invalid_request_error"
    assert "'zstd'" in answer["error"]["message"]
