"""A Responses upstream that reports a failure in its reply (a ``response.failed`` or
``error`` event, a non-streamed response ``failed``): the error it names, as the other
backends read one (:func:`~stateway.backends.upstream_status.classify_reported`), in its
words with its key masked. Codex compacts on ``context_length_exceeded`` and waits on
``rate_limit_exceeded``; both came out a 502."""

from __future__ import annotations

from typing import Any

import orjson
import pytest
from aiohttp import web

from stateway.backends.openai_responses import OpenAIResponsesBackend
from stateway.backends.upstream_http import UpstreamClient
from stateway.backends.upstream_target import UpstreamTarget
from stateway.core.errors import GatewayError
from tests.backends.conftest import Loopback
from tests.backends.test_redaction import inference

KEY = "sk-upstream-secret-0123456789"


def _events(error: dict[str, Any], form: str) -> bytes:
    if form == "failed":
        event: dict[str, Any] = {
            "type": "response.failed",
            "sequence_number": 1,
            "response": {"id": "resp_1", "status": "failed", "error": error},
        }
    else:  # the flat error event
        event = {"type": "error", "sequence_number": 1, **error}
    created = {"type": "response.created", "sequence_number": 0, "response": {"id": "resp_1"}}
    return b"".join(
        f"event: {e['type']}\ndata: ".encode() + orjson.dumps(e) + b"\n\n" for e in (created, event)
    )


async def responses_backend(
    loopback: Loopback, error: dict[str, Any], form: str
) -> OpenAIResponsesBackend:
    async def reports(request: web.Request) -> web.Response:
        if form == "whole":
            return web.json_response({"id": "resp_1", "status": "failed", "error": error})
        return web.Response(body=_events(error, form), content_type="text/event-stream")

    target = UpstreamTarget("up", await loopback.serve(reports), api_key=KEY)
    return OpenAIResponsesBackend(loopback.adopt(UpstreamClient(target)))


@pytest.mark.parametrize(
    ("error", "status", "code"),
    [
        (
            {"code": "context_length_exceeded", "message": "too long"},
            400,
            "context_length_exceeded",
        ),
        ({"code": "rate_limit_exceeded", "message": "slow down"}, 429, "rate_limit_exceeded"),
        ({"code": "server_error", "message": "went wrong"}, 502, "upstream_error"),
        ({"message": "plain words"}, 502, "upstream_error"),
    ],
)
@pytest.mark.parametrize("form", ["failed", "error", "whole"])
async def test_a_reported_error_is_the_error_it_names(
    loopback: Loopback, error: dict[str, Any], status: int, code: str, form: str
) -> None:
    backend = await responses_backend(loopback, error, form)
    with pytest.raises(GatewayError) as caught:
        async for _ in backend.infer(inference(form != "whole")):
            pass
    assert (caught.value.status, caught.value.code) == (status, code)
    assert error["message"] in caught.value.message
    assert "Model server 'up'" in caught.value.message


async def test_the_upstreams_key_is_masked_in_its_words(loopback: Loopback) -> None:
    error = {"code": "invalid_api_key", "message": f"Incorrect API key provided: {KEY}."}
    backend = await responses_backend(loopback, error, "failed")
    with pytest.raises(GatewayError) as caught:
        async for _ in backend.infer(inference(True)):
            pass
    assert KEY not in caught.value.message


LIMITED = {"code": "rate_limit_exceeded", "message": "slow down", "type": "requests"}


@pytest.mark.parametrize(
    ("body", "status", "code"),
    [
        ({"id": "resp_1", "status": "failed", "error": LIMITED}, 429, "rate_limit_exceeded"),
        ({"error": LIMITED}, 429, "rate_limit_exceeded"),
        ({"error": {"message": "went wrong", "type": "server_error"}}, 502, "upstream_error"),
        (
            {"type": "error", "error": {"type": "overloaded_error", "message": "Overloaded"}},
            503,
            "upstream_overloaded",
        ),
    ],
)
@pytest.mark.parametrize("stream", [False, True])
async def test_a_200_json_error_is_the_error_it_names_streamed_or_not(
    loopback: Loopback, body: dict[str, Any], status: int, code: str, stream: bool
) -> None:
    """A 200 whose JSON body is only an error (OpenAI's or Anthropic's shape, or a failed
    response), to a streamed request too (some proxies answer so): the error it names,
    before any delta; not an empty answer, nor a stream cut short."""

    async def reports(request: web.Request) -> web.Response:
        return web.json_response(body)

    target = UpstreamTarget("up", await loopback.serve(reports), api_key=KEY)
    backend = OpenAIResponsesBackend(loopback.adopt(UpstreamClient(target)))
    with pytest.raises(GatewayError) as caught:  # before any delta
        await anext(backend.infer(inference(stream)))
    assert (caught.value.status, caught.value.code) == (status, code)
    assert caught.value.message.startswith("Model server 'up' answered with an error: ")


async def test_a_stream_whose_first_event_is_an_error_is_that_error(loopback: Loopback) -> None:
    event = {**LIMITED, "type": "error", "sequence_number": 0}
    error = await streamed_failure(
        loopback, b"event: error\ndata: " + orjson.dumps(event) + b"\n\n"
    )
    assert (error.status, error.code) == (429, "rate_limit_exceeded")
    assert error.message.startswith("Model server 'up' failed mid-stream: slow down")


async def streamed_failure(loopback: Loopback, data: bytes) -> GatewayError:
    """The error a streamed round raises whose upstream answers the event stream ``data``."""

    async def reports(request: web.Request) -> web.Response:
        return web.Response(body=data, content_type="text/event-stream")

    target = UpstreamTarget("up", await loopback.serve(reports))
    backend = OpenAIResponsesBackend(loopback.adopt(UpstreamClient(target)))
    with pytest.raises(GatewayError) as caught:
        async for _ in backend.infer(inference(True)):
            pass
    return caught.value


@pytest.mark.parametrize(
    ("error", "status", "code"),
    [
        ({"code": 500, "message": "decode failed", "type": "server_error"}, 502, "upstream_error"),
        (
            {"code": 400, "message": "too long", "type": "exceed_context_size_error"},
            400,
            "context_length_exceeded",
        ),
    ],
)
async def test_llama_servers_error_event_is_the_error_it_names(
    loopback: Loopback, error: dict[str, Any], status: int, code: str
) -> None:
    """llama-server ends its Responses stream on a failure with an event that is only
    ``{"error": {...}}`` (its Chat Completions stream's error chunk), no ``type``: the
    error it names, in its words; not a stream cut short."""

    added = {"type": "response.output_item.added", "item": {"id": "msg_1", "type": "message"}}
    delta = {"type": "response.output_text.delta", "item_id": "msg_1", "delta": "Hi"}
    events = (added, delta, {"error": error})
    data = b"".join(b"data: " + orjson.dumps(event) + b"\n\n" for event in events)
    failure = await streamed_failure(loopback, data)
    assert (failure.status, failure.code) == (status, code)
    assert failure.message.startswith(f"Model server 'up' failed mid-stream: {error['message']}")
