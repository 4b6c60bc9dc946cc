"""The Chat Completions fast path end to end, against a canned upstream on loopback: the
upstream's bytes come back verbatim (streamed or not), its error status and body pass
through, and a client that leaves closes the upstream request (so does one leaving a
summary or a token count that the upstream works on)."""

from __future__ import annotations

import asyncio
import gzip
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import aiohttp
import orjson
import pytest
from openai import OpenAI
from starlette.types import Receive, Scope, Send

from stateway.fake_upstream.delivery import drop_connection
from tests.e2e.configured import RunningGateway, configured_gateway
from tests.support.mcp_server import serve_app

CANNED_JSON = (
    b'{ "id" : "chatcmpl-canned", "object": "chat.completion", "created": 1,'
    b' "model": "json", "vendor_extra": {"kept": [1, 2.50, null]},\n "choices": [{"index": 0,'
    b' "message": {"role": "assistant", "content": "canned \\u00e9"}, "finish_reason": "stop"}]}'
)
CANNED_FRAMES = [
    b": upstream comment\n\n",
    b'data: {"id":"c","object":"chat.completion.chunk","created":1,"model":"stream",'
    b'"choices":[{"index":0,"delta":{"role":"assistant","content":"a"},"finish_reason":null}]}\n\n',
    b'data: {"id":"c","object":"chat.completion.chunk","created":1,"model":"stream",'
    b'"choices":[{"index":0,"delta":{"content":"b"},"finish_reason":"stop"}],"x":1}\n\n',
    b"data: [DONE]\n\n",
]
TEAPOT = (
    b'{"error": {"message": "short and stout", "type": "teapot", "param": null, "code": "418"}}'
)


class CannedUpstream:
    def __init__(self) -> None:
        self.bodies: list[bytes] = []
        self.headers: list[dict[bytes, bytes]] = []
        """Each request's headers (lower-case names), as its body's."""
        self.left = threading.Event()
        """Set when the client of a ``hang`` request disconnected."""
        self.silent_asked = threading.Event()
        self.silent_left = threading.Event()
        """Set when the client of a ``silent`` request (never answered) disconnected."""

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            return
        raw = b""
        while True:
            message = await receive()
            raw += message.get("body", b"")
            if not message.get("more_body"):
                break
        self.bodies.append(raw)
        self.headers.append(dict(scope["headers"]))
        model = orjson.loads(raw)["model"]
        if model == "silent":
            self.silent_asked.set()
            while (await receive())["type"] != "http.disconnect":
                pass
            self.silent_left.set()
        elif model == "json":
            await _whole(send, 200, CANNED_JSON)
        elif model == "teapot":
            await _whole(send, 418, TEAPOT, [(b"retry-after", b"7")])
        elif model == "cut-body":  # its length declared, half of it sent, then dropped
            length = (b"content-length", str(len(CANNED_JSON)).encode())
            headers = [(b"content-type", b"application/json"), length]
            await send({"type": "http.response.start", "status": 200, "headers": headers})
            half = CANNED_JSON[: len(CANNED_JSON) // 2]
            await send({"type": "http.response.body", "body": half, "more_body": True})
            await drop_connection(send, receive)
        else:
            sse = [(b"content-type", b"text/event-stream")]
            await send({"type": "http.response.start", "status": 200, "headers": sse})
            frames = CANNED_FRAMES if model == "stream" else CANNED_FRAMES[:2]
            for frame in frames:
                await send({"type": "http.response.body", "body": frame, "more_body": True})
            if model == "hang":
                while (await receive())["type"] != "http.disconnect":
                    pass
                self.left.set()
                return
            await send({"type": "http.response.body", "body": b"", "more_body": False})


async def _whole(
    send: Send, status: int, body: bytes, extra: list[tuple[bytes, bytes]] | None = None
) -> None:
    headers = [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())]
    await send(
        {"type": "http.response.start", "status": status, "headers": headers + (extra or [])}
    )
    await send({"type": "http.response.body", "body": body})


class Setup:
    def __init__(self, gateway: RunningGateway, upstream: CannedUpstream) -> None:
        self.gateway = gateway
        self.upstream = upstream


@contextmanager
def canned_gateway(directory: Path) -> Iterator[Setup]:
    """A gateway whose one Chat backend is a :class:`CannedUpstream` (its fast path)."""
    upstream = CannedUpstream()
    with (
        serve_app(upstream, lifespan=False) as base,
        configured_gateway(directory, {"url": base + "/v1", "api": "chat"}) as gateway,
    ):
        yield Setup(gateway, upstream)


@pytest.fixture(scope="module")
def setup(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Setup]:
    with canned_gateway(tmp_path_factory.mktemp("fast")) as running:
        yield running


async def exchange(setup: Setup, body: bytes) -> tuple[int, dict[str, str], bytes]:
    headers = {"Content-Type": "application/json"}
    async with (
        aiohttp.ClientSession() as session,
        session.post(
            setup.gateway.url + "/v1/chat/completions", data=body, headers=headers
        ) as reply,
    ):
        return reply.status, dict(reply.headers), await reply.read()


def sent(model: str, **fields: Any) -> bytes:
    """A body as a client might write it: its own spacing, vendor fields, a message name."""
    body = {"model": model, "messages": [{"role": "user", "content": "hi", "name": "ann"}]}
    return orjson.dumps({**body, **fields}, option=orjson.OPT_INDENT_2)


async def test_a_json_answer_comes_back_byte_for_byte(setup: Setup) -> None:
    body = sent("json", chat_template_kwargs={"enable_thinking": False}, top_k=7, n=2)
    status, headers, answer = await exchange(setup, body)
    assert (status, answer) == (200, CANNED_JSON)
    assert headers["Content-Type"] == "application/json"
    assert setup.upstream.bodies[-1] == body  # untouched: the very bytes the client sent


async def test_a_compressed_body_goes_upstream_decoded(setup: Setup) -> None:
    """A body the client compressed goes upstream as the JSON it decodes to, with no
    ``Content-Encoding`` and its own length: the fast path's bytes are the decoded ones."""
    body = sent("json", top_k=7)
    headers = {"Content-Type": "application/json", "Content-Encoding": "gzip"}
    async with (
        aiohttp.ClientSession() as session,
        session.post(
            setup.gateway.url + "/v1/chat/completions", data=gzip.compress(body), headers=headers
        ) as reply,
    ):
        assert (reply.status, await reply.read()) == (200, CANNED_JSON)
    assert setup.upstream.bodies[-1] == body
    asked = setup.upstream.headers[-1]
    assert b"content-encoding" not in asked
    assert asked[b"content-length"] == str(len(body)).encode()


async def test_a_stream_comes_back_byte_for_byte(setup: Setup) -> None:
    status, headers, answer = await exchange(setup, sent("stream", stream=True))
    assert (status, answer) == (200, b"".join(CANNED_FRAMES))
    assert headers["Content-Type"] == "text/event-stream"
    # as a translated stream's: a proxy in front (nginx) relays its events as they come
    named = {name.lower(): value for name, value in headers.items()}
    assert (named["cache-control"], named["x-accel-buffering"]) == ("no-cache", "no")


async def test_an_upstream_error_passes_through(setup: Setup) -> None:
    status, headers, answer = await exchange(setup, sent("teapot"))
    assert (status, answer, headers["Retry-After"]) == (418, TEAPOT, "7")


async def test_a_body_cut_part_way_is_a_502_before_a_byte_of_it(setup: Setup) -> None:
    """An upstream that declared its body's length and dropped the connection half-way
    through it: a 200 body that is no event stream is read whole before it is relayed
    (:mod:`stateway.backends.upstream_relay`), so the client gets a 502 in the OpenAI
    shape naming the backend, not a 200 cut short, and the gateway logs no ASGI server's
    error about a response shorter than its ``Content-Length``."""
    logged = setup.gateway.log.read_text()
    headers = {"Content-Type": "application/json"}
    async with (
        aiohttp.ClientSession() as session,
        session.post(
            setup.gateway.url + "/v1/chat/completions", data=sent("cut-body"), headers=headers
        ) as reply,
    ):
        assert reply.status == 502
        error = (await reply.json())["error"]
    assert error["code"] == "upstream_stream_cut"
    assert "'default'" in error["message"]
    await asyncio.sleep(0.5)  # the gateway's log lines about it are written
    new = setup.gateway.log.read_text()[len(logged) :]
    assert "ERROR" not in new, new
    assert "Traceback" not in new, new


def test_the_sdk_parses_relayed_answers(setup: Setup) -> None:
    with OpenAI(base_url=setup.gateway.url + "/v1", api_key="k", max_retries=0) as sdk:
        completion = sdk.chat.completions.create(
            model="json", messages=[{"role": "user", "content": "x"}]
        )
        assert completion.choices[0].message.content == "canned é"
        assert (completion.model_extra or {})["vendor_extra"] == {"kept": [1, 2.5, None]}
        chunks = list(
            sdk.chat.completions.create(
                model="stream", messages=[{"role": "user", "content": "x"}], stream=True
            )
        )
        assert "".join(c.choices[0].delta.content or "" for c in chunks) == "ab"


async def test_a_client_that_leaves_closes_the_upstream_request(setup: Setup) -> None:
    headers = {"Content-Type": "application/json"}
    async with (
        aiohttp.ClientSession() as session,
        session.post(
            setup.gateway.url + "/v1/chat/completions",
            data=sent("hang", stream=True),
            headers=headers,
        ) as reply,
    ):
        assert reply.status == 200
        first = await reply.content.readuntil(b"\n\n")
        assert first == CANNED_FRAMES[0]
        reply.connection.close()  # type: ignore[union-attr]
    assert await asyncio.to_thread(setup.upstream.left.wait, 30)


@pytest.mark.parametrize(
    ("path", "body"),
    [
        ("/v1/chat/completions", sent("silent")),
        ("/v1/responses/compact", b'{"model": "silent", "input": "hi"}'),
        ("/v1/responses/input_tokens", b'{"model": "silent", "input": "hi"}'),
    ],
)
async def test_a_client_that_leaves_before_the_upstream_answers_closes_its_request(
    setup: Setup, path: str, body: bytes
) -> None:
    """A non-streamed answer's status line comes with its whole body: a client that gives
    up while the model works closes the upstream request (no relay exists yet), as does
    one giving up on a summary (``/compact``) or a count of its input."""
    setup.upstream.silent_asked.clear()
    setup.upstream.silent_left.clear()
    headers = {"Content-Type": "application/json"}
    async with aiohttp.ClientSession() as session:
        request = session.post(setup.gateway.url + path, data=body, headers=headers)
        asking = asyncio.ensure_future(request.__aenter__())
        assert await asyncio.to_thread(setup.upstream.silent_asked.wait, 30)
        asking.cancel()  # the client gives up: its connection is closed
    assert await asyncio.to_thread(setup.upstream.silent_left.wait, 30)
