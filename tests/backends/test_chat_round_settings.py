"""What a Chat backend's settings change in the body of each round it sends its server:
``alternate_roles`` (a run of user messages made one), ``reasoning_efforts`` (an effort
the server does not take sent at the nearest it does), ``max_tokens_field``,
``thinking_switch`` (the effort's thinking in ``chat_template_kwargs``, on the fast path
too). The functions that build them are tested alone; this is their wiring through
``ChatBackend.infer`` and ``forward_chat``."""

from __future__ import annotations

from contextlib import aclosing
from typing import Any

import orjson

from stateway.core.backend import Backend
from stateway.core.generation_settings import GenerationSettings
from stateway.core.inference import InferenceRequest
from tests.backends.conftest import Loopback
from tests.backends.test_tool_call_content import USER, Server


async def sent(backend: Backend, server: Server, settings: GenerationSettings) -> dict[str, Any]:
    """The body of one round of two user messages in a row, as the server got it."""
    request = InferenceRequest(
        model="m", instructions=None, items=[USER, USER], settings=settings, stream=False
    )
    async with aclosing(backend.infer(request)) as deltas:
        _ = [delta async for delta in deltas]
    return server.bodies[-1]


async def test_a_round_goes_with_the_backend_s_settings_applied(loopback: Loopback) -> None:
    server = Server(loopback)
    backend = await server.backend(
        alternate_roles=True,
        reasoning_efforts=["low", "high"],
        max_tokens_field="max_completion_tokens",
        thinking_switch="enable_thinking",
    )
    settings = GenerationSettings(reasoning_effort="minimal", max_output_tokens=64)
    body = await sent(backend, server, settings)

    assert [m["role"] for m in body["messages"]] == ["user"]  # the two made one
    assert body["reasoning_effort"] == "low"
    assert body["max_completion_tokens"] == 64
    assert "max_tokens" not in body
    assert body["chat_template_kwargs"] == {"enable_thinking": True}


async def test_thinking_disabled_switches_it_off_whatever_the_effort(loopback: Loopback) -> None:
    server = Server(loopback)
    backend = await server.backend(thinking_switch="enable_thinking")
    settings = GenerationSettings(reasoning_effort="high", reasoning_disabled=True)
    body = await sent(backend, server, settings)

    assert body["chat_template_kwargs"] == {"enable_thinking": False}


async def test_a_round_goes_as_built_without_those_settings(loopback: Loopback) -> None:
    server = Server(loopback)
    backend = await server.backend()
    settings = GenerationSettings(reasoning_effort="minimal", max_output_tokens=64)
    body = await sent(backend, server, settings)

    assert [m["role"] for m in body["messages"]] == ["user", "user"]
    assert body["reasoning_effort"] == "minimal"
    assert body["max_tokens"] == 64
    assert "chat_template_kwargs" not in body


async def forwarded(backend: Backend, server: Server, fields: dict[str, Any]) -> bytes:
    """``fields`` sent on the fast path (spaced, as a client may write them): the bytes
    the server got."""
    body = orjson.dumps(fields, option=orjson.OPT_INDENT_2)
    relay = await backend.forward_chat(body, orjson.loads(body))  # type: ignore[attr-defined]
    await relay.aclose()
    return server.sent[-1]


async def test_the_fast_path_switches_thinking_as_the_effort_asks(loopback: Loopback) -> None:
    """A body asking for an effort gets the switch set as the effort asks; one asking
    none goes as the very bytes the client sent, its own template flags among them."""
    server = Server(loopback)
    backend = await server.backend(thinking_switch="enable_thinking")
    user = {"role": "user", "content": "hi"}
    for effort, asked in (("high", True), ("none", False)):
        fields = {"model": "m", "messages": [user], "reasoning_effort": effort}
        sent = orjson.loads(await forwarded(backend, server, fields))
        assert sent == {**fields, "chat_template_kwargs": {"enable_thinking": asked}}
    own = {"model": "m", "messages": [user], "chat_template_kwargs": {"enable_thinking": False}}
    assert await forwarded(backend, server, own) == orjson.dumps(own, option=orjson.OPT_INDENT_2)
