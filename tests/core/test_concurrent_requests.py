"""Concurrent model requests per principal through ``Gateway.execute``
(``[rate_limits] concurrent_requests``): a request holds one of its principal's slots
until what it started ends, and every way it can fail before that gives the slot back,
once."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator, Mapping
from typing import Any

import pytest

from stateway.coordination.redis import connect
from stateway.coordination.request_slots import RedisRequestSlots
from stateway.coordination.token_buckets import MemoryTokenBuckets
from stateway.core.commands import CancelResponse, CompactResponse, CreateResponse, ForwardChat
from stateway.core.concurrency import MemoryRequestSlots, Slot
from stateway.core.errors import (
    InvalidRequest,
    NotFound,
    Overloaded,
    PreviousResponseNotFound,
    RateLimited,
    UpstreamError,
    UpstreamUnavailable,
)
from stateway.core.gateway import Gateway
from stateway.core.inference import Finish, TextDelta
from stateway.core.journal import EventEncoder
from stateway.core.limits import RateLimits
from stateway.core.loop import Loop
from stateway.core.ports import StoredChain
from stateway.core.principal import Principal
from stateway.core.routing import BackendEntry, Router
from stateway.core.run_registry import RunRegistry
from stateway.core.runs import Run
from stateway.core.usage import Usage
from stateway.protocols.responses.stream import encode_event_json
from tests.core.compaction.test_service import SEALER, SUMMARY
from tests.core.fakes import MemoryStore, ScriptedBackend
from tests.core.test_background import ended, user
from tests.core.test_chat_forwarding import Relayed
from tests.core.test_limits import ALICE, BOB, Clock, create, forwarded

KEY = "concurrent\x1facme\x1falice"
"""Alice's slots."""


class Limited:
    """A gateway whose principals may have one model request in flight, over ``backend``."""

    def __init__(
        self,
        backend: ScriptedBackend,
        *,
        store: MemoryStore | None = None,
        encoder: EventEncoder | None = None,
        requests_per_minute: int | None = None,
    ) -> None:
        self.slots = MemoryRequestSlots()
        self.buckets = MemoryTokenBuckets(Clock())
        self.limits = RateLimits(
            self.buckets,
            requests_per_minute,
            slots=self.slots,
            concurrent_requests=1,
        )
        self.store = store or MemoryStore()
        router = Router([BackendEntry(backend, {}, catch_all=True)])
        loop = Loop(self.store, sealer=SEALER)
        self.gateway = Gateway(
            self.store,
            router,
            loop,
            RunRegistry(),
            limits=self.limits,
            sealer=SEALER,
            encoder=encoder,
        )

    @property
    def held(self) -> int:
        """Alice's slots held."""
        return self.slots.held(KEY)

    async def refused(self, principal: Principal = ALICE) -> RateLimited:
        with pytest.raises(RateLimited) as caught:
            await self.gateway.execute(principal, create())
        return caught.value

    async def released(self) -> None:
        """Wait until Alice holds no slot (a run's is given back beside its end)."""
        for _ in range(100):
            if self.held == 0:
                return
            await asyncio.sleep(0)
        raise AssertionError(f"{self.held} slot(s) still held")


class HeldChains(MemoryStore):
    """A store whose reads of a previous response's chain wait for ever (``reading`` set
    once one waits)."""

    def __init__(self) -> None:
        super().__init__()
        self.reading = asyncio.Event()

    async def load_context(self, tenant_id: str, response_id: str) -> StoredChain | None:
        self.reading.set()
        await asyncio.Event().wait()
        return None


def streamed() -> CreateResponse:
    return CreateResponse(model="m", input=[user("hi")], store=False, stream=True)


async def test_a_second_request_waits_for_the_first_to_end_and_others_are_apart() -> None:
    gate = asyncio.Event()
    limited = Limited(ScriptedBackend([TextDelta("hi")], gate=gate))
    run = await limited.gateway.execute(ALICE, streamed())
    assert limited.held == 1

    refused = await limited.refused()
    assert (refused.status, refused.type, refused.code) == (429, "requests", "rate_limit_exceeded")
    assert refused.message == "Too many concurrent requests (limit 1): wait for one to end."
    assert refused.headers == {"Retry-After": "1"}
    bob = await limited.gateway.execute(BOB, streamed())  # a principal of his own

    gate.set()
    await ended(run)
    await ended(bob)
    await limited.released()
    await ended(await limited.gateway.execute(ALICE, create()))
    await limited.released()


async def test_a_refusal_for_concurrency_takes_no_request_and_one_for_requests_no_slot() -> None:
    gate = asyncio.Event()
    limited = Limited(ScriptedBackend([TextDelta("hi")], gate=gate), requests_per_minute=2)
    run = await limited.gateway.execute(ALICE, streamed())
    await limited.refused()  # every slot held: the request bucket keeps its second request
    gate.set()
    await ended(run)
    await limited.released()
    await ended(await limited.gateway.execute(ALICE, create()))
    await limited.released()

    refused = await limited.refused()  # two a minute, both taken
    assert refused.message.startswith("Rate limit reached on requests per minute")
    assert limited.held == 0


async def test_a_request_refused_before_its_run_gives_its_slot_back() -> None:
    limited = Limited(ScriptedBackend([TextDelta("hi"), Finish("stop")]))
    unknown = CreateResponse(model="m", input=[user("hi")], previous_response_id="resp_gone")
    with pytest.raises(PreviousResponseNotFound):  # a 400
        await limited.gateway.execute(ALICE, unknown)
    assert limited.held == 0
    in_conversation = CreateResponse(model="m", input=[user("hi")], conversation_id="conv_1")
    with pytest.raises(NotFound):  # a 404: no conversation is served here
        await limited.gateway.execute(ALICE, in_conversation)
    assert limited.held == 0
    background = CreateResponse(model="m", input=[user("hi")], background=True)
    with pytest.raises(InvalidRequest):  # a 400: no event log served here
        await limited.gateway.execute(ALICE, background)
    assert limited.held == 0
    await ended(await limited.gateway.execute(ALICE, create()))


async def test_an_overloaded_route_gives_its_slot_back() -> None:
    backend = ScriptedBackend([TextDelta("hi"), Finish("stop")])
    backend.places = 0  # every connection in use, its queue full
    limited = Limited(backend)
    with pytest.raises(Overloaded):
        await limited.gateway.execute(ALICE, create())
    assert limited.held == 0


async def test_a_run_its_upstream_failed_gives_its_slot_back_as_it_ends() -> None:
    limited = Limited(ScriptedBackend([UpstreamUnavailable("down")]))
    run = await limited.gateway.execute(ALICE, create())
    await ended(run)
    assert run.state.status == "failed"
    await limited.released()


async def test_an_attached_run_has_given_its_slot_back_when_execute_returns() -> None:
    limited = Limited(ScriptedBackend([TextDelta("hi"), Finish("stop")]))
    attached = CreateResponse(model="m", input=[user("hi")], store=False, attach=lambda _: None)
    run = await limited.gateway.execute(ALICE, attached)
    assert run.closed
    assert limited.held == 0


async def test_a_request_cancelled_before_its_run_gives_its_slot_back() -> None:
    store = HeldChains()
    limited = Limited(ScriptedBackend([TextDelta("hi"), Finish("stop")]), store=store)
    continued = CreateResponse(model="m", input=[user("hi")], previous_response_id="resp_1")
    task = asyncio.create_task(limited.gateway.execute(ALICE, continued))
    await store.reading.wait()
    assert limited.held == 1
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert limited.held == 0


async def test_a_stream_whose_client_left_holds_its_slot_until_its_run_ends() -> None:
    gate = asyncio.Event()
    limited = Limited(ScriptedBackend([TextDelta("hi")], gate=gate))
    run = await limited.gateway.execute(ALICE, streamed())
    assert isinstance(run, Run)
    await run.announced()
    run.cancel()  # the client left
    assert limited.held == 1
    await ended(run)
    await limited.released()


async def test_a_background_run_holds_its_slot_until_it_is_cancelled() -> None:
    gate = asyncio.Event()
    limited = Limited(ScriptedBackend([TextDelta("hi")], gate=gate), encoder=encode_event_json)
    background = CreateResponse(model="m", input=[user("hi")], background=True)
    run = await limited.gateway.execute(ALICE, background)
    await run.announced()
    await limited.refused()

    await limited.gateway.execute(ALICE, CancelResponse(run.id))
    await ended(run)
    assert run.state.status == "cancelled"
    await limited.released()


class Answer(Relayed):
    """An upstream answer of one chunk, or failing (``fails``) after it."""

    def __init__(self, fails: bool = False) -> None:
        self.fails = fails

    async def chunks(self) -> AsyncIterator[bytes]:
        yield b"{}"
        if self.fails:
            raise UpstreamError("cut")


class Forwarding(ScriptedBackend):
    def __init__(self, answer: Answer | UpstreamError) -> None:
        super().__init__([])
        self.answer = answer

    async def forward_chat(self, body: bytes, fields: Mapping[str, Any]) -> Answer:
        if isinstance(self.answer, UpstreamError):
            raise self.answer
        return self.answer


@pytest.mark.parametrize(
    ("answer", "read"),
    [
        (Answer(), True),  # relayed to its end
        (Answer(fails=True), True),  # cut part-way
        (Answer(), False),  # its client left unread
    ],
)
async def test_a_relayed_answer_holds_its_slot_until_its_relay_closes(
    answer: Answer, read: bool
) -> None:
    limited = Limited(Forwarding(answer))
    relay = await limited.gateway.execute(ALICE, forwarded())
    assert not isinstance(relay, Run)
    with pytest.raises(RateLimited):
        await limited.gateway.execute(ALICE, forwarded())
    if read:
        try:
            async for _ in relay.chunks():
                pass
        except UpstreamError:
            assert answer.fails
    assert limited.held == 1, "held until closed"
    await relay.aclose()
    assert limited.held == 0
    await relay.aclose()  # given back once
    assert limited.held == 0


async def test_a_forwarded_request_its_upstream_failed_gives_its_slot_back() -> None:
    limited = Limited(Forwarding(UpstreamUnavailable("down")))
    with pytest.raises(UpstreamUnavailable):
        await limited.gateway.execute(ALICE, forwarded())
    assert limited.held == 0


async def test_a_translated_chat_request_holds_its_slot_until_its_run_ends() -> None:
    gate = asyncio.Event()
    limited = Limited(ScriptedBackend([TextDelta("hi")], gate=gate))

    async def translate() -> CreateResponse:
        return streamed()

    run = await limited.gateway.execute(ALICE, ForwardChat("m", b"{}", {}, translate))
    assert isinstance(run, Run)
    assert limited.held == 1
    gate.set()
    await ended(run)
    await limited.released()


async def test_a_compaction_holds_its_slot_until_it_returns() -> None:
    gate = asyncio.Event()
    backend = ScriptedBackend(SUMMARY, gate=gate)
    limited = Limited(backend)
    compacting = asyncio.create_task(
        limited.gateway.execute(ALICE, CompactResponse("m", [user("hi")]))
    )
    await backend.started.wait()
    assert limited.held == 1
    gate.set()
    await compacting
    assert limited.held == 0

    backend.script = [UpstreamUnavailable("down")]
    with pytest.raises(UpstreamUnavailable):
        await limited.gateway.execute(ALICE, CompactResponse("m", [user("hi")]))
    assert limited.held == 0


async def test_a_prewarm_takes_no_slot() -> None:
    gate = asyncio.Event()
    limited = Limited(ScriptedBackend([TextDelta("hi")], gate=gate))
    run = await limited.gateway.execute(ALICE, streamed())
    prewarm = CreateResponse(model="m", input=[user("hi")], store=False, generate=False)
    await ended(await limited.gateway.execute(ALICE, prewarm))
    assert limited.held == 1
    gate.set()
    await ended(run)


def test_a_slot_is_given_back_once() -> None:
    given: list[None] = []
    slot = Slot(lambda: given.append(None))
    slot.release()
    slot.release()
    assert given == [None]
    assert not slot.held


async def test_an_in_process_slot_is_free_for_all_without_waiting() -> None:
    """A run's end waits for its slot's give-back (:meth:`Slot.given_back`): in process,
    that costs no step of the event loop."""
    slots = MemoryRequestSlots()
    slot = await slots.take("k", 1)
    assert slot is not None
    with pytest.raises(StopIteration):
        slot.given_back().send(None)  # done in its first step
    assert slots.held("k") == 0


async def test_a_slots_give_back_waits_for_its_store_only_a_while() -> None:
    never: asyncio.Future[None] = asyncio.get_running_loop().create_future()
    slot = Slot(lambda: never, wait=0.01)
    await slot.given_back()
    assert not slot.held
    await slot.given_back()  # again: the same answer awaited, nothing given back twice
    assert not never.done()


async def test_slots_given_back_one_at_a_time_are_counted_down_one_at_a_time() -> None:
    slots = MemoryRequestSlots()
    first, second = await slots.take("k", 2), await slots.take("k", 2)
    assert first is not None
    assert second is not None
    assert await slots.take("k", 2) is None
    first.release()
    assert slots.held("k") == 1
    third = await slots.take("k", 2)
    assert third is not None
    assert await slots.take("k", 2) is None
    second.release()
    third.release()
    assert (slots.held("k"), len(slots)) == (0, 0), "a key holding none is not kept"


class Usaged(Answer):
    """An answer reporting the tokens it used."""

    def usage(self) -> Usage | None:
        return Usage(30, 12)


async def test_a_relayed_answer_holding_a_slot_is_still_charged_its_tokens() -> None:
    """The slot's give-back is told after the relay's own ending, which charges it."""
    limited = Limited(Forwarding(Usaged()))
    limits = RateLimits(limited.buckets, None, 100, slots=limited.slots, concurrent_requests=1)
    limited.gateway = Gateway(
        limited.store,
        Router([BackendEntry(Forwarding(Usaged()), {}, catch_all=True)]),
        Loop(limited.store),
        RunRegistry(),
        limits=limits,
    )
    relay = await limited.gateway.execute(ALICE, forwarded())
    assert not isinstance(relay, Run)
    async for _ in relay.chunks():
        pass
    await relay.aclose()
    await limits.settled()
    assert limited.held == 0
    refused = await limited.buckets.take("tokens\x1facme\x1falice", 100, 59, 0)
    assert refused > 0, "42 of its 100 tokens were taken"


@pytest.mark.redis
async def test_closing_the_limits_gives_back_the_slots_of_runs_still_ending(
    redis_url: str,
) -> None:
    """Shutdown ends the runs, then closes the limits: a slot whose run just ended (its
    release not yet run) is given back in Redis, not left held for a lease."""
    prefix = f"test:{uuid.uuid4().hex}:"
    slots = RedisRequestSlots(connect(redis_url), prefix)
    limits = RateLimits(MemoryTokenBuckets(Clock()), slots=slots, concurrent_requests=1)
    ended = asyncio.Event()
    slot = await limits.admit(ALICE)
    assert slot is not None
    limits.release_after(slot, ended.wait)
    ended.set()  # the run ended; its release has not run yet
    await limits.aclose()
    other = RedisRequestSlots(connect(redis_url), prefix)
    try:
        assert await other.take(KEY, 1) is not None
    finally:
        await other.aclose()
