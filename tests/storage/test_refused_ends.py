"""A run's end the database refuses for its data, as PostgreSQL refuses it: the settler
stores it without its output at once, rather than retrying it for as long as the process
lives (``tests/core/test_settling.py`` has the rest)."""

from __future__ import annotations

import asyncio
import base64
import os
from collections.abc import AsyncIterator

import asyncpg
import orjson
import pytest

from stateway.core import events as ev
from stateway.core.errors import StorageRejected
from stateway.core.generation_settings import GenerationSettings
from stateway.core.response import ResponseState, final_record, started_record
from stateway.core.settling import REFUSED_OUTPUT, Settler
from stateway.storage.sql import SqlResponseStore, migrate, open_store

pytestmark = pytest.mark.postgres


def encode(seq: int, event: ev.Event) -> bytes:
    assert isinstance(event, ev.ResponseFinished)
    return orjson.dumps({"seq": seq, "status": event.response.status})


@pytest.fixture
async def store(fresh_postgres_url: str) -> AsyncIterator[SqlResponseStore]:
    """A store whose items table has an index over item bodies (as an operator's might):
    PostgreSQL refuses an item too big for it (``program_limit_exceeded``)."""
    await migrate(fresh_postgres_url)
    connection = await asyncpg.connect(fresh_postgres_url.replace("+asyncpg", ""), timeout=5)
    try:
        await connection.execute("CREATE INDEX items_by_body ON items (body)")
    finally:
        await connection.close()
    sql_store = open_store(fresh_postgres_url)
    yield sql_store
    await sql_store.aclose()


async def failed_run(store: SqlResponseStore, tenant: str) -> ResponseState:
    state = ResponseState(
        "resp_1", tenant, 1.0, "m", None, None, True, GenerationSettings(), background=True
    )
    await store.save(started_record(state, [], "owner"))
    text = base64.b64encode(os.urandom(12_000)).decode()  # past what an index row holds
    content = [{"type": "output_text", "text": text, "annotations": []}]
    state.output = [{"type": "message", "id": "msg_1", "role": "assistant", "content": content}]
    state.status = "failed"
    state.error = {"code": "storage_unavailable", "message": "not stored", "status": 503}
    return state


async def test_postgres_refusing_an_item_is_a_rejection(store: SqlResponseStore) -> None:
    state = await failed_run(store, "t1")
    with pytest.raises(StorageRejected) as caught:
        await store.finish(final_record(state))
    assert caught.value.reason is not None
    assert caught.value.reason.startswith("ProgramLimitExceededError: index row")


async def test_an_end_postgres_refuses_is_stored_without_its_output(
    store: SqlResponseStore,
) -> None:
    state = await failed_run(store, "t2")
    settler = Settler(store, encode, first_pause=0.001)
    settler.settle(state, None)
    await asyncio.wait_for(settler.settled(), 10)
    stored = await store.get("t2", "resp_1")
    assert stored is not None
    assert (stored.status, stored.output_items, stored.body["error"]) == (
        "failed",
        [],
        {"code": "storage_unavailable", "message": REFUSED_OUTPUT, "status": 503},
    )
    log = await store.read_events("t2", "resp_1", -1)
    assert log is not None
    assert log.status == "failed"
    assert [orjson.loads(p) for p in log.events.payloads] == [{"seq": 0, "status": "failed"}]
