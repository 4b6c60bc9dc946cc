"""A named ``tool_choice`` as each Chat server takes it: as named to vLLM, SGLang and
hosted OpenAI, as ``required`` over the named function alone to llama.cpp, which reads a
named one as ``auto``, and to any server not known to force it; which server it is,
learned from its listing (read by the window discovery, or asked by the first call naming
a function); whether it takes custom tools as sent (hosted OpenAI alone); scripted servers
on loopback."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from aiohttp import web

from stateway.backends.chat_forwarder import OpenAIChatBackend
from stateway.backends.named_choice import as_required
from stateway.backends.upstream_http import UpstreamClient
from stateway.backends.upstream_target import UpstreamTarget
from stateway.core.generation_settings import GenerationSettings
from stateway.core.inference import Delta, InferenceRequest
from stateway.core.items import Item
from tests.backends.conftest import Loopback
from tests.backends.test_model_windows import LLAMA_CPP, LLAMA_CPP_NOW, OPENAI, SGLANG, VLLM

ROUTER = [  # llama-server's router mode: a model not loaded has no ``meta``
    {"id": "qwen3-8b", "object": "model", "owned_by": "llamacpp", "status": {"value": "unloaded"}}
]
TOOLS: list[Item] = [
    {"type": "function", "name": "get_weather", "parameters": {"type": "object"}},
    {"type": "function", "name": "get_time", "parameters": {"type": "object"}},
]
LLAMA_SWAP = [  # a proxy in front of llama-server: its models listed as its own
    {"id": "qwen3-8b", "object": "model", "created": 1764547200, "owned_by": "llama-swap"}
]
OLLAMA = [{"id": "qwen3:8b", "object": "model", "created": 1764547200, "owned_by": "library"}]
VLLM_OWNED = [{"id": "qwen3-8b", "object": "model", "owned_by": "vllm"}]
NAMED = {"type": "function", "name": "get_time"}
ANSWER = {
    "id": "c",
    "object": "chat.completion",
    "model": "m",
    "choices": [
        {"index": 0, "message": {"role": "assistant", "content": "ok"}, "finish_reason": "stop"}
    ],
}


class Server:
    """A Chat server: ``listing`` at ``/v1/models`` (an int: that status), a whole answer
    to each ``/v1/chat/completions`` (its bodies kept), a count at ``/tokenize``; the
    listings asked, counted."""

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
                return web.json_response({"error": {"message": "no"}}, status=self.listing)
            return web.json_response({"object": "list", "data": self.listing})
        self.bodies.append(await http.json())
        if http.path == "/tokenize":
            return web.json_response({"count": 7, "tokens": [], "max_model_len": 100})
        return web.json_response(ANSWER)


async def backend(server: Server, loopback: Loopback) -> OpenAIChatBackend:
    url = await loopback.serve(server.handle)
    return OpenAIChatBackend(loopback.adopt(UpstreamClient(UpstreamTarget("up", url))))


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


async def sent(chat: OpenAIChatBackend, server: Server, choice: Any = NAMED) -> dict[str, Any]:
    """The body a round with ``choice`` sends."""
    deltas: list[Delta] = [delta async for delta in chat.infer(request(choice))]
    assert deltas
    return server.bodies[-1]


def offered(body: dict[str, Any]) -> list[str]:
    return [tool["function"]["name"] for tool in body["tools"]]


@pytest.mark.parametrize("listing", [LLAMA_CPP, LLAMA_CPP_NOW, ROUTER, LLAMA_SWAP, OLLAMA, []])
async def test_llama_cpp_and_unknown_servers_are_sent_required_with_the_function_alone(
    loopback: Loopback, listing: list[dict[str, Any]]
) -> None:
    server = Server(listing)
    chat = await backend(server, loopback)
    assert not chat.takes_named_choice  # not known before it is asked
    body = await sent(chat, server)
    assert (body["tool_choice"], offered(body)) == ("required", ["get_time"])
    await sent(chat, server)
    assert server.listed == 1  # learned once
    assert not chat.takes_named_choice


@pytest.mark.parametrize("listing", [VLLM, SGLANG, OPENAI, VLLM_OWNED])
async def test_servers_known_to_force_it_get_the_choice_named_and_every_tool(
    loopback: Loopback, listing: list[dict[str, Any]]
) -> None:
    server = Server(listing)
    chat = await backend(server, loopback)
    body = await sent(chat, server)
    assert body["tool_choice"] == {"type": "function", "function": {"name": "get_time"}}
    assert offered(body) == ["get_weather", "get_time"]
    assert chat.takes_named_choice


@pytest.mark.parametrize("choice", ["auto", "required", "none"])
async def test_a_call_naming_no_function_asks_nothing(loopback: Loopback, choice: str) -> None:
    server = Server(LLAMA_CPP_NOW)
    chat = await backend(server, loopback)
    body = await sent(chat, server, choice)
    assert (body["tool_choice"], offered(body)) == (choice, ["get_weather", "get_time"])
    assert server.listed == 0


async def test_the_listing_the_window_discovery_reads_tells_it(loopback: Loopback) -> None:
    server = Server(LLAMA_CPP_NOW)
    chat = await backend(server, loopback)
    await chat.advertised_windows()
    assert server.listed == 1
    assert (await sent(chat, server))["tool_choice"] == "required"
    assert server.listed == 1  # not asked again


@pytest.mark.parametrize("status", [400, 404])
async def test_a_server_without_a_listing_is_sent_required(loopback: Loopback, status: int) -> None:
    """Nothing tells it forces a named choice; its refusal is an answer: not asked again."""
    server = Server(status)
    chat = await backend(server, loopback)
    body = await sent(chat, server)
    assert (body["tool_choice"], offered(body)) == ("required", ["get_time"])
    await sent(chat, server)
    assert server.listed == 1
    assert not chat.takes_named_choice


@pytest.mark.parametrize("status", [429, 503])
async def test_while_the_listing_cannot_be_read_the_choice_is_forced_as_required(
    loopback: Loopback, status: int
) -> None:
    """Forced whatever the server; not asked again by the next call naming a function,
    which goes on as the first did (asked again after a back-off: test_listed_trait)."""
    server = Server(status)
    chat = await backend(server, loopback)
    body = await sent(chat, server)
    assert (body["tool_choice"], offered(body)) == ("required", ["get_time"])
    assert not chat.takes_named_choice
    server.listing = VLLM  # up now, but not asked yet
    assert (await sent(chat, server))["tool_choice"] == "required"
    assert server.listed == 1
    await chat.advertised_windows()  # the window discovery's listing tells it meanwhile
    assert (await sent(chat, server))["tool_choice"]["function"] == {"name": "get_time"}
    assert chat.takes_named_choice


async def test_calls_meanwhile_wait_for_the_one_asking(loopback: Loopback) -> None:
    server = Server(LLAMA_CPP_NOW)
    server.gate = asyncio.Event()
    chat = await backend(server, loopback)
    calls = [asyncio.ensure_future(sent(chat, server)) for _ in range(3)]
    await server.asked.wait()
    server.gate.set()
    bodies = await asyncio.gather(*calls)
    assert [body["tool_choice"] for body in bodies] == ["required"] * 3
    assert server.listed == 1


async def test_input_tokens_are_counted_of_the_body_sent(loopback: Loopback) -> None:
    server = Server(LLAMA_CPP_NOW)
    chat = await backend(server, loopback)
    assert await chat.count_tokens(request()) == 7
    assert [tool["function"]["name"] for tool in server.bodies[-1]["tools"]] == ["get_time"]


def test_as_required_keeps_a_body_offering_no_function_of_the_name() -> None:
    tools = [{"type": "function", "function": {"name": "get_weather"}}]
    choice = {"type": "function", "function": {"name": "get_time"}}
    body = {"tools": tools, "tool_choice": choice}
    as_required(body, choice)
    assert body == {"tools": tools, "tool_choice": choice}


@pytest.mark.parametrize(
    "listing", [OPENAI, VLLM, SGLANG, VLLM_OWNED, LLAMA_CPP_NOW, LLAMA_SWAP, OLLAMA, []]
)
async def test_custom_tools_are_taken_as_sent_by_hosted_openai_alone(
    loopback: Loopback, listing: list[dict[str, Any]]
) -> None:
    """vLLM, SGLang and llama.cpp refuse a ``custom`` tool: the fast path translates a
    request declaring one for any server but OpenAI's, and for it until its listing told."""
    server = Server(listing)
    chat = await backend(server, loopback)
    assert not chat.takes_custom_tools
    await sent(chat, server)
    assert not chat.takes_custom_tools  # no call asks it
    await chat.advertised_windows()
    assert chat.takes_custom_tools is (listing is OPENAI)
