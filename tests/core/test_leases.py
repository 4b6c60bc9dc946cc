"""Run ownership by lease, on an injected clock: an owner whose beat stands still for the
lease timeout loses its unfinished responses (failed, server_restarted); a beating one,
or one not watched for that long yet, never does."""

from __future__ import annotations

import asyncio
import logging

import orjson
import pytest

from stateway.core import events as ev
from stateway.core.commands import CreateResponse
from stateway.core.errors import ServerRestarted, StorageError, StorageRejected
from stateway.core.inference import TextDelta
from stateway.core.leases import LeaseKeeper
from stateway.core.ownership import fail_owned
from stateway.core.ports import EventBatch, ResponseRecord
from stateway.core.principal import Principal
from stateway.protocols.responses.encode import encode_response
from stateway.protocols.responses.event_log import decode_event_json
from stateway.protocols.responses.stream import encode_event_json
from tests.core.fakes import MemoryStore, ScriptedBackend
from tests.core.sharing_fakes import MemoryFanout, MemoryOwnerLeases
from tests.core.test_background import gateway_for as background_gateway
from tests.core.test_loop import user
from tests.core.test_ownership import RefusingEnds, in_progress
from tests.core.test_run_endings import generating, started

TIMEOUT = 10.0


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def keeper(
    store: MemoryStore,
    leases: MemoryOwnerLeases,
    clock: Clock,
    me: str = "host-b 2 2",
    fanout: MemoryFanout | None = None,
) -> LeaseKeeper:
    return LeaseKeeper(
        store, leases, me, encode_event_json, decode_event_json, TIMEOUT, clock=clock, fanout=fanout
    )


def statuses(store: MemoryStore) -> dict[str, str]:
    return {key[1]: record.status for key, record in store.records.items()}


async def test_a_silent_owner_loses_its_runs_after_the_lease_timeout() -> None:
    store, leases, clock = MemoryStore(), MemoryOwnerLeases(), Clock()
    for record in [
        in_progress("dead-1", "host-a 1 1"),
        in_progress("dead-2", "host-a 1 1", status="queued"),
        in_progress("alive", "host-c 3 3"),
        in_progress("mine", "host-b 2 2"),
        in_progress("unowned", None),
    ]:
        await store.save(record)
    await leases.register("host-a 1 1", TIMEOUT)
    await leases.register("host-c 3 3", TIMEOUT)
    judge = keeper(store, leases, clock)
    await judge.start()
    try:
        assert await judge.beat() == []  # first seen now
        clock.now += TIMEOUT - 0.5
        await leases.renew("host-c 3 3")
        assert await judge.beat() == []  # host-a silent, but not for long enough yet
        clock.now += 0.5
        await leases.renew("host-c 3 3")

        assert await judge.beat() == ["host-a 1 1"]
    finally:
        await judge.aclose()

    assert statuses(store) == {
        "dead-1": "failed",
        "dead-2": "failed",
        "alive": "in_progress",
        "mine": "in_progress",
        "unowned": "in_progress",
    }
    error = store.records["t", "dead-1"].body["error"]
    assert error["code"] == "server_restarted"
    assert "host-a 1 1" not in leases.counts, "a dead owner's row is removed"


async def test_an_owner_that_keeps_beating_is_never_judged() -> None:
    store, leases, clock = MemoryStore(), MemoryOwnerLeases(), Clock()
    await store.save(in_progress("alive", "host-a 1 1"))
    await leases.register("host-a 1 1", TIMEOUT)
    judge = keeper(store, leases, clock)
    for _ in range(20):
        await leases.renew("host-a 1 1")
        assert await judge.beat() == []
        clock.now += TIMEOUT * 0.9
    assert statuses(store) == {"alive": "in_progress"}


async def test_a_newly_started_process_watches_a_whole_lease_before_judging() -> None:
    store, leases, clock = MemoryStore(), MemoryOwnerLeases(), Clock()
    await store.save(in_progress("old", "host-a 1 1"))
    await leases.register("host-a 1 1", TIMEOUT)  # silent since long before this process started
    judge = keeper(store, leases, clock)

    assert await judge.beat() == []
    clock.now += TIMEOUT / 2
    assert await judge.beat() == []
    clock.now += TIMEOUT / 2
    assert await judge.beat() == ["host-a 1 1"]
    assert statuses(store) == {"old": "failed"}


async def test_a_background_log_gets_its_terminal_event_and_followers_are_told() -> None:
    store, leases, clock, fanout = MemoryStore(), MemoryOwnerLeases(), Clock(), MemoryFanout()
    await store.save(in_progress("bg", "host-a 1 1", background=True))
    await store.append_events("t", "bg", EventBatch(0, [b"{}", b"{}", b"{}"]))
    await leases.register("host-a 1 1", TIMEOUT)
    judge = keeper(store, leases, clock, fanout=fanout)
    await judge.beat()
    clock.now += TIMEOUT

    await judge.beat()

    (terminal,) = store.events["t", "bg"][3:]
    assert orjson.loads(terminal)["sequence_number"] == 3
    assert orjson.loads(terminal)["response"]["error"]["code"] == "server_restarted"
    assert fanout.published == [("t", "bg", EventBatch(3, [terminal]), True)]


async def test_a_run_whose_end_the_database_refuses_is_left_not_judged_at_every_beat(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """Refused for its data (refused again at every beat, unlike an outage): that
    response is left in progress with an error line, the others are failed, and the dead
    process is forgotten rather than judged again for ever."""
    store, leases, clock = RefusingEnds(), MemoryOwnerLeases(), Clock()
    await store.save(in_progress("refused", "host-a 1 1"))
    await store.save(in_progress("plain", "host-a 1 1"))
    await leases.register("host-a 1 1", TIMEOUT)
    judge = keeper(store, leases, clock)
    await judge.beat()
    clock.now += TIMEOUT

    assert await judge.beat() == ["host-a 1 1"]
    assert statuses(store) == {"refused": "in_progress", "plain": "failed"}
    assert caplog.messages[-2:] == [
        "the database refused the end of response refused of a dead process, even without"
        " its output: it is left in progress (Storage rejected the data while saving a"
        " response.)",
        "marked 1 response(s) of 1 process(es) whose lease expired as failed"
        " (server_restarted): host-a 1 1",
    ]
    assert "host-a 1 1" not in leases.counts, "forgotten: judging it again changes nothing"


class RefusingSome(MemoryStore):
    async def finish(self, record: ResponseRecord) -> bool:
        if record.id.startswith("refused"):
            raise StorageRejected("Storage rejected the data while saving a response.")
        return await super().finish(record)


async def test_the_judging_counts_only_the_runs_it_failed(
    caplog: pytest.LogCaptureFixture,
) -> None:
    store, leases, clock = RefusingSome(), MemoryOwnerLeases(), Clock()
    for response_id, owner in [
        ("plain", "host-a 1 1"),
        ("refused-1", "host-a 1 1"),
        ("refused-2", "host-c 3 3"),
        ("other", "host-c 3 3"),
    ]:
        await store.save(in_progress(response_id, owner))
    await leases.register("host-b 2 2", TIMEOUT)  # this process, listed first
    await leases.register("host-c 3 3", TIMEOUT)
    await leases.register("host-a 1 1", TIMEOUT)
    judge = keeper(store, leases, clock)
    await judge.beat()
    clock.now += TIMEOUT

    with caplog.at_level(logging.WARNING):
        assert sorted(await judge.beat()) == ["host-a 1 1", "host-c 3 3"]
    assert caplog.messages[-1] == (
        "marked 2 response(s) of 2 process(es) whose lease expired as failed"
        " (server_restarted): host-a 1 1, host-c 3 3"
    )
    assert statuses(store) == {
        "plain": "failed",
        "refused-1": "in_progress",
        "refused-2": "in_progress",
        "other": "failed",
    }


async def test_a_judged_run_keeps_the_output_its_log_shows() -> None:
    store, leases, clock = MemoryStore(), MemoryOwnerLeases(), Clock()
    await store.save(in_progress("bg", "host-a 1 1", background=True))
    done = {"id": "msg_1", "type": "message", "role": "assistant", "status": "completed"}
    done |= {"content": [{"type": "output_text", "text": "hi", "annotations": []}]}
    events = [ev.ItemAdded(0, done), ev.ItemDone(0, done)]
    logged = [encode_event_json(seq, event) for seq, event in enumerate(events)]
    await store.append_events("t", "bg", EventBatch(0, logged))
    await leases.register("host-a 1 1", TIMEOUT)
    judge = keeper(store, leases, clock)
    await judge.beat()
    clock.now += TIMEOUT

    assert await judge.beat() == ["host-a 1 1"]
    record = store.records["t", "bg"]
    assert (record.status, record.output_items) == ("failed", [done])


async def test_closing_a_keeper_never_started_or_closed_already_does_nothing() -> None:
    store, leases, clock = MemoryStore(), MemoryOwnerLeases(), Clock()
    tasks = len(asyncio.all_tasks())
    never = keeper(store, leases, clock)
    await never.aclose()
    started = keeper(store, leases, clock, me="host-c 3 3")
    await started.start()
    await started.aclose()
    await started.aclose()
    assert len(asyncio.all_tasks()) == tasks, "its beating task ended"
    assert leases.counts == {}


async def test_a_run_that_could_not_be_failed_is_judged_again_at_the_next_beat(
    caplog: pytest.LogCaptureFixture,
) -> None:
    store, leases, clock = MemoryStore(fail_final=True), MemoryOwnerLeases(), Clock()
    await store.save(in_progress("dead", "host-a 1 1"))
    await leases.register("host-a 1 1", TIMEOUT)
    judge = keeper(store, leases, clock)
    await judge.beat()
    clock.now += TIMEOUT

    with caplog.at_level(logging.WARNING):
        assert await judge.beat() == ["host-a 1 1"]
    assert caplog.messages[-2:] == [
        "failing a response of a dead process failed: Storage failed while saving a response.",
        "marked 0 response(s) of 1 process(es) whose lease expired as failed"
        " (server_restarted): host-a 1 1",
    ]
    assert "host-a 1 1" in leases.counts, "kept, to be judged again"
    assert statuses(store) == {"dead": "in_progress"}

    store.fail_final = False
    assert await judge.beat() == ["host-a 1 1"]
    assert statuses(store) == {"dead": "failed"}
    assert "host-a 1 1" not in leases.counts


async def test_a_process_whose_row_is_gone_registers_again(
    caplog: pytest.LogCaptureFixture,
) -> None:
    store, leases, clock = MemoryStore(), MemoryOwnerLeases(), Clock()
    judge = keeper(store, leases, clock)
    await judge.start()
    await leases.forget(["host-b 2 2"])  # judged dead by another process

    with caplog.at_level(logging.ERROR):
        await judge.beat()

    assert caplog.messages == [
        "this process's lease had lapsed (another process judged it dead and failed its"
        " runs); registering again"
    ]
    assert "host-b 2 2" in leases.counts
    await judge.aclose()


async def test_a_process_whose_lease_lapsed_ends_the_runs_another_failed() -> None:
    """Paused past its lease, it comes back to runs another process has failed meanwhile:
    they end as stored (failed, server_restarted) for their clients here too, instead of
    running on to an end nobody keeps. A run the judge never saw goes on."""
    backend, store, gateway = generating()
    failed, spared = await started(gateway, backend), await started(gateway, backend)
    unstored = await gateway.execute(
        Principal(), CreateResponse(model="m", input=[user("hi")], store=False)
    )
    [record] = [r for r in store.records.values() if r.id == failed.id]
    me = record.owner
    assert me is not None
    await fail_owned(
        store, record, encode_event_json, decode_event_json
    )  # another process judged this one
    here = LeaseKeeper(
        store,
        MemoryOwnerLeases(),
        me,
        encode_event_json,
        decode_event_json,
        TIMEOUT,
        runs=gateway.runs,
    )
    await here.beat()  # finds its row gone

    async with asyncio.timeout(5):  # a hang guard: the run is ended by the beat, not later
        await failed.wait()
    assert isinstance(failed.error, ServerRestarted)
    assert encode_response(failed.state)["error"]["code"] == "server_restarted"
    last = failed.events[-1]
    assert isinstance(last, ev.ResponseFinished)
    assert last.response.status == "failed"
    kept = await store.get(record.tenant_id, failed.id)
    assert kept is not None
    assert kept.body["error"]["code"] == "server_restarted"
    assert not spared.closed
    assert not unstored.closed
    backend.gate.set()
    await spared.wait()
    await unstored.wait()
    assert spared.state.status == "completed"


async def test_a_failed_check_after_a_lapse_is_made_again_at_the_next_beat(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """The store failing to read the runs when the process finds its lease lapsed: the
    beat goes on to judge the others, and the next one still ends the runs another
    process failed, though its renewal succeeds."""
    backend, store, gateway = generating()
    failed, spared = await started(gateway, backend), await started(gateway, backend)
    [record] = [r for r in store.records.values() if r.id == failed.id]
    me = record.owner
    assert me is not None
    await fail_owned(store, record, encode_event_json, decode_event_json)
    leases, clock = MemoryOwnerLeases(), Clock()
    here = LeaseKeeper(
        store,
        leases,
        me,
        encode_event_json,
        decode_event_json,
        TIMEOUT,
        clock=clock,
        runs=gateway.runs,
    )
    await leases.register("host-z 9 9", TIMEOUT)  # another process, silent from now on
    store.fail_get = True
    with caplog.at_level(logging.WARNING):
        assert await here.beat() == []
        clock.now += TIMEOUT
        assert await here.beat() == ["host-z 9 9"], "the others judged meanwhile"
    checking = (
        "checking this process's runs after its lease lapsed failed (again at the next"
        " beat): Storage failed while reading a response."
    )
    assert caplog.messages.count(checking) == 2
    assert me in leases.counts, "registered again before the check failed"
    assert leases.timeouts[me] == TIMEOUT
    assert not failed.closed

    store.fail_get = False
    await here.beat()  # renews: its row is back

    async with asyncio.timeout(5):
        await failed.wait()
    assert isinstance(failed.error, ServerRestarted)
    assert "ended 1 run(s) another process had failed meanwhile" in caplog.messages
    store.fail_get = True  # checked once done: the next beat reads no run
    with caplog.at_level(logging.WARNING):
        await here.beat()
    assert caplog.text.count("after its lease lapsed failed") == 2
    assert not spared.closed
    backend.gate.set()
    async with asyncio.timeout(5):
        await spared.wait()


async def test_closing_removes_this_process_and_survives_a_database_outage(
    caplog: pytest.LogCaptureFixture,
) -> None:
    store, leases, clock = MemoryStore(), MemoryOwnerLeases(), Clock()
    judge = keeper(store, leases, clock)
    await judge.start()
    assert "host-b 2 2" in leases.counts
    await judge.aclose()
    assert "host-b 2 2" not in leases.counts

    await judge.start()
    leases.fail = True
    with caplog.at_level(logging.WARNING):
        await judge.aclose()  # the row stays: a survivor removes it after the lease
    assert caplog.messages == ["removing this process's lease failed: The database is unavailable."]
    with pytest.raises(StorageError):
        await judge.beat()


async def test_closing_a_keeper_not_started_or_closed_already_touches_no_database(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """A start-up failing before the lease was registered closes the keeper, and so may
    a second shutdown path after the first: neither reaches the database (failing here,
    as it may be what stopped the start-up)."""
    store, leases, clock = MemoryStore(), MemoryOwnerLeases(), Clock()
    judge = keeper(store, leases, clock)
    leases.fail = True
    with caplog.at_level(logging.WARNING):
        await judge.aclose()
    leases.fail = False
    await judge.start()
    await judge.aclose()
    assert "host-b 2 2" not in leases.counts
    leases.fail = True
    with caplog.at_level(logging.WARNING):
        await judge.aclose()
    assert "lease failed" not in caplog.text


async def test_closing_keeps_the_lease_of_a_process_leaving_responses_in_progress(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """A process stopping with a response of its own still in progress (its end could
    not be stored: its settler gave up at shutdown) leaves its row, beating no more: a
    survivor fails that response once the lease expires, as a dead process's. Removed,
    the row would never be judged, and the response would stay in progress for ever."""
    store, leases, clock = MemoryStore(), MemoryOwnerLeases(), Clock()
    await store.save(in_progress("left", "host-b 2 2", background=True))
    await store.save(in_progress("elsewhere", "host-c 3 3"))
    leaving = keeper(store, leases, clock)
    await leaving.start()
    with caplog.at_level(logging.WARNING):
        await leaving.aclose()
    assert "host-b 2 2" in leases.counts, "the row stays for the survivors to judge"
    assert caplog.messages == [
        "stopping with 1 response(s) of its own in progress (their ends could not be"
        " stored): this process's lease is left to expire, and another process fails"
        " them then"
    ]

    await leases.register("host-c 3 3", TIMEOUT)
    survivor = keeper(store, leases, clock, me="host-c 3 3")
    assert await survivor.beat() == []
    clock.now += TIMEOUT
    assert await survivor.beat() == ["host-b 2 2"]
    assert statuses(store) == {"left": "failed", "elsewhere": "in_progress"}
    assert store.records["t", "left"].body["error"]["code"] == "server_restarted"
    log = await store.read_events("t", "left", -1)
    assert log is not None
    assert log.last == 0, "its log got its terminal event"


async def test_closing_keeps_the_lease_when_what_it_leaves_cannot_be_read() -> None:
    store, leases, clock = Unreadable(), MemoryOwnerLeases(), Clock()
    leaving = keeper(store, leases, clock)
    await leaving.start()
    await leaving.aclose()
    assert "host-b 2 2" in leases.counts, "it may leave something: a survivor looks"


class Unreadable(MemoryStore):
    async def in_progress(self) -> list[ResponseRecord]:
        raise StorageError("Storage failed while finding responses in progress.")


async def test_the_beating_task_logs_a_failed_beat_and_goes_on(
    caplog: pytest.LogCaptureFixture,
) -> None:
    store, leases = MemoryStore(), MemoryOwnerLeases()
    judge = LeaseKeeper(store, leases, "host-b 2 2", encode_event_json, decode_event_json, 0.003)
    await judge.start()
    leases.fail = True
    with caplog.at_level(logging.WARNING):
        for _ in range(1000):
            if "renewing leases failed" in caplog.text:
                break
            await asyncio.sleep(0.001)
    assert "renewing leases failed: The database is unavailable." in caplog.messages
    leases.fail = False
    beats = leases.counts["host-b 2 2"]
    for _ in range(1000):  # beats again once the database answers
        if leases.counts["host-b 2 2"] > beats:
            break
        await asyncio.sleep(0.001)
    assert leases.counts["host-b 2 2"] > beats
    await judge.aclose()


async def test_each_owner_is_judged_by_the_timeout_it_registered() -> None:
    store, leases, clock = MemoryStore(), MemoryOwnerLeases(), Clock()
    await store.save(in_progress("patient", "host-a 1 1"))
    await store.save(in_progress("hasty", "host-c 3 3"))
    await leases.register("host-a 1 1", 60.0)  # beats every 20 s: alive for 60
    await leases.register("host-c 3 3", 1.0)
    judge = keeper(store, leases, clock)  # its own lease is 10 s
    await judge.beat()
    clock.now += 30.0

    assert await judge.beat() == ["host-c 3 3"]
    assert statuses(store) == {"patient": "in_progress", "hasty": "failed"}


async def test_an_outage_longer_than_the_lease_does_not_make_the_first_one_back_judge() -> None:
    """The database is out of reach for every process for two leases: the judge, back
    first, must give the others the time to beat again rather than count the outage as
    their silence (it could not watch either)."""
    store, leases, clock = MemoryStore(), MemoryOwnerLeases(), Clock()
    await store.save(in_progress("alive", "host-a 1 1"))
    await leases.register("host-a 1 1", TIMEOUT)
    judge = keeper(store, leases, clock)
    await judge.beat()  # sees host-a's count

    leases.fail = True
    for _ in range(6):  # both beat in vain for two leases
        clock.now += TIMEOUT / 3
        with pytest.raises(StorageError):
            await judge.beat()
    leases.fail = False

    clock.now += TIMEOUT / 3
    assert await judge.beat() == [], "the judge is back first: host-a has not beaten yet"
    clock.now += TIMEOUT / 6
    await leases.renew("host-a 1 1")  # host-a is back too, at its next beat
    clock.now += TIMEOUT / 6
    assert await judge.beat() == []
    assert statuses(store) == {"alive": "in_progress"}

    for _ in range(3):  # host-a dies now: judged a lease later, as ever
        clock.now += TIMEOUT / 3
        await judge.beat()
    clock.now += TIMEOUT / 3
    assert await judge.beat() == ["host-a 1 1"]


class HangingLeases(MemoryOwnerLeases):
    """Renewing takes ``hang`` seconds of the clock (a lock held on the leases' table)."""

    def __init__(self, clock: Clock) -> None:
        super().__init__()
        self.clock = clock
        self.hang = 0.0

    async def renew(self, owner: str) -> bool:
        self.clock.now += self.hang
        return await super().renew(owner)


async def test_a_beat_that_hung_longer_than_a_lease_judges_nobody() -> None:
    clock = Clock()
    store, leases = MemoryStore(), HangingLeases(clock)
    await store.save(in_progress("alive", "host-a 1 1"))
    await leases.register("host-a 1 1", TIMEOUT)
    judge = keeper(store, leases, clock)
    await judge.beat()

    leases.hang = 2 * TIMEOUT  # host-a's renewal waits behind the same lock
    assert await judge.beat() == []
    leases.hang = 0.0
    assert statuses(store) == {"alive": "in_progress"}


async def test_a_process_whose_registration_was_refused_registers_at_a_later_beat(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """Started on a database that took no writes: the first beat it takes registers this
    process, which was not judged dead (no lapse to tell), and the next renews it."""
    store, leases = MemoryStore(), MemoryOwnerLeases()
    judge = LeaseKeeper(store, leases, "host-b 2 2", encode_event_json, decode_event_json, 0.003)
    leases.fail = True
    with pytest.raises(StorageError):
        await judge.start()
    judge.start_unregistered()
    with caplog.at_level(logging.WARNING):
        for _ in range(1000):
            if "renewing leases failed" in caplog.text:
                break
            await asyncio.sleep(0.001)
    assert "host-b 2 2" not in leases.counts
    leases.fail = False
    for _ in range(1000):
        if leases.counts.get("host-b 2 2", 0) > 0:
            break
        await asyncio.sleep(0.001)
    assert leases.counts["host-b 2 2"] > 0  # registered, then renewed
    assert "lease had lapsed" not in caplog.text
    await judge.aclose()


async def test_a_queued_run_whose_row_another_process_failed_ends_as_stored() -> None:
    """Still waiting for a connection slot when its process's lease lapsed: it ends as the
    judge stored it, as a run in progress does, and never marks its row in progress."""
    backend, store = ScriptedBackend([TextDelta("partial")]), MemoryStore()
    backend.seat = asyncio.Event()
    gateway = background_gateway(backend, store)
    run = await gateway.execute(
        Principal(), CreateResponse(model="m", input=[user("hi")], background=True)
    )
    await backend.started.wait()
    await run.announced()
    [record] = [r for r in store.records.values() if r.id == run.id]
    assert (record.status, record.owner is not None) == ("queued", True)
    assert record.owner is not None
    await fail_owned(store, record, encode_event_json, decode_event_json)  # judged elsewhere
    here = LeaseKeeper(
        store,
        MemoryOwnerLeases(),
        record.owner,
        encode_event_json,
        decode_event_json,
        TIMEOUT,
        runs=gateway.runs,
    )
    await here.beat()  # finds its row gone

    async with asyncio.timeout(5):
        await run.wait()
    assert isinstance(run.error, ServerRestarted)
    assert [type(e) for e in run.events] == [
        ev.ResponseCreated,
        ev.ResponseQueued,
        ev.ResponseFinished,
    ]
    kept = await store.get(record.tenant_id, run.id)
    assert kept is not None
    assert (kept.status, kept.body["error"]["code"]) == ("failed", "server_restarted")
