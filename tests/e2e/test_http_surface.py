"""The HTTP surface through the real ``stateway serve`` process: held stream status lines,
keep-alive comments, slow bodies, content types, the Host check and WebSocket upgrades."""

from __future__ import annotations

import re
import socket
import sys
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import aiohttp
import openai
import orjson
import pytest
from openai import OpenAI

from stateway.app import TESTING_KEEPALIVE_ENV
from stateway.launch import GATEWAY_ANNOUNCEMENT, launch

MODEL = "fake-model"
SHAPE = {"message", "type", "param", "code"}


@pytest.fixture(scope="module")
def served_log(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("surface") / "served.log"


@pytest.fixture(scope="module")
def served(fake_upstream: str, served_log: Path) -> Iterator[str]:
    """One gateway (SQLite, chat upstream), its keep-alive interval and body timeout
    lowered, its stderr kept in ``served_log``."""
    directory = served_log.parent
    command = [sys.executable, "-m", "stateway", "serve", "--port", "0"]
    command += ["--upstream", fake_upstream, "--database", f"sqlite:///{directory / 'gw.db'}"]
    env = {TESTING_KEEPALIVE_ENV: "0.2", "STATEWAY_REQUEST_BODY_TIMEOUT": "1"}
    with (
        open(served_log, "w") as log,
        launch(command, GATEWAY_ANNOUNCEMENT, env=env, stderr=log) as gateway,
    ):
        yield gateway.url


def exchange(url: str, request: bytes, within: float = 10.0) -> bytes:
    """Send raw bytes, read until the server closes, the reply is whole (its
    ``content-length``, or the head of a 101) or ``within`` seconds pass."""
    host, port = url.removeprefix("http://").split(":")
    received = b""
    with socket.create_connection((host, int(port)), timeout=within) as sock:
        sock.sendall(request)
        deadline = time.monotonic() + within
        while time.monotonic() < deadline:
            try:
                chunk = sock.recv(65536)
            except TimeoutError:
                break
            if not chunk:
                break
            received += chunk
            if received.startswith(b"HTTP/1.1 101 ") and b"\r\n\r\n" in received:
                break  # switched protocols: the head is the whole HTTP reply
            if b"\r\n\r\n" in received and b"content-length: " in received.lower():
                head, _, body = received.partition(b"\r\n\r\n")
                length = int(head.lower().split(b"content-length: ")[1].split(b"\r\n")[0])
                if len(body) >= length:
                    break
    return received


def logged_after(url: str, log: Path, within: float = 10.0) -> str:
    """The server's log once everything logged before now is in it: a request known to
    log a warning is sent, and the log read once that warning appears (bounded)."""
    marker = "answered 503"
    before = log.read_text().count(marker)
    with (
        OpenAI(base_url=url + "/v1", api_key="x", max_retries=0) as sdk,
        pytest.raises(openai.InternalServerError),
    ):
        sdk.responses.create(model=MODEL, input="[[error:503]]")
    deadline = time.monotonic() + within
    while (text := log.read_text()).count(marker) == before:
        assert time.monotonic() < deadline, "the gateway logged nothing"
        time.sleep(0.02)
    return text


@pytest.mark.parametrize(("status", "gateway_status"), [(429, 429), (500, 502)])
def test_stream_failing_before_output_is_an_http_error(
    served: str, status: int, gateway_status: int
) -> None:
    with (
        OpenAI(base_url=served + "/v1", api_key="x", max_retries=0) as sdk,
        pytest.raises(openai.APIStatusError) as caught,
    ):
        sdk.responses.create(model=MODEL, input=f"[[error:{status}]]", stream=True)
    assert caught.value.status_code == gateway_status
    assert caught.value.response.headers["content-type"] == "application/json"
    assert isinstance(caught.value.body, dict)
    assert set(caught.value.body) >= SHAPE
    if status == 429:
        assert caught.value.response.headers.get("retry-after") == "1"


async def test_stalled_upstream_gets_keep_alive_comments(served: str) -> None:
    body = {"model": MODEL, "input": "[[slow:1500]] [[words:2]]", "stream": True}
    lines: list[bytes] = []
    async with (
        aiohttp.ClientSession() as session,
        session.post(f"{served}/v1/responses", json=body) as response,
    ):
        assert response.status == 200
        async for line in response.content:
            lines.append(line.rstrip(b"\n"))
    first_delta = next(i for i, line in enumerate(lines) if b"output_text.delta" in line)
    comments = [i for i, line in enumerate(lines) if line.startswith(b": keep-alive")]
    assert sum(i < first_delta for i in comments) >= 3  # silent 1.5 s before the first
    data = [orjson.loads(line[6:]) for line in lines if line.startswith(b"data: ")]
    assert [e["sequence_number"] for e in data] == list(range(len(data)))
    assert data[-1]["type"] == "response.completed"


MCP_ACCEPT = "Accept: application/json, text/event-stream\r\n"


@pytest.mark.parametrize(
    ("path", "extra"), [("/v1/responses", ""), ("/mcp", MCP_ACCEPT)], ids=["responses", "mcp"]
)
def test_half_sent_body_is_a_408_within_seconds(served: str, path: str, extra: str) -> None:
    host = served.removeprefix("http://")
    head = (
        f"POST {path} HTTP/1.1\r\nHost: {host}\r\n{extra}"
        "Content-Type: application/json\r\nContent-Length: 100\r\n\r\n"
    )
    started = time.monotonic()
    reply = exchange(served, head.encode() + b'{"model": "fake-model", ')
    assert time.monotonic() - started < 5
    assert reply.startswith(b"HTTP/1.1 408 "), reply[:200]
    error = orjson.loads(reply.partition(b"\r\n\r\n")[2])["error"]
    assert set(error) == SHAPE
    assert error["code"] == "request_timeout"


MAX_BODY_BYTES = 32 * 1024 * 1024  # [server] max_body_bytes, unchanged here


def test_an_mcp_body_past_the_body_limit_is_a_413_as_on_every_route(served: str) -> None:
    host = served.removeprefix("http://")
    head = (
        f"POST /mcp HTTP/1.1\r\nHost: {host}\r\n{MCP_ACCEPT}"
        f"Content-Type: application/json\r\nContent-Length: {MAX_BODY_BYTES + 1}\r\n\r\n"
    )
    reply = exchange(served, head.encode())
    assert reply.startswith(b"HTTP/1.1 413 "), reply[:200]
    error = orjson.loads(reply.partition(b"\r\n\r\n")[2])["error"]
    assert set(error) == SHAPE
    assert error["code"] == "request_too_large"


async def test_an_mcp_body_within_the_body_limit_is_served(served: str) -> None:
    """Larger than the ``mcp`` SDK's own default (4 MiB): the gateway's limit is the one."""
    initialize = {
        "jsonrpc": "2.0",
        "id": 1,
        "method": "initialize",
        "params": {
            "protocolVersion": "2025-11-25",
            "capabilities": {"experimental": {"padding": {"text": "x" * (5 * 1024 * 1024)}}},
            "clientInfo": {"name": "test", "version": "1"},
        },
    }
    headers = {"Accept": "application/json, text/event-stream"}
    async with (
        aiohttp.ClientSession() as session,
        session.post(f"{served}/mcp", json=initialize, headers=headers) as response,
    ):
        assert response.status == 200, await response.text()
        session_id = response.headers["mcp-session-id"]
        await response.read()
        ended = {"mcp-session-id": session_id, "mcp-protocol-version": "2025-11-25"}
        async with session.delete(f"{served}/mcp", headers=ended) as closed:
            assert closed.status == 200


def counted(url: str, route: str) -> dict[str, float]:
    """``stateway_requests_total`` of ``route``, by status."""
    text = urllib.request.urlopen(url + "/metrics").read().decode()
    pattern = rf'^stateway_requests_total{{route="{re.escape(route)}",status="(\d+)"}} (\S+)$'
    return {status: float(n) for status, n in re.findall(pattern, text, re.MULTILINE)}


@pytest.mark.parametrize(
    "path",
    [
        "/v1/responses/compact",
        "/v1/responses/input_tokens",
        "/v1/messages/count_tokens",
        "/v1/conversations",
        "/mcp",
    ],
)
def test_a_client_gone_mid_body_is_counted_499_and_logs_no_error(
    served: str, served_log: Path, path: str
) -> None:
    logged_before = len(served_log.read_text())
    counted_before = counted(served, path)  # the module's other tests' requests to it
    host = served.removeprefix("http://")
    head = (
        f"POST {path} HTTP/1.1\r\nHost: {host}\r\n"
        "Content-Type: application/json\r\nContent-Length: 100\r\n\r\n"
    )
    name, port = host.split(":")
    with socket.create_connection((name, int(port))) as sock:
        sock.sendall(head.encode() + b'{"model": ')
    deadline = time.monotonic() + 10
    while (statuses := counted(served, path)) == counted_before:
        assert time.monotonic() < deadline, "the request was never counted"
        time.sleep(0.02)
    added = {s: n - counted_before.get(s, 0.0) for s, n in statuses.items()}
    assert {s: n for s, n in added.items() if n} == {"499": 1.0}
    log = logged_after(served, served_log)[logged_before:]
    assert "ERROR" not in log
    assert "Traceback" not in log


@pytest.mark.parametrize(
    ("content_type", "status"),
    [
        ("text/plain", 415),
        ("application/x-www-form-urlencoded", 415),
        (None, 415),
        ("application/json; charset=utf-8", 200),
    ],
)
async def test_content_types(served: str, content_type: str | None, status: int) -> None:
    data = orjson.dumps({"model": MODEL, "input": "hi"})
    headers = {} if content_type is None else {"Content-Type": content_type}
    async with (
        aiohttp.ClientSession(skip_auto_headers=["Content-Type"]) as session,
        session.post(f"{served}/v1/responses", data=data, headers=headers) as response,
    ):
        assert response.status == status
        if status == 415:
            error = (await response.json())["error"]
            assert set(error) == SHAPE
            assert error["code"] == "unsupported_media_type"


async def test_foreign_host_is_refused_and_loopback_names_served(served: str) -> None:
    port = served.rsplit(":", 1)[1]
    body = {"model": MODEL, "input": "hi"}
    async with aiohttp.ClientSession() as session:
        for host, status in [
            (f"evil.example:{port}", 421),
            (f"localhost:{port}", 200),
            (f"127.0.0.1:{port}", 200),
        ]:
            headers = {"Host": host}
            async with session.post(
                f"{served}/v1/responses", json=body, headers=headers
            ) as response:
                assert response.status == status, host
                if status == 421:
                    assert (await response.json())["error"]["code"] == "host_not_allowed"


def test_websocket_upgrade_is_accepted_without_server_warnings(
    served: str, served_log: Path
) -> None:
    """WebSocket mode (docs/websocket.md) upgrades ``GET /v1/responses`` with Codex's beta
    header; its own tests live in test_websocket_*.py."""
    host = served.removeprefix("http://")
    request = (
        f"GET /v1/responses HTTP/1.1\r\nHost: {host}\r\nUpgrade: websocket\r\n"
        "Connection: Upgrade\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n"
        "Sec-WebSocket-Version: 13\r\nopenai-beta: responses_websockets=2026-02-06\r\n"
        "Authorization: Bearer x\r\n\r\n"
    )
    reply = exchange(served, request.encode())
    assert reply.startswith(b"HTTP/1.1 101 "), reply[:200]
    log = logged_after(served, served_log)
    assert [line for line in log.splitlines() if line.startswith(("WARNING:", "ERROR:"))] == []


async def test_405_allow_and_reserved_routes(served: str) -> None:
    async with aiohttp.ClientSession() as session:
        async with session.get(f"{served}/v1/responses") as response:
            assert response.status == 405
            assert response.headers["Allow"] == "POST"
        async with session.get(f"{served}/v1/responses/compact") as response:
            assert response.status == 405
            assert response.headers["Allow"] == "POST"
        for method, path in [
            ("POST", "/v1/responses/compact/items"),
            ("POST", "/v1/responses/input_tokens/x"),
        ]:
            async with session.request(method, served + path, json={}) as response:
                assert response.status == 404
                error = (await response.json())["error"]
                assert error["message"] == f"Unknown route: {method} {path}."
                assert error["param"] is None
