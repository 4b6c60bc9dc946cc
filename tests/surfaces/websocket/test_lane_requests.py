"""What a lane runs, in process: a resume streamed to its end (or told that nothing
follows), a failed start and a failed run forgetting the response they continued (not a
rate limit's refusal), a steered response's successor on its lane, its failure returning
the steers, each error frame on its lane."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

import orjson
import pytest

from stateway.core.commands import CreateResponse, ListInputItems, WatchResponse
from stateway.core.errors import InternalError, InvalidRequest, RateLimited
from stateway.core.gateway import Gateway
from stateway.core.inference import Finish, TextDelta
from stateway.core.principal import Credential, Principal
from stateway.surfaces.auth.authenticator import Identity
from tests.core.fakes import ScriptedBackend
from tests.surfaces.websocket.client import Client, Frame, surface
from tests.surfaces.websocket.test_session import CREATE, Key, errors

OK = [TextDelta("ok"), Finish("stop")]


def texts(command: CreateResponse) -> list[str]:
    return [part["text"] for item in command.input for part in item.get("content", [])]


async def test_a_resume_streams_the_rest_on_its_lane_and_nothing_after_the_end() -> None:
    client = Client(surface())
    client.put(**CREATE, command_id="c1")
    created = (await client.ended(1))[0]
    start = len(client.frames)
    client.put(type="response.resume", response_id=created["response"]["id"], stream_id="r")
    client.put(type="response.resume", response_id="resp_none", stream_id="r")  # next on it
    frames = (await client.ended(3))[start:]
    assert [f["sequence_number"] for f in frames[:-1]] == list(range(9))
    assert frames[-2]["type"] == "response.completed"
    assert {f.get("stream_id") for f in frames} == {"r"}
    assert errors(frames) == [(404, "not_found")]
    await client.leave()


async def test_a_resume_of_no_response_is_a_404_on_its_lane() -> None:
    client = Client(surface())
    client.put(type="response.resume", response_id="resp_none", stream_id="r")
    [refused] = await client.ended(1)
    assert (refused["status"], refused["error"]["code"], refused["stream_id"]) == (
        404,
        "not_found",
        "r",
    )
    await client.leave()


async def test_a_resume_whose_watch_ends_without_the_end_says_nothing_follows(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Another process's run, followed through a log its socket there never stored: the
    watch ends with the run, its terminal event unseen. A socket has no end of stream to
    say that nothing follows: the lane's error frame does."""
    event = orjson.dumps({"type": "response.in_progress", "sequence_number": 3})

    class Unseen:
        position = 3

        async def batches(self) -> AsyncIterator[tuple[list[bytes], bool]]:
            yield [event], False
            yield [], True

        def behind(self) -> int:
            return 0

    real = Gateway.execute

    async def execute(self: Gateway, principal: Principal, command: Any) -> Any:
        if isinstance(command, WatchResponse):
            return Unseen()
        return await real(self, principal, command)

    monkeypatch.setattr(Gateway, "execute", execute)
    client = Client(surface())
    client.put(type="response.resume", response_id="resp_x", stream_id="r")
    progress, refused = await client.ended(1)
    assert progress == {"type": "response.in_progress", "sequence_number": 3, "stream_id": "r"}
    assert (refused["status"], refused["error"]["code"], refused["stream_id"]) == (
        400,
        "unsupported_parameter",
        "r",
    )
    assert refused["error"]["message"].startswith("Response 'resp_x' has no event log to resume")
    await client.leave()


async def test_an_unexpected_failure_is_a_500_on_its_lane(monkeypatch: pytest.MonkeyPatch) -> None:
    async def execute(self: Gateway, principal: Principal, command: Any) -> Any:
        raise TypeError("secret internals")

    monkeypatch.setattr(Gateway, "execute", execute)
    client = Client(surface())
    client.put(type="response.resume", response_id="resp_x", stream_id="r")
    [refused] = await client.ended(1)
    assert (refused["status"], refused["error"]["code"], refused["stream_id"]) == (
        500,
        "internal_error",
        "r",
    )
    await client.leave()


def failing_starts(monkeypatch: pytest.MonkeyPatch) -> None:
    """A create whose input says ``refuse`` fails its start (400), ``limit`` is refused by
    the rate limits (429)."""
    real = Gateway.execute

    async def execute(self: Gateway, principal: Principal, command: Any) -> Any:
        if isinstance(command, CreateResponse):
            if "refuse" in texts(command):
                raise InvalidRequest("Refused.", code="refused")
            if "limit" in texts(command):
                raise RateLimited("requests", 1, 2.0)
        return await real(self, principal, command)

    monkeypatch.setattr(Gateway, "execute", execute)


async def test_a_continuation_whose_start_fails_forgets_its_parent_but_a_rate_limit_not(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The retry a rate limit's Retry-After asks for goes on from the same response."""
    failing_starts(monkeypatch)
    client = Client(surface())
    client.put(**CREATE, store=False, stream_id="s")
    parent = (await client.ended(1))[-1]["response"]["id"]
    lanes = [("limit", "s"), ("hi", "fork"), ("refuse", "s"), ("hi", "s")]
    for n, (text, lane) in enumerate(lanes):  # a fork's success leaves the parent to its lane
        continuation = {**CREATE, "input": text, "previous_response_id": parent}
        client.put(**continuation, store=False, stream_id=lane)
        frames = await client.ended(n + 2)  # lanes run side by side: one at a time here
    assert errors(frames) == [
        (429, "rate_limit_exceeded"),
        (400, "refused"),
        (400, "previous_response_not_found"),
    ]
    await client.leave()


async def test_a_continuation_whose_run_fails_forgets_its_parent_and_is_kept_by_none() -> None:
    backend = ScriptedBackend(OK)
    client = Client(surface(backend=backend))
    client.put(**CREATE, store=False, stream_id="s")
    parent = (await client.ended(1))[-1]["response"]["id"]
    backend.script = [InternalError()]
    client.put(**CREATE, store=False, stream_id="s", previous_response_id=parent)
    failed = (await client.ended(2))[-1]
    assert failed["type"] == "response.failed"
    backend.script = OK
    failed_id = failed["response"]["id"]
    client.put(**CREATE, store=False, stream_id="s", previous_response_id=failed_id)
    client.put(**CREATE, store=False, stream_id="s", previous_response_id=parent)
    frames = await client.ended(4)
    assert errors(frames) == [(400, "previous_response_not_found")] * 2
    await client.leave()


async def steered(client: Client, gate: asyncio.Event, steer: Any = "more") -> str:
    """A create on lane ``a`` steered while it runs; its id."""
    client.put(**CREATE, store=False, stream_id="a", instructions="Be brief.")
    await client.until(lambda c: bool(c.frames))
    response_id: str = client.frames[0]["response"]["id"]
    client.put(type="response.steer", previous_response_id=response_id, input=steer)
    await client.until(lambda c: any(f["type"] == "response.steer.accepted" for f in c.frames))
    gate.set()
    return response_id


async def test_a_steered_response_s_successor_runs_on_its_lane_with_its_settings() -> None:
    gate = asyncio.Event()
    backend = ScriptedBackend(OK, gate)
    client = Client(surface(backend=backend))
    first = await steered(client, gate)
    frames = await client.ended(2)
    ends = [f for f in frames if f["type"] == "response.completed"]
    assert [f["response"]["previous_response_id"] for f in ends] == [None, first]
    assert ends[1]["stream_id"] == "a"
    assert {f.get("stream_id") for f in frames} == {"a"}
    assert ends[1]["response"]["instructions"] == "Be brief."
    successor = backend.requests[-1]
    assert successor.items[-1]["content"][0]["text"] == "more"
    await client.leave()


async def test_a_successor_whose_start_fails_fails_its_steers(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    failing_starts(monkeypatch)
    gate = asyncio.Event()
    client = Client(surface(gate=gate))
    first = await steered(client, gate, "refuse")
    await client.ended(2)
    failed = next(f for f in client.frames if f["type"] == "response.steer.failed")
    assert failed["error"]["code"] == "successor_creation_failed"
    assert failed["steer"]["previous_response_id"] == first
    assert client.frames[-1]["status"] == 400
    assert client.frames[-1]["stream_id"] == "a"
    await client.leave()


async def test_a_successor_of_a_revoked_key_fails_its_steers_and_ends_the_connection() -> None:
    """Checked again as a request frame is."""
    key = Key()
    gate = asyncio.Event()
    principal = Principal("t", "key_1", Credential.API_KEY)
    client = Client(surface(gate=gate), Identity(principal, authenticated=True, recheck=key))
    client.put(**CREATE, store=False, stream_id="a")
    await client.until(lambda c: bool(c.frames))
    response_id = client.frames[0]["response"]["id"]
    client.put(type="response.steer", previous_response_id=response_id, input="more")
    await client.until(lambda c: any(f["type"] == "response.steer.accepted" for f in c.frames))
    key.revoked = True
    gate.set()
    await client.until(lambda c: bool(c.closes))
    kinds = [f["type"] for f in client.frames]
    assert kinds[-3:] == ["response.completed", "response.steer.failed", "error"]
    assert client.frames[-2]["error"]["code"] == "successor_creation_failed"
    assert (client.frames[-1]["status"], client.frames[-1]["stream_id"]) == (401, "a")
    assert client.closes == [(1008, "This API key was revoked.")]
    await client.leave()


async def test_a_steer_queued_as_the_server_drains_is_failed_not_run() -> None:
    gate = asyncio.Event()
    app = surface(gate=gate)
    client = Client(app)
    client.put(**CREATE, store=False, stream_id="a")
    await client.until(lambda c: bool(c.frames))
    response_id = client.frames[0]["response"]["id"]
    client.put(type="response.steer", previous_response_id=response_id, input="more")
    await client.until(lambda c: any(f["type"] == "response.steer.accepted" for f in c.frames))
    draining = asyncio.create_task(app.drain())
    await asyncio.sleep(0)
    gate.set()
    await asyncio.wait_for(draining, 5)
    frames: list[Frame] = client.frames
    assert [f["type"] for f in frames][-2:] == ["response.completed", "response.steer.failed"]
    assert frames[-1]["error"]["code"] == "successor_creation_failed"
    assert sum(f["type"] == "response.created" for f in frames) == 1
    await client.leave()


@pytest.mark.parametrize(
    ("parent_stored", "stored"),
    [(False, ["first", "ok", "second"]), (True, ["second"])],
    ids=["unstored", "stored"],
)
async def test_a_stored_continuation_of_a_kept_response_stores_what_the_store_lacks(
    parent_stored: bool, stored: list[str]
) -> None:
    """The store has no chain to an unstored parent: the stored child holds the context
    it ran on. A stored parent's items are the store's already."""
    app = surface()
    client = Client(app)
    client.put(**{**CREATE, "input": "first"}, store=parent_stored)
    parent = (await client.ended(1))[-1]["response"]["id"]
    client.put(**{**CREATE, "input": "second"}, store=True, previous_response_id=parent)
    child = (await client.ended(2))[-1]["response"]["id"]
    await client.leave()
    page = await app.gateway.execute(Principal("default"), ListInputItems(child, order="asc"))
    assert [item["content"][0]["text"] for item in page.items] == stored
