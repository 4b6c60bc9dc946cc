"""What real model servers write that is legal, or harmless, and must not fail an answer:
``[DONE]`` with trailing whitespace, token counts written as whole floats, an empty
``data:`` event, a byte order mark starting the stream, a call's ``id`` and ``name``
repeated as empty strings on its later fragments, a call's ``arguments`` as an object, a
whole JSON completion answering a streamed request."""

from __future__ import annotations

import orjson
import pytest
from aiohttp import web

from stateway.backends.chat_forwarder import OpenAIChatBackend
from stateway.backends.chat_reply import from_upstream_chunk, from_upstream_completion
from stateway.backends.upstream_http import UpstreamClient
from stateway.backends.upstream_target import UpstreamTarget
from stateway.backends.upstream_values import count
from stateway.core.assembler import OutputAssembler
from stateway.core.generation_settings import GenerationSettings
from stateway.core.inference import Finish, InferenceRequest, TextDelta, ToolCallDelta, UsageReport
from stateway.core.usage import Usage
from tests.backends.conftest import Loopback

CHUNK = b'data: {"choices":[{"index":0,"delta":{"content":"Hi"},"finish_reason":null}]}\n\n'
END = (
    b'data: {"choices":[{"index":0,"delta":{},"finish_reason":"stop"}],'
    b'"usage":{"prompt_tokens":3.0,"completion_tokens":1.0}}\n\n'
)


def test_a_whole_float_is_a_token_count() -> None:
    assert (count(7.0), count(7), count(None)) == (7, 7, 0)
    for bad in (7.5, -1.0, float("inf"), True, "7"):
        try:
            count(bad)
        except TypeError:
            continue
        raise AssertionError(f"{bad!r} counted")


async def test_an_unusual_but_legal_stream_gives_its_whole_answer(loopback: Loopback) -> None:
    async def answer(request: web.Request) -> web.StreamResponse:
        reply = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await reply.prepare(request)
        for part in (b"\xef\xbb", b"\xbf" + CHUNK, b"data:\n\n", END, b"data: [DONE] \n\n"):
            await reply.write(part)
        return reply

    url = await loopback.serve(answer)
    backend = OpenAIChatBackend(loopback.adopt(UpstreamClient(UpstreamTarget("up", url))))
    item = {"type": "message", "role": "user", "content": [{"type": "input_text", "text": "x"}]}
    request = InferenceRequest("m", None, [item], GenerationSettings(), True)
    deltas = [delta async for delta in backend.infer(request)]
    assert TextDelta("Hi") in deltas
    assert UsageReport(Usage(3, 1)) in deltas
    assert Finish("stop") in deltas


@pytest.mark.parametrize("media", ["application/json", "application/vnd.example+json"])
async def test_a_whole_completion_answering_a_streamed_request_is_its_answer(
    loopback: Loopback, media: str
) -> None:
    """A server that ignores ``stream: true`` and answers JSON (``application/json`` or
    any ``+json`` type): read as a non-streamed reply (as a JSON error to a streamed
    request is), not a stream cut short."""

    async def answer(request: web.Request) -> web.StreamResponse:
        message = {"role": "assistant", "content": "Hi"}
        choice = {"index": 0, "message": message, "finish_reason": "stop"}
        return web.json_response({"choices": [choice]}, content_type=media)

    url = await loopback.serve(answer)
    backend = OpenAIChatBackend(loopback.adopt(UpstreamClient(UpstreamTarget("up", url))))
    item = {"type": "message", "role": "user", "content": [{"type": "input_text", "text": "x"}]}
    request = InferenceRequest("m", None, [item], GenerationSettings(), True)
    assert [delta async for delta in backend.infer(request)] == [TextDelta("Hi"), Finish("stop")]


def _call_chunk(call: dict[str, object]) -> bytes:
    delta = {"tool_calls": [{"index": 0, "type": "function", **call}]}
    return b"data: " + orjson.dumps({"choices": [{"index": 0, "delta": delta}]}) + b"\n\n"


async def test_an_empty_id_and_name_on_a_calls_later_fragments_continue_it(
    loopback: Loopback,
) -> None:
    """DashScope (Qwen) and DeepSeek repeat a streamed call's ``id`` and ``name`` as empty
    strings on its argument fragments: they continue the call, not start another."""
    chunks = [
        _call_chunk({"id": "call_a", "function": {"name": "f", "arguments": ""}}),
        _call_chunk({"id": "", "function": {"name": "", "arguments": '{"x": '}}),
        _call_chunk({"id": "", "function": {"name": "", "arguments": "1}"}}),
        b'data: {"choices":[{"index":0,"delta":{},"finish_reason":"tool_calls"}]}\n\n',
        b"data: [DONE]\n\n",
    ]

    async def answer(request: web.Request) -> web.StreamResponse:
        reply = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await reply.prepare(request)
        for chunk in chunks:
            await reply.write(chunk)
        return reply

    url = await loopback.serve(answer)
    backend = OpenAIChatBackend(loopback.adopt(UpstreamClient(UpstreamTarget("up", url))))
    item = {"type": "message", "role": "user", "content": [{"type": "input_text", "text": "x"}]}
    request = InferenceRequest("m", None, [item], GenerationSettings(), True)
    output: list[dict[str, object]] = []
    assembler = OutputAssembler(output, lambda _event: None, set())
    async for delta in backend.infer(request):
        if isinstance(delta, ToolCallDelta):
            assembler.tool_call(delta)
    assembler.finish()

    [call] = output
    assert (call["call_id"], call["name"], call["arguments"]) == ("call_a", "f", '{"x": 1}')


def test_arguments_sent_as_an_object_are_its_json() -> None:
    """llama-server wrote a call's ``arguments`` as a JSON object instead of a string for a
    while (ggml-org/llama.cpp#20198), as TGI does (huggingface/text-generation-inference#2136):
    the call is the object's JSON, not a malformed reply."""
    call = {"id": "call_a", "type": "function", "function": {"name": "f", "arguments": {"x": 1}}}
    message = {"role": "assistant", "content": None, "tool_calls": [call]}
    completion = {"choices": [{"index": 0, "message": message, "finish_reason": "tool_calls"}]}
    chunk = {"choices": [{"index": 0, "delta": {"tool_calls": [{"index": 0, **call}]}}]}
    expected = ToolCallDelta(0, "call_a", "f", '{"x":1}')
    assert expected in list(from_upstream_completion(completion))
    assert from_upstream_chunk(chunk) == [expected]
