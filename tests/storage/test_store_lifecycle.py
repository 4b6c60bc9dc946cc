"""A run's two writes: the in-progress row with its input, then its end with its output."""

from __future__ import annotations

import asyncio
import dataclasses

from stateway.core.ports import EventBatch, ResponseRecord
from stateway.storage.sql import SqlResponseStore
from tests.storage.conftest import RecordFactory
from tests.storage.test_queries import statements_written
from tests.storage.test_store import texts


def started(record: RecordFactory, response_id: str, *inputs: str, **kw: object) -> ResponseRecord:
    row = record(response_id, inputs=inputs, **kw)
    row.status, row.owner = "in_progress", "host 1 2"
    return row


def ended(row: ResponseRecord, status: str, *outputs: str) -> ResponseRecord:
    body = {**row.body, "status": status}
    items = [
        {"type": "message", "role": "assistant", "content": [{"type": "text", "text": text}]}
        for text in outputs
    ]
    return dataclasses.replace(row, status=status, body=body, input_items=[], output_items=items)


async def test_a_running_response_is_readable_and_continuable_only_once_finished(
    store: SqlResponseStore, record: RecordFactory, tenant: str
) -> None:
    row = started(record, "r1", "q")
    await store.save(row)

    running = await store.get(tenant, "r1")
    assert running is not None
    assert running.status == "in_progress"
    chain = await store.load_context(tenant, "r1")
    assert chain is not None
    assert chain.status == "in_progress"
    assert texts(chain) == ["q"]

    await store.finish(ended(row, "completed", "a"))

    done = await store.get(tenant, "r1")
    assert done is not None
    assert (done.status, done.body["status"]) == ("completed", "completed")
    assert texts(await store.load_context(tenant, "r1")) == ["q", "a"]


async def test_finishing_leaves_a_deleted_response_deleted(
    store: SqlResponseStore, record: RecordFactory, tenant: str
) -> None:
    row = started(record, "r1", "q")
    await store.save(row)
    assert await store.delete(tenant, "r1")
    await store.finish(ended(row, "cancelled"))
    assert await store.get(tenant, "r1") is None


async def test_finishing_touches_only_a_response_still_in_progress(
    store: SqlResponseStore, record: RecordFactory, tenant: str
) -> None:
    row = started(record, "r1", "q")
    await store.save(row)
    assert await store.finish(ended(row, "failed"))
    assert not await store.finish(ended(row, "completed"))
    stored = await store.get(tenant, "r1")
    assert stored is not None
    assert stored.status == "failed"


async def test_a_late_end_writes_nothing_into_a_response_ended_elsewhere(
    store: SqlResponseStore, record: RecordFactory, tenant: str
) -> None:
    """A paused process's run ending after another process failed its row (a lapsed
    lease): its output and its log's last events stay out of the failed row."""
    row = started(record, "r1", "q")
    await store.save(row)
    judged = dataclasses.replace(ended(row, "failed"), events=EventBatch(0, [b'{"n":0}']))
    assert await store.finish(judged)
    late = dataclasses.replace(
        ended(row, "completed", "late answer"), events=EventBatch(0, [b'{"n":"late"}'])
    )
    assert not await store.finish(late)
    stored = await store.get(tenant, "r1")
    assert stored is not None
    assert (stored.status, stored.output_items) == ("failed", [])
    log = await store.read_events(tenant, "r1", -1)
    assert log is not None
    assert log.events.payloads == [b'{"n":0}']


async def test_a_late_end_in_a_shared_transaction_fails_alone(
    store: SqlResponseStore, record: RecordFactory, tenant: str
) -> None:
    rows = [started(record, f"r{n}", "q") for n in range(4)]
    await asyncio.gather(*(store.save(r) for r in rows))
    assert await store.finish(ended(rows[1], "failed"))  # judged elsewhere
    with statements_written(store) as executed:
        taken = await asyncio.gather(
            *(store.finish(ended(r, "completed", f"a{n}")) for n, r in enumerate(rows))
        )
    assert taken == [True, False, True, True]
    # together first (rolled back at the update), then one by one: the late end alone
    # writes no items
    assert [sql.split()[0] for sql in executed] == ["UPDATE"] + ["UPDATE", "INSERT"] + [
        "UPDATE"
    ] + ["UPDATE", "INSERT"] * 2
    for n, row in enumerate(rows):
        stored = await store.get(tenant, row.id)
        assert stored is not None
        expected = ("failed", 0) if n == 1 else ("completed", 1)
        assert (stored.status, len(stored.output_items)) == expected


async def test_a_failed_response_lends_its_input_but_not_its_output(
    store: SqlResponseStore, record: RecordFactory, tenant: str
) -> None:
    await store.save(record("r1", inputs=["q1"], outputs=["a1"]))
    failed = record("r2", "r1", inputs=["q2"], outputs=["cut off"])
    failed.status = "failed"
    await store.save(failed)
    await store.save(record("r3", "r2", inputs=["q3"], outputs=["a3"]))

    chain = await store.load_context(tenant, "r2")
    assert chain is not None
    assert (texts(chain), chain.status) == (["q1", "a1", "q2"], "failed")
    assert texts(await store.load_context(tenant, "r3")) == ["q1", "a1", "q2", "q3", "a3"]


async def test_in_progress_lists_every_running_response_with_its_owner(
    store: SqlResponseStore, record: RecordFactory, tenant: str
) -> None:
    await store.save(record("done", inputs=["q"]))
    await store.save(started(record, "running", "q", previous="done"))
    deleted = started(record, "deleted", "q")
    await store.save(deleted)
    await store.delete(tenant, "deleted")

    mine = {r.id: r for r in await store.in_progress() if r.tenant_id == tenant}
    assert set(mine) == {"running", "deleted"}
    running = mine["running"]
    assert (running.owner, running.previous_response_id) == ("host 1 2", "done")
    assert (running.status, running.created_at) == ("in_progress", 1_700_000_000.25)
    assert running.body == {"id": "running", "model": "m"}


async def test_starts_and_ends_arriving_together_share_one_transaction(
    store: SqlResponseStore, record: RecordFactory
) -> None:
    rows = [started(record, f"r{n}", "q") for n in range(6)]
    await asyncio.gather(*(store.save(r) for r in rows[:3]))
    with statements_written(store) as executed:
        await asyncio.gather(
            *(store.finish(ended(r, "completed", "a")) for r in rows[:3]),
            *(store.save(r) for r in rows[3:]),
        )
    # one insert of responses, one (executemany) update, one insert of items
    assert [sql.split()[0] for sql in executed] == ["INSERT", "UPDATE", "INSERT"]


async def test_find_items_prefers_outputs_then_the_latest_live_response(
    store: SqlResponseStore, record: RecordFactory, tenant: str
) -> None:
    def message(item_id: str, text: str) -> dict[str, object]:
        return {"id": item_id, "type": "message", "role": "user", "content": text}

    older = dataclasses.replace(
        record("r1", inputs=[message("m_in", "old input")], outputs=[message("m_out", "out")]),
        created_at=1.0,
    )
    newer = dataclasses.replace(
        record("r2", inputs=[message("m_in", "new input"), message("m_out", "resent")]),
        created_at=2.0,
    )
    gone = record("r3", outputs=[message("m_gone", "x")])
    other = record("r4", outputs=[message("m_other", "x")], tenant_id=tenant + "-other")
    for row in (older, newer, gone, other):
        await store.save(row)
    assert await store.delete(tenant, "r3")

    found = await store.find_items(tenant, ["m_in", "m_out", "m_gone", "m_other", "nope"])
    assert {key: item["content"] for key, item in found.items()} == {
        "m_in": "new input",  # the latest response's
        "m_out": "out",  # an output item wins over a later input item with its id
    }
