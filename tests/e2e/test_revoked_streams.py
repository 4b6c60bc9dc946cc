"""An API key revoked while its HTTP streams are open (``stateway keys revoke`` against
the database of a real gateway): each stream ends within the check interval plus the key
cache's TTL, with its protocol's authentication error, as its WebSocket connections and
MCP streams do. A client's own run is cancelled with its stream; a background run watched
goes on to its end (only the watch ends). A WebSocket connection sending no frame is
closed all the same. A key that expires while its streams are open ends them alike, at
its expiry, in the words it would be refused with."""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import httpx2
import pytest
from websockets.exceptions import ConnectionClosed
from websockets.sync.client import connect

from stateway.app import TESTING_KEEPALIVE_ENV, TESTING_RECHECK_ENV
from tests.e2e.authenticated import AuthGateway, auth_gateway, keys_command

MODEL = "fake-model"
SLOW = "[[slow:200]] [[words:40]]"
"""An answer of ~8 s: still streaming when its key is revoked (its first event, then the
command revoking it, a fraction of a second) and for ``BOUND`` after."""
OUTLIVING = "[[slow:300]] [[words:200]]"
"""An answer of ~60 s, still streaming when a key made by any of :func:`expiring_key`'s
tries expires (which ends it)."""
BOUND = 5.0
"""Seconds a revoked key's stream may last after the revocation: checked every 0.2 s
here (``TESTING_RECHECK_ENV``), seen within the cache's 0.5 s TTL, and time to spare."""
REVOKED = "This API key has been revoked."
EXPIRED = "This API key has expired."
LIFE = 3.0
"""Seconds an expiring key lives: made (``stateway keys create``), then a stream opened
with it."""
LEFT = 1.5
"""Seconds of its life a new expiring key must have left: time to open its stream."""
AT_EXPIRY = 3.0
"""Seconds an expired key's stream may last past its expiry (a timer ends it, no check is
waited for): it ends then, not long after. The slack is a loaded machine's: an idle
WebSocket's close came 1.3 s late once under the whole suite."""


@pytest.fixture(scope="module")
def gateway(fake_upstream: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[AuthGateway]:
    directory = tmp_path_factory.mktemp("revoked-streams")
    database = f"sqlite:///{directory / 'stateway.db'}"
    env = {TESTING_RECHECK_ENV: "0.2"}
    with auth_gateway(directory, fake_upstream, database, env=env) as running:
        yield running


@pytest.fixture(scope="module")
def keeping_alive(
    fake_upstream: str, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[AuthGateway]:
    """The gateway, its streams' keep-alives every 50 ms: a keyed stream's retry waiting
    for its key has its stream opened at once."""
    directory = tmp_path_factory.mktemp("revoked-waits")
    database = f"sqlite:///{directory / 'stateway.db'}"
    env = {TESTING_RECHECK_ENV: "0.2", TESTING_KEEPALIVE_ENV: "0.05"}
    with auth_gateway(directory, fake_upstream, database, env=env) as running:
        yield running


def revoke(gateway: AuthGateway, name: str) -> float:
    """Revoke the key named ``name`` with ``stateway keys``; when that was done
    (monotonic)."""
    listed = keys_command("list", "--json", "--database", gateway.database)
    [entry] = [k for k in json.loads(listed.stdout) if k["name"] == name]
    revoked = keys_command("revoke", entry["id"], "--database", gateway.database)
    assert revoked.returncode == 0, revoked.stderr
    return time.monotonic()


def events_after_revoking(
    gateway: AuthGateway, name: str, lines: Iterator[str]
) -> tuple[list[dict[str, Any]], list[str], float]:
    """Read a stream's first event, revoke the key, read the rest: every ``data:`` JSON,
    every ``event:`` name, and how long the stream lasted after the revocation."""
    data: list[dict[str, Any]] = []
    names: list[str] = []
    revoked_at: float | None = None
    for line in lines:
        if line.startswith("event: "):
            names.append(line[7:])
        elif line.startswith("data: ") and line != "data: [DONE]":
            data.append(json.loads(line[6:]))
            if revoked_at is None:
                revoked_at = revoke(gateway, name)
    assert revoked_at is not None, "the stream sent nothing"
    return data, names, time.monotonic() - revoked_at


def keys(gateway: AuthGateway) -> tuple[str, str, str]:
    """A key to revoke (and its name), and another of the same tenant's."""
    name, key = key_to_revoke(gateway)
    return name, key, gateway.create_key("acme", "--name", f"other-{name}")


def key_to_revoke(gateway: AuthGateway) -> tuple[str, str]:
    """A key to revoke, and its name (made with ``stateway keys create``)."""
    name = f"streaming-{uuid.uuid4().hex}"
    return name, gateway.create_key("acme", "--name", name)


def bearer(key: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {key}"}


def status_once_settled(gateway: AuthGateway, key: str, response_id: str) -> str:
    deadline = time.monotonic() + 60
    with httpx2.Client(base_url=gateway.url, headers=bearer(key), timeout=30) as client:
        while True:
            status: str = client.get(f"/v1/responses/{response_id}").json()["status"]
            if status not in ("queued", "in_progress"):
                return status
            assert time.monotonic() < deadline, f"{response_id} is still {status}"
            time.sleep(0.2)


def test_a_responses_stream_ends_with_an_error_event_and_its_run_with_it(
    gateway: AuthGateway,
) -> None:
    name, key, other = keys(gateway)
    body = {"model": MODEL, "input": SLOW, "stream": True}
    with httpx2.stream(
        "POST", gateway.url + "/v1/responses", json=body, headers=bearer(key), timeout=60
    ) as sse:
        assert sse.status_code == 200
        data, names, lasted = events_after_revoking(gateway, name, sse.iter_lines())

    assert lasted < BOUND
    assert names[-1] == "error"
    assert data[-1] == {
        "type": "error",
        "code": "invalid_api_key",
        "message": REVOKED,
        "param": None,
        "error": {  # as hosted sends it (the reference has the fields above)
            "type": "invalid_request_error",
            "code": "invalid_api_key",
            "message": REVOKED,
            "param": None,
        },
        "sequence_number": data[-2]["sequence_number"] + 1,  # as every event of the stream
    }
    assert "response.completed" not in names
    # The client's own run, ended as when its client leaves (stored incomplete,
    # client_disconnected), not answered to no one.
    assert status_once_settled(gateway, other, data[0]["response"]["id"]) == "incomplete"


def test_a_background_watch_ends_and_the_run_completes(gateway: AuthGateway) -> None:
    name, key, other = keys(gateway)
    with httpx2.Client(base_url=gateway.url, headers=bearer(key), timeout=60) as client:
        started = client.post(
            "/v1/responses", json={"model": MODEL, "input": SLOW, "background": True}
        )
        assert started.status_code == 200, started.text
        response_id = started.json()["id"]
        with client.stream("GET", f"/v1/responses/{response_id}?stream=true") as sse:
            assert sse.status_code == 200
            data, names, lasted = events_after_revoking(gateway, name, sse.iter_lines())

    assert lasted < BOUND
    assert names[-1] == "error"
    assert (data[-1]["code"], data[-1]["message"]) == ("invalid_api_key", REVOKED)
    assert data[-1]["sequence_number"] == data[-2]["sequence_number"] + 1
    assert "response.completed" not in names
    # Only the watch ended: the run goes on, and the tenant's other key sees it finish.
    assert status_once_settled(gateway, other, response_id) == "completed"


def test_a_messages_stream_ends_with_an_authentication_error_event(
    gateway: AuthGateway,
) -> None:
    name, key = key_to_revoke(gateway)
    body = {
        "model": MODEL,
        "max_tokens": 200,
        "stream": True,
        "messages": [{"role": "user", "content": SLOW}],
    }
    headers = {"x-api-key": key, "anthropic-version": "2023-06-01"}
    with httpx2.stream(
        "POST", gateway.url + "/v1/messages", json=body, headers=headers, timeout=60
    ) as sse:
        assert sse.status_code == 200
        data, names, lasted = events_after_revoking(gateway, name, sse.iter_lines())

    assert lasted < BOUND
    assert names[-1] == "error"
    assert data[-1] == {
        "type": "error",
        "error": {"type": "authentication_error", "message": REVOKED},
    }
    assert "message_stop" not in names


def test_a_relayed_chat_stream_ends_with_an_error_chunk(gateway: AuthGateway) -> None:
    """The fast path (a Chat upstream, no gateway tools): the relay is cut, its upstream
    request closed, and the stream ends with the error line a relay ends a failure with."""
    name, key = key_to_revoke(gateway)
    body = {"model": MODEL, "stream": True, "messages": [{"role": "user", "content": SLOW}]}
    with httpx2.stream(
        "POST", gateway.url + "/v1/chat/completions", json=body, headers=bearer(key), timeout=60
    ) as sse:
        assert sse.status_code == 200
        data, _, lasted = events_after_revoking(gateway, name, sse.iter_lines())

    assert lasted < BOUND
    assert data[-1] == {"error": data[-1]["error"]}  # Chat's shape: no sequence number
    assert data[-1]["error"]["code"] == "invalid_api_key"
    assert data[-1]["error"]["message"] == REVOKED
    assert all(chunk.get("choices", [{}])[0].get("finish_reason") is None for chunk in data[:-1])


KEYED = {
    "/v1/chat/completions": ({"Authorization": "Bearer {}"}, ": keep-alive"),
    "/v1/messages": ({"x-api-key": "{}", "anthropic-version": "2023-06-01"}, "event: ping"),
}
"""How each keyed stream's route is sent a key, and its keep-alive's first line."""


@pytest.mark.parametrize("path", list(KEYED))
def test_a_keyed_retrys_stream_waiting_for_its_key_ends_with_the_auth_error(
    keeping_alive: AuthGateway, path: str
) -> None:
    """A retry of a keyed stream waits for the first (still streaming) in its own stream,
    opened and kept alive: its key revoked meanwhile, that stream ends as any stream of
    the key does, with the protocol's authentication error, within the same bound."""
    gateway = keeping_alive
    name, key = key_to_revoke(gateway)
    credential, idle = KEYED[path]
    headers = {k: v.format(key) for k, v in credential.items()}
    headers["Idempotency-Key"] = uuid.uuid4().hex
    body = {
        "model": MODEL,
        "max_tokens": 200,
        "stream": True,
        "messages": [{"role": "user", "content": SLOW}],
    }
    url = gateway.url + path
    with (
        httpx2.stream("POST", url, json=body, headers=headers, timeout=60) as first,
        httpx2.stream("POST", url, json=body, headers=headers, timeout=60) as retry,
    ):
        assert (first.status_code, retry.status_code) == (200, 200)
        lines = retry.iter_lines()
        assert next(lines) == idle  # it waits, kept alive
        revoked_at = revoke(gateway, name)
        data, names = lines_until_closed(lines)
        lasted = time.monotonic() - revoked_at

    assert lasted < BOUND
    if path == "/v1/messages":
        assert set(names) == {"ping", "error"}  # nothing of the first's answer
        assert data[-1] == {
            "type": "error",
            "error": {"type": "authentication_error", "message": REVOKED},
        }
    else:  # the first's relay, cut by the revocation too, may free the key first: then
        # the retry's own relay begins in its stream, and is cut the same way
        error = data[-1]["error"]
        assert (error["code"], error["message"]) == ("invalid_api_key", REVOKED)


def until_closed(socket: Any, frames: list[dict[str, Any]]) -> ConnectionClosed:
    """Read frames into ``frames`` until the gateway closes the connection."""
    while True:
        try:
            frames.append(json.loads(socket.recv(timeout=30)))
        except ConnectionClosed as closed:
            return closed


def test_a_websocket_sending_no_frame_is_closed_all_the_same(gateway: AuthGateway) -> None:
    """No request frame comes to check the key: the timer does, and the connection gets
    the 401 error frame and the 1008 close as a frame's check would give it."""
    name, key = key_to_revoke(gateway)
    url = gateway.url.replace("http://", "ws://", 1) + "/v1/responses"
    frames: list[dict[str, Any]] = []
    with connect(url, additional_headers=bearer(key)) as socket:
        socket.send(json.dumps({"type": "response.create", "model": MODEL, "input": SLOW}))
        frames.append(json.loads(socket.recv(timeout=30)))
        revoked_at = revoke(gateway, name)
        closed = until_closed(socket, frames)
        lasted = time.monotonic() - revoked_at

    assert lasted < BOUND
    assert frames[-1]["type"] == "error"
    assert (frames[-1]["status"], frames[-1]["error"]["message"]) == (401, REVOKED)
    assert "sequence_number" not in frames[-1]  # the WebSocket error frame's own shape
    assert closed.rcvd is not None
    assert closed.rcvd.code == 1008


def test_an_unrevoked_keys_stream_runs_to_its_end(gateway: AuthGateway) -> None:
    """Checked all along (every 0.2 s here), a key that holds changes nothing."""
    _, key = key_to_revoke(gateway)
    body = {"model": MODEL, "input": "[[slow:100]] [[words:10]]", "stream": True}
    with httpx2.stream(
        "POST", gateway.url + "/v1/responses", json=body, headers=bearer(key), timeout=60
    ) as sse:
        names = [line[7:] for line in sse.iter_lines() if line.startswith("event: ")]
    assert names[-1] == "response.completed"


def expiring_key(gateway: AuthGateway) -> tuple[str, float]:
    """A key of the tenant expiring ``LIFE`` seconds from now, and when (Unix time); made
    again to live four times as long when making it left less than ``LEFT`` of that life on
    a loaded machine, or took all of it (the command refuses an expiry in the past), so the
    stream opens before the key expires."""
    for life in (LIFE, 4 * LIFE, 16 * LIFE):
        expires = time.time() + life
        moment = datetime.fromtimestamp(expires, UTC).isoformat()
        made = keys_command(
            "create", "--tenant", "acme", "--database", gateway.database, "--expires", moment
        )
        if made.returncode != 0:
            assert "is in the past" in made.stderr, made.stderr
            continue
        if expires - time.time() >= LEFT:
            return made.stdout.strip(), expires
    raise AssertionError(f"making a key took more than {16 * LIFE - LEFT:.0f} s")


def lines_until_closed(lines: Iterator[str]) -> tuple[list[dict[str, Any]], list[str]]:
    """Every ``data:`` JSON and every ``event:`` name of a stream until it ends."""
    data: list[dict[str, Any]] = []
    names: list[str] = []
    for line in lines:
        if line.startswith("event: "):
            names.append(line[7:])
        elif line.startswith("data: ") and line != "data: [DONE]":
            data.append(json.loads(line[6:]))
    return data, names


def test_an_expiring_keys_responses_stream_ends_at_its_expiry(gateway: AuthGateway) -> None:
    """No check is waited for: a timer at the expiry ends the stream, with the error event
    numbered next, in the words an expired key is refused with."""
    key, expires = expiring_key(gateway)
    body = {"model": MODEL, "input": OUTLIVING, "stream": True}
    with httpx2.stream(
        "POST", gateway.url + "/v1/responses", json=body, headers=bearer(key), timeout=60
    ) as sse:
        assert sse.status_code == 200
        data, names = lines_until_closed(sse.iter_lines())
    ended = time.time()

    assert expires <= ended < expires + AT_EXPIRY
    assert names[-1] == "error"
    assert names[-2] != "error"  # streamed until then
    assert data[-1] == {
        "type": "error",
        "code": "invalid_api_key",
        "message": EXPIRED,
        "param": None,
        "error": {
            "type": "invalid_request_error",
            "code": "invalid_api_key",
            "message": EXPIRED,
            "param": None,
        },
        "sequence_number": data[-2]["sequence_number"] + 1,
    }
    assert "response.completed" not in names


def test_an_expiring_keys_messages_stream_ends_with_an_authentication_error_event(
    gateway: AuthGateway,
) -> None:
    key, expires = expiring_key(gateway)
    body = {
        "model": MODEL,
        "max_tokens": 200,
        "stream": True,
        "messages": [{"role": "user", "content": OUTLIVING}],
    }
    headers = {"x-api-key": key, "anthropic-version": "2023-06-01"}
    with httpx2.stream(
        "POST", gateway.url + "/v1/messages", json=body, headers=headers, timeout=60
    ) as sse:
        assert sse.status_code == 200
        data, names = lines_until_closed(sse.iter_lines())

    assert expires <= time.time() < expires + AT_EXPIRY
    assert names[-1] == "error"
    assert data[-1] == {
        "type": "error",
        "error": {"type": "authentication_error", "message": EXPIRED},
    }
    assert "message_stop" not in names


def test_an_expiring_keys_relayed_chat_stream_ends_with_an_error_chunk(
    gateway: AuthGateway,
) -> None:
    key, expires = expiring_key(gateway)
    body = {"model": MODEL, "stream": True, "messages": [{"role": "user", "content": OUTLIVING}]}
    with httpx2.stream(
        "POST", gateway.url + "/v1/chat/completions", json=body, headers=bearer(key), timeout=60
    ) as sse:
        assert sse.status_code == 200
        data, _ = lines_until_closed(sse.iter_lines())

    assert expires <= time.time() < expires + AT_EXPIRY
    assert data[-1] == {"error": data[-1]["error"]}
    assert (data[-1]["error"]["code"], data[-1]["error"]["message"]) == (
        "invalid_api_key",
        EXPIRED,
    )
    assert len(data) > 1


def test_an_expiring_keys_idle_websocket_is_closed_at_its_expiry(gateway: AuthGateway) -> None:
    """No frame comes, nothing streams: the connection gets the 401 error frame and the
    1008 close at the key's expiry, as a revoked key's does."""
    key, expires = expiring_key(gateway)
    url = gateway.url.replace("http://", "ws://", 1) + "/v1/responses"
    frames: list[dict[str, Any]] = []
    with connect(url, additional_headers=bearer(key)) as socket:
        closed = until_closed(socket, frames)

    assert expires <= time.time() < expires + AT_EXPIRY
    [refused] = frames
    assert refused == {
        "type": "error",
        "status": 401,
        "error": {
            "type": "invalid_request_error",
            "code": "invalid_api_key",
            "message": EXPIRED,
            "param": None,
        },
    }
    assert closed.rcvd is not None
    assert (closed.rcvd.code, closed.rcvd.reason) == (1008, EXPIRED)


def test_zz_no_key_reached_the_log(gateway: AuthGateway) -> None:
    assert "sk-sw-" not in Path(gateway.log).read_text()
