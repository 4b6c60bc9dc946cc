"""Start-up recovery: only responses of a dead process of this host are marked failed."""

import os

from stateway.core.ownership import ProcessIdentity, _start_time, fail_abandoned
from stateway.core.ports import ResponseRecord
from tests.core.fakes import MemoryStore


def in_progress(response_id: str, owner: ProcessIdentity | str | None) -> ResponseRecord:
    body = {"id": response_id, "created_at": 1.0, "model": "m", "status": "in_progress"}
    return ResponseRecord(
        "t",
        response_id,
        None,
        "in_progress",
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
        in_progress("dead", ProcessIdentity(me.host, 2**22 + 17, "5")),
        in_progress("reused", reused_pid),
        in_progress("sibling", parent()),
        in_progress("mine", me),
        in_progress("elsewhere", ProcessIdentity("another-host", 1, "1")),
        in_progress("unowned", None),
    ]:
        await store.save(record)

    assert await fail_abandoned(store, me) == 2

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


def test_identities_round_trip_through_their_stored_form() -> None:
    me = ProcessIdentity.current()
    assert ProcessIdentity.parse(str(me)) == me
    assert me.is_alive()
    assert ProcessIdentity.parse("garbage") is None
