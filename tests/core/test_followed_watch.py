"""Following a run of another process: the stored log, then the batches its owner
publishes, each event once by sequence number, the store read for what was missed."""

from __future__ import annotations

import asyncio

import pytest

from stateway.core.background import watch
from stateway.core.commands import GetResponse, WatchResponse
from stateway.core.errors import NotFound, ServerShuttingDown, StorageError
from stateway.core.gateway import Gateway
from stateway.core.loop import Loop
from stateway.core.ports import EventBatch, EventLog
from stateway.core.principal import Principal
from stateway.core.routing import BackendEntry, Router
from stateway.core.run_registry import RunRegistry
from stateway.core.runs import CancelReason
from stateway.core.watch import FollowedWatch, StoredWatch
from tests.core.fakes import MemoryStore, ScriptedBackend
from tests.core.sharing_fakes import MemoryFanout
from tests.core.test_ownership import in_progress

KEY = ("t", "bg")


def event(n: int) -> bytes:
    return b'{"sequence_number":%d}' % n


def events(first: int, end: int) -> list[bytes]:
    return [event(n) for n in range(first, end)]


async def stored(count: int) -> MemoryStore:
    store = MemoryStore()
    await store.save(in_progress("bg", "host-a 1 1", background=True))
    if count:
        await store.append_events(*KEY, EventBatch(0, events(0, count)))
    return store


async def log_after(store: MemoryStore, after: int) -> EventLog:
    log = await store.read_events(*KEY, after)
    assert log is not None
    return log


async def commit(
    store: MemoryStore, fanout: MemoryFanout, first: int, end: int, *, last: bool = False
) -> None:
    """What an owner does: store a batch, then publish it."""
    if last:
        store.records[KEY].status = "completed"
    batch = EventBatch(first, events(first, end))
    await store.append_events(*KEY, batch)
    fanout.publish(*KEY, batch, last)


async def collect(follower: FollowedWatch) -> tuple[list[bytes], list[bool]]:
    seen: list[bytes] = []
    flags: list[bool] = []
    async for batch, last in follower.batches():
        seen += batch
        flags.append(last)
    return seen, flags


async def test_the_stored_log_then_each_published_event_once() -> None:
    store, fanout = await stored(3), MemoryFanout()
    follower = FollowedWatch(store, fanout, KEY, await log_after(store, -1), quiet=60)
    following = asyncio.create_task(collect(follower))
    await fanout.following.wait()

    await commit(store, fanout, 3, 5)
    fanout.publish(*KEY, EventBatch(2, events(2, 5)), False)  # overlaps: only news are taken
    fanout.publish(*KEY, EventBatch(3, events(3, 5)), False)  # a duplicate
    await commit(store, fanout, 5, 7, last=True)

    seen, flags = await following
    assert seen == events(0, 7)
    assert flags[-1] is True
    assert not any(flags[:-1])
    assert fanout.followers[KEY] == [], "it stopped following"


async def test_from_the_middle_it_gives_what_follows_the_position() -> None:
    store, fanout = await stored(6), MemoryFanout()
    follower = FollowedWatch(store, fanout, KEY, await log_after(store, 3), 3, quiet=60)
    following = asyncio.create_task(collect(follower))
    await fanout.following.wait()
    await commit(store, fanout, 6, 8, last=True)

    seen, _ = await following
    assert seen == events(4, 8)


async def test_a_batch_ahead_of_the_position_is_filled_from_the_store() -> None:
    store, fanout = await stored(2), MemoryFanout()
    follower = FollowedWatch(store, fanout, KEY, await log_after(store, -1), quiet=60)
    following = asyncio.create_task(collect(follower))
    await fanout.following.wait()

    await store.append_events(*KEY, EventBatch(2, events(2, 4)))  # published, but lost
    await commit(store, fanout, 4, 6, last=True)

    seen, flags = await following
    assert seen == events(0, 6)
    assert flags[-1] is True


async def test_with_nothing_published_it_reads_the_store_and_ends_with_it() -> None:
    store, fanout = await stored(2), MemoryFanout()
    follower = FollowedWatch(store, fanout, KEY, await log_after(store, -1), quiet=0.001)
    following = asyncio.create_task(collect(follower))
    await fanout.following.wait()

    # The owner died; whoever failed its run stored the end (and published nothing).
    store.records[KEY].status = "failed"
    await store.append_events(*KEY, EventBatch(2, events(2, 3)))

    seen, flags = await following
    assert seen == events(0, 3)
    assert flags == [False, True]


async def test_a_response_deleted_meanwhile_ends_the_watch_with_not_found() -> None:
    """Deleted with no word reaching its run (no shared Redis, or Redis away): the watch
    cannot end as if the stream were whole; it raises, for its surface to say so."""
    store, fanout = await stored(1), MemoryFanout()
    follower = FollowedWatch(store, fanout, KEY, await log_after(store, -1), quiet=0.001)
    seen: list[bytes] = []

    async def follow() -> None:
        async for batch, _ in follower.batches():
            seen.extend(batch)

    following = asyncio.create_task(follow())
    await fanout.following.wait()
    await store.delete(*KEY)

    with pytest.raises(NotFound, match="'bg' was deleted while it was streamed"):
        await following
    assert seen == events(0, 1)


async def test_a_stored_watch_of_a_response_deleted_meanwhile_raises_not_found() -> None:
    store = await stored(1)
    watching = StoredWatch(store, KEY, await log_after(store, -1), poll=0.001)
    seen: list[bytes] = []

    async def follow() -> None:
        async for batch, _ in watching.batches():
            seen.extend(batch)
            await store.delete(*KEY)

    with pytest.raises(NotFound, match="'bg' was deleted while it was streamed") as gone:
        await follow()
    assert seen == events(0, 1)
    assert (gone.value.status, gone.value.param) == (404, "response_id")


async def test_what_was_committed_before_following_is_read_then_the_published_rest() -> None:
    """Events stored between the watch's first read and its following (published to
    nobody) come from the store; the watch goes on with what is published after them."""
    store, fanout = await stored(2), MemoryFanout()
    follower = FollowedWatch(store, fanout, KEY, await log_after(store, -1), quiet=60)
    await store.append_events(*KEY, EventBatch(2, events(2, 4)))
    batches = follower.batches()

    assert await anext(batches) == (events(0, 2), False)
    assert await anext(batches) == (events(2, 4), False)
    reading = asyncio.ensure_future(anext(batches))
    await fanout.following.wait()
    await commit(store, fanout, 4, 6, last=True)
    assert await asyncio.wait_for(reading, 5) == (events(4, 6), True)
    await batches.aclose()


class CountingStore(MemoryStore):
    reads = 0

    async def read_events(self, tenant_id: str, response_id: str, after: int) -> EventLog | None:
        self.reads += 1
        return await super().read_events(tenant_id, response_id, after)


async def test_published_batches_and_marks_are_taken_without_reading_the_store() -> None:
    """The store is read once, for what was committed before following; after that it is
    read only for what was missed (a batch ahead of the position, a quiet while): not for
    every batch published in order, nor for a mark (another watcher's question)."""
    store, fanout = CountingStore(), MemoryFanout()
    await store.save(in_progress("bg", "host-a 1 1", background=True))
    await store.append_events(*KEY, EventBatch(0, events(0, 2)))
    follower = FollowedWatch(store, fanout, KEY, await log_after(store, -1), quiet=60)
    store.reads = 0
    following = asyncio.create_task(collect(follower))
    async with asyncio.timeout(5):
        await fanout.following.wait()
        while store.reads < 1:  # noqa: ASYNC110 - the read is what is awaited
            await asyncio.sleep(0)

    await commit(store, fanout, 2, 4)
    fanout.mark(*KEY, 4, "question")
    await commit(store, fanout, 4, 6, last=True)

    seen, flags = await asyncio.wait_for(following, 5)
    assert (seen, flags[-1]) == (events(0, 6), True)
    assert store.reads == 1


async def test_after_a_mark_a_quiet_while_still_reads_the_store() -> None:
    """A mark, then the owner dies: the failed end, stored by whoever failed the run and
    published by nobody, is read after a quiet while (waiting for a batch without a bound
    would wait for ever)."""
    store, fanout = await stored(2), MemoryFanout()
    follower = FollowedWatch(store, fanout, KEY, await log_after(store, -1), quiet=0.01)
    following = asyncio.create_task(collect(follower))
    async with asyncio.timeout(5):
        await fanout.following.wait()
    fanout.mark(*KEY, 2, None)
    await asyncio.sleep(0.05)  # the mark taken: the follower waits for the next batch
    terminal = await die(store)

    seen, flags = await asyncio.wait_for(following, 5)
    assert (seen, flags[-1]) == (events(0, 2) + terminal.payloads, True)


async def test_behind_counts_the_published_bytes_not_taken_yet() -> None:
    store, fanout = await stored(1), MemoryFanout()
    follower = FollowedWatch(store, fanout, KEY, await log_after(store, -1), quiet=60)
    batches = follower.batches()
    assert follower.behind() == 0
    assert await anext(batches) == (events(0, 1), False)
    reading = asyncio.ensure_future(anext(batches))
    await fanout.following.wait()
    await asyncio.sleep(0)
    assert not reading.done()

    await commit(store, fanout, 1, 3)
    waiting = sum(map(len, events(1, 3)))
    assert follower.behind() == waiting
    assert await reading == (events(1, 3), False)
    assert follower.behind() == 0
    await batches.aclose()


async def test_a_finished_response_is_read_once_without_following() -> None:
    store, fanout = await stored(2), MemoryFanout()
    store.records[KEY].status = "completed"
    follower = FollowedWatch(store, fanout, KEY, await log_after(store, -1), quiet=60)

    seen, flags = await collect(follower)

    assert (seen, flags) == (events(0, 2), [True])
    assert not fanout.following.is_set()


async def test_the_gateway_follows_an_unfinished_run_of_another_process_when_shared() -> None:
    store, fanout = await stored(2), MemoryFanout()
    command = WatchResponse("bg")

    shared = await watch(store, RunRegistry(), Principal("t"), command, fanout)
    alone = await watch(store, RunRegistry(), Principal("t"), command)
    store.records[KEY].status = "completed"
    ended = await watch(store, RunRegistry(), Principal("t"), command, fanout)

    assert isinstance(shared, FollowedWatch)
    assert isinstance(alone, StoredWatch)
    assert isinstance(ended, StoredWatch)


class OutageStore(MemoryStore):
    """A store whose reads fail while ``away`` (the database gone for a moment)."""

    away = False

    async def read_events(self, tenant_id: str, response_id: str, after: int) -> EventLog | None:
        if self.away:
            self.failed_reads += 1
            raise StorageError("Storage failed while reading an event log.")
        return await super().read_events(tenant_id, response_id, after)

    failed_reads = 0


async def outage_seen(store: OutageStore, reads: int) -> None:
    """Until ``reads`` reads failed: the watcher went on reading through the outage (a
    watcher that ended at the first stops short, and this fails after 5 s)."""
    async with asyncio.timeout(5):
        while store.failed_reads < reads:  # noqa: ASYNC110 - the reads are what is awaited
            await asyncio.sleep(0.001)


async def test_a_storage_outage_is_waited_out_not_the_end_of_the_stream() -> None:
    store, fanout = OutageStore(), MemoryFanout()
    await store.save(in_progress("bg", "host-a 1 1", background=True))
    await store.append_events(*KEY, EventBatch(0, events(0, 2)))
    follower = FollowedWatch(store, fanout, KEY, await log_after(store, -1), quiet=0.001)
    following = asyncio.create_task(collect(follower))
    await fanout.following.wait()
    store.away = True
    await outage_seen(store, 3)
    assert not following.done()
    store.away = False
    store.records[KEY].status = "failed"
    await store.append_events(*KEY, EventBatch(2, events(2, 3)))
    seen, flags = await following
    assert (seen, flags[-1]) == (events(0, 3), True)


async def test_a_stored_watch_rides_out_an_outage_too() -> None:
    store = OutageStore()
    await store.save(in_progress("bg", "host-a 1 1", background=True))
    await store.append_events(*KEY, EventBatch(0, events(0, 1)))
    watching = StoredWatch(store, KEY, await log_after(store, -1), poll=0.001)
    store.away = True
    seen: list[bytes] = []

    async def follow() -> None:
        async for batch, _ in watching.batches():
            seen.extend(batch)

    task = asyncio.create_task(follow())
    await outage_seen(store, 3)
    store.away = False
    store.records[KEY].status = "completed"
    await store.append_events(*KEY, EventBatch(1, events(1, 2)))
    await task
    assert seen == events(0, 2)


async def die(store: MemoryStore, code: str = "server_restarted") -> EventBatch:
    """What a survivor does to the run of an owner that died: fail it (server_restarted)
    and append the terminal event after what was stored; the batch it publishes. With a
    storage error's ``code``: what the owner's settler does once the end it could not
    store lands."""
    record = store.records[KEY]
    record.status = "failed"
    record.body["error"] = {"code": code, "message": "gone"}
    terminal = EventBatch(len(store.events[KEY]), [b'{"type":"response.failed"}'])
    await store.append_events(*KEY, terminal)
    return terminal


async def test_a_follower_past_the_stored_log_is_told_how_a_dead_owners_run_ended() -> None:
    """Resuming on another replica after events the owner sent live but had not stored
    (5 stored, 7 seen), the follower is past the terminal event appended once the owner
    died (numbered 5): it gets that event, not a stream that ends saying nothing."""
    for published in (True, False):
        store, fanout = await stored(5), MemoryFanout()
        follower = FollowedWatch(store, fanout, KEY, await log_after(store, 6), 6, quiet=0.001)
        following = asyncio.create_task(collect(follower))
        await fanout.following.wait()

        terminal = await die(store)
        if published:
            fanout.publish(*KEY, terminal, True)

        seen, flags = await asyncio.wait_for(following, 5)
        assert (seen, flags) == (terminal.payloads, [True]), f"published: {published}"


@pytest.mark.parametrize(
    "code", ["storage_unavailable", "storage_full", "storage_read_only", "storage_write_failed"]
)
async def test_a_follower_past_the_stored_log_is_told_an_end_stored_late(code: str) -> None:
    """The owner sent events live it could not store (the database away), then could not
    store its end either: its settler stores that end later, after the last event stored.
    A follower past it gets it, as if the owner had died, not a stream ending silently."""
    store, fanout = await stored(5), MemoryFanout()
    follower = FollowedWatch(store, fanout, KEY, await log_after(store, 6), 6, quiet=0.001)
    following = asyncio.create_task(collect(follower))
    await fanout.following.wait()

    terminal = await die(store, code)
    fanout.publish(*KEY, terminal, True)

    assert await asyncio.wait_for(following, 5) == (terminal.payloads, [True])


async def test_a_stored_watch_past_the_log_is_told_how_a_dead_owners_run_ended() -> None:
    store = await stored(5)
    watching = StoredWatch(store, KEY, await log_after(store, 5), 5, poll=0.001)
    seen: list[bytes] = []

    async def follow() -> None:
        async for batch, _ in watching.batches():
            seen.extend(batch)

    task = asyncio.create_task(follow())
    await asyncio.sleep(0.01)
    terminal = await die(store)
    await asyncio.wait_for(task, 5)
    assert seen == terminal.payloads


async def test_a_watch_from_the_terminal_events_number_of_a_dead_run_gets_it() -> None:
    """The watcher saw an event numbered as the terminal event appended since (one never
    stored): it has not seen how the response ended. At the end of a log that ended
    otherwise there is nothing more to give."""
    store = await stored(5)
    terminal = await die(store)
    command = WatchResponse("bg", starting_after=terminal.first)

    resumed = await watch(store, RunRegistry(), Principal("t"), command)

    assert [batch async for batch, _ in resumed.batches()] == [terminal.payloads]
    store.records[KEY].body["error"] = None  # failed otherwise: nothing after its last
    resumed = await watch(store, RunRegistry(), Principal("t"), command)
    assert [batch async for batch, _ in resumed.batches()] == []


async def test_a_follower_past_the_end_of_a_run_that_completed_gets_nothing_more() -> None:
    store, fanout = await stored(5), MemoryFanout()
    follower = FollowedWatch(store, fanout, KEY, await log_after(store, 8), 8, quiet=60)
    following = asyncio.create_task(collect(follower))
    await fanout.following.wait()
    await commit(store, fanout, 5, 7, last=True)
    assert await asyncio.wait_for(following, 5) == ([], [])


async def test_a_watch_through_the_gateway_follows_what_the_owner_publishes() -> None:
    store, fanout = await stored(2), MemoryFanout()
    router = Router([BackendEntry(ScriptedBackend([]), {}, catch_all=True)])
    gateway = Gateway(store, router, Loop(store), RunRegistry(), fanout=fanout)
    watched = await gateway.execute(Principal("t"), WatchResponse("bg"))
    assert isinstance(watched, FollowedWatch)
    following = asyncio.create_task(collect(watched))
    async with asyncio.timeout(5):  # a watch that does not follow the fanout waits for ever
        await fanout.following.wait()
    await commit(store, fanout, 2, 4, last=True)
    seen, flags = await following
    assert seen == events(0, 4)
    assert flags[-1] is True


async def test_a_get_of_a_response_another_process_runs_answers_its_row() -> None:
    store = await stored(2)
    router = Router([BackendEntry(ScriptedBackend([]), {}, catch_all=True)])
    gateway = Gateway(store, router, Loop(store), RunRegistry())
    state = await gateway.execute(Principal("t"), GetResponse("bg"))
    assert (state.id, state.status, state.background) == ("bg", "in_progress", True)


async def test_shutting_down_ends_the_watches_of_runs_elsewhere_while_they_wait() -> None:
    """Nothing here ends a run another process runs: its watchers, waiting on that
    process, are ended with this process's runs, told to resume elsewhere."""
    store, fanout, runs = await stored(2), MemoryFanout(), RunRegistry()
    polling = StoredWatch(store, KEY, await log_after(store, -1), poll=60, runs=runs)
    following = FollowedWatch(store, fanout, KEY, await log_after(store, -1), quiet=60, runs=runs)
    seen: list[list[bytes]] = []
    both_read = asyncio.Event()

    async def watching(watch: StoredWatch | FollowedWatch) -> None:
        async for batch, _ in watch.batches():
            seen.append(batch)
            if len(seen) == 2:
                both_read.set()

    watches = [asyncio.create_task(watching(w)) for w in (polling, following)]
    await both_read.wait()  # each went on to wait for more: a poll, the next batch

    assert await runs.end_all(CancelReason.SHUTTING_DOWN) == 2
    async with asyncio.timeout(5):  # each waits 60 s unless ended
        ended = await asyncio.gather(*watches, return_exceptions=True)
    for error in ended:
        assert isinstance(error, ServerShuttingDown), error
        assert (error.status, error.code) == (503, "server_shutting_down")
        assert "resume the stream from another one with starting_after" in error.message
    assert seen == [events(0, 2), events(0, 2)]
    assert not fanout.followers.get(KEY)  # its following let go


async def test_a_watch_of_a_run_elsewhere_waits_no_more_once_shut_down() -> None:
    store, runs = await stored(1), RunRegistry()
    await runs.end_all(CancelReason.SHUTTING_DOWN)
    watching = StoredWatch(store, KEY, await log_after(store, -1), poll=60, runs=runs)
    batches = watching.batches()
    assert await anext(batches) == (events(0, 1), False)
    with pytest.raises(ServerShuttingDown):
        await asyncio.wait_for(anext(batches), 5)


async def test_a_watch_that_ended_leaves_nothing_for_shutdown_to_end() -> None:
    store, runs = await stored(1), RunRegistry()
    watching = StoredWatch(store, KEY, await log_after(store, -1), poll=0.001, runs=runs)
    seen: list[bytes] = []
    async for batch, _ in watching.batches():
        seen += batch
        if len(seen) == 1:
            await commit(store, MemoryFanout(), 1, 2, last=True)
    assert seen == events(0, 2)
    assert await runs.end_all(CancelReason.SHUTTING_DOWN) == 0
