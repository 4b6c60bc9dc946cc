"""A watch from past the stored log of a run another process runs, judged as the process
running it judges it: by how far that process has logged (asked through the fan-out),
not by what is stored of it yet."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncGenerator

import pytest

from stateway.core import events as ev
from stateway.core import owner_position
from stateway.core.commands import WatchResponse
from stateway.core.errors import InvalidRequest
from stateway.core.gateway import Gateway
from stateway.core.inference import Delta, Finish, InferenceRequest, TextDelta
from stateway.core.loop import Loop
from stateway.core.ports import EventBatch
from stateway.core.principal import Principal
from stateway.core.routing import BackendEntry, Router
from stateway.core.runs import Run, RunRegistry
from stateway.core.watch import FollowedWatch
from stateway.protocols.responses.encode import encode_event_json
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
