"""``cache_salt = "tenant"`` on the Chat and Responses backends: the request's salt goes
in the body they send, over a client's own and the backend's ``extra_body``; a backend
without the setting sends none, and a forwarded body keeps the salt the core put in."""

from __future__ import annotations

from contextlib import aclosing
from typing import Any

import orjson
import pytest
from aiohttp import web

from stateway.backends.chat_forwarder import OpenAIChatBackend
from stateway.backends.openai_responses import OpenAIResponsesBackend
from stateway.backends.upstream_http import UpstreamClient
from stateway.backends.upstream_target import UpstreamTarget
from stateway.core.generation_settings import GenerationSettings
from stateway.core.inference import InferenceRequest
from tests.backends.conftest import Loopback

CHAT_ANSWER = {
    "choices": [{"index": 0, "message": {"role": "assistant", "content": "hi"}}],
}
RESPONSES_ANSWER = {
    "id": "resp_1",
    "status": "completed",
    "output": [
        {
            "type": "message",
            "role": "assistant",
            "content": [{"type": "output_text", "text": "hi"}],
        }
    ],
}


def request(salt: str | None, **settings: Any) -> InferenceRequest:
    user = {"type": "message", "role": "user", "content": [{"type": "input_text", "text": "x"}]}
    return InferenceRequest(
        model="m",
        instructions=None,
        items=[user],
        settings=GenerationSettings(**settings),
        stream=False,
        cache_salt=salt,
    )


async def sent_body(
    loopback: Loopback,
    api: str,
    inference: InferenceRequest,
    *,
    salted: bool,
    extra_body: dict[str, Any] | None = None,
) -> dict[str, Any]:
    received: list[bytes] = []

    async def answer(incoming: web.Request) -> web.Response:
        received.append(await incoming.read())
        return web.json_response(CHAT_ANSWER if api == "chat" else RESPONSES_ANSWER)

    url = await loopback.serve(answer)
    target = UpstreamTarget("vllm", url, extra_body=extra_body or {})
    client = loopback.adopt(UpstreamClient(target))
    backend: OpenAIChatBackend | OpenAIResponsesBackend
    if api == "chat":
        backend = OpenAIChatBackend(client, cache_salted=salted)
    else:
        backend = OpenAIResponsesBackend(client, cache_salted=salted)
    assert backend.cache_salted is salted
    async with aclosing(backend.infer(inference)) as deltas:
        async for _ in deltas:
            pass
    [raw] = received
    body: dict[str, Any] = orjson.loads(raw)
    return body


@pytest.mark.parametrize("api", ["chat", "responses"])
async def test_a_salted_backend_sends_the_requests_salt(loopback: Loopback, api: str) -> None:
    body = await sent_body(loopback, api, request("s-acme"), salted=True)
    assert body["cache_salt"] == "s-acme"


@pytest.mark.parametrize("api", ["chat", "responses"])
async def test_a_backend_without_the_setting_sends_no_salt(loopback: Loopback, api: str) -> None:
    body = await sent_body(loopback, api, request("s-acme"), salted=False)
    assert "cache_salt" not in body


@pytest.mark.parametrize("api", ["chat", "responses"])
async def test_a_salted_backend_given_no_salt_sends_none(loopback: Loopback, api: str) -> None:
    """A gateway without salts (built without the server key) adds nothing: no
    ``"cache_salt": null`` over the backend's ``extra_body``."""
    body = await sent_body(loopback, api, request(None), salted=True)
    assert "cache_salt" not in body
    extra = {"cache_salt": "operator"}
    body = await sent_body(loopback, api, request(None), salted=True, extra_body=extra)
    assert body["cache_salt"] == "operator"


@pytest.mark.parametrize("api", ["chat", "responses"])
async def test_the_tenants_salt_wins_over_extra_body(loopback: Loopback, api: str) -> None:
    extra = {"cache_salt": "operator", "top_k": 5}
    body = await sent_body(loopback, api, request("s-acme"), salted=True, extra_body=extra)
    assert (body["cache_salt"], body["top_k"]) == ("s-acme", 5)


async def test_the_tenants_salt_wins_over_a_chat_clients_own(loopback: Loopback) -> None:
    """A translated Chat request's vendor fields reach a Chat upstream, but not its salt."""
    inference = request("s-acme", vendor_fields={"cache_salt": "mine", "min_p": 0.1})
    body = await sent_body(loopback, "chat", inference, salted=True)
    assert (body["cache_salt"], body["min_p"]) == ("s-acme", 0.1)


async def test_a_forwarded_body_keeps_the_salt_over_extra_body(loopback: Loopback) -> None:
    """The fast path's body is salted by the core; re-encoded by the backend (to fill in
    its ``extra_body``), it keeps that salt."""
    received: list[bytes] = []

    async def answer(incoming: web.Request) -> web.Response:
        received.append(await incoming.read())
        return web.json_response(CHAT_ANSWER)

    url = await loopback.serve(answer)
    target = UpstreamTarget("vllm", url, extra_body={"cache_salt": "operator", "top_k": 5})
    backend = OpenAIChatBackend(loopback.adopt(UpstreamClient(target)), cache_salted=True)
    relay = await backend.forward_chat(
        b'{"model": "m", "messages": [], "cache_salt": "s-acme"}',
        orjson.loads(b'{"model": "m", "messages": [], "cache_salt": "s-acme"}'),
    )
    await relay.aclose()
    assert orjson.loads(received[0]) == {
        "model": "m",
        "messages": [],
        "cache_salt": "s-acme",
        "top_k": 5,
    }
