"""One connection's receive loop in process: frames refused with an error frame (the
connection serving on), a credential that stops holding ending it (1008), a command id's
retry, a refused continuation forgetting its parent, an interrupt, a client that stops
reading (4429), the drain at shutdown."""

from __future__ import annotations

import asyncio
import time
from typing import Any

import orjson
import pytest

from stateway.core.errors import CredentialRevoked
from stateway.core.inference import Finish, TextDelta
from stateway.core.principal import Credential, Principal
from stateway.surfaces.auth.authenticator import KEY_EXPIRED, TOKEN_EXPIRED, Identity
from stateway.surfaces.websocket import session
from stateway.websocket_config import WebSocketConfig
from tests.core.fakes import ScriptedBackend
from tests.surfaces.websocket.client import Client, Frame, surface

CREATE: dict[str, Any] = {"type": "response.create", "model": "m", "input": "hi"}


def errors(frames: list[Frame]) -> list[tuple[int, str | None]]:
    return [(f["status"], f["error"]["code"]) for f in frames if f["type"] == "error"]


async def test_a_binary_frame_is_refused_and_the_connection_serves_on() -> None:
    client = Client(surface())
    client.put_bytes(orjson.dumps(CREATE))
    client.put(**CREATE)
    frames = await client.ended(2)
    assert frames[0] == {
        "type": "error",
        "status": 400,
        "error": {
            "type": "invalid_request_error",
            "code": "unsupported_frame",
            "message": "Binary frames are not supported: send each frame as JSON text.",
            "param": None,
        },
    }
    assert frames[-1]["type"] == "response.completed"
    await client.leave()


def padded(size: int, pad: str = "a") -> str:
    """A create frame of ``size`` bytes of UTF-8, its input ``pad`` repeated."""
    frame = orjson.dumps({**CREATE, "input": ""}).decode()
    count, rest = divmod(size - len(frame.encode()), len(pad.encode()))
    text = orjson.dumps({**CREATE, "input": pad * count + "a" * rest}).decode()
    assert len(text.encode()) == size
    return text


async def test_a_frame_over_the_limit_is_a_413_and_one_at_it_runs() -> None:
    limit = 2048
    client = Client(surface(max_frame_bytes=limit))
    client.put_text(padded(limit + 2))
    client.put_text(padded(limit))
    frames = await client.ended(2)
    assert frames[0]["error"] == {
        "type": "invalid_request_error",
        "code": "frame_too_large",
        "message": f"The frame is {limit + 2} bytes, more than the limit of {limit} bytes.",
        "param": None,
    }
    assert frames[0]["status"] == 413
    assert frames[-1]["type"] == "response.completed"
    await client.leave()


async def test_a_two_byte_frame_under_the_limit_in_characters_is_refused_in_bytes() -> None:
    """Counted in bytes, as the limit is."""
    limit = 2048
    client = Client(surface(max_frame_bytes=limit))
    over = padded(limit + 2, "é")
    assert len(over) < limit
    client.put_text(over)
    [refused] = await client.ended(1)
    assert (refused["status"], refused["error"]["code"]) == (413, "frame_too_large")
    await client.leave()


async def test_a_refused_frame_s_error_names_its_lane_when_it_could_be_read() -> None:
    client = Client(surface())
    client.put_text("{not json")
    client.put(**CREATE, temperature=5, stream_id="a")
    client.put(type="response.create", stream_id="b")  # no model
    frames = await client.ended(3)
    assert [(f["error"]["code"], f.get("stream_id")) for f in frames] == [
        ("invalid_json", None),
        ("decimal_above_max_value", "a"),
        ("missing_required_parameter", "b"),
    ]
    await client.leave()


class Key:
    """An API key's recheck: it holds until revoked."""

    def __init__(self) -> None:
        self.revoked = False
        self.checks = 0

    async def __call__(self) -> None:
        self.checks += 1
        if self.revoked:
            raise CredentialRevoked("This API key was revoked.")


async def test_a_revoked_key_s_next_frame_ends_the_connection_with_1008() -> None:
    key = Key()
    principal = Principal("t", "key_1", Credential.API_KEY)
    client = Client(surface(), Identity(principal, authenticated=True, recheck=key))
    client.put(**CREATE)
    await client.ended(1)
    key.revoked = True
    client.put(**CREATE, stream_id="a")
    client.put(**CREATE)  # not read: the connection is ending
    await client.until(lambda c: bool(c.closes))
    refused = client.frames[-1]
    assert refused == {
        "type": "error",
        "status": 401,
        "error": {
            "type": "invalid_request_error",
            "code": "invalid_api_key",
            "message": "This API key was revoked.",
            "param": None,
        },
        "stream_id": "a",
    }
    assert client.closes == [(1008, "This API key was revoked.")]
    assert client.sent[-1]["type"] == "websocket.close"
    await client.leave()
    assert sum(f["type"] == "response.created" for f in client.frames) == 1


@pytest.mark.parametrize(
    ("credential", "words"), [(Credential.API_KEY, KEY_EXPIRED), (Credential.TOKEN, TOKEN_EXPIRED)]
)
async def test_an_expiring_credential_ends_the_connection_at_its_expiry(
    credential: Credential, words: str
) -> None:
    """Ended on a timer while no frame comes, in the words the credential would be
    refused with at admission."""
    principal = Principal("t", "sub", credential)
    identity = Identity(principal, authenticated=True, expires_at=time.time() + 0.2)
    client = Client(surface(), identity)
    await client.until(lambda c: bool(c.closes))
    [refused] = client.frames
    assert (refused["status"], refused["error"]["message"]) == (401, words)
    assert "stream_id" not in refused
    assert client.closes == [(1008, words)]
    await client.leave()


async def test_a_command_id_runs_once_and_another_body_under_it_is_refused() -> None:
    """Its lane is no part of what the id fingerprints: a retry on another lane streams
    the first response."""
    client = Client(surface())
    client.put(**CREATE, command_id="c1")
    first = (await client.ended(1))[-1]
    client.put(**CREATE, command_id="c1", stream_id="other")
    await client.ended(2)
    replayed = client.frames[len(client.frames) // 2 :]
    assert replayed[-1]["response"]["id"] == first["response"]["id"]
    assert replayed[-1]["stream_id"] == "other"
    client.put(command_id="c1", input="hi", model="m", type="response.create")  # reordered
    again = (await client.ended(3))[-1]
    assert again["response"]["id"] == first["response"]["id"]
    client.put(**{**CREATE, "input": "another"}, command_id="c1")
    refused = (await client.ended(4))[-1]
    assert (refused["status"], refused["error"]["code"]) == (409, "idempotency_key_reused")
    assert refused["error"]["param"] == "command_id"
    await client.leave()


async def test_a_continuation_refused_for_its_body_forgets_its_lane_s_parent_only() -> None:
    """As hosted: a same-lane continuation answered with a 4xx evicts its parent; a fork
    from another lane refused so leaves it to its lane."""
    client = Client(surface())
    client.put(**CREATE, store=False, stream_id="s")
    parent = (await client.ended(1))[-1]["response"]["id"]
    refused = {**CREATE, "store": False, "temperature": 5, "previous_response_id": parent}
    client.put(**refused, stream_id="fork")
    client.put(**CREATE, store=False, stream_id="s", previous_response_id=parent)
    frames = await client.ended(3)
    assert errors(frames) == [(400, "decimal_above_max_value")]
    child = frames[-1]["response"]["id"]
    client.put(**{**refused, "previous_response_id": child}, stream_id="s")
    client.put(**CREATE, store=False, stream_id="s", previous_response_id=child)
    frames = await client.ended(5)
    assert errors(frames)[1:] == [
        (400, "decimal_above_max_value"),
        (400, "previous_response_not_found"),
    ]
    await client.leave()


async def test_a_default_lane_continuation_refused_for_its_body_forgets_its_parent() -> None:
    client = Client(surface())
    client.put(**CREATE, store=False)
    parent = (await client.ended(1))[-1]["response"]["id"]
    client.put(**CREATE, store=False, temperature=5, previous_response_id=parent)
    client.put(**CREATE, store=False, previous_response_id=parent)
    frames = await client.ended(3)
    assert errors(frames) == [
        (400, "decimal_above_max_value"),
        (400, "previous_response_not_found"),
    ]
    await client.leave()


async def test_an_interrupt_stops_a_response_this_connection_runs() -> None:
    gate = asyncio.Event()
    client = Client(surface([TextDelta("a"), TextDelta("b"), Finish("stop")], gate))
    client.put(**CREATE)
    await client.until(lambda c: any(f["type"] == "response.in_progress" for f in c.frames))
    response_id = client.frames[0]["response"]["id"]
    client.put(type="response.interrupt", response_id=response_id, mode="discard_partial_items")
    [*_, ended] = await client.ended(1)
    assert ended["type"] == "response.incomplete"
    assert ended["response"]["incomplete_details"] == {"reason": "interrupted"}
    gate.set()
    await client.leave()


async def test_a_client_that_stops_reading_is_closed_with_4429_and_its_run_goes_on(
    caplog: pytest.LogCaptureFixture,
) -> None:
    script = [TextDelta("x" * 64) for _ in range(200)] + [Finish("stop")]
    app = surface(script, config=WebSocketConfig(outbox_bytes=1024))
    client = Client(app, reads=1)
    client.put(**CREATE)
    await client.until(lambda c: bool(c.closes), seconds=10)
    assert client.closes == [(4429, "The client did not read its events fast enough.")]
    assert (
        "closing a WebSocket connection (4429) whose client stopped reading while its runs "
        "went on; it can resume them with response.resume"
    ) in caplog.text
    [created] = client.frames
    await client.leave()
    run = app.gateway.runs.get(created["response"]["id"])
    if run is not None:
        await asyncio.wait_for(run.wait(), 5)
        assert run.state.status == "completed"

    again = Client(app)
    again.put(type="response.resume", response_id=created["response"]["id"], starting_after=0)
    frames = await again.ended(1)
    assert frames[0]["sequence_number"] == 1
    assert frames[-1]["type"] == "response.completed"
    await again.leave()


async def test_the_drain_lets_the_request_in_flight_end_then_closes() -> None:
    gate = asyncio.Event()
    app = surface(gate=gate)
    client = Client(app)
    client.put(**CREATE)
    await client.until(lambda c: bool(c.frames))
    draining = asyncio.create_task(app.drain())
    client.put(**CREATE, stream_id="late")
    await client.until(lambda c: bool(errors(c.frames)))
    assert errors(client.frames) == [(503, "server_shutting_down")]
    assert client.frames[-1]["error"]["message"] == (
        "The server is shutting down; send this request on a new connection."
    )
    assert not draining.done()
    gate.set()
    await asyncio.wait_for(draining, 5)
    assert client.frames[-1]["type"] == "response.completed"
    assert client.sent[-1] == {
        "type": "websocket.close",
        "code": 1001,
        "reason": "The server is shutting down.",
    }
    await client.leave()


async def test_a_create_past_the_input_items_bound_is_refused_as_its_post_would_be() -> None:
    client = Client(surface(max_input_items=2))
    message = {"type": "message", "role": "user", "content": "x"}
    client.put(**{**CREATE, "input": [message] * 3})
    client.put(**{**CREATE, "input": [message] * 2})
    frames = await client.ended(2)
    assert errors(frames) == [(400, "array_above_max_length")]
    assert frames[0]["error"]["param"] == "input"
    assert frames[-1]["type"] == "response.completed"
    await client.leave()


async def test_a_refused_steer_naming_a_kept_response_leaves_it_kept() -> None:
    """Only a refused create forgets the response it continues."""
    client = Client(surface())
    client.put(**CREATE, store=False)
    parent = (await client.ended(1))[-1]["response"]["id"]
    client.put(type="response.steer", previous_response_id=parent)  # no input
    client.put(type="response.steer", previous_response_id="resp_gone", input="x")
    await client.until(lambda c: len(errors(c.frames)) == 1)
    client.put(**CREATE, store=False, previous_response_id=parent)
    frames = await client.ended(3)
    assert errors(frames) == [(400, "missing_required_parameter")]
    [failed] = [f for f in frames if f["type"] == "response.steer.failed"]
    assert (failed["error"]["code"], failed["sequence_number"]) == ("response_not_found", 0)
    assert frames[-1]["type"] == "response.completed"
    await client.leave()


async def test_a_connection_keeps_the_steering_targets_of_its_lanes_and_the_default_one() -> None:
    """``max_lanes`` named lanes and the default lane: past them, the oldest ended
    target is let go (a steer naming it is not found)."""
    client = Client(surface(config=WebSocketConfig(max_lanes=1)))
    ids = []
    for n, lane in enumerate(["a", "b", None]):
        client.put(**CREATE, stream_id=lane)
        ids.append((await client.ended(n + 1))[-1]["response"]["id"])
    for response_id in ids[:2]:
        client.put(type="response.steer", previous_response_id=response_id, input="x")
    await client.until(lambda c: sum(f["type"] == "response.steer.failed" for f in c.frames) == 2)
    failures = [f["error"]["code"] for f in client.frames if f["type"] == "response.steer.failed"]
    assert failures == ["response_not_found", "response_already_completed"]
    await client.leave()


async def test_a_continuation_naming_no_valid_lane_leaves_the_default_lane_s_parent() -> None:
    """Its ``invalid_stream_id`` goes out on the default lane, but it continued from no
    lane: the default lane's response is not forgotten."""
    client = Client(surface())
    client.put(**CREATE, store=False)
    parent = (await client.ended(1))[-1]["response"]["id"]
    client.put(**CREATE, store=False, stream_id="not a lane!", previous_response_id=parent)
    client.put(**CREATE, store=False, previous_response_id=parent)
    frames = await client.ended(3)
    assert errors(frames) == [(400, "invalid_stream_id")]
    assert frames[-1]["type"] == "response.completed"
    await client.leave()


async def test_a_revoked_key_s_connection_is_closed_even_while_its_client_reads_nothing(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The close waits for the frames queued before it at most ``LOG_WAIT``."""
    monkeypatch.setattr(session, "LOG_WAIT", 0.05)
    key = Key()
    key.revoked = True
    principal = Principal("t", "key_1", Credential.API_KEY)
    client = Client(surface(), Identity(principal, authenticated=True, recheck=key), reads=0)
    client.put(**CREATE)
    await client.until(lambda c: bool(c.closes))
    assert client.closes == [(1008, "This API key was revoked.")]
    assert client.frames == []
    await client.leave()


async def test_a_frame_after_a_slow_client_s_close_starts_nothing() -> None:
    script = [TextDelta("x" * 64) for _ in range(200)] + [Finish("stop")]
    backend = ScriptedBackend(script)
    client = Client(surface(backend=backend, config=WebSocketConfig(outbox_bytes=1024)), reads=1)
    client.put(**CREATE)
    await client.until(lambda c: bool(c.closes), seconds=10)
    client.put(**CREATE, stream_id="late")
    await client.leave()
    assert len(backend.requests) == 1


async def test_a_frame_past_a_mebibyte_is_decoded_aside_and_runs() -> None:
    limit = 4 << 20
    client = Client(surface(max_frame_bytes=limit))
    client.put_text(padded(session.INLINE_DECODE_BYTES + 1))
    client.put_text("{" + " " * session.INLINE_DECODE_BYTES)
    frames = await client.ended(2)
    assert errors(frames) == [(400, "invalid_json")]
    assert any(f["type"] == "response.completed" for f in frames)  # answered first
    await client.leave()
