"""A watch from past the stored log of a run another process runs, judged as the process
running it judges it: by how far that process has logged (asked through the fan-out),
not by what is stored of it yet."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncGenerator, AsyncIterator, Callable
from contextlib import asynccontextmanager
from types import SimpleNamespace

import pytest

from stateway.core import events as ev
from stateway.core import owner_position
from stateway.core.commands import WatchResponse
from stateway.core.coordination import Published
from stateway.core.errors import InvalidRequest
from stateway.core.gateway import Gateway
from stateway.core.inference import Delta, Finish, InferenceRequest, TextDelta
from stateway.core.loop import Loop
from stateway.core.ports import EventBatch, EventLog
from stateway.core.principal import Principal
from stateway.core.routing import BackendEntry, Router
from stateway.core.run_registry import RunRegistry
from stateway.core.runs import Run
from stateway.core.watch import FollowedWatch
from stateway.protocols.responses.stream import encode_event_json
from tests.core.fakes import MemoryStore, ScriptedBackend
from tests.core.sharing_fakes import MemoryFanout
from tests.core.test_background import create, ended, payloads, script, types, until_output
from tests.core.test_followed_watch import KEY, events, stored

ME = Principal()
ELSEWHERE = Principal(KEY[0])
"""Whose is the run :func:`stored` stores."""


def replica(store: MemoryStore, fanout: MemoryFanout, backend: ScriptedBackend) -> Gateway:
    router = Router([BackendEntry(backend, {}, catch_all=True)])
    return Gateway(
        store, router, Loop(store), RunRegistry(), encoder=encode_event_json, fanout=fanout
    )


class Pair:
    """Two processes on one store and one fan-out; ``owner`` answers the questions."""

    def __init__(self, backend: ScriptedBackend | None = None) -> None:
        self.gate = asyncio.Event()
        self.store, self.fanout = MemoryStore(), MemoryFanout()
        backend = backend or ScriptedBackend(script("a", "b", "c"), self.gate)
        self.owner = replica(self.store, self.fanout, backend)
        self.other = replica(self.store, self.fanout, backend)

    async def started(self) -> Run:
        await self.fanout.start(self.owner.position_asked)
        self.store.events_gate = asyncio.Event()  # nothing of its log is stored yet
        run = await create(self.owner, background=True)
        await until_output(run)
        return run


async def refused(gateway: Gateway, response_id: str, after: int) -> InvalidRequest:
    with pytest.raises(InvalidRequest) as caught:
        await gateway.execute(ME, WatchResponse(response_id, after))
    assert (caught.value.param, caught.value.code) == ("starting_after", "invalid_value")
    return caught.value


async def test_past_what_the_owner_logged_is_refused_elsewhere_as_on_the_owner() -> None:
    pair = Pair()
    run = await pair.started()
    logged = len(run.events)
    assert pair.store.events.get((ME.tenant_id, run.id), []) == [], "none of it stored"

    on_owner = await refused(pair.owner, run.id, logged)
    elsewhere = await refused(pair.other, run.id, logged)
    assert elsewhere.message == on_owner.message
    assert f"(sequence number {logged - 1})" in elsewhere.message
    assert pair.fanout.asks == [(ME.tenant_id, run.id)], "the owner was asked, once"

    # An event the owner logged (and sent live), not stored yet: taken, and followed.
    resumed = await pair.other.execute(ME, WatchResponse(run.id, logged - 2))
    assert isinstance(resumed, FollowedWatch)
    pair.store.events_gate.set()  # type: ignore[union-attr]
    pair.gate.set()
    await ended(run)
    followed = await payloads(resumed)
    assert followed == run.journal.wire[logged - 1 :]  # type: ignore[union-attr]


async def test_a_finished_run_is_judged_by_its_stored_log_everywhere() -> None:
    pair = Pair()
    run = await pair.started()
    pair.store.events_gate.set()  # type: ignore[union-attr]
    pair.gate.set()
    await ended(run)
    last = len(run.events) - 1

    for gateway in (pair.owner, pair.other):
        error = await refused(gateway, run.id, last + 1)
        assert f"(sequence number {last})" in error.message
        assert await payloads(await gateway.execute(ME, WatchResponse(run.id, last))) == []
        before = await payloads(await gateway.execute(ME, WatchResponse(run.id, last - 1)))
        assert types(before) == ["response.completed"]
    assert pair.fanout.asks == [], "a finished log needs no question"


async def test_a_run_ending_while_asked_is_judged_by_its_stored_log(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Nobody answers (its owner ended it and forgot it): the store, read again, says it
    ended, short of the position."""
    monkeypatch.setattr(owner_position, "ASK_AGAIN", 0.01)
    store, fanout = await stored(3), MemoryFanout()
    other = replica(store, fanout, ScriptedBackend([]))
    watching = asyncio.ensure_future(other.execute(ELSEWHERE, WatchResponse("bg", 5)))
    await fanout.following.wait()
    store.records[KEY].status = "completed"
    await store.append_events(*KEY, EventBatch(3, events(3, 5)))

    with pytest.raises(InvalidRequest) as caught:
        await watching
    assert "5 is past the last event of the response (sequence number 4)" in caught.value.message


async def test_a_batch_published_that_reaches_the_position_answers_too() -> None:
    store, fanout = await stored(3), MemoryFanout()
    other = replica(store, fanout, ScriptedBackend([]))
    watching = asyncio.ensure_future(other.execute(ELSEWHERE, WatchResponse("bg", 4)))
    await fanout.following.wait()
    fanout.publish(*KEY, EventBatch(3, events(3, 4)), False)  # short of it: still waits
    await asyncio.sleep(0.01)
    assert not watching.done()

    fanout.publish(*KEY, EventBatch(4, events(4, 6)), False)
    assert isinstance(await watching, FollowedWatch)


async def test_another_watchs_mark_only_confirms() -> None:
    """Short of the position it neither refuses nor takes the watch; reaching it, it takes
    it (the owner had logged the position by then), as a batch would."""
    store, fanout = await stored(3), MemoryFanout()
    other = replica(store, fanout, ScriptedBackend([]))
    watching = asyncio.ensure_future(other.execute(ELSEWHERE, WatchResponse("bg", 4)))
    await fanout.following.wait()
    fanout.mark(*KEY, 4, "0ther")
    fanout.mark(*KEY, 3, None)  # an older process's mark
    await asyncio.sleep(0.01)
    assert not watching.done()

    fanout.mark(*KEY, 6, "0ther")
    assert isinstance(await watching, FollowedWatch)


async def test_without_an_answer_it_asks_again_then_takes_the_watch(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """An owner that cannot answer (an older one; Redis lost every question) leaves the
    watch as it was before owners were asked: taken, following the run."""
    monkeypatch.setattr(owner_position, "ASK_AGAIN", 0.01)
    monkeypatch.setattr(owner_position, "ASK_WAIT", 0.2)
    store, fanout = await stored(3), MemoryFanout()
    other = replica(store, fanout, ScriptedBackend([]))

    publishing = asyncio.create_task(early_batches(fanout))  # no answer among them

    watching = await other.execute(ELSEWHERE, WatchResponse("bg", 500))

    publishing.cancel()
    assert isinstance(watching, FollowedWatch)
    assert len(fanout.asks) >= 2, "asked again while nothing answered"


async def early_batches(fanout: MemoryFanout) -> None:
    """Batches of a run going on, short of the position a watcher asks about."""
    for first in range(3, 500):
        fanout.publish(*KEY, EventBatch(first, events(first, first + 1)), False)
        await asyncio.sleep(0.002)


async def test_a_mark_answering_another_watch_does_not_judge_this_one() -> None:
    """Every mark goes to every follower of the run: one answering an earlier watch's
    question, counted before this watch came but published after it followed, reaches it
    too. It says nothing of this watch: a position the owner had logged when this watch
    came is taken, not refused by that older count."""
    backend = Stepped(script("a", "b", "c"), pause_after=1)
    pair = Pair(backend)
    run = await pair.started()
    logged = len(run.events)
    pair.fanout.hold()

    earlier = asyncio.ensure_future(pair.other.execute(ME, WatchResponse(run.id, logged)))
    await until_asked(pair.fanout, 1)  # answered: `logged` events, published later
    backend.step.set()
    await until_text_deltas(run, 3)  # the owner logged more, and waits for its gate
    later = asyncio.ensure_future(pair.other.execute(ME, WatchResponse(run.id, logged)))
    await until_asked(pair.fanout, 2)
    pair.fanout.release()  # both answers reach both watches, the earlier one first

    with pytest.raises(InvalidRequest):
        await earlier  # by its own answer: not logged yet when it came
    resumed = await later
    assert isinstance(resumed, FollowedWatch), "logged before it came"
    pair.store.events_gate.set()  # type: ignore[union-attr]
    backend.end.set()
    await ended(run)
    assert await payloads(resumed) == run.journal.wire[logged + 1 :]  # type: ignore[union-attr]


class Stepped(ScriptedBackend):
    """Its first ``pause_after`` deltas, the others once ``step`` is set; it ends once
    ``end`` is."""

    def __init__(self, deltas: list[TextDelta | Finish], pause_after: int) -> None:
        self.step, self.end = asyncio.Event(), asyncio.Event()
        super().__init__(list(deltas), self.end)
        self._pause_after = pause_after

    async def infer(self, request: InferenceRequest) -> AsyncGenerator[Delta, None]:
        yielded = 0
        async for delta in super().infer(request):
            yield delta
            yielded += 1
            if yielded == self._pause_after:
                await self.step.wait()


async def until_text_deltas(run: Run, count: int) -> None:
    for _ in range(1000):
        if sum(isinstance(e, ev.TextDelta) for e in run.events) >= count:
            return
        await asyncio.sleep(0)
    raise AssertionError("the output never came")


async def until_asked(fanout: MemoryFanout, count: int) -> None:
    for _ in range(1000):
        if len(fanout.asks) >= count:
            return
        await asyncio.sleep(0)
    raise AssertionError("nobody asked")


# `judged` alone, on a clock of its own: each boundary of a mark or a batch, and when it
# asks again.

AFTER = 5
"""The position watched from, past the stored log."""
STORED = EventLog("in_progress", True, 3, EventBatch(4, []))
"""What the watch read first: the owner's events after 3 are not stored yet."""


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def monotonic(self) -> float:
        return self.now


Told = Callable[[str], Published]
"""What the fan-out delivers, given the watch's question (its own mark names it)."""


class ScriptedFanout:
    """Delivers ``script`` to the one follower in order, each after its delay (no entry:
    nothing within the wait, which then passes on the clock); records the questions asked
    and each wait."""

    def __init__(self, clock: Clock, *script: tuple[float, Told]) -> None:
        self.clock = clock
        self.script = list(script)
        self.asks: list[str] = []
        self.waits: list[float] = []

    def ask(self, tenant_id: str, response_id: str, question: str) -> None:
        assert (tenant_id, response_id) == KEY
        self.asks.append(question)

    @asynccontextmanager
    async def follow(self, tenant_id: str, response_id: str) -> AsyncIterator[ScriptedFanout]:
        yield self

    async def next(self, within: float) -> Published | None:
        self.waits.append(within)
        assert len(self.waits) < 100, "asked again without waiting"  # not a hang
        if self.script and self.script[0][0] <= within:
            delay, told = self.script.pop(0)
            self.clock.now += delay
            return told(self.asks[0])
        self.clock.now += within
        return None


class Reads:
    """The store's side: ``read_events`` answers ``log`` and counts the reads."""

    def __init__(self, log: EventLog) -> None:
        self.log = log
        self.count = 0

    async def read_events(self, tenant_id: str, response_id: str, after: int) -> EventLog:
        assert ((tenant_id, response_id), after) == (KEY, AFTER)
        self.count += 1
        return self.log


def mark(logged: int, own: bool = True) -> Told:
    return lambda question: Published(EventBatch(logged, []), False, question if own else "0ther")


def batch(first: int, end: int, last: bool = False) -> Told:
    return lambda question: Published(EventBatch(first, [b"{}"] * (end - first)), last)


@pytest.fixture
def clock(monkeypatch: pytest.MonkeyPatch) -> Clock:
    clock = Clock()
    monkeypatch.setattr(owner_position, "time", clock)
    return clock


async def judge(fanout: ScriptedFanout, reads: Reads) -> EventLog | None:
    return await owner_position.judged(reads, fanout, KEY, STORED, AFTER)  # type: ignore[arg-type]


async def test_a_mark_at_the_position_takes_the_watch_as_stored_whatever_the_store_says(
    clock: Clock,
) -> None:
    """The owner had logged up to event ``after`` and no further: the watch is taken
    from a fresh read of the store, even one still trailing the owner."""
    trailing = EventLog("in_progress", True, 4, EventBatch(5, []))
    reads = Reads(trailing)
    fanout = ScriptedFanout(clock, (0.1, mark(AFTER + 1)))
    assert await judge(fanout, reads) is trailing
    assert (reads.count, len(fanout.asks)) == (1, 1)


async def test_a_mark_past_the_position_takes_the_watch_at_once(clock: Clock) -> None:
    reads = Reads(EventLog("in_progress", True, 4, EventBatch(5, [])))
    assert await judge(ScriptedFanout(clock, (0.1, mark(AFTER + 2))), reads) is STORED
    assert reads.count == 0


@pytest.mark.parametrize("end", [AFTER + 1, AFTER + 2], ids=["ending-at-it", "past-it"])
async def test_a_batch_reaching_the_position_takes_the_watch_at_once(
    clock: Clock, end: int
) -> None:
    reads = Reads(EventLog("in_progress", True, 4, EventBatch(5, [])))
    assert await judge(ScriptedFanout(clock, (0.1, batch(4, end))), reads) is STORED
    assert reads.count == 0


async def test_the_runs_last_batch_ending_at_the_position_is_judged_by_the_store(
    clock: Clock,
) -> None:
    """The run ended at event ``after``: its end is stored by then, and the read of it
    is the answer (past its end the watch is then refused as any finished log's)."""
    read = EventLog("in_progress", True, 4, EventBatch(5, []))
    reads = Reads(read)
    fanout = ScriptedFanout(clock, (0.1, batch(4, AFTER + 1, last=True)))
    assert await judge(fanout, reads) is read
    assert reads.count == 1


async def test_without_an_answer_the_store_caught_up_takes_the_watch(clock: Clock) -> None:
    caught_up = EventLog("in_progress", True, AFTER, EventBatch(AFTER + 1, []))
    reads = Reads(caught_up)
    fanout = ScriptedFanout(clock)
    assert await judge(fanout, reads) is caught_up
    assert fanout.waits == [owner_position.ASK_AGAIN]


async def test_unanswered_it_asks_again_each_interval_the_same_question_then_gives_up(
    clock: Clock,
) -> None:
    """Another watch's mark (one that would refuse this watch) only shortens the wait
    left; the question is asked every ``ASK_AGAIN`` with its id until ``ASK_WAIT``."""
    reads = Reads(STORED)
    fanout = ScriptedFanout(clock, (0.4, mark(AFTER, own=False)))
    assert await judge(fanout, reads) is STORED
    assert fanout.waits == pytest.approx([1.0, 0.6, 1.0, 1.0])
    assert len(fanout.asks) == 3
    assert len(set(fanout.asks)) == 1
    assert reads.count == 3


class Marks:
    def __init__(self) -> None:
        self.sent: list[tuple[str, str, int, str | None]] = []

    def mark(self, tenant_id: str, response_id: str, logged: int, question: str | None) -> None:
        self.sent.append((tenant_id, response_id, logged, question))


def runs(journaled: bool) -> RunRegistry:
    """A registry of one run, ``resp_1`` of tenant ``t``, with three events logged."""
    registry = RunRegistry()
    run = SimpleNamespace(
        id="resp_1",
        state=SimpleNamespace(tenant_id="t"),
        journal=object() if journaled else None,
        events=[None] * 3,
    )
    registry.add(run)  # type: ignore[arg-type]
    return registry


@pytest.mark.parametrize(
    ("journaled", "tenant", "response", "answered"),
    [
        (True, "t", "resp_1", True),
        (True, "t", "resp_2", False),
        (True, "u", "resp_1", False),
        (False, "t", "resp_1", False),
    ],
    ids=["its-journaled-run", "not-run-here", "another-tenants", "not-journaled"],
)
def test_only_the_process_running_a_journaled_run_of_that_tenant_answers(
    journaled: bool, tenant: str, response: str, answered: bool
) -> None:
    marks = Marks()
    owner_position.answer(runs(journaled), marks, tenant, response, "0f3a9c")  # type: ignore[arg-type]
    assert marks.sent == ([("t", "resp_1", 3, "0f3a9c")] if answered else [])
