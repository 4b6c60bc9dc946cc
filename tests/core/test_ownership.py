"""Start-up recovery: only responses of a dead process of this host are marked failed."""

import os
import uuid
from dataclasses import replace
from pathlib import Path

import orjson
import pytest

from stateway.core import events as ev
from stateway.core.errors import ServerRestarted, StorageRejected
from stateway.core.ownership import (
    ProcessIdentity,
    _start_time,
    died_running,
    end_as_stored,
    fail_abandoned,
    sent_unstored,
)
from stateway.core.ports import ConversationTurn, EventBatch, ResponseRecord
from stateway.core.response import ResponseState, load_state
from stateway.protocols.responses.event_log import decode_event_json
from stateway.protocols.responses.stream import encode_event_json
from tests.core.fakes import MemoryStore

DEAD = ProcessIdentity(ProcessIdentity.current().host, 2**22 + 17, "5")


def in_progress(
    response_id: str,
    owner: ProcessIdentity | str | None,
    *,
    status: str = "in_progress",
    background: bool = False,
) -> ResponseRecord:
    body = {
        "id": response_id,
        "created_at": 1.0,
        "model": "m",
        "status": status,
        "background": background,
    }
    return ResponseRecord(
        "t",
        response_id,
        None,
        status,
        1.0,
        body,
        [{"type": "message", "role": "user", "content": []}],
        owner=None if owner is None else str(owner),
    )


def parent() -> ProcessIdentity:
    """A process that is certainly alive and is not this one."""
    me = ProcessIdentity.current()
    return ProcessIdentity(me.host, os.getppid(), _start_time(os.getppid()) or "")


async def test_only_a_dead_owner_of_this_host_loses_its_responses() -> None:
    me = ProcessIdentity.current()
    store = MemoryStore()
    reused_pid = ProcessIdentity(me.host, os.getppid(), "1")  # alive pid, other start time
    for record in [
        in_progress("dead", DEAD),
        in_progress("reused", reused_pid),
        in_progress("sibling", parent()),
        in_progress("mine", me),
        in_progress("elsewhere", ProcessIdentity("another-host", 1, "1")),
        in_progress("unowned", None),
    ]:
        await store.save(record)

    assert await fail_abandoned(store, me, encode_event_json, decode_event_json) == 2

    status = {key[1]: r.status for key, r in store.records.items()}
    assert status == {
        "dead": "failed",
        "reused": "failed",
        "sibling": "in_progress",
        "mine": "in_progress",
        "elsewhere": "in_progress",
        "unowned": "in_progress",
    }
    body = store.records["t", "dead"].body
    assert body["error"]["code"] == "server_restarted"
    assert body["completed_at"] is None
    assert store.records["t", "dead"].input_items  # the input stays
    assert store.records["t", "dead"].output_items == []  # no log: no output


async def test_a_sibling_in_another_pid_namespace_of_this_host_keeps_its_responses() -> None:
    """Containers on the host's network (``docker run --network host``, Kubernetes'
    ``hostNetwork``) share its hostname but not its pids: an owner of another PID namespace
    is judged by its lease, never by a pid this process cannot see (here, no process at
    all, or another one). An owner named without a namespace (a row of an older version)
    is judged by its pid as before."""
    me = ProcessIdentity.current()
    assert me.pid_namespace, "read from /proc/self/ns/pid"
    other = replace(me, pid_namespace="1")
    store = MemoryStore()
    for record in [
        in_progress("gone here", replace(DEAD, pid_namespace="1")),
        in_progress("reused here", replace(other, started="1")),
        in_progress("legacy", DEAD),
        in_progress("dead", replace(DEAD, pid_namespace=me.pid_namespace)),
    ]:
        await store.save(record)

    assert await fail_abandoned(store, me, encode_event_json, decode_event_json) == 2

    status = {key[1]: r.status for key, r in store.records.items()}
    assert status == {
        "gone here": "in_progress",
        "reused here": "in_progress",
        "legacy": "failed",
        "dead": "failed",
    }


async def test_a_queued_response_of_a_dead_process_is_failed_too() -> None:
    """Died before its run started (waiting for a connection slot): failed as one that
    died in progress, its log (``response.created``, ``response.queued``) ended."""
    store = MemoryStore()
    await store.save(in_progress("queued", DEAD, status="queued", background=True))
    await store.append_events("t", "queued", EventBatch(0, [b"{}", b"{}"]))

    assert (
        await fail_abandoned(store, ProcessIdentity.current(), encode_event_json, decode_event_json)
        == 1
    )

    assert store.records["t", "queued"].status == "failed"
    (terminal,) = store.events["t", "queued"][2:]
    payload = orjson.loads(terminal)
    assert (payload["type"], payload["sequence_number"]) == ("response.failed", 2)
    assert payload["response"]["error"]["code"] == "server_restarted"


async def test_a_background_log_gets_the_terminal_event_it_never_had() -> None:
    store = MemoryStore()
    for record in [
        in_progress("logged", DEAD, background=True),
        in_progress("unlogged", DEAD, background=True),
        in_progress("deleted", DEAD, background=True),
        in_progress("foreground", DEAD),
        in_progress("keyed", DEAD),  # a keyed (or WebSocket) stream: journaled too
    ]:
        await store.save(record)
    await store.append_events("t", "logged", EventBatch(0, [b"{}", b"{}"]))
    await store.append_events("t", "keyed", EventBatch(0, [b"{}"]))
    await store.delete("t", "deleted")

    assert (
        await fail_abandoned(store, ProcessIdentity.current(), encode_event_json, decode_event_json)
        == 5
    )
    keyed_end = orjson.loads(store.events["t", "keyed"][-1])
    assert (keyed_end["type"], keyed_end["sequence_number"]) == ("response.failed", 1)

    (terminal,) = store.events["t", "logged"][2:]
    payload = orjson.loads(terminal)
    assert payload["type"] == "response.failed"
    assert payload["sequence_number"] == 2
    assert payload["response"]["status"] == "failed"
    assert payload["response"]["background"] is True
    assert payload["response"]["error"]["code"] == "server_restarted"
    assert [orjson.loads(p)["sequence_number"] for p in store.events["t", "unlogged"]] == [0]
    assert ("t", "deleted") not in store.events
    assert ("t", "foreground") not in store.events
    assert store.records["t", "deleted"].status == "failed"


def test_a_pid_namespace_is_told_apart_from_another_machines() -> None:
    """The initial PID namespace has the same inode on every Linux machine: two hosts of
    one name (``localhost``) would share it. The boot id tells them apart."""
    boot = Path("/proc/sys/kernel/random/boot_id").read_text().strip()
    inode = os.readlink("/proc/self/ns/pid").partition("[")[2].rstrip("]")
    me = ProcessIdentity.current()
    assert me.pid_namespace == f"{boot}:{inode}"
    assert not me.sees_pids_of(replace(me, pid_namespace=f"{uuid.uuid4()}:{inode}"))
    assert me.sees_pids_of(replace(me, pid=1))


def test_identities_round_trip_through_their_stored_form() -> None:
    me = ProcessIdentity.current()
    assert ProcessIdentity.parse(str(me)) == me
    legacy = ProcessIdentity(me.host, me.pid, me.started)  # stored by an older version
    assert ProcessIdentity.parse(f"{me.host} {me.pid} {me.started}") == legacy
    assert me.is_alive()
    assert ProcessIdentity.parse("garbage") is None


async def test_a_dead_run_keeps_the_output_its_log_shows() -> None:
    """As a cancel keeps it: the items done whole, the one being written ``incomplete``
    with its text so far; the usage stays unknown."""
    store = MemoryStore()
    await store.save(in_progress("logged", DEAD, background=True))
    done = {"id": "fc_1", "type": "function_call", "status": "completed", "call_id": "c"}
    done |= {"name": "f", "arguments": "{}"}
    message = {"id": "msg_1", "type": "message", "status": "in_progress", "role": "assistant"}
    part = {"type": "output_text", "text": "", "annotations": [], "logprobs": []}
    events = [
        ev.ItemAdded(0, {**done, "status": "in_progress", "arguments": ""}),
        ev.ItemDone(0, done),
        ev.ItemAdded(1, {**message, "content": []}),
        ev.PartAdded(1, 0, "msg_1", part),
        ev.TextDelta(1, 0, "msg_1", "Hello, "),
        ev.TextDelta(1, 0, "msg_1", "wor"),
    ]
    logged = [encode_event_json(seq, event) for seq, event in enumerate(events)]
    await store.append_events("t", "logged", EventBatch(0, logged))

    assert (
        await fail_abandoned(store, ProcessIdentity.current(), encode_event_json, decode_event_json)
        == 1
    )

    cut = {**message, "status": "incomplete", "content": [{**part, "text": "Hello, wor"}]}
    record = store.records["t", "logged"]
    assert record.output_items == [done, cut]
    assert record.body["usage"] is None
    terminal = orjson.loads(store.events["t", "logged"][-1])
    assert (terminal["type"], terminal["sequence_number"]) == ("response.failed", 6)
    assert terminal["response"]["output"] == [done, cut]
    assert terminal["response"]["error"]["code"] == "server_restarted"


async def test_a_dead_run_keeps_what_a_custom_call_it_was_writing_had_of_its_input() -> None:
    """Codex's freeform ``apply_patch``: its log holds its input's events, not arguments."""
    store = MemoryStore()
    await store.save(in_progress("patching", DEAD, background=True))
    call = {"id": "ctc_1", "type": "custom_tool_call", "status": "in_progress"}
    call |= {"call_id": "c", "name": "apply_patch", "input": ""}
    events = [
        ev.ItemAdded(0, call),
        ev.CustomInputDelta(0, "ctc_1", "*** Begin Patch\n"),
        ev.CustomInputDelta(0, "ctc_1", "*** Add File: a.txt\n+hi"),
    ]
    logged = [encode_event_json(seq, event) for seq, event in enumerate(events)]
    await store.append_events("t", "patching", EventBatch(0, logged))

    await fail_abandoned(store, ProcessIdentity.current(), encode_event_json, decode_event_json)

    cut = {**call, "status": "incomplete", "input": "*** Begin Patch\n*** Add File: a.txt\n+hi"}
    assert store.records["t", "patching"].output_items == [cut]
    terminal = orjson.loads(store.events["t", "patching"][-1])
    assert terminal["response"]["output"] == [cut]


async def test_a_dead_turn_lets_its_conversation_go_and_adds_nothing() -> None:
    """The failed end is written with its turn's let-go (no items), not left to the lock's
    holder being found ended: the retention may delete that holder's row later."""
    store = MemoryStore()
    turn = in_progress("turn", DEAD)
    turn.body["conversation_id"] = "conv_1"
    await store.save(turn)
    await store.save(in_progress("plain", DEAD))
    ends: dict[str, ConversationTurn | None] = {}
    store.on_save = lambda record: ends.__setitem__(record.id, record.turn)

    me = ProcessIdentity.current()
    assert await fail_abandoned(store, me, encode_event_json, decode_event_json) == 2

    assert ends == {"turn": ConversationTurn("conv_1"), "plain": None}


class RefusingOutput(MemoryStore):
    """A database refusing the data of any end with output (a value it cannot hold)."""

    async def finish(self, record: ResponseRecord) -> bool:
        if record.output_items:
            raise StorageRejected("Storage rejected the data while saving a response.")
        return await super().finish(record)


async def test_a_dead_run_whose_logged_output_is_refused_is_failed_without_it(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """Sent again, the same output is refused again: rather than fail every start (or
    every lease judging), the response is failed without it."""
    store = RefusingOutput()
    await store.save(in_progress("logged", DEAD, background=True))
    done = {"id": "fc_1", "type": "function_call", "status": "completed", "call_id": "c"}
    done |= {"name": "f", "arguments": "{}"}
    events = [
        ev.ItemAdded(0, {**done, "status": "in_progress", "arguments": ""}),
        ev.ItemDone(0, done),
    ]
    logged = [encode_event_json(seq, event) for seq, event in enumerate(events)]
    await store.append_events("t", "logged", EventBatch(0, logged))

    me = ProcessIdentity.current()
    assert await fail_abandoned(store, me, encode_event_json, decode_event_json) == 1

    record = store.records["t", "logged"]
    assert (record.status, record.output_items) == ("failed", [])
    terminal = orjson.loads(store.events["t", "logged"][-1])
    assert (terminal["type"], terminal["sequence_number"]) == ("response.failed", 2)
    assert terminal["response"]["output"] == []
    assert terminal["response"]["error"]["code"] == "server_restarted"
    assert caplog.messages == [
        "the database refused the logged output of response logged (Storage rejected the"
        " data while saving a response.): failing it without",
        "marked 1 response(s) left in progress by a stopped process as failed (server_restarted)",
    ]


async def test_a_dead_turn_whose_logged_output_is_refused_still_lets_its_conversation_go() -> None:
    store = RefusingOutput()
    turn = in_progress("turn", DEAD, background=True)
    turn.body["conversation_id"] = "conv_1"
    await store.save(turn)
    done = {"id": "msg_1", "type": "message", "role": "assistant", "status": "completed"}
    done |= {"content": [{"type": "output_text", "text": "hi", "annotations": []}]}
    logged = [
        encode_event_json(0, ev.ItemAdded(0, done)),
        encode_event_json(1, ev.ItemDone(0, done)),
    ]
    await store.append_events("t", "turn", EventBatch(0, logged))
    ends: list[ConversationTurn | None] = []
    store.on_save = lambda record: ends.append(record.turn)

    me = ProcessIdentity.current()
    assert await fail_abandoned(store, me, encode_event_json, decode_event_json) == 1

    assert store.records["t", "turn"].status == "failed"
    assert ends == [ConversationTurn("conv_1")]


class RefusingEnds(MemoryStore):
    """A database refusing every end of one response, its output left out or not (a row
    it cannot hold): the settler gave that end up, leaving the row in progress."""

    async def finish(self, record: ResponseRecord) -> bool:
        if record.id == "refused":
            raise StorageRejected("Storage rejected the data while saving a response.")
        return await super().finish(record)


async def test_a_dead_run_whose_end_is_refused_does_not_stop_every_start(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """Refused again at every start: the other responses are failed, that one is left in
    progress with an error line, and the start goes on (an outage still stops it)."""
    store = RefusingEnds()
    await store.save(in_progress("refused", DEAD))
    await store.save(in_progress("plain", DEAD))

    me = ProcessIdentity.current()
    assert await fail_abandoned(store, me, encode_event_json, decode_event_json) == 1

    assert store.records["t", "plain"].status == "failed"
    assert store.records["t", "refused"].status == "in_progress"
    assert caplog.messages[0] == (
        "the database refused the end of response refused, left in progress by a stopped"
        " process, even without its output: it is left in progress (Storage rejected the data"
        " while saving a response.)"
    )


async def test_nothing_abandoned_marks_nothing(caplog: pytest.LogCaptureFixture) -> None:
    store = MemoryStore()
    me = ProcessIdentity.current()
    await store.save(in_progress("mine", me))
    assert await fail_abandoned(store, me, encode_event_json, decode_event_json) == 0
    assert caplog.messages == []


def running_state(response_id: str) -> ResponseState:
    return load_state("t", in_progress(response_id, None).body, [])


@pytest.mark.parametrize("stored", [None, in_progress("run", DEAD)])
def test_a_run_whose_row_is_gone_or_unfinished_ends_as_restarted(
    stored: ResponseRecord | None,
) -> None:
    """Its row deleted since, or not yet readable as ended: taken as judged."""
    state = running_state("run")
    state.output = [{"type": "message", "role": "assistant", "content": []}]
    state.completed_at = 2.0
    error = end_as_stored(state, stored)
    assert isinstance(error, ServerRestarted)
    assert (state.status, state.output, state.completed_at) == ("failed", [], None)
    assert state.error is not None
    assert state.error["code"] == "server_restarted"


def test_a_run_ended_elsewhere_ends_as_stored() -> None:
    state = running_state("run")
    ended = in_progress("run", DEAD, status="completed")
    ended.body |= {"completed_at": 3.0, "usage": None}
    ended.output_items = [{"type": "message", "role": "assistant", "content": []}]
    assert end_as_stored(state, ended) is None
    assert (state.status, state.completed_at, state.error) == ("completed", 3.0, None)
    assert state.output == ended.output_items


@pytest.mark.parametrize(
    ("status", "code", "died", "unstored"),
    [
        ("failed", "server_restarted", True, True),
        ("failed", "storage_unavailable", False, True),
        ("failed", "storage_full", False, True),
        ("failed", "upstream_error", False, False),
        ("in_progress", None, False, False),
    ],
)
async def test_what_a_failure_says_of_events_never_stored(
    status: str, code: str | None, died: bool, unstored: bool
) -> None:
    store = MemoryStore()
    record = in_progress("run", DEAD, status=status)
    if code is not None:
        record.body["error"] = {"code": code, "message": "m"}
    await store.save(record)
    assert await died_running(store, "t", "run") is died
    assert await sent_unstored(store, "t", "run") is unstored
    assert not await died_running(store, "t", "gone")
    assert not await sent_unstored(store, "t", "gone")
