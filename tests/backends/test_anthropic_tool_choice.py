"""A Messages ``tool_choice`` as the server behind an Anthropic backend takes it: as it
came to Anthropic and any server not known to be llama.cpp; to llama.cpp, which keeps
only a choice's kind, a named one as ``any`` over that tool alone and ``none`` with no
tools; which server it is, learned from its listing (read by the window discovery, or
asked by the first call that needs it); scripted servers on loopback."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from aiohttp import web

from stateway.backends.anthropic import AnthropicBackend
from stateway.backends.anthropic_tool_choice import as_any
from stateway.backends.upstream_http import UpstreamClient
from stateway.backends.upstream_target import UpstreamTarget
from stateway.core.generation_settings import GenerationSettings
from stateway.core.inference import Delta, InferenceRequest
from stateway.core.items import Item
from tests.backends.conftest import Loopback
from tests.backends.test_model_windows import LLAMA_CPP, LLAMA_CPP_NOW, VLLM
from tests.backends.test_named_choice import LLAMA_SWAP, ROUTER

TOOLS: list[Item] = [
    {"type": "function", "name": "get_weather", "parameters": {"type": "object"}},
    {"type": "function", "name": "get_time", "parameters": {"type": "object"}},
]
NAMED = {"type": "function", "name": "get_time"}
ANTHROPIC = [
    {
        "type": "model",
        "id": "claude-sonnet-4-5",
        "display_name": "Claude Sonnet 4.5",
        "created_at": "2025-09-29T00:00:00Z",
    }
]
ANSWER = {
    "id": "msg_1",
    "type": "message",
    "role": "assistant",
    "model": "m",
    "content": [{"type": "text", "text": "ok"}],
    "stop_reason": "end_turn",
    "usage": {"input_tokens": 3, "output_tokens": 1},
}


class Server:
    """A Messages server: ``listing`` at ``/v1/models`` (an int: that status), a whole
    answer to each ``/v1/messages`` and a count to ``/v1/messages/count_tokens`` (the
    bodies kept); the listings asked, counted."""

    def __init__(self, listing: list[dict[str, Any]] | int) -> None:
        self.listing = listing
        self.listed = 0
        self.bodies: list[dict[str, Any]] = []
        self.gate: asyncio.Event | None = None
        """Set: the listing waits for it."""
        self.asked = asyncio.Event()
        """Set once the listing is asked."""

    async def handle(self, http: web.Request) -> web.StreamResponse:
        if http.path == "/v1/models":
            self.listed += 1
            self.asked.set()
            if self.gate is not None:
                await self.gate.wait()
            if isinstance(self.listing, int):
                error = {"type": "error", "error": {"type": "not_found_error", "message": "no"}}
                return web.json_response(error, status=self.listing)
            return web.json_response({"data": self.listing, "has_more": False})
        self.bodies.append(await http.json())
        if http.path == "/v1/messages/count_tokens":
            return web.json_response({"input_tokens": 7})
        return web.json_response(ANSWER)


async def backend(server: Server, loopback: Loopback) -> AnthropicBackend:
    url = await loopback.serve(server.handle)
    return AnthropicBackend(loopback.adopt(UpstreamClient(UpstreamTarget("up", url))))


def request(choice: str | dict[str, Any] = NAMED) -> InferenceRequest:
    return InferenceRequest(
        model="m",
        instructions=None,
        items=[{"type": "message", "role": "user", "content": "Time?"}],
        settings=GenerationSettings(),
        stream=False,
        tools=TOOLS,
        tool_choice=choice,
    )


async def sent(messages: AnthropicBackend, server: Server, choice: Any = NAMED) -> dict[str, Any]:
    """The body a round with ``choice`` sends."""
    deltas: list[Delta] = [delta async for delta in messages.infer(request(choice))]
    assert deltas
    return server.bodies[-1]


def offered(body: dict[str, Any]) -> list[str]:
    return [tool["name"] for tool in body.get("tools", ())]


@pytest.mark.parametrize("listing", [LLAMA_CPP, LLAMA_CPP_NOW, ROUTER])
async def test_llama_cpp_is_sent_any_with_the_named_tool_alone(
    loopback: Loopback, listing: list[dict[str, Any]]
) -> None:
    server = Server(listing)
    messages = await backend(server, loopback)
    body = await sent(messages, server)
    assert (body["tool_choice"], offered(body)) == ({"type": "any"}, ["get_time"])
    await sent(messages, server)
    assert server.listed == 1  # learned once


async def test_llama_cpp_is_sent_no_tools_for_none(loopback: Loopback) -> None:
    server = Server(LLAMA_CPP_NOW)
    body = await sent(await backend(server, loopback), server, "none")
    assert "tools" not in body
    assert "tool_choice" not in body


@pytest.mark.parametrize("listing", [ANTHROPIC, VLLM, LLAMA_SWAP, []])
@pytest.mark.parametrize(
    ("choice", "wire"),
    [(NAMED, {"type": "tool", "name": "get_time"}), ("none", {"type": "none"})],
)
async def test_other_servers_get_the_choice_as_it_came_and_every_tool(
    loopback: Loopback, listing: list[dict[str, Any]], choice: Any, wire: dict[str, Any]
) -> None:
    """Anthropic's prompt cache begins with the tools: none is dropped where the server
    is not known to need it."""
    server = Server(listing)
    body = await sent(await backend(server, loopback), server, choice)
    assert (body["tool_choice"], offered(body)) == (wire, ["get_weather", "get_time"])


@pytest.mark.parametrize("choice", ["auto", "required"])
async def test_a_choice_llama_cpp_takes_asks_nothing(loopback: Loopback, choice: str) -> None:
    server = Server(LLAMA_CPP_NOW)
    body = await sent(await backend(server, loopback), server, choice)
    assert offered(body) == ["get_weather", "get_time"]
    assert server.listed == 0


async def test_the_listing_the_window_discovery_reads_tells_it(loopback: Loopback) -> None:
    server = Server(LLAMA_CPP_NOW)
    messages = await backend(server, loopback)
    await messages.advertised_windows()
    assert server.listed == 1
    assert (await sent(messages, server))["tool_choice"] == {"type": "any"}
    assert server.listed == 1  # not asked again


@pytest.mark.parametrize("status", [400, 404])
async def test_a_server_without_a_listing_gets_the_choice_as_it_came(
    loopback: Loopback, status: int
) -> None:
    """Nothing tells it is llama.cpp; its refusal is an answer: not asked again."""
    server = Server(status)
    messages = await backend(server, loopback)
    assert (await sent(messages, server))["tool_choice"]["type"] == "tool"
    await sent(messages, server)
    assert server.listed == 1


@pytest.mark.parametrize("status", [429, 503])
async def test_while_the_listing_cannot_be_read_the_choice_goes_as_it_came(
    loopback: Loopback, status: int
) -> None:
    """Not asked again by the next call that needs it, which goes on as the first did
    (asked again after a back-off: test_listed_trait)."""
    server = Server(status)
    messages = await backend(server, loopback)
    assert (await sent(messages, server))["tool_choice"]["type"] == "tool"
    server.listing = LLAMA_CPP_NOW  # up now, but not asked yet
    assert (await sent(messages, server))["tool_choice"]["type"] == "tool"
    assert server.listed == 1
    await messages.advertised_windows()  # the window discovery's listing tells it meanwhile
    assert (await sent(messages, server))["tool_choice"] == {"type": "any"}


async def test_calls_meanwhile_wait_for_the_one_asking(loopback: Loopback) -> None:
    server = Server(LLAMA_CPP_NOW)
    server.gate = asyncio.Event()
    messages = await backend(server, loopback)
    calls = [asyncio.ensure_future(sent(messages, server)) for _ in range(3)]
    async with asyncio.timeout(5):  # a call not asking would leave it unset
        await server.asked.wait()
    server.gate.set()
    bodies = await asyncio.gather(*calls)
    assert [body["tool_choice"] for body in bodies] == [{"type": "any"}] * 3
    assert server.listed == 1


async def test_input_tokens_are_counted_of_the_body_sent(loopback: Loopback) -> None:
    server = Server(LLAMA_CPP_NOW)
    messages = await backend(server, loopback)
    assert await messages.count_tokens(request()) == 7
    assert (server.bodies[-1]["tool_choice"], offered(server.bodies[-1])) == (
        {"type": "any"},
        ["get_time"],
    )


def test_as_any_keeps_a_body_offering_no_tool_of_the_name() -> None:
    tools = [{"name": "get_weather", "input_schema": {"type": "object"}}]
    choice = {"type": "tool", "name": "get_time"}
    body = {"tools": tools, "tool_choice": choice}
    as_any(body, choice)
    assert body == {"tools": tools, "tool_choice": choice}


def test_as_any_keeps_the_parallel_calls_setting() -> None:
    tools = [{"name": "get_time", "input_schema": {"type": "object"}}]
    choice = {"type": "tool", "name": "get_time", "disable_parallel_tool_use": True}
    body = {"tools": tools, "tool_choice": choice}
    as_any(body, choice)
    assert body["tool_choice"] == {"type": "any", "disable_parallel_tool_use": True}
