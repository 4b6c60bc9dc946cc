"""Bodies a client got wrong, through the HTTP surface: each is a 4xx in the protocol's
own error shape naming the field, never a 500 (found by fuzzing the served gateway)."""

from __future__ import annotations

from typing import Any

import orjson
import pytest
from starlette.applications import Starlette

from stateway.core.gateway import Gateway
from stateway.core.inference import Finish, TextDelta
from stateway.core.loop import Loop
from stateway.core.routing import BackendEntry, Router
from stateway.core.runs import RunRegistry
from stateway.surfaces.http.app import build_http_app
from stateway.surfaces.http.messages import MessagesRoutes
from stateway.surfaces.http.responses import ResponsesRoutes
from stateway.surfaces.http.service import ServiceRoutes
from tests.core.fakes import MemoryStore, ScriptedBackend
from tests.surfaces.http.asgi import Reply, call

ANTHROPIC = [(b"anthropic-version", b"2023-06-01")]


def build() -> Starlette:
    store = MemoryStore()
    backend = ScriptedBackend([TextDelta("ok"), Finish("stop")])
    router = Router([BackendEntry(backend, {}, catch_all=True)])
    gateway = Gateway(store, router, Loop(store), RunRegistry())
    return build_http_app(
        ResponsesRoutes(gateway, 1 << 20),
        ServiceRoutes(gateway),
        messages=MessagesRoutes(gateway, 1 << 20),
    )


def assert_openai_refusal(reply: Reply, param: str) -> None:
    assert reply.status == 400, reply.body
    error = reply.json()["error"]
    assert set(error) == {"message", "type", "param", "code"}
    assert error["param"] == param


CALL = {"type": "function_call", "call_id": "c", "name": "f", "arguments": "{}"}
CUSTOM_CALL = {"type": "custom_tool_call", "call_id": "c", "name": "f", "input": ""}


@pytest.mark.parametrize("kind", [["web_search"], {"type": "mcp"}])
@pytest.mark.parametrize("path", ["/v1/responses", "/v1/responses/input_tokens"])
async def test_a_tool_type_of_another_type_is_refused(path: str, kind: object) -> None:
    body = {"model": "m", "input": "hi", "tools": [{"type": kind, "name": "f"}]}
    reply = await call(build(), "POST", path, orjson.dumps(body))
    assert_openai_refusal(reply, "tools[0].type")
    assert reply.json()["error"]["code"] == "invalid_type"


@pytest.mark.parametrize("detail", [["low"], {"a": 1}, 3])
async def test_an_image_detail_of_another_type_is_refused(detail: object) -> None:
    image = {"type": "input_image", "image_url": "data:,", "detail": detail}
    body = {"model": "m", "input": [{"role": "user", "content": [image]}]}
    reply = await call(build(), "POST", "/v1/responses", orjson.dumps(body))
    assert_openai_refusal(reply, "input[0].content[0].detail")


@pytest.mark.parametrize(
    ("part", "param"),
    [
        ({"type": ["input_text"], "text": "r"}, "input[1].output[0].type"),
        ({"type": {"type": "input_text"}, "text": "r"}, "input[1].output[0].type"),
        ({"type": "input_text", "text": ["r"]}, "input[1].output[0].text"),
        ({"type": "input_text", "text": {"a": 1}}, "input[1].output[0].text"),
        ("r", "input[1].output[0]"),
        ({"type": "input_image", "image_url": "data:,", "detail": []}, "input[1].output[0].detail"),
    ],
)
@pytest.mark.parametrize("kind", ["function_call_output", "custom_tool_call_output"])
async def test_a_tool_output_part_is_checked_as_a_message_part(
    kind: str, part: object, param: str
) -> None:
    """These reached the backends, whose translations failed on them (an Anthropic
    upstream's on a text that is no string, the context check on a type that is none)."""
    call_item = CALL if kind == "function_call_output" else CUSTOM_CALL
    output = {"type": kind, "call_id": "c", "output": [part]}
    body = {"model": "m", "input": [call_item, output]}
    reply = await call(build(), "POST", "/v1/responses", orjson.dumps(body))
    assert_openai_refusal(reply, param)


async def test_a_tool_output_part_of_a_later_type_is_left_to_the_backend() -> None:
    """Judged by what the routed backend carries (this one: text only), as before."""
    output = {"type": "function_call_output", "call_id": "c", "output": [{"type": "x_new"}]}
    body = {"model": "m", "input": [CALL, output]}
    reply = await call(build(), "POST", "/v1/responses", orjson.dumps(body))
    assert_openai_refusal(reply, "input[1].output[0].type")
    assert reply.json()["error"]["code"] == "unsupported_content_type"


@pytest.mark.parametrize("kind", [["custom"], {"type": "custom"}])
@pytest.mark.parametrize("path", ["/v1/messages", "/v1/messages/count_tokens"])
async def test_a_messages_tool_type_of_another_type_is_refused(path: str, kind: Any) -> None:
    body = {
        "model": "m",
        "max_tokens": 8,
        "messages": [{"role": "user", "content": "hi"}],
        "tools": [{"type": kind, "name": "f", "input_schema": {"type": "object"}}],
    }
    reply = await call(build(), "POST", path, orjson.dumps(body), headers=ANTHROPIC)
    assert reply.status == 400, reply.body
    assert reply.json()["type"] == "error"
    error = reply.json()["error"]
    assert error["type"] == "invalid_request_error"
    assert "tools.0.type" in error["message"]
