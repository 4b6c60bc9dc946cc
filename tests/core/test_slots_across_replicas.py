"""A concurrent request's slot in Redis is free for every replica before its end is told:
with ``concurrent_requests = 1`` a client that sends its next request to another replica
the moment the last one's terminal event (or answer, or error) arrives must not be refused.
Each replica here is a ``Gateway`` of its own, over its own Redis client, on one key
prefix; the first's ``ZREM`` is held until the test lets it through, which shows what the
end waits for; a Redis that does not answer holds it back no longer than the slots'
``give_back_wait``."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator, Callable
from typing import Any

import pytest

from stateway.coordination.redis import connect
from stateway.coordination.request_slots import RedisRequestSlots
from stateway.coordination.token_buckets import MemoryTokenBuckets
from stateway.core import events as ev
from stateway.core.commands import CreateResponse
from stateway.core.errors import PreviousResponseNotFound, RateLimited
from stateway.core.gateway import Gateway
from stateway.core.inference import Finish, TextDelta
from stateway.core.limits import RateLimits
from stateway.core.loop import Loop
from stateway.core.routing import BackendEntry, Router
from stateway.core.run_registry import RunRegistry
from stateway.core.runs import Run
from stateway.protocols.responses.stream import encode_event_json
from tests.core.compaction.test_service import SEALER
from tests.core.fakes import MemoryStore, ScriptedBackend
from tests.core.test_background import ended, user
from tests.core.test_concurrent_requests import Answer, Forwarding
from tests.core.test_limits import ALICE, Clock, forwarded

pytestmark = pytest.mark.redis

ANSWER = [TextDelta("hi"), Finish("stop")]


class Replica:
    """A gateway process whose principals may have one model request in flight, its slots
    in Redis under ``prefix`` (every replica's), its responses in ``store`` (the one
    database). Its ``ZREM``\\ s wait for ``answer`` (``asked`` is set as one is sent)."""

    def __init__(
        self,
        redis_url: str,
        prefix: str,
        store: MemoryStore,
        backend: ScriptedBackend,
        give_back_wait: float,
    ) -> None:
        self.store = store
        self.slots = RedisRequestSlots(connect(redis_url), prefix, give_back_wait=give_back_wait)
        self.limits = RateLimits(
            MemoryTokenBuckets(Clock()), slots=self.slots, concurrent_requests=1
        )
        router = Router([BackendEntry(backend, {}, catch_all=True)])
        self.loop = Loop(store, sealer=SEALER)
        self.gateway = Gateway(
            store,
            router,
            self.loop,
            RunRegistry(),
            limits=self.limits,
            sealer=SEALER,
            encoder=encode_event_json,
        )
        self.asked, self.answer = asyncio.Event(), asyncio.Event()
        zrem = self.slots._redis.zrem

        async def held(*args: Any) -> Any:
            self.asked.set()
            await self.answer.wait()
            return await zrem(*args)

        self.slots._redis.zrem = held  # type: ignore[method-assign]

    async def admits(self, command: CreateResponse | None = None) -> None:
        """Alice's next request is admitted here (and left to end)."""
        run = await self.gateway.execute(ALICE, command or streamed())
        await ended(run)


Replicas = Callable[..., tuple[Replica, Replica]]


@pytest.fixture
async def replicas(redis_url: str) -> AsyncIterator[Replicas]:
    """``replicas(backend, give_back_wait=10)``: two replicas on one Redis and one store,
    the first over ``backend``; the second's ``ZREM``\\ s answered at once."""
    prefix = f"test:{uuid.uuid4().hex}:"
    store = MemoryStore()
    made: list[Replica] = []

    def make(backend: ScriptedBackend, give_back_wait: float = 10.0) -> tuple[Replica, Replica]:
        first = Replica(redis_url, prefix, store, backend, give_back_wait)
        second = Replica(redis_url, prefix, store, ScriptedBackend(ANSWER), give_back_wait)
        second.answer.set()
        made.extend([first, second])
        return first, second

    yield make
    for replica in made:
        replica.answer.set()
        await replica.limits.aclose()


def streamed() -> CreateResponse:
    return CreateResponse(model="m", input=[user("hi")], store=False, stream=True)


def terminal_emitted(run: Run) -> bool:
    return any(isinstance(event, ev.ResponseFinished) for event in run.events)


@pytest.mark.parametrize(
    "command",
    [
        streamed(),
        CreateResponse(model="m", input=[user("hi")], stream=True),  # stored
        CreateResponse(model="m", input=[user("hi")], background=True),
    ],
    ids=["stream", "stored stream", "background"],
)
async def test_a_runs_terminal_event_waits_until_its_slot_is_free_on_every_replica(
    replicas: Replicas, command: CreateResponse
) -> None:
    """Stored, the end is not saved either (a background run's terminal event is published
    with its final save): whoever learns of it, from any replica, finds the slot free."""
    a, b = replicas(ScriptedBackend(ANSWER))
    run = await a.gateway.execute(ALICE, command)
    await a.asked.wait()
    assert not terminal_emitted(run)
    assert not run.closed
    if command.store:
        stored = await a.store.get("acme", run.id)
        assert stored is None or stored.status == "in_progress"

    a.answer.set()
    await ended(run)
    assert terminal_emitted(run)
    await b.admits()


async def test_a_run_whose_loop_crashed_ends_once_its_slot_is_free(
    replicas: Replicas, caplog: pytest.LogCaptureFixture
) -> None:
    """A bug ends the run failed all the same, its terminal event after its give-back."""
    a, b = replicas(ScriptedBackend(ANSWER))

    async def crashing(*args: Any) -> None:
        raise RuntimeError("a bug")

    a.loop.execute = crashing  # type: ignore[method-assign]
    run = await a.gateway.execute(ALICE, streamed())
    await a.asked.wait()
    assert not terminal_emitted(run)

    a.answer.set()
    await ended(run)
    assert run.state.status == "failed"
    await b.admits()


async def test_an_answer_attached_to_its_request_waits_until_its_slot_is_free(
    replicas: Replicas,
) -> None:
    """A non-stream request's run ends in its caller's task: ``execute`` returns it once
    the slot is free, and the JSON answer goes out after that."""
    a, b = replicas(ScriptedBackend(ANSWER))
    attached = CreateResponse(model="m", input=[user("hi")], store=False, attach=lambda _: None)
    answered = asyncio.create_task(a.gateway.execute(ALICE, attached))
    await a.asked.wait()
    assert not answered.done()

    a.answer.set()
    run = await answered
    assert run.closed
    await b.admits()


async def test_a_refusal_waits_until_the_slot_it_took_is_free(replicas: Replicas) -> None:
    a, b = replicas(ScriptedBackend(ANSWER))
    continued = CreateResponse(model="m", input=[user("hi")], previous_response_id="resp_none")
    refused = asyncio.create_task(a.gateway.execute(ALICE, continued))
    await a.asked.wait()
    assert not refused.done()

    a.answer.set()
    with pytest.raises(PreviousResponseNotFound):
        await refused
    await b.admits()


async def test_a_relayed_answer_closes_once_its_slot_is_free(replicas: Replicas) -> None:
    """The relay's route closes it before the last bytes of its body go out."""
    a, b = replicas(Forwarding(Answer()))
    relay = await a.gateway.execute(ALICE, forwarded())
    assert not isinstance(relay, Run)
    async for _ in relay.chunks():
        pass
    closing = asyncio.create_task(relay.aclose())
    await a.asked.wait()
    assert not closing.done()

    a.answer.set()
    await closing
    await b.admits()


async def test_a_redis_that_does_not_answer_holds_the_end_back_only_a_moment(
    replicas: Replicas,
) -> None:
    """Past ``give_back_wait`` the end goes out; the slot is free once Redis answers."""
    a, b = replicas(ScriptedBackend(ANSWER), give_back_wait=0.02)
    run = await a.gateway.execute(ALICE, streamed())
    await ended(run)  # its ZREM still unanswered
    assert terminal_emitted(run)
    with pytest.raises(RateLimited):
        await b.gateway.execute(ALICE, streamed())

    a.answer.set()
    await asyncio.wait(a.slots._removing)
    await b.admits()
