"""API keys end to end: made, listed and revoked with ``stateway keys`` against the
database a running gateway uses, sent by the official ``openai`` (bearer) and
``anthropic`` (``x-api-key``) SDKs; refusals in each SDK's error shape; the keys never
in the gateway's log."""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anthropic
import httpx2
import openai
import pytest
from websockets.exceptions import ConnectionClosed, InvalidStatus
from websockets.sync.client import connect

from stateway.app import TESTING_RECHECK_ENV
from tests.e2e.authenticated import AuthGateway, auth_gateway, keys_command, stateway
from tests.e2e.routing import fake_requests

MODEL = "fake-model"
ADMIN = f"admin-{uuid.uuid4().hex}"
"""The gateway's admin credential (``STATEWAY_ADMIN_KEY``)."""
USED: list[str] = [ADMIN]
"""Every credential a test sent: none may appear in the log (the last test)."""


@pytest.fixture(scope="module")
def gateway(fake_upstream: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[AuthGateway]:
    directory = tmp_path_factory.mktemp("keys")
    database = f"sqlite:///{directory / 'stateway.db'}"
    # The checks each request frame makes are tested here: the timer's (every 5 s, which
    # would end a socket before a frame's check could) in test_revoked_streams.py.
    env = {"STATEWAY_ADMIN_KEY": ADMIN, TESTING_RECHECK_ENV: "600"}
    with auth_gateway(directory, fake_upstream, database, env=env) as running:
        yield running


def openai_client(gateway: AuthGateway, key: str) -> openai.OpenAI:
    USED.append(key)
    return openai.OpenAI(base_url=gateway.url + "/v1", api_key=key, max_retries=0)


def anthropic_client(gateway: AuthGateway, key: str) -> anthropic.Anthropic:
    USED.append(key)
    return anthropic.Anthropic(base_url=gateway.url, api_key=key, max_retries=0)


def until_refused(client: openai.OpenAI) -> openai.AuthenticationError:
    """Send requests until one is refused with 401 (a bounded wait: a change reaches the
    gateway within its key cache's TTL)."""
    deadline = time.monotonic() + 30
    while True:
        try:
            client.models.list()
        except openai.AuthenticationError as refused:
            return refused
        assert time.monotonic() < deadline, "the key is still accepted"
        time.sleep(0.1)


def test_a_created_key_works_with_both_sdks(gateway: AuthGateway) -> None:
    key = gateway.create_key("acme", "--name", "ci")

    with openai_client(gateway, key) as client:
        response = client.responses.create(model=MODEL, input="hello [[words:3]]")
        assert response.status == "completed"
        assert client.responses.retrieve(response.id).id == response.id
    with anthropic_client(gateway, key) as claude:
        message = claude.messages.create(
            model=MODEL, max_tokens=20, messages=[{"role": "user", "content": "hi [[words:2]]"}]
        )
        assert message.type == "message"


def test_no_key_or_a_wrong_one_is_a_401_in_each_sdks_shape(gateway: AuthGateway) -> None:
    for key in ("sk-sw-" + "A" * 43, "not-a-key"):
        with (
            openai_client(gateway, key) as client,
            pytest.raises(openai.AuthenticationError) as refused,
        ):
            client.responses.create(model=MODEL, input="hi")
        assert refused.value.status_code == 401
        assert refused.value.code == "invalid_api_key"
        assert refused.value.body == {
            "message": "Incorrect API key provided.",
            "type": "invalid_request_error",
            "param": None,
            "code": "invalid_api_key",
        }
        with (
            anthropic_client(gateway, key) as claude,
            pytest.raises(anthropic.AuthenticationError) as denied,
        ):
            claude.messages.create(
                model=MODEL, max_tokens=5, messages=[{"role": "user", "content": "hi"}]
            )
        assert denied.value.body == {
            "type": "error",
            "error": {"type": "authentication_error", "message": "Incorrect API key provided."},
            "request_id": denied.value.request_id,
        }
        assert denied.value.request_id is not None
    missing = httpx2.post(gateway.url + "/v1/responses", json={"model": MODEL, "input": "hi"})
    assert missing.status_code == 401
    assert missing.json()["error"]["message"].startswith("Missing credentials")
    assert missing.headers["x-request-id"].startswith("req_")


def test_probes_need_no_key(gateway: AuthGateway) -> None:
    assert httpx2.get(gateway.url + "/health").status_code == 200
    assert httpx2.get(gateway.url + "/ready").status_code == 200


def test_metrics_are_not_for_tenants_once_auth_is_configured(gateway: AuthGateway) -> None:
    key = gateway.create_key("acme")
    USED.append(key)

    assert httpx2.get(gateway.url + "/metrics").status_code == 401
    tenant = httpx2.get(gateway.url + "/metrics", headers={"x-api-key": key})
    assert tenant.status_code == 403
    assert tenant.json()["error"]["code"] == "permission_denied"


def test_a_websocket_upgrade_without_a_key_is_refused_with_a_401(gateway: AuthGateway) -> None:
    url = gateway.url.replace("http://", "ws://", 1) + "/v1/responses"

    with pytest.raises(InvalidStatus) as refused:
        connect(url, open_timeout=30).close()

    assert refused.value.response.status_code == 401
    assert b'"invalid_api_key"' in refused.value.response.body


def test_the_admin_credential_acts_for_no_tenant_over_a_websocket(gateway: AuthGateway) -> None:
    """Its upgrade is accepted (as any credential's), and each request frame refused."""
    url = gateway.url.replace("http://", "ws://", 1) + "/v1/responses"
    requests = [
        {"type": "response.create", "model": MODEL, "input": "hi"},
        {"type": "response.resume", "response_id": "resp_123"},
        {"type": "response.steer", "previous_response_id": "resp_123", "input": "hi"},
    ]
    with connect(url, additional_headers={"x-api-key": ADMIN}) as socket:
        for request in requests:
            socket.send(json.dumps(request))
            refused = json.loads(socket.recv(timeout=30))
            assert refused["type"] == "error", refused
            assert (refused["status"], refused["error"]["code"]) == (403, "permission_denied")
    admin = httpx2.get(gateway.url + "/admin/config/status", headers={"x-api-key": ADMIN})
    assert admin.status_code == 200


def test_the_list_names_the_keys_never_the_keys(gateway: AuthGateway) -> None:
    key = gateway.create_key("listed-tenant", "--name", "for listing")

    listed = stateway("keys", "list", "--json", "--database", gateway.database)

    assert listed.returncode == 0, listed.stderr
    keys = json.loads(listed.stdout)
    [entry] = [k for k in keys if k["tenant"] == "listed-tenant"]
    assert entry["name"] == "for listing"
    assert entry["id"].startswith("key_")
    assert entry["status"] == "active"
    assert key not in listed.stdout
    assert key[6:] not in listed.stdout


def test_a_revoked_key_is_refused_within_seconds(gateway: AuthGateway) -> None:
    key = gateway.create_key("acme", "--name", "to revoke")
    with openai_client(gateway, key) as client:
        client.models.list()  # accepted, and cached
        revoked = stateway(
            "keys", "revoke", key_id_named(gateway, "to revoke"), "--database", gateway.database
        )
        assert revoked.returncode == 0, revoked.stderr

        refused = until_refused(client)

    assert refused.body["message"] == "This API key has been revoked."  # type: ignore[index]


def test_a_key_revoked_while_its_websocket_is_open_ends_the_connection(
    gateway: AuthGateway,
) -> None:
    """The upgrade was authenticated; each later request frame checks the key again, so
    a revocation reaches an open connection within the key cache's TTL too: that frame
    gets the 401 error frame, then the connection is closed with 1008 (policy violation),
    its streams with it. Its runs go on, resumable with another of the tenant's keys."""
    key = gateway.create_key("acme", "--name", "socket to revoke")
    other = gateway.create_key("acme", "--name", "the tenant's other key")
    USED.extend((key, other))
    url = gateway.url.replace("http://", "ws://", 1) + "/v1/responses"
    long = {"type": "response.create", "model": MODEL, "stream_id": "long"}
    probe = json.dumps({"type": "response.create", "model": MODEL, "input": "hi"})
    seen: list[dict[str, Any]] = []  # the long lane's events

    def answer(socket: Any) -> dict[str, Any]:
        socket.send(probe)
        while True:
            frame: dict[str, Any] = json.loads(socket.recv(timeout=30))
            if frame.get("stream_id") == "long":
                seen.append(frame)
            elif frame["type"] in ("response.completed", "error"):
                return frame

    key_id = key_id_named(gateway, "socket to revoke")  # before: one run in the ~8 s
    with connect(url, additional_headers={"Authorization": f"Bearer {key}"}) as socket:
        socket.send(json.dumps({**long, "input": "[[slow:200]] [[words:40]]"}))  # ~8 s
        assert answer(socket)["type"] == "response.completed"
        revoked = keys_command("revoke", key_id, "--database", gateway.database)
        assert revoked.returncode == 0, revoked.stderr
        deadline = time.monotonic() + 30
        while (frame := answer(socket))["type"] != "error":
            assert time.monotonic() < deadline, "the revoked key still works on the socket"
            time.sleep(0.1)
        closed = until_closed(socket, seen)

    assert frame["status"] == 401
    assert frame["error"]["code"] == "invalid_api_key"
    assert frame["error"]["message"] == "This API key has been revoked."
    assert closed.rcvd is not None
    assert (closed.rcvd.code, closed.rcvd.reason) == (1008, frame["error"]["message"])
    assert seen[-1]["type"] != "response.completed"  # the long stream was cut off
    long_id, last = seen[0]["response"]["id"], seen[-1]["sequence_number"]
    with connect(url, additional_headers={"Authorization": f"Bearer {other}"}) as socket:
        socket.send(
            json.dumps({"type": "response.resume", "response_id": long_id, "starting_after": last})
        )
        rest = [json.loads(socket.recv(timeout=30))]
        while rest[-1]["type"] not in ("response.completed", "error"):
            rest.append(json.loads(socket.recv(timeout=30)))
    assert rest[0]["sequence_number"] == last + 1
    assert rest[-1]["type"] == "response.completed"


def test_a_steered_responses_successor_on_a_revoked_key_fails_then_the_socket_closes(
    gateway: AuthGateway, fake_upstream: str
) -> None:
    """A steer accepted before the key was revoked, on a response that ends after: the
    successor starts as a request frame would, so it is refused (its steer fails
    ``successor_creation_failed``, returning its input), the lane gets the 401 error frame,
    and then the connection is closed with 1008; the steered input never reaches a model."""
    key = gateway.create_key("acme", "--name", "steering to revoke")
    USED.append(key)
    url = gateway.url.replace("http://", "ws://", 1) + "/v1/responses"
    marker = f"steered-after-revocation-{uuid.uuid4().hex}"
    key_id = key_id_named(gateway, "steering to revoke")
    with connect(url, additional_headers={"Authorization": f"Bearer {key}"}) as socket:
        create = {"type": "response.create", "model": MODEL, "stream_id": "s"}
        # ~8 s: the revocation (once the steer is accepted) must be seen before it ends,
        # however busy the machine (one seen after lets the successor start unrefused);
        # the key's id is looked up before, so the revocation is one command's work.
        socket.send(json.dumps({**create, "input": "[[slow:200]] [[words:40]]"}))
        created = json.loads(socket.recv(timeout=30))
        assert created["type"] == "response.created"
        steer = {"type": "response.steer", "previous_response_id": created["response"]["id"]}
        socket.send(json.dumps({**steer, "input": marker}))
        events: list[dict[str, Any]] = []
        while "response.steer.accepted" not in [event["type"] for event in events]:
            events.append(lane_frame(socket, lane="s"))
        revoked = keys_command("revoke", key_id, "--database", gateway.database)
        assert revoked.returncode == 0, revoked.stderr
        closed = until_closed(socket, events, lane="s")
    types = [event["type"] for event in events]
    assert "response.steer.accepted" in types
    assert types[-3:] == ["response.completed", "response.steer.failed", "error"], types
    completed, failed, refused = events[-3:]
    assert failed["error"]["code"] == "successor_creation_failed"
    assert failed["steer"]["input"] == marker
    assert failed["sequence_number"] == completed["sequence_number"] + 1
    assert (refused["status"], refused["error"]["code"]) == (401, "invalid_api_key")
    assert closed.rcvd is not None
    assert closed.rcvd.code == 1008
    assert fake_requests(fake_upstream, marker) == []


def key_id_named(gateway: AuthGateway, name: str) -> str:
    """The id ``stateway keys list`` gives the key named ``name``."""
    listed = keys_command("list", "--json", "--database", gateway.database)
    [entry] = [k for k in json.loads(listed.stdout) if k["name"] == name]
    return str(entry["id"])


def until_closed(socket: Any, seen: list[dict[str, Any]], lane: str = "long") -> ConnectionClosed:
    """Read until the connection closes: only frames of ``lane`` may come."""
    while True:
        try:
            seen.append(lane_frame(socket, lane))
        except ConnectionClosed as closed:
            return closed


def lane_frame(socket: Any, lane: str) -> dict[str, Any]:
    """The next frame, which must be one of ``lane``'s."""
    frame: dict[str, Any] = json.loads(socket.recv(timeout=30))
    assert frame.get("stream_id") == lane, frame
    return frame


def test_an_expired_key_is_refused(gateway: AuthGateway) -> None:
    key = gateway.create_key("acme", "--expires", "1s")

    with openai_client(gateway, key) as client:
        refused = until_refused(client)

    assert refused.body["message"] == "This API key has expired."  # type: ignore[index]


def test_revoking_an_unknown_key_fails_naming_it(gateway: AuthGateway) -> None:
    revoked = stateway("keys", "revoke", "key_nothing", "--database", gateway.database)

    assert revoked.returncode == 1
    assert "key_nothing" in revoked.stderr


@pytest.mark.parametrize(
    ("args", "problem"),
    [
        (["--tenant", "a/b"], "not a valid tenant id"),
        (["--tenant", "acme", "--expires", "soon"], "--expires"),
        (["--tenant", "acme", "--expires", "2001-01-01T00:00:00"], "in the past"),
    ],
)
def test_a_bad_create_is_refused_readably(
    gateway: AuthGateway, args: list[str], problem: str
) -> None:
    created = stateway("keys", "create", *args, "--database", gateway.database)

    assert created.returncode == 2
    assert problem in created.stderr
    assert created.stdout == ""
    assert "Traceback" not in created.stderr


@pytest.mark.parametrize(
    "headers",
    [
        {"authorization": "Bearer " + "A" * 9000},
        {"authorization": "Basic c2stc3c6eA=="},
        {"x-api-key": "sk-sw-\tinjected"},
        {"authorization": "Bearer eyJhbGciOiJub25lIn0.eyJzdWIiOiJ4In0."},
    ],
)
def test_malformed_credentials_are_401s(gateway: AuthGateway, headers: dict[str, str]) -> None:
    answer = httpx2.get(gateway.url + "/v1/models", headers=headers)

    assert answer.status_code == 401
    assert answer.json()["error"]["code"] == "invalid_api_key"


def test_an_id_carrying_a_header_is_a_plain_404(gateway: AuthGateway) -> None:
    key = gateway.create_key("acme")
    USED.append(key)
    injected = "resp_x%0d%0aSet-Cookie:%20stolen=1"

    answer = httpx2.get(
        gateway.url + f"/v1/responses/{injected}", headers={"authorization": f"Bearer {key}"}
    )

    assert answer.status_code == 404
    assert "set-cookie" not in answer.headers
    assert answer.json()["error"]["param"] == "response_id"


def test_zz_no_key_reached_the_log(gateway: AuthGateway) -> None:
    """Last in the module: every key sent above, accepted or refused."""
    assert USED
    log = Path(gateway.log).read_text()
    for key in USED:
        assert key not in log
