"""The upstream key never leaves through upstream text: error bodies, mid-stream errors."""

from __future__ import annotations

import base64
from typing import Any

import orjson
import pytest
from aiohttp import web

from stateway.backends.chat_forwarder import OpenAIChatBackend
from stateway.backends.openai_responses import OpenAIResponsesBackend
from stateway.backends.upstream_http import UpstreamClient
from stateway.backends.upstream_target import UpstreamTarget
from stateway.core.errors import UpstreamError
from stateway.core.generation_settings import GenerationSettings
from stateway.core.inference import InferenceRequest
from stateway.redaction import MASK
from tests.backends.conftest import Loopback
from tests.test_redaction import KEY, reveals


def inference(stream: bool) -> InferenceRequest:
    item = {"type": "message", "role": "user", "content": [{"type": "input_text", "text": "hi"}]}
    return InferenceRequest("m", None, [item], GenerationSettings(), stream)


async def run(backend: OpenAIChatBackend | OpenAIResponsesBackend, stream: bool) -> None:
    async for _ in backend.infer(inference(stream)):
        pass


def leak() -> str:
    return f"key {KEY.lower()} (starts {KEY[:12]}) is not allowed"


@pytest.mark.parametrize("as_json", [True, False])
@pytest.mark.parametrize("status", [400, 429, 500, 503])
async def test_error_bodies_are_scrubbed(loopback: Loopback, as_json: bool, status: int) -> None:
    async def echoes_the_key(request: web.Request) -> web.Response:
        assert request.headers["Authorization"] == f"Bearer {KEY}"
        if as_json:
            body = {"error": {"message": leak(), "code": KEY[:10]}}
            return web.json_response(body, status=status)
        return web.Response(text=leak(), status=status)

    client = loopback.adopt(
        UpstreamClient(UpstreamTarget("up", await loopback.serve(echoes_the_key), KEY))
    )
    with pytest.raises(UpstreamError) as caught:
        await run(OpenAIChatBackend(client), stream=False)
    assert MASK in caught.value.message
    assert not reveals(caught.value.message)
    assert not reveals(str(caught.value.code))


@pytest.mark.parametrize("echoed", ["password", "basic"])
async def test_a_password_in_the_url_is_scrubbed_from_error_bodies(
    loopback: Loopback, echoed: str
) -> None:
    """A URL's password is sent as Basic credentials: a proxy echoing them, as sent or
    decoded, reveals no more than one echoing a configured key."""
    password = "Pw-Kq7Mw2Zx9Lp4Rt6"

    async def echoes_the_credentials(request: web.Request) -> web.Response:
        sent = request.headers["Authorization"]
        assert sent == "Basic " + base64.b64encode(f"proxy:{password}".encode()).decode()
        said = sent if echoed == "basic" else f"user proxy, password {password.lower()}"
        return web.json_response({"error": {"message": f"refused {said}"}}, status=407)

    url = await loopback.serve(echoes_the_credentials)
    url = url.replace("http://", f"http://proxy:{password}@", 1)
    client = loopback.adopt(UpstreamClient(UpstreamTarget("up", url)))
    with pytest.raises(UpstreamError) as caught:
        await run(OpenAIChatBackend(client), stream=False)
    assert MASK in caught.value.message
    basic = base64.b64encode(f"proxy:{password}".encode()).decode()
    assert not reveals(caught.value.message, password)
    assert not reveals(caught.value.message, basic)


def chat_stream() -> bytes:
    chunk = {"choices": [{"index": 0, "delta": {"content": "hel"}}]}
    return b"data: %s\n\ndata: %s\n\n" % (
        orjson.dumps(chunk),
        orjson.dumps({"error": {"message": leak()}}),
    )


def responses_stream(kind: str) -> bytes:
    event: dict[str, Any] = {"type": "error", "message": leak()}
    if kind == "response.failed":
        event = {"type": kind, "response": {"error": {"message": leak()}}}
    return b"data: " + orjson.dumps(event) + b"\n\n"


@pytest.mark.parametrize(
    "wire", ["chat", "chat-whole", "error", "response.failed", "failed-object"]
)
async def test_upstream_failures_reported_in_the_body_are_scrubbed(
    loopback: Loopback, wire: str
) -> None:
    async def fails_in_the_body(request: web.Request) -> web.Response:
        if wire == "chat":
            return web.Response(body=chat_stream(), content_type="text/event-stream")
        if wire == "failed-object":
            return web.json_response({"status": "failed", "error": {"message": leak()}})
        if wire == "chat-whole":
            return web.json_response({"error": {"message": leak(), "code": KEY[:10]}})
        return web.Response(body=responses_stream(wire), content_type="text/event-stream")

    client = loopback.adopt(
        UpstreamClient(UpstreamTarget("up", await loopback.serve(fails_in_the_body), KEY))
    )
    chat = wire.startswith("chat")
    backend = OpenAIChatBackend(client) if chat else OpenAIResponsesBackend(client)
    with pytest.raises(UpstreamError) as caught:
        await run(backend, stream=wire not in ("failed-object", "chat-whole"))
    assert MASK in caught.value.message
    assert not reveals(caught.value.message)
    assert not reveals(str(caught.value.code))


@pytest.mark.parametrize("status", [200, 401])
async def test_a_relayed_answer_is_scrubbed_byte_for_byte(loopback: Loopback, status: int) -> None:
    """The Chat fast path relays bytes: the key is masked in them, everything else (UTF-8
    included) comes through as sent, and the upstream's length, which masking changes, is
    not passed on."""
    held = "error" if status == 401 else "choices"  # a 200 error alone is the error
    template = '{{"' + held + '": {{"message": "{}"}}, "note": "café ✓"}}'
    sent = template.format(leak()).encode()

    async def echoes_the_key(request: web.Request) -> web.Response:
        return web.Response(body=sent, status=status, content_type="application/json")

    client = loopback.adopt(
        UpstreamClient(UpstreamTarget("up", await loopback.serve(echoes_the_key), KEY))
    )
    relay = await client.relay("/chat/completions", b"{}")
    relayed = b"".join([chunk async for chunk in relay.chunks()])
    await relay.aclose()

    assert relay.status == status
    assert "content-length" not in relay.headers
    assert relayed == template.format(f"key {MASK} (starts {MASK}) is not allowed").encode()


async def test_a_relayed_answer_without_the_key_is_relayed_unchanged(loopback: Loopback) -> None:
    sent = '{"choices": [{"message": {"content": "café ✓ sk-other"}}]}'.encode()

    async def answers(request: web.Request) -> web.Response:
        return web.Response(body=sent, content_type="application/json")

    client = loopback.adopt(
        UpstreamClient(UpstreamTarget("up", await loopback.serve(answers), KEY))
    )
    relay = await client.relay("/chat/completions", b"{}")
    assert b"".join([chunk async for chunk in relay.chunks()]) == sent
    await relay.aclose()


async def test_a_relayed_whole_answer_reporting_an_error_is_raised_scrubbed(
    loopback: Loopback,
) -> None:
    """A 200 that is an error alone is raised, not relayed (no answer a client could read):
    its words masked as a translated request's are."""

    async def echoes_the_key(request: web.Request) -> web.Response:
        body = {"error": {"message": leak(), "code": KEY[:10]}}
        return web.json_response(body)

    client = loopback.adopt(
        UpstreamClient(UpstreamTarget("up", await loopback.serve(echoes_the_key), KEY))
    )
    relay = await client.relay("/chat/completions", b"{}")
    try:
        with pytest.raises(UpstreamError) as caught:
            await anext(relay.chunks())
    finally:
        await relay.aclose()
    assert MASK in caught.value.message
    assert not reveals(caught.value.message)
    assert not reveals(str(caught.value.code))
