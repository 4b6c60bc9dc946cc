"""Upstream failures, client disconnects and bad input, end to end."""

from __future__ import annotations

import asyncio
import time
import urllib.request
import uuid

import aiohttp
import openai
import orjson
import pytest
from openai import OpenAI

from stateway.fake_upstream.launch import start_fake_upstream
from stateway.launch import start_gateway
from tests.e2e.conftest import MAX_BODY_BYTES
from tests.e2e.test_background import upstream_saw_leave

MODEL = "fake-model"
TERMINAL = {"response.completed", "response.incomplete", "response.failed"}


def wait_for_status(client: OpenAI, response_id: str, status: str, within: float = 10.0) -> str:
    """Poll the stored response across the process boundary (bounded)."""
    deadline = time.monotonic() + within
    seen = None
    while time.monotonic() < deadline:
        try:
            seen = client.responses.retrieve(response_id).status
        except openai.NotFoundError:
            seen = None
        if seen == status:
            return seen
        time.sleep(0.05)
    raise AssertionError(f"response {response_id} stayed {seen!r}, expected {status!r}")


@pytest.mark.parametrize("stream", [False, True])
@pytest.mark.parametrize(
    ("status", "error_class", "gateway_status", "code"),
    [
        (500, openai.InternalServerError, 502, "upstream_error"),
        (503, openai.InternalServerError, 503, "upstream_unavailable"),
        (429, openai.RateLimitError, 429, "rate_limit_exceeded"),
        (400, openai.BadRequestError, 400, "upstream_rejected"),
        (413, openai.APIStatusError, 413, "request_too_large"),  # too large for the server
    ],
)
def test_upstream_error_before_output_is_an_http_error(
    client: OpenAI,
    status: int,
    error_class: type[openai.APIStatusError],
    gateway_status: int,
    code: str,
    stream: bool,
) -> None:
    """Streamed too: the status line waits until output starts, so SDKs can retry."""
    with pytest.raises(error_class) as caught:
        client.responses.create(model=MODEL, input=f"[[error:{status}]]", stream=stream)
    assert caught.value.status_code == gateway_status
    body = caught.value.body
    assert isinstance(body, dict)
    assert set(body) >= {"message", "type", "param", "code"}
    assert body["code"] == code
    retry_after = {429: "1", 503: "2"}.get(status)  # what the fake sends, passed on
    assert caught.value.response.headers.get("retry-after") == retry_after


def test_upstream_cut_mid_stream_is_response_failed(client: OpenAI) -> None:
    # Chunks come apart: aiohttp drops what it buffered once the cut is seen, so chunks
    # arriving together with the cut (while the in-progress row commits) may never be read.
    text = "[[words:20]] [[cut:3]] [[slow:30]]"
    events = list(client.responses.create(model=MODEL, input=text, stream=True))
    assert events[-1].type == "response.failed"
    assert sum(e.type in TERMINAL for e in events) == 1
    assert "before finishing" in events[-1].response.error.message  # type: ignore[union-attr]
    assert sum(e.type == "response.output_text.delta" for e in events) == 3
    stored = client.responses.retrieve(events[-1].response.id)  # type: ignore[union-attr]
    assert stored.status == "failed"
    assert stored.output[0].status == "incomplete"  # type: ignore[union-attr]


def test_upstream_cut_non_streamed_is_502(client: OpenAI) -> None:
    with pytest.raises(openai.InternalServerError) as caught:
        client.responses.create(model=MODEL, input="[[cut:0]]")
    assert caught.value.status_code == 502


async def test_client_disconnect_cancels_upstream_and_stores_incomplete(
    gateway: str, client: OpenAI
) -> None:
    body = {"model": MODEL, "input": "[[slow:20]] [[words:500]]", "stream": True}
    response_id = None
    deltas = 0
    async with (
        aiohttp.ClientSession() as session,
        session.post(f"{gateway}/v1/responses", json=body) as response,
    ):
        async for line in response.content:
            if line.startswith(b"data: "):
                event = orjson.loads(line[6:])
                if event["type"] == "response.created":
                    response_id = event["response"]["id"]
                if event["type"] == "response.output_text.delta":
                    deltas += 1
                    if deltas == 3:
                        break
        response.connection.close()  # type: ignore[union-attr]
    assert response_id is not None
    await asyncio.to_thread(wait_for_status, client, response_id, "incomplete")
    stored = client.responses.retrieve(response_id)
    assert stored.output[0].status == "incomplete"  # type: ignore[union-attr]
    assert len(stored.output_text.split()) < 500


@pytest.mark.parametrize(
    ("path", "fields"),
    [
        ("/v1/responses", {"store": False}),
        ("/v1/chat/completions", {}),  # relayed from a Chat upstream, else translated
        ("/v1/messages", {"max_tokens": 1000}),
    ],
)
async def test_a_client_leaving_any_stream_closes_the_upstream_request(
    gateway: str, fake_upstream: str, path: str, fields: dict[str, object]
) -> None:
    marker = f"leave-{uuid.uuid4().hex}"
    text = f"{marker} [[slow:20]] [[words:500]]"
    asked = {"input": text} if path == "/v1/responses" else {"messages": [user(text)]}
    body = {"model": MODEL, "stream": True, **fields, **asked}
    headers = {"anthropic-version": "2023-06-01"}
    async with (
        aiohttp.ClientSession() as session,
        session.post(gateway + path, json=body, headers=headers) as response,
    ):
        assert response.status == 200
        deltas = 0
        async for line in response.content:
            deltas += line.startswith(b"data: ") and b"delta" in line
            if deltas == 3:
                break
        response.connection.close()  # type: ignore[union-attr]
    deadline = time.monotonic() + 10
    while not await upstream_saw_leave(fake_upstream, marker):
        assert time.monotonic() < deadline, "the upstream request was never closed"
        await asyncio.sleep(0.05)


def user(text: str) -> dict[str, str]:
    return {"role": "user", "content": text}


async def raw_post(
    gateway: str, data: bytes, content_type: str = "application/json"
) -> tuple[int, dict[str, object]]:
    async with (
        aiohttp.ClientSession() as session,
        session.post(
            f"{gateway}/v1/responses", data=data, headers={"Content-Type": content_type}
        ) as response,
    ):
        return response.status, orjson.loads(await response.read())


@pytest.mark.parametrize(
    ("data", "param"),
    [
        (b"{not json", None),
        (b"", None),
        (b"[1, 2]", None),
        (b'{"input": "x"}', "model"),
        (b'{"model": "m", "input": "x", "temperature": "warm"}', "temperature"),
        (
            b'{"model": "m", "input": [{"type": "message", "role": "user", '
            b'"content": [{"type": "input_file"}]}]}',
            None,
        ),
        (b'{"model": "m", "input": "x", "tools": [{"type": "web_search"}]}', "tools[0].type"),
    ],
)
async def test_bad_requests_get_openai_errors(gateway: str, data: bytes, param: str | None) -> None:
    status, body = await raw_post(gateway, data)
    assert status == 400
    error = body["error"]
    assert isinstance(error, dict)
    assert error["type"] == "invalid_request_error"
    assert set(error) == {"message", "type", "param", "code"}
    if param is not None:
        assert error["param"] == param


async def test_oversize_body_is_413(gateway: str) -> None:
    big = orjson.dumps({"model": MODEL, "input": "x" * (MAX_BODY_BYTES + 1)})
    status, body = await raw_post(gateway, big)
    assert status == 413
    assert body["error"]["type"] == "invalid_request_error"  # type: ignore[index]


async def test_unknown_routes_and_methods_use_the_error_shape(gateway: str) -> None:
    async with aiohttp.ClientSession() as session:
        async with session.get(f"{gateway}/v1/nothing") as response:
            assert response.status == 404
            assert (await response.json())["error"]["type"] == "invalid_request_error"
        async with session.put(f"{gateway}/v1/responses") as response:
            assert response.status == 405
            assert "error" in await response.json()


async def test_health_and_ready(gateway: str) -> None:
    async with aiohttp.ClientSession() as session:
        async with session.get(f"{gateway}/health") as response:
            assert response.status == 200
        async with session.get(f"{gateway}/ready") as response:
            assert response.status == 200
            body = await response.json()
            assert body["storage"] == "ok"
            assert body["upstreams"] == {"default": "reachable"}


def test_unreachable_upstream_is_502_and_not_ready_upstream(tmp_path: object) -> None:
    args = ["--upstream", "http://127.0.0.1:9/v1", "--database", f"sqlite:///{tmp_path}/gw.db"]
    with (
        start_gateway(args) as url,
        OpenAI(base_url=url + "/v1", api_key="x", max_retries=0) as sdk,
    ):
        with pytest.raises(openai.InternalServerError) as caught:
            sdk.responses.create(model=MODEL, input="hi")
        assert caught.value.status_code == 502
        assert caught.value.code == "upstream_unavailable"
        with urllib.request.urlopen(url + "/ready") as ready:
            assert orjson.loads(ready.read())["upstreams"] == {"default": "unreachable"}


def test_upstream_credentials_come_from_the_named_variable_and_never_leak(tmp_path: object) -> None:
    secret = "sk-upstream-secret-123"
    with start_fake_upstream(api_key=secret) as upstream:
        base = ["--upstream", upstream, "--database", f"sqlite:///{tmp_path}/gw.db"]
        with (
            start_gateway(
                [*base, "--upstream-api-key-env", "FAKE_KEY"], env={"FAKE_KEY": secret}
            ) as url,
            OpenAI(base_url=url + "/v1", api_key="x", max_retries=0) as sdk,
        ):
            assert sdk.responses.create(model=MODEL, input="hi").status == "completed"
        with (
            start_gateway(
                [*base, "--upstream-api-key-env", "WRONG_KEY"], env={"WRONG_KEY": "sk-wrong"}
            ) as url,
            OpenAI(base_url=url + "/v1", api_key="x", max_retries=0) as sdk,
        ):
            with pytest.raises(openai.InternalServerError) as caught:
                sdk.responses.create(model=MODEL, input="hi")
            assert caught.value.status_code == 502
            assert "sk-wrong" not in caught.value.response.text
            assert secret not in caught.value.response.text
