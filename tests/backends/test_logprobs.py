"""Output text log probabilities at the backends: asked for upstream only when the request
includes them, read from both OpenAI wires into one token shape, and a malformed token
list is the upstream's fault (a malformed reply), never a crash."""

from __future__ import annotations

from typing import Any

import orjson
import pytest
from aiohttp import web

from stateway.backends import openai_chat, openai_responses
from stateway.backends.openai_chat import OpenAIChatBackend
from stateway.backends.openai_responses import OpenAIResponsesBackend
from stateway.backends.upstream_http import UpstreamClient, UpstreamTarget
from stateway.core.errors import UpstreamError
from stateway.core.inference import Delta, TextDelta
from stateway.core.logprobs import INCLUDE, tokens
from tests.backends.conftest import Loopback
from tests.backends.test_openai_chat import request, user

WIRE_TOKEN = {
    "token": " hi",
    "logprob": -0.5,
    "bytes": [32, 104, 105],
    "top_logprobs": [
        {"token": " hi", "logprob": -0.5, "bytes": [32, 104, 105]},
        {"token": " ho", "logprob": -1.5, "bytes": None},
    ],
}
TOKEN = {
    "token": " hi",
    "bytes": [32, 104, 105],
    "logprob": -0.5,
    "top_logprobs": [
        {"token": " hi", "bytes": [32, 104, 105], "logprob": -0.5},
        {"token": " ho", "bytes": [32, 104, 111], "logprob": -1.5},  # its UTF-8: none sent
    ],
}


def test_tokens_take_one_shape_and_refuse_wrong_types() -> None:
    assert tokens([WIRE_TOKEN]) == [TOKEN]
    assert tokens([{"token": "é", "logprob": -1}]) == [
        {"token": "é", "bytes": [195, 169], "logprob": -1.0, "top_logprobs": []}
    ]
    wrong = (
        [{"token": 1, "logprob": 0}],
        [{"token": "a", "logprob": "0"}],
        [{"token": "a", "logprob": False}],
    )
    for bad in ({"content": []}, *wrong):
        with pytest.raises((TypeError, KeyError)):
            tokens(bad)
    with pytest.raises(KeyError):
        tokens([{"token": "a"}])


@pytest.mark.parametrize("translate", [openai_chat.to_upstream, openai_responses.to_upstream])
def test_logprobs_are_asked_for_only_when_included(translate: Any) -> None:
    for settings in ({}, {"top_logprobs": 3}, {"include": ["reasoning.encrypted_content"]}):
        body = translate(request([user("x")], **settings))
        assert not {"logprobs", "top_logprobs"} & set(body)
        assert INCLUDE not in body.get("include", ())


def test_chat_asks_for_logprobs_and_the_alternatives() -> None:
    body = openai_chat.to_upstream(request([user("x")], include=[INCLUDE], top_logprobs=4))
    assert (body["logprobs"], body["top_logprobs"]) == (True, 4)
    body = openai_chat.to_upstream(request([user("x")], include=[INCLUDE]))
    assert body["logprobs"] is True
    assert "top_logprobs" not in body


def test_responses_asks_for_logprobs_and_the_alternatives() -> None:
    body = openai_responses.to_upstream(request([user("x")], include=[INCLUDE], top_logprobs=4))
    assert (body["include"], body["top_logprobs"]) == ([INCLUDE], 4)


def test_chat_text_carries_its_chunk_tokens() -> None:
    chunk = {
        "choices": [
            {"index": 0, "delta": {"content": " hi"}, "logprobs": {"content": [WIRE_TOKEN]}}
        ]
    }
    assert list(openai_chat.from_upstream_chunk(chunk)) == [TextDelta(" hi", [TOKEN])]
    chunk["choices"][0]["logprobs"] = None
    assert list(openai_chat.from_upstream_chunk(chunk)) == [TextDelta(" hi")]
    completion = {
        "choices": [
            {
                "index": 0,
                "message": {"role": "assistant", "content": " hi"},
                "logprobs": {"content": [WIRE_TOKEN], "refusal": None},
                "finish_reason": "stop",
            }
        ]
    }
    [text, _finish] = openai_chat.from_upstream_completion(completion)
    assert text == TextDelta(" hi", [TOKEN])


def test_responses_text_carries_its_tokens() -> None:
    state = openai_responses._StreamState()
    event = {"type": "response.output_text.delta", "delta": " hi", "logprobs": [WIRE_TOKEN]}
    assert list(state.feed(event)) == [TextDelta(" hi", [TOKEN])]
    assert list(state.feed({**event, "logprobs": []})) == [TextDelta(" hi")]
    part = {"type": "output_text", "text": " hi", "annotations": [], "logprobs": [WIRE_TOKEN]}
    payload = {
        "status": "completed",
        "output": [{"type": "message", "role": "assistant", "content": [part, part]}],
    }
    [text, _finish] = openai_responses.from_upstream_response(payload)
    assert text == TextDelta(" hi hi", [TOKEN, TOKEN])


async def _deltas(backend: Any, stream: bool) -> list[Delta]:
    req = request([user("q")], include=[INCLUDE], stream=stream)
    return [delta async for delta in backend.infer(req)]


@pytest.mark.parametrize("stream", [False, True])
async def test_a_malformed_chat_token_list_is_a_malformed_reply(
    loopback: Loopback, stream: bool
) -> None:
    choice = {"index": 0, "logprobs": {"content": [{"token": 7, "logprob": 0}]}}

    async def answer(http: web.Request) -> web.StreamResponse:
        if not stream:
            message = {"role": "assistant", "content": "a"}
            return web.json_response({"choices": [{**choice, "message": message}]})
        reply = web.StreamResponse(headers={"content-type": "text/event-stream"})
        await reply.prepare(http)
        chunk = {"choices": [{**choice, "delta": {"content": "a"}}]}
        await reply.write(b"data: " + orjson.dumps(chunk) + b"\n\n")
        return reply

    client = loopback.adopt(UpstreamClient(UpstreamTarget("u", await loopback.serve(answer))))
    with pytest.raises(UpstreamError, match="malformed"):
        await _deltas(OpenAIChatBackend(client), stream)


@pytest.mark.parametrize("stream", [False, True])
async def test_a_malformed_responses_token_list_is_a_malformed_event(
    loopback: Loopback, stream: bool
) -> None:
    async def answer(http: web.Request) -> web.StreamResponse:
        if not stream:
            part = {"type": "output_text", "text": "a", "logprobs": {"token": "a"}}
            message = {"type": "message", "role": "assistant", "content": [part]}
            return web.json_response({"status": "completed", "output": [message]})
        reply = web.StreamResponse(headers={"content-type": "text/event-stream"})
        await reply.prepare(http)
        event = {"type": "response.output_text.delta", "delta": "a", "logprobs": [{"logprob": 0}]}
        await reply.write(b"data: " + orjson.dumps(event) + b"\n\n")
        return reply

    client = loopback.adopt(UpstreamClient(UpstreamTarget("u", await loopback.serve(answer))))
    with pytest.raises(UpstreamError, match="malformed"):
        await _deltas(OpenAIResponsesBackend(client), stream)
