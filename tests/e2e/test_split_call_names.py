"""A Chat upstream that streams a call's name in pieces, as Gemini's OpenAI-compatible
endpoint does (continuedev/continue#5849): through the real gateway, the ``openai`` SDK on
the Responses frontend sees the call's whole name, from its first event on."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import orjson
import pytest
from openai import OpenAI
from starlette.types import Receive, Scope, Send

from tests.e2e.configured import configured_gateway
from tests.support.mcp_server import serve_app

TOOL: dict[str, Any] = {
    "type": "function",
    "name": "edit_existing_file",
    "parameters": {"type": "object", "properties": {"path": {"type": "string"}}},
    "strict": False,
}


def chunk(delta: dict[str, Any], finish_reason: str | None = None) -> bytes:
    choice = {"index": 0, "delta": delta, "finish_reason": finish_reason}
    body = {"object": "chat.completion.chunk", "model": "gemini-2.5-flash", "choices": [choice]}
    return b"data: " + orjson.dumps(body) + b"\n\n"


def call(name: str | None, arguments: str, call_id: str | None = None) -> dict[str, Any]:
    function = {"arguments": arguments} | ({} if name is None else {"name": name})
    fragment = {"index": 0, "type": "function", "function": function}
    return {"tool_calls": [fragment | ({} if call_id is None else {"id": call_id})]}


GEMINI = [
    chunk({"role": "assistant", **call("edit_ex", "", "call_gem")}),
    chunk(call("isting_file", "")),
    chunk(call(None, '{"path": "a.py"}')),
    chunk({}, "tool_calls"),
    b"data: [DONE]\n\n",
]


async def gemini(scope: Scope, receive: Receive, send: Send) -> None:
    """Replays :data:`GEMINI` to any request."""
    if scope["type"] != "http":
        return
    while (await receive()).get("more_body"):
        pass
    sse = [(b"content-type", b"text/event-stream")]
    await send({"type": "http.response.start", "status": 200, "headers": sse})
    for frame in GEMINI:
        await send({"type": "http.response.body", "body": frame, "more_body": True})
    await send({"type": "http.response.body", "body": b""})


@pytest.fixture(scope="module")
def client(tmp_path_factory: pytest.TempPathFactory) -> Iterator[OpenAI]:
    with (
        serve_app(gemini, lifespan=False) as base,
        configured_gateway(
            tmp_path_factory.mktemp("gemini"), {"url": base + "/v1", "api": "chat"}
        ) as gateway,
        OpenAI(base_url=gateway.url + "/v1", api_key="sk-test", max_retries=0) as sdk,
    ):
        yield sdk


def test_a_name_streamed_in_pieces_reaches_the_client_whole(client: OpenAI) -> None:
    with client.responses.stream(
        model="gemini-2.5-flash",
        input="edit a.py",
        tools=[TOOL],  # type: ignore[list-item]
    ) as stream:
        events = list(stream)
        response = stream.get_final_response()
    [added] = [e.item for e in events if e.type == "response.output_item.added"]
    assert added.type == "function_call"
    assert (added.name, added.call_id) == ("edit_existing_file", "call_gem")
    [item] = response.output
    assert item.type == "function_call"
    assert (item.name, item.arguments) == ("edit_existing_file", '{"path": "a.py"}')
    [stored] = client.responses.retrieve(response.id).output
    assert stored.type == "function_call"
    assert (stored.name, stored.call_id) == ("edit_existing_file", "call_gem")
