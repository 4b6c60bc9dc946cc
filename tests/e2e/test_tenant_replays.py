"""Tenant isolation against replays, on SQLite and PostgreSQL: what one tenant used or was
given, sent again by another tenant, must not reach the first one's state. Idempotency
keys and command ids (HTTP, WebSocket, MCP) run apart, and one tenant's flood of keyed
requests leaves another's outcomes kept; item references, sealed
``encrypted_content`` and a running response's id (resumed or steered over a WebSocket)
of another tenant are answered as unknown ones; an MCP session answers only the key that
opened it, whatever the method. Credentials go in either header
(``tests/e2e/test_tenant_isolation.py`` walks every route naming an id)."""

from __future__ import annotations

import json
import uuid
from pathlib import Path
from typing import Any

import httpx2
from websockets.sync.client import connect

from tests.e2e.authenticated import API_KEYS, auth_gateway, create_key
from tests.e2e.test_tenant_isolation import (
    MODEL,
    SLOW,
    Owned,
    Tenants,
    client,
    ended,
    masked,
    mcp_as,
    owned,
    same_shape,
    sdk,
    tenants,
)
from tests.e2e.test_upstream_mapping import upstream_requests

__all__ = ["owned", "tenants"]  # the fixtures, shared with the walk of every route

_ENDS = ("error", "response.completed", "response.steer.failed")


def frames(tenants: Tenants, headers: dict[str, str], frame: dict[str, Any]) -> list[Any]:
    """What a WebSocket opened with ``headers`` gets for ``frame``, up to its end."""
    url = tenants.gateway.url.replace("http://", "ws://") + "/v1/responses"
    got: list[dict[str, Any]] = []
    with connect(url, additional_headers=headers) as socket:
        socket.send(json.dumps(frame))
        while not got or got[-1]["type"] not in _ENDS:
            got.append(json.loads(socket.recv(timeout=60)))
    return got


def test_an_item_reference_to_another_tenants_item_is_an_unknown_one(
    tenants: Tenants, owned: Owned
) -> None:
    with client(tenants, tenants.alice) as alice:
        output = alice.get(f"/v1/responses/{owned.response}").json()["output"][0]["id"]
        inputs = alice.get(f"/v1/responses/{owned.response}/input_items").json()["data"]

        def ask(http: httpx2.Client, item_id: str) -> httpx2.Response:
            reference = {"type": "item_reference", "id": item_id}
            return http.post("/v1/responses", json={"model": MODEL, "input": [reference]})

        assert ask(alice, output).status_code == 200
    with client(tenants, tenants.bob) as bob:
        for theirs in (output, inputs[0]["id"]):
            missing = same_shape(theirs)
            foreign = masked(ask(bob, theirs), theirs)
            assert foreign == masked(ask(bob, missing), missing)
            assert foreign[0] == 404


def test_an_idempotency_key_on_a_create_runs_apart_for_each_tenant(tenants: Tenants) -> None:
    for stream in (False, True):
        key = {"idempotency-key": uuid.uuid4().hex}
        body = {"model": MODEL, "input": "mine [[words:3]]", "stream": stream}
        with client(tenants, tenants.alice) as alice, client(tenants, tenants.bob) as bob:
            first = alice.post("/v1/responses", json=body, headers=key)
            other = bob.post("/v1/responses", json=body, headers=key)
        assert first.status_code == other.status_code == 200
        ids = [_created_id(answer, stream) for answer in (first, other)]
        assert ids[0] != ids[1]
        with client(tenants, tenants.bob) as bob:
            assert bob.get(f"/v1/responses/{ids[0]}").status_code == 404


def test_an_idempotency_key_on_chat_and_messages_runs_apart_for_each_tenant(
    tenants: Tenants, fake_upstream: str
) -> None:
    """The same key from another tenant is another command: it runs, and gets its own
    answer; each tenant's retry gets its own first answer."""
    marker = uuid.uuid4().hex
    said = [{"role": "user", "content": f"{marker} [[words:3]]"}]
    asks = {
        "/v1/chat/completions": {"model": MODEL, "messages": said},
        "/v1/messages": {"model": MODEL, "max_tokens": 64, "messages": said},
    }
    for path, body in asks.items():
        for stream in (False, True):
            sent = {**body, "stream": stream}
            key = {"idempotency-key": f"{marker}{path}{stream}", "anthropic-version": "2023-06-01"}
            answers = []
            with client(tenants, tenants.alice) as alice, client(tenants, tenants.bob) as bob:
                for http in (alice, bob, alice, bob):
                    answers.append(http.post(path, json=sent, headers=key))
            assert {answer.status_code for answer in answers} == {200}
            mine, theirs, mine_again, theirs_again = (answer.content for answer in answers)
            assert mine != theirs  # each its own answer (its own id)
            assert (mine_again, theirs_again) == (mine, theirs)
    asked = sum(marker in str(r["body"]) for r in upstream_requests(fake_upstream))
    assert asked == 8  # each tenant's, per route and streaming: two of four requests


def _created_id(answer: httpx2.Response, stream: bool) -> str:
    if not stream:
        response_id: str = answer.json()["id"]
        return response_id
    first = next(line for line in answer.text.splitlines() if line.startswith("data:"))
    created_id: str = json.loads(first.removeprefix("data:"))["response"]["id"]
    return created_id


def test_a_websocket_command_id_runs_apart_for_each_tenant(tenants: Tenants) -> None:
    command = uuid.uuid4().hex
    frame = {"type": "response.create", "model": MODEL, "input": "hi", "command_id": command}
    mine = frames(tenants, {"authorization": f"Bearer {tenants.alice}"}, frame)[-1]
    theirs = frames(tenants, {"x-api-key": tenants.bob}, frame)[-1]
    assert mine["type"] == theirs["type"] == "response.completed"
    assert mine["response"]["id"] != theirs["response"]["id"]


def test_a_running_response_is_neither_resumed_nor_steered_by_another_tenant(
    tenants: Tenants,
) -> None:
    bob = {"x-api-key": tenants.bob}
    with sdk(tenants, tenants.alice) as alice:
        running = alice.responses.create(model=MODEL, input=f"slow {SLOW}", background=True)
        missing = same_shape(running.id)
        for frame in (
            lambda i: {"type": "response.resume", "response_id": i, "starting_after": 0},
            lambda i: {"type": "response.create", "model": MODEL, "previous_response_id": i},
        ):
            foreign = json.dumps(frames(tenants, bob, frame(running.id)))
            unknown = json.dumps(frames(tenants, bob, frame(missing)))
            assert foreign.replace(running.id, "<id>") == unknown.replace(missing, "<id>")
            assert json.loads(foreign)[-1]["type"] == "error"
        steer = {"type": "response.steer", "previous_response_id": running.id, "input": "x"}
        assert frames(tenants, bob, steer)[-1]["type"] == "response.steer.failed"
        ended(alice, running.id)
        assert alice.responses.retrieve(running.id).status == "completed"


def test_sealed_items_of_another_tenant_do_not_open(tenants: Tenants) -> None:
    with sdk(tenants, tenants.alice) as alice:
        compaction = alice.responses.compact(model=MODEL, input="hello").output[-1]
        reasoning = alice.responses.create(
            model=MODEL, input="[[reason:mine]] hi", include=["reasoning.encrypted_content"]
        ).output[0]
    blobs = [
        compaction.model_dump(exclude_none=True),
        {"type": "reasoning", "summary": [], "encrypted_content": reasoning.encrypted_content},  # type: ignore[union-attr]
    ]
    user = {"role": "user", "content": "[[echo]]"}
    with client(tenants, tenants.alice) as owner, client(tenants, tenants.bob) as bob:
        for blob in blobs:
            body = {"model": MODEL, "store": False, "input": [user, blob, user]}
            assert owner.post("/v1/responses", json=body).status_code == 200
            for path in ("/v1/responses", "/v1/responses/input_tokens", "/v1/responses/compact"):
                refused = bob.post(path, json=body)
                assert refused.status_code == 400, path
                assert refused.json()["error"]["code"] == "invalid_encrypted_content"
                assert refused.json()["error"]["param"] == "input[1].encrypted_content"


def test_sealed_items_added_to_a_conversation_open_for_their_tenant_only(
    tenants: Tenants,
) -> None:
    """Appended items are stored as sent: a seal of another tenant, or an altered one, is
    refused when added (the whole batch), not stored to fail a later turn."""
    with sdk(tenants, tenants.alice) as alice:
        compaction = alice.responses.compact(model=MODEL, input="hello").output[-1]
        reasoning = alice.responses.create(
            model=MODEL, input="[[reason:mine]] hi", include=["reasoning.encrypted_content"]
        ).output[0]
    blobs = [
        {"type": "compaction", "encrypted_content": compaction.encrypted_content},  # type: ignore[union-attr]
        {"type": "reasoning", "summary": [], "encrypted_content": reasoning.encrypted_content},  # type: ignore[union-attr]
    ]
    user = {"role": "user", "content": "hi"}
    with client(tenants, tenants.alice) as owner, client(tenants, tenants.bob) as bob:
        mine, theirs = (
            http.post("/v1/conversations", json={"items": [user]}).json()["id"]
            for http in (owner, bob)
        )
        for blob in blobs:
            sealed = blob["encrypted_content"]
            middle = len(sealed) // 2
            flipped = "A" if sealed[middle] != "A" else "B"
            altered = {
                **blob,
                "encrypted_content": sealed[:middle] + flipped + sealed[middle + 1 :],
            }
            for http, conversation, bad in ((bob, theirs, blob), (owner, mine, altered)):
                for path in ("/v1/conversations", f"/v1/conversations/{conversation}/items"):
                    refused = http.post(path, json={"items": [user, bad]})
                    assert refused.status_code == 400, (path, refused.text)
                    error = refused.json()["error"]
                    assert error["type"] == "invalid_request_error"
                    assert error["code"] == "invalid_encrypted_content"
                    assert error["param"] == "items[1].encrypted_content"
            assert owner.post("/v1/conversations", json={"items": [user, blob]}).status_code == 200
        for http, conversation in ((owner, mine), (bob, theirs)):
            assert len(http.get(f"/v1/conversations/{conversation}/items").json()["data"]) == 1
        added = owner.post(f"/v1/conversations/{mine}/items", json={"items": blobs})
        assert added.status_code == 200, added.text
        turn = {"model": MODEL, "input": "[[echo]]", "conversation": mine}
        assert owner.post("/v1/responses", json=turn).status_code == 200


def test_a_prewarm_stores_no_seal_of_another_tenant(tenants: Tenants) -> None:
    """A prewarm asks no model but stores its input (a conversation's turn, a chain's
    response): another tenant's seal in it is refused there, as in any request."""
    with sdk(tenants, tenants.alice) as alice:
        compaction = alice.responses.compact(model=MODEL, input="hello").output[-1]
    theirs = {"type": "compaction", "encrypted_content": compaction.encrypted_content}  # type: ignore[union-attr]
    user = {"role": "user", "content": "hi"}
    with client(tenants, tenants.bob) as bob:
        conversation = bob.post("/v1/conversations", json={"items": [user]}).json()["id"]
        prewarm = {
            "model": MODEL,
            "input": [theirs, user],
            "conversation": conversation,
            "prompt_cache_options": {"prewarm": True},
        }
        refused = bob.post("/v1/responses", json=prewarm)
        assert refused.status_code == 400, refused.text
        assert refused.json()["error"]["param"] == "input[0].encrypted_content"
        assert len(bob.get(f"/v1/conversations/{conversation}/items").json()["data"]) == 1
        turn = {"model": MODEL, "input": "[[echo]]", "conversation": conversation}
        assert bob.post("/v1/responses", json=turn).status_code == 200


async def test_mcp_command_ids_and_turns_run_apart_for_each_tenant(
    tenants: Tenants, owned: Owned
) -> None:
    arguments = {"model": MODEL, "input": "mine", "command_id": uuid.uuid4().hex}
    async with mcp_as(tenants, tenants.alice) as alice:
        first = await alice.call_tool("create_response", arguments)
    async with mcp_as(tenants, tenants.bob) as bob:
        other = await bob.call_tool("create_response", arguments)
        missing = same_shape(owned.conversation)
        answers = []
        for conversation in (owned.conversation, missing):
            turn = {"model": MODEL, "input": "x", "conversation": conversation}
            result = await bob.call_tool("create_response", turn)
            assert result.is_error
            answers.append(repr(result.structured_content).replace(conversation, "<id>"))
    assert not first.is_error
    assert not other.is_error
    assert first.structured_content is not None
    assert other.structured_content is not None
    assert first.structured_content["id"] != other.structured_content["id"]
    assert answers[0] == answers[1]


def test_an_mcp_session_answers_no_other_key_whatever_the_method(tenants: Tenants) -> None:
    url = tenants.gateway.url + "/mcp"

    def as_(key: str, session: str | None = None) -> dict[str, str]:
        headers = {"accept": "application/json, text/event-stream", "x-api-key": key}
        if session is not None:
            headers |= {"mcp-session-id": session, "mcp-protocol-version": "2025-11-25"}
        return headers

    hello = {
        "protocolVersion": "2025-11-25",
        "capabilities": {},
        "clientInfo": {"name": "t", "version": "1"},
    }
    initialize = {"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": hello}
    session = httpx2.post(url, json=initialize, headers=as_(tenants.alice))
    session_id = session.headers["mcp-session-id"]
    ready = {"jsonrpc": "2.0", "method": "notifications/initialized"}
    assert httpx2.post(url, json=ready, headers=as_(tenants.alice, session_id)).status_code == 202
    same_tenant = create_key(tenants.gateway.database, tenants.alice_tenant)

    for key in (tenants.bob, same_tenant):
        with httpx2.stream("GET", url, headers=as_(key, session_id), timeout=10) as listen:
            assert listen.status_code == 404
        assert httpx2.delete(url, headers=as_(key, session_id)).status_code == 404

    listing = {"jsonrpc": "2.0", "id": 2, "method": "tools/list"}
    assert httpx2.post(url, json=listing, headers=as_(tenants.alice, session_id)).status_code == 200


def test_another_tenants_flood_of_keyed_requests_leaves_a_create_answered_once(
    fake_upstream: str, tmp_path: Path
) -> None:
    """Outcomes kept in process are bounded (``max_results``): another tenant's keyed
    requests past the bound (conversations, which no rate limit counts) push out their
    own, and a retry of the owner's create gets its first response, not a second run."""
    database = f"sqlite:///{tmp_path / 'stateway.db'}"
    config = API_KEYS + "[coordination]\nmax_results = 4\n"
    with auth_gateway(tmp_path, fake_upstream, database, config) as gateway:
        keys = [create_key(database, name) for name in ("alice", "bob")]
        alice, bob = (
            httpx2.Client(base_url=gateway.url, headers={"authorization": f"Bearer {k}"})
            for k in keys
        )
        with alice, bob:
            create = {"model": MODEL, "input": "once [[words:3]]"}
            key = {"idempotency-key": uuid.uuid4().hex}
            first = alice.post("/v1/responses", json=create, headers=key)
            assert first.status_code == 200
            for _ in range(10):
                flood = {"idempotency-key": uuid.uuid4().hex}
                assert bob.post("/v1/conversations", json={}, headers=flood).status_code == 200
            again = alice.post("/v1/responses", json=create, headers=key)
    assert again.status_code == 200
    assert again.json()["id"] == first.json()["id"]
