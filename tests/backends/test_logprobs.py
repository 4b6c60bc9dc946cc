"""Output text log probabilities at the backends: asked for upstream only when the request
includes them, read from both OpenAI wires into one token shape, and a malformed token
list is the upstream's fault (a malformed reply), never a crash."""

from __future__ import annotations

from typing import Any

import orjson
import pytest
from aiohttp import web

from stateway.backends import chat_request, openai_chat, responses_reply, responses_request
from stateway.backends.chat_forwarder import OpenAIChatBackend
from stateway.backends.openai_responses import OpenAIResponsesBackend
from stateway.backends.upstream_http import UpstreamClient
from stateway.backends.upstream_target import UpstreamTarget
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


@pytest.mark.parametrize("translate", [chat_request.to_upstream, responses_request.to_upstream])
def test_logprobs_are_asked_for_only_when_included(translate: Any) -> None:
    for settings in ({}, {"top_logprobs": 3}, {"include": ["reasoning.encrypted_content"]}):
        body = translate(request([user("x")], **settings))
        assert not {"logprobs", "top_logprobs"} & set(body)
        assert INCLUDE not in body.get("include", ())


def test_chat_asks_for_logprobs_and_the_alternatives() -> None:
    body = chat_request.to_upstream(request([user("x")], include=[INCLUDE], top_logprobs=4))
    assert (body["logprobs"], body["top_logprobs"]) == (True, 4)
    body = chat_request.to_upstream(request([user("x")], include=[INCLUDE]))
    assert body["logprobs"] is True
    assert "top_logprobs" not in body


def test_responses_asks_for_logprobs_and_the_alternatives() -> None:
    body = responses_request.to_upstream(request([user("x")], include=[INCLUDE], top_logprobs=4))
    assert (body["include"], body["top_logprobs"]) == (["reasoning.encrypted_content", INCLUDE], 4)


def test_chat_text_carries_its_chunk_tokens() -> None:
    chunk = {
        "choices": [
            {"index": 0, "delta": {"content": " hi"}, "logprobs": {"content": [WIRE_TOKEN]}}
        ]
    }
    assert list(openai_chat.from_upstream_chunk(chunk, True)) == [TextDelta(" hi", [TOKEN])]
    assert list(openai_chat.from_upstream_chunk(chunk)) == [TextDelta(" hi")]  # not asked
    chunk["choices"][0]["logprobs"] = None
    assert list(openai_chat.from_upstream_chunk(chunk, True)) == [TextDelta(" hi")]
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
    [text, _finish] = openai_chat.from_upstream_completion(completion, True)
    assert text == TextDelta(" hi", [TOKEN])
    [text, _finish] = openai_chat.from_upstream_completion(completion)
    assert text == TextDelta(" hi")


def test_responses_text_carries_its_tokens() -> None:
    state = responses_reply.StreamState(tokens=True)
    event = {"type": "response.output_text.delta", "delta": " hi", "logprobs": [WIRE_TOKEN]}
    assert list(state.feed(event)) == [TextDelta(" hi", [TOKEN])]
    assert list(state.feed({**event, "logprobs": []})) == [TextDelta(" hi")]
    assert list(responses_reply.StreamState().feed(event)) == [TextDelta(" hi")]
    part = {"type": "output_text", "text": " hi", "annotations": [], "logprobs": [WIRE_TOKEN]}
    payload = {
        "status": "completed",
        "output": [{"type": "message", "role": "assistant", "content": [part, part]}],
    }
    [_start, text, _finish] = responses_reply.from_upstream_response(payload, tokens=True)
    assert text == TextDelta(" hi hi", [TOKEN, TOKEN])
    [_start, text, _finish] = responses_reply.from_upstream_response(payload)
    assert text == TextDelta(" hi hi")


def wire(*texts: str) -> list[dict[str, Any]]:
    return [{"token": t, "logprob": -1.0, "bytes": list(t.encode())} for t in texts]


def spelled(delta: Any) -> list[str]:
    return [token["token"] for token in delta.logprobs]


def test_a_chunk_s_tokens_without_text_extend_the_text_but_not_reasoning_or_calls() -> None:
    part = {"index": 0, "delta": {"content": ""}, "logprobs": {"content": wire("\ufffd")}}
    [delta] = openai_chat.from_upstream_chunk({"choices": [part]}, True)
    assert (delta.text, spelled(delta)) == ("", ["\ufffd"])
    for other in ({"reasoning_content": "hm"}, {"tool_calls": [{"index": 0, "id": "c"}]}):
        part = {"index": 0, "delta": other, "logprobs": {"content": wire("x")}}
        deltas = list(openai_chat.from_upstream_chunk({"choices": [part]}, True))
        assert not [d for d in deltas if isinstance(d, TextDelta)]


@pytest.mark.parametrize(
    ("message", "tokens", "kept"),
    [
        # vLLM lists the reasoning's tokens before the text's, and the calls' after it
        ({"reasoning_content": "think more"}, wire("think", " more", "Ans", "wer"), ["Ans", "wer"]),
        (
            {"tool_calls": [{"id": "c", "function": {"name": "f", "arguments": "{}"}}]},
            wire("Ans", "wer", "<tool>", "{}"),
            ["Ans", "wer"],
        ),
        ({}, wire("Ans", "wer"), ["Ans", "wer"]),
        # tokens that do not spell the text are left as they came
        ({"reasoning_content": "r"}, wire("r", "other"), ["r", "other"]),
    ],
)
def test_a_completion_keeps_the_tokens_of_its_text(
    message: dict[str, Any], tokens: list[dict[str, Any]], kept: list[str]
) -> None:
    choice = {
        "index": 0,
        "message": {"role": "assistant", "content": "Answer", **message},
        "logprobs": {"content": tokens},
        "finish_reason": "stop",
    }
    deltas = list(openai_chat.from_upstream_completion({"choices": [choice]}, True))
    [text] = [d for d in deltas if isinstance(d, TextDelta)]
    assert spelled(text) == kept


async def _deltas(backend: Any, stream: bool, asked: bool = True) -> list[Delta]:
    req = request([user("q")], include=[INCLUDE] if asked else [], stream=stream)
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
        end = {"choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}]}
        await reply.write(b"data: " + orjson.dumps(end) + b"\n\ndata: [DONE]\n\n")
        return reply

    client = loopback.adopt(UpstreamClient(UpstreamTarget("u", await loopback.serve(answer))))
    with pytest.raises(UpstreamError, match="malformed"):
        await _deltas(OpenAIChatBackend(client), stream)
    # not asked for, they are not read: an upstream that always sends them is no fault
    deltas = await _deltas(OpenAIChatBackend(client), stream, asked=False)
    assert [d for d in deltas if isinstance(d, TextDelta)] == [TextDelta("a")]


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


LLAMA_REFUSAL = {
    "error": {
        "code": 400,
        "message": "logprobs is not supported with tools + stream",
        "type": "invalid_request_error",
    }
}
"""llama-server's refusal of a streamed Chat Completions request with logprobs and tools."""


async def test_a_streamed_round_with_tools_is_asked_whole_where_its_tokens_are_refused(
    loopback: Loopback,
) -> None:
    """llama-server gives tokens with tools only whole: the round refused streamed is asked
    again whole (same deltas), and so is every such round from then on; one without tools
    still streams."""
    asked: list[dict[str, Any]] = []
    token = {"token": "a", "logprob": -0.5, "bytes": [97], "top_logprobs": []}

    async def answer(http: web.Request) -> web.StreamResponse:
        body = await http.json()
        asked.append(body)
        if body.get("stream") and "tools" in body:
            return web.json_response(LLAMA_REFUSAL, status=400)
        choice = {"index": 0, "logprobs": {"content": [token]}, "finish_reason": "stop"}
        if not body.get("stream"):
            message = {"role": "assistant", "content": "a"}
            return web.json_response({"choices": [{**choice, "message": message}]})
        reply = web.StreamResponse(headers={"content-type": "text/event-stream"})
        await reply.prepare(http)
        chunk = {"choices": [{**choice, "delta": {"content": "a"}}]}
        await reply.write(b"data: " + orjson.dumps(chunk) + b"\n\ndata: [DONE]\n\n")
        return reply

    client = loopback.adopt(UpstreamClient(UpstreamTarget("u", await loopback.serve(answer))))
    backend = OpenAIChatBackend(client)
    tool = {"type": "function", "name": "f", "parameters": {"type": "object"}}

    async def texts(tools: list[dict[str, Any]]) -> list[Delta]:
        req = request([user("q")], include=[INCLUDE], tools=tools, stream=True)
        return [d async for d in backend.infer(req) if isinstance(d, TextDelta)]

    whole = [TextDelta("a", [{**token, "logprob": -0.5}])]
    assert await texts([tool]) == whole
    assert [(bool(b.get("stream")), "stream_options" in b) for b in asked] == [
        (True, True),
        (False, False),
    ]
    assert await texts([tool]) == whole
    assert await texts([]) == whole
    assert [bool(b.get("stream")) for b in asked[2:]] == [False, True]
