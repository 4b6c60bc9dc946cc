"""Browsers as clients (``[server] cors_origins``) through the real ``stateway serve``:
the preflights a browser sends before the openai, anthropic and MCP SDKs' requests are
answered without a credential; the requests themselves still need theirs, and every
answer (JSON, an SSE stream, 401, 415, 421, 429) carries the CORS headers a page's script
needs to read it; a listed origin's WebSocket upgrade and ``/mcp`` requests pass the
cross-site check. A gateway listing no origin answers as before: no CORS headers."""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator
from pathlib import Path

import httpx2
import pytest
from websockets.exceptions import InvalidStatus
from websockets.sync.client import connect

from tests.e2e.authenticated import API_KEYS, AuthGateway, auth_gateway
from tests.e2e.test_mcp_surface import ACCEPT, INITIALIZE

MODEL = "fake-model"
PAGE = "http://localhost:5173"
"""The listed origin: a web UI's dev server on another port."""
OTHER = "https://evil.example"
PER_MINUTE = 3
"""Each key's model requests a minute."""

CONFIG = f"""[server]
cors_origins = ["{PAGE}/", "https://app.example.com"]

[rate_limits]
requests_per_minute = {PER_MINUTE}

{API_KEYS}"""

OPENAI_HEADERS = (
    "authorization, content-type, openai-organization, openai-project, openai-beta, "
    "idempotency-key, x-stainless-arch, x-stainless-lang, x-stainless-os, "
    "x-stainless-package-version, x-stainless-retry-count, x-stainless-runtime, "
    "x-stainless-runtime-version, x-stainless-timeout, x-stainless-helper-method"
)
"""What openai-node sends from a browser (``dangerouslyAllowBrowser``)."""
ANTHROPIC_HEADERS = (
    "x-api-key, content-type, anthropic-version, anthropic-beta, "
    "anthropic-dangerous-direct-browser-access, x-stainless-lang, x-stainless-retry-count, "
    "x-stainless-timeout, x-stainless-helper-method"
)
MCP_HEADERS = "authorization, content-type, mcp-session-id, mcp-protocol-version, last-event-id"


@pytest.fixture(scope="module")
def gateway(fake_upstream: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[AuthGateway]:
    directory = tmp_path_factory.mktemp("browsers")
    database = f"sqlite:///{directory / 'stateway.db'}"
    with auth_gateway(directory, fake_upstream, database, auth=CONFIG) as running:
        yield running


def key(gateway: AuthGateway) -> str:
    """A key of a tenant of its own: its own rate limit."""
    return gateway.create_key(f"browser-{uuid.uuid4().hex[:8]}")


def preflight(
    url: str, method: str, headers: str, origin: str = PAGE, **extra: str
) -> httpx2.Response:
    asked = {
        "origin": origin,
        "access-control-request-method": method,
        "access-control-request-headers": headers,
        **extra,
    }
    return httpx2.options(url, headers=asked)


@pytest.mark.parametrize(
    ("path", "method", "headers"),
    [
        ("/v1/responses", "POST", OPENAI_HEADERS),
        ("/v1/chat/completions", "POST", OPENAI_HEADERS),
        ("/v1/models", "GET", OPENAI_HEADERS),
        ("/v1/responses/resp_1", "DELETE", OPENAI_HEADERS),
        ("/v1/messages", "POST", ANTHROPIC_HEADERS),
        ("/mcp", "POST", MCP_HEADERS),
        ("/mcp", "DELETE", MCP_HEADERS),
    ],
)
def test_a_preflight_needs_no_credential_and_allows_what_the_sdks_send(
    gateway: AuthGateway, path: str, method: str, headers: str
) -> None:
    answer = preflight(gateway.url + path, method, headers)

    assert answer.status_code == 200, answer.text
    assert answer.headers["access-control-allow-origin"] == PAGE
    assert method in answer.headers["access-control-allow-methods"]
    allowed = {h.strip() for h in answer.headers["access-control-allow-headers"].split(",")}
    assert {h.strip() for h in headers.split(",")} <= allowed
    assert "access-control-allow-credentials" not in answer.headers
    assert answer.headers["x-request-id"].startswith("req_")


def test_a_preflight_from_an_unlisted_page_is_refused(gateway: AuthGateway) -> None:
    answer = preflight(gateway.url + "/v1/responses", "POST", OPENAI_HEADERS, origin=OTHER)

    assert answer.status_code == 400
    assert "access-control-allow-origin" not in answer.headers


def test_a_listed_page_may_call_a_gateway_on_a_private_network(gateway: AuthGateway) -> None:
    """Chrome's preflight from a public page to a loopback or private address."""
    answer = preflight(
        gateway.url + "/v1/responses",
        "POST",
        OPENAI_HEADERS,
        origin="https://app.example.com",
        **{"access-control-request-private-network": "true"},
    )

    assert answer.status_code == 200
    assert answer.headers["access-control-allow-private-network"] == "true"


def test_preflights_are_not_counted_by_the_rate_limits(gateway: AuthGateway) -> None:
    credential = key(gateway)
    for _ in range(PER_MINUTE * 3):
        asked = preflight(gateway.url + "/v1/responses", "POST", OPENAI_HEADERS)
        assert asked.status_code == 200
    headers = {"origin": PAGE, "authorization": f"Bearer {credential}"}
    body = {"model": MODEL, "input": "hi", "store": False}

    answers = [
        httpx2.post(gateway.url + "/v1/responses", json=body, headers=headers)
        for _ in range(PER_MINUTE + 1)
    ]

    assert [a.status_code for a in answers] == [200] * PER_MINUTE + [429]
    refused = answers[-1]
    assert refused.json()["error"]["code"] == "rate_limit_exceeded"
    assert refused.headers["access-control-allow-origin"] == PAGE
    exposed = refused.headers["access-control-expose-headers"]
    assert "retry-after" in exposed
    assert "x-request-id" in exposed


def test_the_request_itself_still_needs_its_credential(gateway: AuthGateway) -> None:
    body = {"model": MODEL, "input": "hi"}
    for path, headers in [
        ("/v1/responses", {}),
        ("/v1/messages", {"anthropic-version": "2023-06-01"}),
        ("/v1/models", {}),
    ]:
        answer = httpx2.post(gateway.url + path, json=body, headers={"origin": PAGE, **headers})
        if path == "/v1/models":
            answer = httpx2.get(gateway.url + path, headers={"origin": PAGE})

        assert answer.status_code == 401, path
        assert answer.headers["access-control-allow-origin"] == PAGE
        assert "x-request-id" in answer.headers["access-control-expose-headers"]


def test_an_answer_and_an_error_carry_the_cors_headers(gateway: AuthGateway) -> None:
    credential = key(gateway)
    headers = {"origin": PAGE, "x-api-key": credential, "anthropic-version": "2023-06-01"}
    body = {"model": MODEL, "max_tokens": 16, "messages": [{"role": "user", "content": "hi"}]}

    answered = httpx2.post(gateway.url + "/v1/messages", json=body, headers=headers)
    not_json = httpx2.post(
        gateway.url + "/v1/messages",
        content=json.dumps(body),
        headers={**headers, "content-type": "text/plain"},
    )

    assert answered.status_code == 200
    assert answered.headers["access-control-allow-origin"] == PAGE
    assert "request-id" in answered.headers["access-control-expose-headers"].split(", ")
    assert not_json.status_code == 415
    assert not_json.headers["access-control-allow-origin"] == PAGE
    assert not_json.json()["type"] == "error"


def test_an_unserved_host_is_refused_readably(gateway: AuthGateway) -> None:
    """The Host check's 421 (DNS rebinding) carries the headers too: the page reads why."""
    answer = httpx2.get(
        gateway.url + "/v1/models", headers={"origin": PAGE, "host": "gateway.example"}
    )

    assert answer.status_code == 421
    assert answer.json()["error"]["code"] == "host_not_allowed"
    assert answer.headers["access-control-allow-origin"] == PAGE


def test_a_stream_is_read_cross_origin(gateway: AuthGateway) -> None:
    headers = {"origin": PAGE, "authorization": f"Bearer {key(gateway)}"}
    body = {"model": MODEL, "input": "[[words:3]]", "stream": True}

    with httpx2.stream("POST", gateway.url + "/v1/responses", json=body, headers=headers) as sse:
        assert sse.status_code == 200
        assert sse.headers["content-type"].startswith("text/event-stream")
        assert sse.headers["access-control-allow-origin"] == PAGE
        events = [
            json.loads(line[6:])["type"] for line in sse.iter_lines() if line.startswith("data: ")
        ]

    assert events[0] == "response.created"
    assert events[-1] == "response.completed"


def test_a_listed_pages_websocket_is_accepted_another_refused(gateway: AuthGateway) -> None:
    url = gateway.url.replace("http://", "ws://", 1) + "/v1/responses"
    credential = {"x-api-key": key(gateway)}

    with connect(url, origin=PAGE, additional_headers=credential) as socket:  # type: ignore[arg-type]
        socket.send(json.dumps({"type": "response.create", "model": MODEL, "input": "hi"}))
        frames = []
        while not frames or frames[-1]["type"] not in ("response.completed", "error"):
            frames.append(json.loads(socket.recv(timeout=30)))
    with pytest.raises(InvalidStatus) as refused:
        connect(url, origin=OTHER, additional_headers=credential).close()  # type: ignore[arg-type]

    assert frames[-1]["type"] == "response.completed"
    assert refused.value.response.status_code == 403
    assert b'"origin_not_allowed"' in refused.value.response.body


def test_a_listed_pages_mcp_requests_are_served_another_refused(gateway: AuthGateway) -> None:
    """The spec's Origin check: a listed origin is a validated one; the session id is
    exposed, for the page's client to send back."""
    headers = {**ACCEPT, "authorization": f"Bearer {key(gateway)}"}

    with httpx2.Client(base_url=gateway.url, timeout=60) as http:  # the SDK's first import
        served = http.post("/mcp", json=INITIALIZE, headers={**headers, "origin": PAGE})
        refused = http.post("/mcp", json=INITIALIZE, headers={**headers, "origin": OTHER})
        ending = {**headers, "mcp-session-id": served.headers["mcp-session-id"]}
        http.delete("/mcp", headers={**ending, "mcp-protocol-version": "2025-11-25"})

    assert served.status_code == 200, served.text
    assert served.headers["access-control-allow-origin"] == PAGE
    assert "mcp-session-id" in served.headers["access-control-expose-headers"]
    assert served.headers["mcp-session-id"]
    assert refused.status_code == 403
    assert refused.json()["error"]["code"] == "origin_not_allowed"


def test_without_origins_listed_no_cors_headers_are_sent(
    fake_upstream: str, tmp_path: Path
) -> None:
    database = f"sqlite:///{tmp_path / 'stateway.db'}"
    with auth_gateway(tmp_path, fake_upstream, database) as plain:
        asked = preflight(plain.url + "/v1/responses", "POST", OPENAI_HEADERS)
        refused = httpx2.get(plain.url + "/v1/models", headers={"origin": PAGE})

    assert asked.status_code == 401  # a request as any other, without a credential
    assert refused.status_code == 401
    for answer in (asked, refused):
        assert not [name for name in answer.headers if name.startswith("access-control-")]
