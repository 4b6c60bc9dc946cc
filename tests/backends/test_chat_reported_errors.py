"""A Chat Completions upstream that reports a failure inside a 200 reply (a whole body, or
a stream event, that is only ``{"error": ...}``, or an ``error`` event): one rule for all,
the upstream's words kept, and each frontend's own error shape."""

from __future__ import annotations

from typing import Any

import orjson
import pytest
from aiohttp import web
from starlette.applications import Starlette

from stateway.backends.chat_forwarder import OpenAIChatBackend
from stateway.backends.upstream_http import UpstreamClient
from stateway.backends.upstream_target import UpstreamTarget
from stateway.core.errors import GatewayError, UpstreamContextTooLong
from stateway.core.gateway import Gateway
from stateway.core.loop import Loop
from stateway.core.routing import BackendEntry, Router
from stateway.core.run_registry import RunRegistry
from stateway.surfaces.http.app import build_http_app
from stateway.surfaces.http.chat import ChatRoutes
from stateway.surfaces.http.messages import MessagesRoutes
from stateway.surfaces.http.responses import ResponsesRoutes
from stateway.surfaces.http.service import ServiceRoutes
from tests.backends.conftest import Loopback
from tests.backends.test_redaction import inference
from tests.core.fakes import MemoryStore
from tests.surfaces.http.asgi import call

WARMING = {"message": "Model is still warming up", "type": "server_error"}
LIMITED = {"message": "Too many requests in flight", "type": "rate_limit_error"}
VLLM_REFUSAL = {"message": "bad 'temperature'", "type": "BadRequestError", "code": 400}
TOO_LONG = {
    "message": "too long",
    "type": "invalid_request_error",
    "code": "context_length_exceeded",
}


async def chat_backend(loopback: Loopback, error: object, *, stream: bool) -> OpenAIChatBackend:
    """A chat backend whose server answers 200 with only ``error`` (as a stream event when
    ``stream``)."""

    async def reports(request: web.Request) -> web.Response:
        if stream:
            event = b"data: " + orjson.dumps({"error": error}) + b"\n\n"
            return web.Response(body=event, content_type="text/event-stream")
        return web.json_response({"error": error})

    client = UpstreamClient(UpstreamTarget("up", await loopback.serve(reports)))
    return OpenAIChatBackend(loopback.adopt(client))


@pytest.mark.parametrize(
    ("error", "status", "code"),
    [
        (WARMING, 502, "upstream_error"),
        ("plain words", 502, "upstream_error"),
        (LIMITED, 429, "rate_limit_exceeded"),
        (VLLM_REFUSAL, 400, "upstream_rejected"),
        (TOO_LONG, 400, "context_length_exceeded"),
        ({"message": "busy", "type": "overloaded_error"}, 503, "upstream_overloaded"),
        ({"message": "no key", "code": 401}, 502, "upstream_auth_failed"),
    ],
)
@pytest.mark.parametrize("stream", [False, True])
async def test_a_reported_error_is_the_error_its_status_would_be(
    loopback: Loopback, error: object, status: int, code: str, stream: bool
) -> None:
    backend = await chat_backend(loopback, error, stream=stream)
    with pytest.raises(GatewayError) as caught:
        async for _ in backend.infer(inference(stream)):
            pass
    assert (caught.value.status, caught.value.code) == (status, code)
    if code != "upstream_auth_failed":
        said = error["message"] if isinstance(error, dict) else error
        assert said in caught.value.message
    assert "without a choice" not in caught.value.message


@pytest.mark.parametrize(
    ("body", "status", "code"),
    [
        ({"error": WARMING}, 502, "upstream_error"),
        ({"error": LIMITED}, 429, "rate_limit_exceeded"),
        ({"error": TOO_LONG}, 400, "context_length_exceeded"),
        (
            {"type": "error", "error": {"type": "overloaded_error", "message": "Overloaded"}},
            503,
            "upstream_overloaded",
        ),
    ],
)
async def test_a_streamed_request_answered_with_a_json_error_is_that_error_before_output(
    loopback: Loopback, body: dict[str, Any], status: int, code: str
) -> None:
    """Some servers and proxies answer even a streamed request with a 200 whose body is
    JSON, the error alone: classified as the same body answering a non-streamed request
    (``answered with an error``), before any delta, not a stream cut short."""

    async def reports(request: web.Request) -> web.Response:
        return web.json_response(body)

    client = UpstreamClient(UpstreamTarget("up", await loopback.serve(reports)))
    backend = OpenAIChatBackend(loopback.adopt(client))
    for stream in (False, True):
        with pytest.raises(GatewayError) as caught:  # before any delta
            await anext(backend.infer(inference(stream)))
        assert (caught.value.status, caught.value.code) == (status, code)
        assert caught.value.message.startswith("Model server 'up' answered with an error: ")


@pytest.mark.parametrize(
    ("error", "status", "code"),
    [(WARMING, 502, "upstream_error"), (LIMITED, 429, "rate_limit_exceeded")],
)
@pytest.mark.parametrize("stream", [False, True])
async def test_a_forwarded_request_answered_with_a_json_error_is_that_error(
    loopback: Loopback, error: dict[str, Any], status: int, code: str, stream: bool
) -> None:
    """The fast path relays an answer untouched, but a 200 whose JSON body is an error
    alone is no answer: a client reading it as one gets an empty completion (or, asking
    for a stream, an empty stream) and asks again at once. It is the error it reports,
    in the OpenAI shape, before a byte of it was relayed."""
    backend = await chat_backend(loopback, error, stream=False)
    body = orjson.dumps({"model": "m", "messages": [{"role": "user", "content": "hi"}]})
    relay = await backend.forward_chat(body, orjson.loads(body))
    with pytest.raises(GatewayError) as caught:
        await anext(relay.chunks())
    await relay.aclose()
    assert (caught.value.status, caught.value.code) == (status, code)
    relay = await backend.forward_chat(body, orjson.loads(body))
    assert relay.whole
    with pytest.raises(GatewayError) as read_whole:  # read in one piece: the same error
        await relay.body()
    await relay.aclose()
    assert (read_whole.value.status, read_whole.value.code) == (status, code)
    assert caught.value.message.startswith("Model server 'up' answered with an error: ")

    app = app_over(backend)
    fields = {"model": "m", "messages": [{"role": "user", "content": "hi"}], "stream": stream}
    answer = await call(app, "POST", "/v1/chat/completions", orjson.dumps(fields))
    assert answer.status == status
    assert answer.json()["error"]["code"] == code
    assert error["message"] in answer.json()["error"]["message"]


async def test_a_forwarded_answer_that_mentions_an_error_is_relayed_as_it_came(
    loopback: Loopback,
) -> None:
    """Only a body that is an error alone (no ``choices``) is one."""
    completion = {
        "id": "c",
        "object": "chat.completion",
        "choices": [{"index": 0, "message": {"role": "assistant", "content": '"error"'}}],
        "error": None,
    }
    backend = await answering(loopback, completion)
    relay = await backend.forward_chat(
        b'{"model": "m", "messages": []}', orjson.loads(b'{"model": "m", "messages": []}')
    )
    relayed = b"".join([chunk async for chunk in relay.chunks()])
    await relay.aclose()
    assert orjson.loads(relayed) == completion


@pytest.mark.parametrize(
    ("reason", "content"), [("abort", "Hel"), ("error", "Hel"), ("stop", "abort")]
)
async def test_a_forwarded_answer_the_server_gave_up_on_is_the_error_a_run_gets(
    loopback: Loopback, reason: str, content: str
) -> None:
    """A whole answer whose ``finish_reason`` says the server gave up on it (vLLM's
    ``abort``, of a request its engine aborted; its engine's ``error``) is cut short: the
    error a translated request gets, before a byte of it is relayed. ``"abort"`` in the
    text ends nothing."""
    message = {"role": "assistant", "content": content}
    completion = {
        "id": "c",
        "object": "chat.completion",
        "choices": [{"index": 0, "message": message, "finish_reason": reason}],
    }
    backend = await answering(loopback, completion)
    relay = await backend.forward_chat(
        b'{"model": "m", "messages": []}', orjson.loads(b'{"model": "m", "messages": []}')
    )
    try:
        if reason == "stop":
            assert orjson.loads(b"".join([c async for c in relay.chunks()])) == completion
            return
        with pytest.raises(GatewayError) as relayed:
            await anext(relay.chunks())
    finally:
        await relay.aclose()
    with pytest.raises(GatewayError) as translated:
        async for _ in backend.infer(inference(False)):
            pass
    assert (relayed.value.status, relayed.value.code, relayed.value.message) == (
        translated.value.status,
        translated.value.code,
        translated.value.message,
    )
    assert f"'{reason}'" in relayed.value.message


def app_over(backend: OpenAIChatBackend) -> Starlette:
    store = MemoryStore()
    router = Router([BackendEntry(backend, {}, catch_all=True)])
    gateway = Gateway(store, router, Loop(store), RunRegistry())
    return build_http_app(
        ResponsesRoutes(gateway, 1 << 20),
        ServiceRoutes(gateway),
        messages=MessagesRoutes(gateway, 1 << 20, keepalive=15.0, max_input_items=50),
        chat=ChatRoutes(gateway, 1 << 20),
    )


@pytest.mark.parametrize(("error", "status"), [(WARMING, 502), (LIMITED, 429)])
async def test_each_frontend_answers_in_its_own_shape(
    loopback: Loopback, error: dict[str, Any], status: int
) -> None:
    app = app_over(await chat_backend(loopback, error, stream=False))
    responses = await call(
        app, "POST", "/v1/responses", orjson.dumps({"model": "m", "input": "hi"})
    )
    assert responses.status == status
    assert error["message"] in responses.json()["error"]["message"]

    messages = await call(
        app,
        "POST",
        "/v1/messages",
        orjson.dumps(
            {"model": "m", "max_tokens": 8, "messages": [{"role": "user", "content": "hi"}]}
        ),
        headers=[(b"anthropic-version", b"2023-06-01")],
    )
    assert messages.status == status
    answer = messages.json()
    assert answer["type"] == "error"
    assert answer["error"]["type"] == ("api_error" if status == 502 else "rate_limit_error")
    assert error["message"] in answer["error"]["message"]


async def streamed_failure(loopback: Loopback, body: bytes) -> GatewayError:
    """What a Chat backend raises for a 200 event stream of ``body``."""

    async def answers(request: web.Request) -> web.Response:
        return web.Response(body=body, content_type="text/event-stream")

    client = UpstreamClient(UpstreamTarget("up", await loopback.serve(answers)))
    backend = OpenAIChatBackend(loopback.adopt(client))
    with pytest.raises(GatewayError) as caught:
        async for _ in backend.infer(inference(True)):
            pass
    return caught.value


LLAMA_CPP_TOO_LONG = {
    "code": 400,
    "message": "the request exceeds the available context size. try increasing the context size",
    "type": "exceed_context_size_error",
}


@pytest.mark.parametrize(
    "event",
    [
        # llama.cpp before its late-2025 fix (ggml-org/llama.cpp#16109): a field named
        # ``error``, which event-stream readers ignore, then ``[DONE]``
        b"error: " + orjson.dumps(LLAMA_CPP_TOO_LONG) + b"\n\n",
        # the named event that fix's review considered
        b"event: error\ndata: " + orjson.dumps({"error": LLAMA_CPP_TOO_LONG}) + b"\n\n",
    ],
)
async def test_an_error_line_mid_stream_is_the_error_it_reports(
    loopback: Loopback, event: bytes
) -> None:
    """Not a completed answer ending where the error cut it (nor an empty one)."""
    chunk = b'data: {"choices":[{"index":0,"delta":{"content":"Hi"}}]}\n\n'
    failure = await streamed_failure(loopback, chunk + event + b"data: [DONE]\n\n")
    assert (failure.status, failure.code) == (400, "context_length_exceeded")
    assert LLAMA_CPP_TOO_LONG["message"] in failure.message


async def test_a_stream_of_only_done_is_a_failure_not_an_empty_answer(
    loopback: Loopback,
) -> None:
    """vLLM drops an error that comes before the first token, and ends the stream with
    ``[DONE]`` alone (vllm-project/vllm#40978): no answer, so an error (one that a route can
    fail over on), not a completed empty one."""
    failure = await streamed_failure(loopback, b"data: [DONE]\n\n")
    assert (failure.status, failure.code) == (502, "upstream_error")
    assert failure.message == "The model server 'up' ended its stream without an answer."


async def test_lm_studio_s_streamed_context_refusal_is_context_length_exceeded(
    loopback: Loopback,
) -> None:
    """LM Studio refuses a streamed prompt over its context after a 200, as an ``error``
    event in its own words (lmstudio-ai/lmstudio-bug-tracker#2322, aaif-goose/goose#11318):
    the refusal clients compact on, not a 502."""
    message = (
        "Input does not fit in context length. The input has 31430 tokens, but the context "
        "length only supports 30000 tokens."
    )
    data = orjson.dumps({"error": {"message": message}, "message": message})
    failure = await streamed_failure(loopback, b"event: error\ndata: " + data + b"\n\n")
    assert (failure.status, failure.code) == (400, "context_length_exceeded")
    assert message in failure.message


async def test_sglang_s_streamed_context_refusal_is_context_length_exceeded(
    loopback: Loopback,
) -> None:
    """SGLang's scheduler refuses an input over what a request may fill after its stream
    opened: one event holding its error object, then ``[DONE]``. Its words alone say it,
    and its numbers."""
    message = (
        "Input length (258174 tokens) exceeds the maximum allowed length (186353 tokens). Use "
        "a shorter input or enable --allow-auto-truncate."
    )
    error = {"object": "error", "message": message, "type": "BAD_REQUEST", "code": 400}
    data = b"data: " + orjson.dumps({"error": error}) + b"\n\ndata: [DONE]\n\n"
    failure = await streamed_failure(loopback, data)
    assert (failure.status, failure.code) == (400, "context_length_exceeded")
    assert isinstance(failure, UpstreamContextTooLong)
    assert (failure.tokens, failure.window) == (258174, 186353)


@pytest.mark.parametrize(
    ("event", "status", "said"),
    [
        # an error object that says its status by its code alone, no words to go by
        (
            b"event: error\ndata: "
            + orjson.dumps({"error": {"code": 429, "message": "Busy."}})
            + b"\n\n",
            429,
            "Busy.",
        ),
        # words that do not parse (one byte not UTF-8): they are the message
        (b"error: the engine died \xff\n\n", 502, "the engine died \ufffd"),
    ],
)
async def test_an_error_lines_status_and_words_are_the_upstreams(
    loopback: Loopback, event: bytes, status: int, said: str
) -> None:
    failure = await streamed_failure(loopback, event + b"data: [DONE]\n\n")
    assert failure.status == status
    assert failure.message == f"Model server 'up' failed mid-stream: {said}"


@pytest.mark.parametrize(
    "completion",
    [
        pytest.param({"choices": [], "service_tier": "error"}, id="no-choice"),
        pytest.param({"object": "list", "data": ["abort"]}, id="no-choices"),
        pytest.param({"choices": ["abort"]}, id="a-choice-no-object"),
        pytest.param({"choices": [{"finish_reason": ["error"]}]}, id="a-reason-no-string"),
    ],
)
async def test_a_forwarded_answer_naming_error_or_abort_elsewhere_is_relayed_as_it_came(
    loopback: Loopback, completion: dict[str, object]
) -> None:
    """A whole answer that says ``"error"`` or ``"abort"`` but neither is an error alone
    nor has a first choice giving up on it (no choice, none an object) is no failure:
    relayed as it came, as any answer a client reads itself."""
    backend = await answering(loopback, completion)
    relay = await backend.forward_chat(
        b'{"model": "m", "messages": []}', orjson.loads(b'{"model": "m", "messages": []}')
    )
    try:
        assert orjson.loads(b"".join([c async for c in relay.chunks()])) == completion
    finally:
        await relay.aclose()


async def answering(loopback: Loopback, completion: dict[str, Any]) -> OpenAIChatBackend:
    """A backend whose upstream answers ``completion`` whole."""

    async def answers(request: web.Request) -> web.Response:
        return web.json_response(completion)

    client = UpstreamClient(UpstreamTarget("up", await loopback.serve(answers)))
    return OpenAIChatBackend(loopback.adopt(client))
