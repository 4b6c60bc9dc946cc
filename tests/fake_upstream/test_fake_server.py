"""The fake upstream's HTTP surface: models, health, API key, request log, bad requests,
the announcement line and the launcher."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import openai
import orjson
import pytest
from openai import OpenAI

import stateway
from stateway.fake_upstream import build_app
from stateway.fake_upstream.app import REQUEST_LOG_SIZE
from stateway.fake_upstream.delivery import ConnectionDropped
from stateway.fake_upstream.launch import start_fake_upstream

CHAT = {"model": "m", "messages": [{"role": "user", "content": "hi"}]}


def test_models(client: OpenAI) -> None:
    models = client.models.list()
    assert [(m.id, m.object, m.created, m.owned_by) for m in models.data] == [
        ("fake-model", "model", 0, "stateway-fake")
    ]


def test_custom_model_names() -> None:
    with (
        start_fake_upstream(model_names=["alpha", "beta"]) as url,
        OpenAI(base_url=url, api_key="k", max_retries=0) as client,
    ):
        assert [model.id for model in client.models.list()] == ["alpha", "beta"]


def test_health(fake_upstream_url: str, raw_http: Any) -> None:
    status, _, body = raw_http("GET", fake_upstream_url.removesuffix("/v1") + "/health")
    assert (status, body) == (200, {"status": "ok"})


def test_api_key_enforced(fake_upstream_keyed_url: str, fake_upstream_api_key: str) -> None:
    with OpenAI(base_url=fake_upstream_keyed_url, api_key=fake_upstream_api_key) as good:
        assert good.models.list().data[0].id == "fake-model"
        reply = good.chat.completions.create(
            model="m", messages=[{"role": "user", "content": "hi"}]
        )
        assert reply.choices[0].message.content == "Hello! You said: hi"
    with OpenAI(base_url=fake_upstream_keyed_url, api_key="wrong", max_retries=0) as bad:
        for call in (bad.models.list, lambda: bad.responses.create(model="m", input="hi")):
            with pytest.raises(openai.AuthenticationError) as raised:
                call()
            assert raised.value.code == "invalid_api_key"
            assert raised.value.type == "invalid_request_error"


def test_api_key_missing(fake_upstream_keyed_url: str, raw_http: Any) -> None:
    status, _, body = raw_http("GET", fake_upstream_keyed_url + "/models")
    assert status == 401
    assert body["error"]["code"] == "invalid_api_key"
    assert body["error"]["param"] is None
    root = fake_upstream_keyed_url.removesuffix("/v1")
    assert raw_http("GET", root + "/health")[0] == 200
    assert raw_http("GET", root + "/_fake/requests")[0] == 200


def test_request_log(client: OpenAI, fake_upstream_url: str, raw_http: Any) -> None:
    log_url = fake_upstream_url.removesuffix("/v1") + "/_fake/requests"
    assert raw_http("DELETE", log_url)[:1] == (200,)
    client.chat.completions.create(model="m", messages=[{"role": "user", "content": "first"}])
    client.responses.create(model="m", input="second", instructions="be nice")
    client.models.list()
    status, _, log = raw_http("GET", log_url)
    assert status == 200
    assert [entry["path"] for entry in log["data"]] == ["/v1/chat/completions", "/v1/responses"]
    assert log["data"][0]["body"]["messages"] == [{"role": "user", "content": "first"}]
    assert log["data"][1]["body"]["instructions"] == "be nice"
    raw_http("DELETE", log_url)
    assert raw_http("GET", log_url)[2] == {"data": [], "counts": {}}


def test_request_counts_outlast_the_log(
    client: OpenAI, fake_upstream_url: str, raw_http: Any
) -> None:
    log_url = fake_upstream_url.removesuffix("/v1") + "/_fake/requests"
    raw_http("DELETE", log_url)
    for index in range(REQUEST_LOG_SIZE + 5):
        client.chat.completions.create(model="m", messages=[{"role": "user", "content": "x"}])
        if index % 50 == 0:
            client.responses.create(model="other", input="y")
    client.models.list()
    log = raw_http("GET", log_url)[2]
    assert len(log["data"]) == REQUEST_LOG_SIZE
    assert log["counts"] == {"m": REQUEST_LOG_SIZE + 5, "other": 5}
    assert raw_http("DELETE", log_url)[2] == {"data": [], "counts": {}}
    assert raw_http("GET", log_url)[2]["counts"] == {}


def test_request_log_marks_a_client_that_left_a_slow_answer(
    client: OpenAI, fake_upstream_url: str, raw_http: Any
) -> None:
    log_url = fake_upstream_url.removesuffix("/v1") + "/_fake/requests"
    raw_http("DELETE", log_url)
    client.responses.create(model="m", input="whole [[slow:1]] [[words:2]]")
    stream = client.responses.create(model="m", input="left [[slow:50]] [[words:100]]", stream=True)
    for event in stream:
        if event.type == "response.output_text.delta":
            break
    stream.close()
    deadline = time.monotonic() + 10
    while not (log := raw_http("GET", log_url)[2]["data"])[-1].get("disconnected"):
        assert time.monotonic() < deadline, "the fake never noticed the client leave"
        time.sleep(0.02)
    assert "disconnected" not in log[0]


@pytest.mark.parametrize(
    ("path", "body", "param"),
    [
        ("/chat/completions", b"{not json", None),
        ("/chat/completions", b"[1, 2]", None),
        ("/chat/completions", b'{"messages": [{"role": "user", "content": "x"}]}', "model"),
        ("/chat/completions", b'{"model": "m"}', "messages"),
        ("/chat/completions", b'{"model": "m", "messages": []}', "messages"),
        ("/chat/completions", b'{"model": "m", "messages": ["x"]}', "messages[0]"),
        ("/chat/completions", orjson.dumps({**CHAT, "max_tokens": 0}), "max_tokens"),
        ("/responses", b'{"input": "x"}', "model"),
        ("/responses", b'{"model": "m"}', "input"),
        (
            "/responses",
            b'{"model": "m", "input": "x", "max_output_tokens": "3"}',
            "max_output_tokens",
        ),
    ],
)
def test_bad_requests(
    fake_upstream_url: str, raw_http: Any, path: str, body: bytes, param: str | None
) -> None:
    status, headers, reply = raw_http("POST", fake_upstream_url + path, body)
    assert status == 400
    assert headers["content-type"] == "application/json"
    assert set(reply["error"]) == {"message", "type", "param", "code"}
    assert reply["error"]["type"] == "invalid_request_error"
    assert reply["error"]["param"] == param


def test_unknown_routes(fake_upstream_url: str, raw_http: Any) -> None:
    assert raw_http("GET", fake_upstream_url + "/nope")[0] == 404
    status, _, reply = raw_http("GET", fake_upstream_url + "/chat/completions")
    assert status == 405
    assert "error" in reply


def test_announces_exactly_one_line() -> None:
    env = dict(os.environ, PYTHONPATH=str(Path(stateway.__file__).parent.parent))
    command = [sys.executable, "-m", "stateway.fake_upstream", "--port", "0"]
    process = subprocess.Popen(command, stdout=subprocess.PIPE, text=True, env=env)
    try:
        assert process.stdout is not None
        line = process.stdout.readline()
        assert re.fullmatch(r"fake-upstream listening on http://127\.0\.0\.1:\d+/v1\n", line)
    finally:
        process.terminate()
        rest, _ = process.communicate(timeout=10)
    assert rest == ""


async def test_cut_without_uvicorn_transport_raises() -> None:
    """Under an ASGI server that exposes no transport, a cut aborts with an exception."""
    app = build_app()
    body = orjson.dumps({"model": "m", "messages": [{"role": "user", "content": "[[cut:0]]"}]})
    sent: list[Any] = []

    async def receive() -> dict[str, Any]:
        return {"type": "http.request", "body": body, "more_body": False}

    async def send(message: Any) -> None:
        sent.append(message)

    scope = {"type": "http", "method": "POST", "path": "/v1/chat/completions", "headers": []}
    with pytest.raises(ConnectionDropped):
        await app(scope, receive, send)
    assert sent == []
    assert len(app.requests) == 1


async def test_request_log_keeps_the_last_200() -> None:
    app = build_app()

    async def receive() -> dict[str, Any]:
        return {"type": "http.request", "body": orjson.dumps(CHAT), "more_body": False}

    async def send(message: Any) -> None:
        pass

    scope = {"type": "http", "method": "POST", "path": "/v1/chat/completions", "headers": []}
    for _ in range(205):
        await app(scope, receive, send)
    assert len(app.requests) == 200


def test_launcher_reports_a_server_that_cannot_start() -> None:
    with (
        pytest.raises(RuntimeError, match="exited early"),
        start_fake_upstream(host="256.256.256.256"),
    ):
        pass
