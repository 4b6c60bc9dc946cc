"""Every frontend over every backend, end to end: the real ``stateway serve`` in front of
the real fake upstream speaking each upstream wire, driven by each frontend's official SDK
(``openai`` for Responses and Chat Completions, ``anthropic`` for Messages) and parsed with
the SDKs' own types, streamed and not.

The matrix is frontends {Responses, Chat Completions, Messages} x backends {chat,
responses, anthropic} x {plain text, a client tool round trip, a gateway MCP tool in a
hidden round} x {stream, non-stream}. One gateway serves it all: each upstream wire is a
backend of its own (model ``chat``, ``responses``, ``anthropic``), and again with the MCP
server as its ``gateway_tools`` (model ``chat-hosted`` …) for the Chat and Messages clients,
which cannot declare one; a Responses client declares the ``mcp`` tool in its request.

Every case checks the answer text, the tool call's id and name as the upstream saw them,
usage (summed over a hidden round's two upstream calls), the stop reason in the
frontend's own words, the model named, and that the gateway's tool items never reach a
Chat or Messages client. The fake's usage is exact: input tokens are the words it
received, output tokens one per word or tool call it made. A Chat Completions client of
a Chat upstream without gateway tools takes the fast path (its answer is the upstream's,
relayed); with them, it is translated like every other pair.
"""

from __future__ import annotations

import itertools
import re
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import pytest
from anthropic import Anthropic
from openai import OpenAI

from stateway.launch import start_gateway
from tests.e2e.sdk_conversations import (
    ChatConversation,
    Conversation,
    MessagesConversation,
    ResponsesConversation,
)
from tests.support.mcp_server import serve_mcp

BACKENDS = ("chat", "responses", "anthropic")
FRONTENDS = ("responses", "chat", "messages")

WEATHER = '[[tool:get_weather:{"city":"Oslo"}]]'
CALL_PROMPT = f"{WEATHER} weather? [[echo]]"
"""Calls the client's tool, then (``[[echo]]``) answers with the transcript it received,
which shows the call's name, arguments and id as they reached the upstream."""
ADD_PROMPT = '[[tool:calc__add:{"a":2,"b":3}]][[reason:adding]]'
"""Thinks and calls the gateway's MCP tool ``add`` (server ``calc``); then thinks again and
answers with its result."""

STOP = {
    "responses": ("completed", "completed"),
    "chat": ("stop", "tool_calls"),
    "messages": ("end_turn", "tool_use"),
}
"""Each frontend's word for (answered, a client tool call to answer)."""


CALLED = {"responses": ["function_call"], "chat": ["tool_call"], "messages": ["tool_use"]}
"""What an answer that only calls the client's tool holds, per frontend."""

HIDDEN = {
    "responses": ["mcp_list_tools", "reasoning", "mcp_call", "reasoning", "message"],
    "chat": ["text"],
    "messages": ["thinking", "thinking", "text"],
}
"""What an answer after a hidden round holds, per frontend: only a Responses client sees
the gateway's tool items."""

OBJECT = {"type": "object", "properties": {"city": {"type": "string"}}}
TOOLS: dict[str, Any] = {
    "responses": {"type": "function", "name": "get_weather", "parameters": OBJECT},
    "chat": {"type": "function", "function": {"name": "get_weather", "parameters": OBJECT}},
    "messages": {"name": "get_weather", "description": "weather", "input_schema": OBJECT},
}
MCP_TOOL = {"type": "mcp", "server_label": "calc", "require_approval": "never"}
"""A Responses client's own declaration of the gateway's MCP server."""


@dataclass(frozen=True)
class Clients:
    openai: OpenAI
    anthropic: Anthropic


@pytest.fixture(scope="module")
def clients(fake_upstream: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Clients]:
    directory = tmp_path_factory.mktemp("matrix")
    with serve_mcp() as server:
        config = directory / "stateway.toml"
        config.write_text(matrix_config(fake_upstream, server.url))
        args = ["--config", str(config), "--database", f"sqlite:///{directory / 'gw.db'}"]
        with (
            start_gateway(args) as url,
            OpenAI(base_url=url + "/v1", api_key="k", max_retries=0) as sdk,
            Anthropic(base_url=url, api_key="k", max_retries=0) as claude,
        ):
            yield Clients(sdk, claude)


def matrix_config(upstream: str, mcp_url: str) -> str:
    """The MCP server ``calc``; per upstream wire a backend (model = its name) and one
    offering ``calc`` as its gateway tool (model ``<wire>-hosted``)."""
    text = f'[mcp_servers.calc]\nurl = "{mcp_url}"\n'
    hosted = '[{type = "mcp", server_label = "calc"}]'
    for api in BACKENDS:
        for name, tools in ((api, None), (f"{api}-hosted", hosted)):
            text += f'[[backends]]\nname = "{name}"\nurl = "{upstream}"\napi = "{api}"\n'
            text += f'models = {{"{name}" = "fake-model"}}\n'
            text += f"gateway_tools = {tools}\n" if tools else ""
    return text


@dataclass(frozen=True)
class Case:
    frontend: str
    backend: str
    stream: bool

    def conversation(self, clients: Clients, *, client_tool: bool = False) -> Conversation:
        tools = [TOOLS[self.frontend]] if client_tool else []
        match self.frontend:
            case "responses":
                return ResponsesConversation(clients.openai, self.backend, self.stream, tools)
            case "chat":
                return ChatConversation(clients.openai, self.backend, self.stream, tools)
            case _:
                return MessagesConversation(clients.anthropic, self.backend, self.stream, tools)

    def hosted(self, clients: Clients) -> Conversation:
        """A conversation with the gateway's MCP tool: declared by a Responses client, the
        backend's ``gateway_tools`` for the others."""
        model = self.hosted_model
        match self.frontend:
            case "responses":
                return ResponsesConversation(clients.openai, model, self.stream, [MCP_TOOL])
            case "chat":
                return ChatConversation(clients.openai, model, self.stream, [])
            case _:
                return MessagesConversation(clients.anthropic, model, self.stream, [])

    @property
    def hosted_model(self) -> str:
        return self.backend if self.frontend == "responses" else f"{self.backend}-hosted"

    @property
    def fast_path(self) -> bool:
        """A Chat Completions request to a Chat upstream without gateway tools, relayed
        untouched."""
        return self.frontend == self.backend == "chat"

    def answers_as(self, model: str) -> str:
        """The ``model`` an answer names: the one asked for, but where the fast path relays
        the upstream's own answer (the upstream's name for it)."""
        return "fake-model" if self.fast_path else model


CASES = [
    pytest.param(Case(frontend, backend, stream), id=f"{frontend}-over-{backend}-{mode}")
    for frontend, backend, (stream, mode) in itertools.product(
        FRONTENDS, BACKENDS, ((False, "json"), (True, "stream"))
    )
]


@pytest.mark.parametrize("case", CASES)
def test_plain_text(clients: Clients, case: Case) -> None:
    turn = case.conversation(clients).ask("hi there")
    assert turn.text == "Hello! You said: hi there"
    assert turn.calls == []
    assert turn.stop == STOP[case.frontend][0]
    assert turn.usage == (2, 5)
    assert turn.model == case.answers_as(case.backend)


@pytest.mark.parametrize("case", CASES)
def test_a_client_tool_round_trip(clients: Clients, case: Case) -> None:
    chat = case.conversation(clients, client_tool=True)
    first = chat.ask(CALL_PROMPT)
    assert first.kinds == CALLED[case.frontend]
    [call] = first.calls
    assert (call.name, call.arguments) == ("get_weather", {"city": "Oslo"})
    assert first.stop == STOP[case.frontend][1]
    assert first.usage == (len(CALL_PROMPT.split()), 1)
    second = chat.answer(call, "sunny")
    assert second.calls == []
    assert second.stop == STOP[case.frontend][0]
    # The upstream got the call back under the name and id the client saw and answered.
    *_, made, answered = second.text.splitlines()
    assert made == 'assistant->get_weather({"city":"Oslo"})'
    assert answered == f"tool[{call.id}]: sunny"
    assert second.usage == (len(CALL_PROMPT.split()) + 2, len(second.text.split()))
    assert second.model == case.answers_as(case.backend)


OPAQUE = re.compile(r'"(?:signature|id)":"[^"]*"')
"""A shown JSON field whose value is random: a thinking block's signature or an id."""


@pytest.mark.parametrize("case", CASES)
def test_a_gateway_tool_in_a_hidden_round(clients: Clients, case: Case) -> None:
    chat = case.hosted(clients)
    turn = chat.ask(ADD_PROMPT)
    assert turn.text == "Tool said: 5"
    assert turn.calls == []
    assert turn.stop == STOP[case.frontend][0]
    # Two upstream calls, summed: the 1-word prompt, answered by a thought and a call; then
    # the prompt, the thought, the call's arguments and its output (4 words), answered by
    # a thought and 3 words.
    assert turn.usage == (1 + 4, 2 + 4)
    # Each round's thought, apart: Chat has one field for them, a blank line between.
    thoughts = ["adding", "adding"] if case.frontend != "chat" else ["adding\n\nadding"]
    assert turn.reasoning == thoughts
    assert turn.kinds == HIDDEN[case.frontend]
    if case.frontend != "responses":
        # Signatures and ids are random letters, which may spell either word by chance.
        shown = OPAQUE.sub("", turn.shown)
        assert "mcp" not in shown
        assert "calc" not in shown
    assert turn.model == case.hosted_model
    # What the client was shown goes back as the next turn's history (a Messages client's
    # thinking with its signature, a Chat client's reasoning) and is accepted.
    after = chat.ask("thanks")
    assert (after.text, after.stop) == ("Hello! You said: thanks", STOP[case.frontend][0])


INTERLEAVED = (
    '[[tool:get_weather:{"city":"Oslo"}]][[tool:get_weather:{"city":"Bergen"}]][[interleave]]'
)
"""Two calls of the client's tool, their streamed fragments interleaved by the Chat
upstream (both opened, then their argument pieces by turns)."""
CHAT_UPSTREAM_CASES = [case for case in CASES if case.values[0].backend == "chat"]  # type: ignore[union-attr]


def interleaving(clients: Clients, case: Case) -> Conversation:
    """A conversation with the Chat upstream and the client's tool; a Chat client's goes to
    the backend with gateway tools, so that its answer is translated, not relayed."""
    tools = [TOOLS[case.frontend]]
    match case.frontend:
        case "responses":
            return ResponsesConversation(clients.openai, "chat", case.stream, tools)
        case "chat":
            return ChatConversation(clients.openai, "chat-hosted", case.stream, tools)
        case _:
            return MessagesConversation(clients.anthropic, "chat", case.stream, tools)


@pytest.mark.parametrize("case", CHAT_UPSTREAM_CASES)
def test_parallel_calls_whose_fragments_the_upstream_interleaves(
    clients: Clients, case: Case
) -> None:
    """Each call's arguments are assembled by its index, whatever the order its fragments
    came in; each frontend sees two whole calls, one after the other."""
    turn = interleaving(clients, case).ask(INTERLEAVED)
    assert [(call.name, call.arguments) for call in turn.calls] == [
        ("get_weather", {"city": "Oslo"}),
        ("get_weather", {"city": "Bergen"}),
    ]
    assert len({call.id for call in turn.calls}) == 2
    assert turn.stop == STOP[case.frontend][1]
    assert turn.usage == (len(INTERLEAVED.split()), 2)


NEW_IDS = '[[tool:get_weather:{"city":"Oslo"}]][[tool:get_weather:{"city":"Bergen"}]][[newids]]'
"""Two calls of the client's tool, each argument piece of each under an id other than its
call's (as Poolside's server and mlx-openai-server before 2026-03 stream them)."""


@pytest.mark.parametrize("case", CHAT_UPSTREAM_CASES)
def test_calls_whose_fragments_change_their_id_stay_whole(clients: Clients, case: Case) -> None:
    """A fragment that names no function continues its call, whatever its id: each
    frontend sees the two calls whole, under their opening fragments' ids."""
    turn = interleaving(clients, case).ask(NEW_IDS)
    assert [(call.name, call.arguments) for call in turn.calls] == [
        ("get_weather", {"city": "Oslo"}),
        ("get_weather", {"city": "Bergen"}),
    ]
    assert len({call.id for call in turn.calls}) == 2
    assert turn.stop == STOP[case.frontend][1]
    assert turn.usage == (len(NEW_IDS.split()), 2)


NO_ARGUMENTS = "[[tool:get_weather:]]"
"""A call without arguments, as vLLM streams one of a tool taking no parameters (its
opening fragment's empty ``arguments``, and no more: vllm-project/vllm#28806)."""


@pytest.mark.parametrize("case", CHAT_UPSTREAM_CASES)
def test_a_call_that_came_without_arguments_reaches_the_client_as_json(
    clients: Clients, case: Case
) -> None:
    """Every frontend's client reads the call's arguments as JSON (``{}``), as hosted
    and vLLM's whole answer give them, streamed or not."""
    turn = interleaving(clients, case).ask(NO_ARGUMENTS)
    assert [(call.name, call.arguments) for call in turn.calls] == [("get_weather", {})]
    assert turn.stop == STOP[case.frontend][1]


def test_interleaved_fragments_stream_as_one_call_after_the_other(clients: Clients) -> None:
    """On the Responses stream each call's ``function_call_arguments.delta`` events name its
    own item, and come between its ``output_item.added`` and ``.done``."""
    tools: Any = [TOOLS["responses"]]
    with clients.openai.responses.stream(model="chat", input=INTERLEAVED, tools=tools) as stream:
        events = list(stream)
        final = stream.get_final_response()
    open_item: str | None = None
    arguments: dict[str, str] = {}
    for event in events:
        if event.type == "response.output_item.added":
            assert open_item is None
            open_item = event.item.id
            arguments[event.item.id or ""] = ""
        elif event.type == "response.function_call_arguments.delta":
            assert event.item_id == open_item
            arguments[event.item_id] += event.delta
        elif event.type == "response.output_item.done":
            assert event.item.id == open_item
            open_item = None
    calls = [item for item in final.output if item.type == "function_call"]
    assert [arguments[call.id or ""] for call in calls] == [call.arguments for call in calls]
    assert [call.arguments for call in calls] == ['{"city":"Oslo"}', '{"city":"Bergen"}']
