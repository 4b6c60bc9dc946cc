"""Usage by tenant, model and UTC day from the responses table, on SQLite and PostgreSQL:
one aggregate query; unfinished responses left out, deleted ones counted; time and tenant
filters; day boundaries floored, never rounded. The model and token columns it reads, as
each write of a response keeps them."""

from __future__ import annotations

import datetime
import uuid
from dataclasses import replace
from typing import Any

import orjson
import pytest
from sqlalchemy import select, text, update

from stateway.core.accounting import UsageBucket
from stateway.core.commands import GetUsage
from stateway.core.conversations.ports import Conversation
from stateway.core.generation_settings import GenerationSettings
from stateway.core.ports import ConversationTurn, ResponseRecord
from stateway.core.response import ResponseState, final_record, started_record
from stateway.core.retention import BATCH
from stateway.core.settling import store_failed
from stateway.core.usage import Usage
from stateway.storage.sql import SqlConversationStore, SqlResponseStore
from stateway.storage.sql.accounting import SqlUsageLedger
from stateway.storage.sql.schema import responses
from stateway.storage.sql.usage_backfill import SqlUsageBackfill

DAY_START = 1_699_920_000.0
"""2023-11-14T00:00:00Z."""
LAST_MOMENT = DAY_START + 86_400 - 0.1
"""Still 2023-11-14: a rounding cast would make it the 15th."""
NOV_14, NOV_15 = datetime.date(2023, 11, 14), datetime.date(2023, 11, 15)


def response(
    tenant: str,
    model: str,
    created_at: float,
    usage: tuple[int, int] | None,
    status: str = "completed",
) -> ResponseRecord:
    response_id = f"resp_{uuid.uuid4().hex}"
    body: dict[str, Any] = {
        "id": response_id,
        "model": model,
        "status": status,
        "usage": None
        if usage is None
        else {"input_tokens": usage[0], "output_tokens": usage[1], "cached_tokens": 0},
    }
    return ResponseRecord(tenant, response_id, None, status, created_at, body)


async def test_usage_is_summed_by_tenant_model_and_day(
    store: SqlResponseStore, tenant: str
) -> None:
    other = f"{tenant}-other"
    records = [
        response(tenant, "m", DAY_START + 10, (10, 2)),
        response(tenant, "m", LAST_MOMENT, (5, 1)),
        response(tenant, "m", DAY_START + 86_400, (7, 7)),
        response(tenant, "n", DAY_START + 20, (1, 1), status="incomplete"),
        response(tenant, "n", DAY_START + 30, None, status="failed"),
        response(tenant, "m", DAY_START + 40, None, status="in_progress"),
        response(other, "m", DAY_START + 50, (100, 100)),
    ]
    deleted = response(tenant, "n", DAY_START + 60, (2, 2))
    for record in [*records, deleted]:
        await store.save(record)
    assert await store.delete(tenant, deleted.id)  # spent all the same
    ledger = SqlUsageLedger(store.reader)
    assert await ledger.usage(GetUsage(tenant)) == [
        UsageBucket(tenant, "m", NOV_14, responses=2, input_tokens=15, output_tokens=3),
        UsageBucket(tenant, "n", NOV_14, responses=3, input_tokens=3, output_tokens=3),
        UsageBucket(tenant, "m", NOV_15, responses=1, input_tokens=7, output_tokens=7),
    ]
    everyone = await ledger.usage(GetUsage(None))
    ours = {(b.tenant_id, b.model, b.day, b.input_tokens) for b in everyone if other in b.tenant_id}
    assert ours == {(other, "m", NOV_14, 100)}
    assert [b for b in everyone if b.tenant_id == tenant] == await ledger.usage(GetUsage(tenant))
    both = [(b.day, b.tenant_id, b.model) for b in everyone if tenant in b.tenant_id]
    assert both == [  # by day, then tenant, then model
        (NOV_14, tenant, "m"),
        (NOV_14, tenant, "n"),
        (NOV_14, other, "m"),
        (NOV_15, tenant, "m"),
    ]


async def test_usage_between_two_times(store: SqlResponseStore, tenant: str) -> None:
    for record in [
        response(tenant, "m", DAY_START + 10, (1, 1)),
        response(tenant, "m", DAY_START + 20, (2, 2)),
        response(tenant, "m", DAY_START + 30, (4, 4)),
    ]:
        await store.save(record)
    ledger = SqlUsageLedger(store.reader)
    [bucket] = await ledger.usage(GetUsage(tenant, DAY_START + 20, DAY_START + 30))
    assert (bucket.responses, bucket.input_tokens, bucket.total_tokens) == (1, 2, 4)
    assert await ledger.usage(GetUsage(tenant, end_time=DAY_START)) == []


async def test_a_tenant_without_responses_has_no_usage(store: SqlResponseStore) -> None:
    ledger = SqlUsageLedger(store.reader)
    assert await ledger.usage(GetUsage(f"nobody-{uuid.uuid4().hex}")) == []


async def test_usage_reads_bodies_holding_nul_characters(
    store: SqlResponseStore, tenant: str
) -> None:
    """PostgreSQL's jsonb refuses the escape ``\\u0000`` that stands for a NUL in a body's
    JSON text (in instructions, metadata, a model's name): such a body still counts, its
    model named with U+FFFD for each NUL (an escaped backslash before ``u0000`` is no NUL)."""
    records = [
        response(tenant, "m", DAY_START + 10, (10, 2)),
        response(tenant, "m\x00x", DAY_START + 20, (1, 1)),
        response(tenant, "\\u0000\x00\x00", DAY_START + 30, (2, 2)),
    ]
    records[0].body["instructions"] = "a\x00b \\\x00 \\\\u0000"
    for record in records:
        await store.save(record)
    ledger = SqlUsageLedger(store.reader)
    buckets = sorted(await ledger.usage(GetUsage(tenant)), key=lambda bucket: bucket.model)
    assert buckets == [
        UsageBucket(tenant, "\\u0000\ufffd\ufffd", NOV_14, 1, input_tokens=2, output_tokens=2),
        UsageBucket(tenant, "m", NOV_14, responses=1, input_tokens=10, output_tokens=2),
        UsageBucket(tenant, "m\ufffdx", NOV_14, responses=1, input_tokens=1, output_tokens=1),
    ]
    assert tenant in {bucket.tenant_id for bucket in await ledger.usage(GetUsage(None))}


async def columns(store: SqlResponseStore, tenant: str) -> dict[str, tuple[Any, ...]]:
    """Each of the tenant's rows' ``model``, ``input_tokens`` and ``output_tokens``."""
    read = select(
        responses.c.id, responses.c.model, responses.c.input_tokens, responses.c.output_tokens
    ).where(responses.c.tenant_id == tenant)
    async with store.reader.connect() as connection:
        return {row[0]: tuple(row[1:]) for row in (await connection.execute(read)).all()}


async def test_every_write_of_a_response_keeps_its_model_and_usage_as_columns(
    store: SqlResponseStore, tenant: str
) -> None:
    """What the usage query reads, written from the state by each write of a row: a save
    (a store:true response written whole, a run's in-progress row), and each end of a run
    over its row (completed, failed without usage, cancelled with what was reported);
    ``NULL`` tokens when the response has no usage."""
    whole = response(tenant, "m", DAY_START, (10, 2))
    running = [response(tenant, "r", DAY_START, None, status="in_progress") for _ in range(4)]
    for record in [whole, *running]:
        await store.save(record)
    assert await columns(store, tenant) == {
        whole.id: ("m", 10, 2),
        **{record.id: ("r", None, None) for record in running},
    }
    ends = [
        response(tenant, "r", DAY_START, (7, 3), status="completed"),
        response(tenant, "r", DAY_START, None, status="failed"),
        response(tenant, "r", DAY_START, (5, 0), status="cancelled"),
        response(tenant, "r", DAY_START, (1, 1), status="incomplete"),
    ]
    for started, ended in zip(running, ends, strict=True):
        assert await store.finish(
            replace(ended, id=started.id, body=ended.body | {"id": started.id})
        )
    assert await columns(store, tenant) == {
        whole.id: ("m", 10, 2),
        running[0].id: ("r", 7, 3),
        running[1].id: ("r", None, None),
        running[2].id: ("r", 5, 0),
        running[3].id: ("r", 1, 1),
    }


async def test_a_turn_of_a_conversation_keeps_its_model_and_usage_as_columns(
    store: SqlResponseStore, conversations: SqlConversationStore, tenant: str
) -> None:
    """A conversation's turn is written by statements of its own (its row goes in only
    while it holds the conversation)."""
    await conversations.create(Conversation(tenant, "conv_1", 1.0, {}), [])
    started = replace(
        response(tenant, "m", DAY_START, None, status="in_progress"),
        turn=ConversationTurn("conv_1", seen=0),
    )
    await store.save(started)
    assert await columns(store, tenant) == {started.id: ("m", None, None)}
    ended = response(tenant, "m", DAY_START, (4, 2))
    body = ended.body | {"id": started.id}
    await store.finish(
        replace(started, status="completed", body=body, turn=ConversationTurn("conv_1"))
    )
    assert await columns(store, tenant) == {started.id: ("m", 4, 2)}


async def test_a_model_holding_nul_and_counts_no_column_holds_are_kept_as_they_can_be(
    store: SqlResponseStore, tenant: str
) -> None:
    """PostgreSQL's text refuses NUL: a model holding one is kept with U+FFFD in its place,
    as the usage reads it. A count that is no integer a column holds (orjson writes up to
    2**64 - 1, a BIGINT holds less) is kept as unknown, its response saved all the same."""
    nul = response(tenant, "m\x00x", DAY_START, (3, 4))
    huge = response(tenant, "m", DAY_START, (2**64 - 1, 5))
    odd = response(tenant, "m", DAY_START, (1, 1))
    odd.body["usage"]["output_tokens"] = 2.5
    odd.body["model"] = 7
    for record in (nul, huge, odd):
        await store.save(record)
    assert await columns(store, tenant) == {
        nul.id: ("m\ufffdx", 3, 4),
        huge.id: ("m", None, 5),
        odd.id: ("", 1, None),
    }


def run(tenant: str) -> ResponseState:
    return ResponseState(
        f"resp_{uuid.uuid4().hex}", tenant, DAY_START, "m", None, None, True,
        GenerationSettings(), background=True,
    )  # fmt: skip


async def test_the_ends_runs_write_keep_their_model_and_usage_as_columns(
    store: SqlResponseStore, tenant: str
) -> None:
    """As the core writes them: a background run's end, a cancel counting the prompt its
    upstream reported, and a failed end stored by the settler or by lease judging
    (:func:`~stateway.core.settling.store_failed`, its usage unknown)."""
    ended, cancelled, failed = run(tenant), run(tenant), run(tenant)
    for state in (ended, cancelled, failed):
        await store.save(started_record(state, [], "owner"))
    ended.status, ended.usage = "completed", Usage(input_tokens=12, output_tokens=4)
    cancelled.status, cancelled.usage = "cancelled", Usage(input_tokens=9)
    for state in (ended, cancelled):
        assert await store.finish(final_record(state))
    failed.status = "failed"
    failed.error = {"code": "server_restarted", "message": "m", "status": 500}
    await store_failed(store, failed, None)
    assert await columns(store, tenant) == {
        ended.id: ("m", 12, 4),
        cancelled.id: ("m", 9, 0),
        failed.id: ("m", None, None),
    }


async def _plant_unfilled(store: SqlResponseStore, record: ResponseRecord) -> None:
    """``record``'s row as an earlier release wrote it: no usage columns."""
    plant = text(
        "INSERT INTO responses (tenant_id, id, status, created_at, body)"
        " VALUES (:tenant, :id, :status, :created_at, :body)"
    )
    values = {"tenant": record.tenant_id, "id": record.id, "status": record.status}
    values |= {"created_at": record.created_at, "body": orjson.dumps(record.body).decode()}
    async with store.engine.begin() as connection:
        await connection.execute(plant, values)


async def test_responses_stored_without_the_columns_count_from_their_bodies_until_filled_in(
    store: SqlResponseStore, tenant: str
) -> None:
    """Rows an earlier release stored (before the columns, or during a rolling upgrade)
    count in the same buckets as the rows stored with them, read out of their bodies;
    the backfill fills in the finished ones (a running one is left to its end, which
    writes them) and nothing counts twice or differently. A row's columns are what counts
    once it has them: its body is not read again."""
    saved = [response(tenant, "m", DAY_START, (10, 2)), response(tenant, "", DAY_START, None)]
    saved[1].body["model"] = None
    older = [
        response(tenant, "m", DAY_START + 1, (5, 1)),
        response(tenant, "m\x00", LAST_MOMENT, (1, 1)),
        response(tenant, "n", DAY_START + 86_400, None, status="failed"),
        response(tenant, "m", DAY_START + 3, None),
    ]
    older[3].body.pop("model")
    running = response(tenant, "m", DAY_START + 4, None, status="in_progress")
    for record in saved:
        await store.save(record)
    for record in [*older, running]:
        await _plant_unfilled(store, record)
    expected = [
        UsageBucket(tenant, "", NOV_14, responses=2, input_tokens=0, output_tokens=0),
        UsageBucket(tenant, "m", NOV_14, responses=2, input_tokens=15, output_tokens=3),
        UsageBucket(tenant, "m\ufffd", NOV_14, responses=1, input_tokens=1, output_tokens=1),
        UsageBucket(tenant, "n", NOV_15, responses=1, input_tokens=0, output_tokens=0),
    ]
    ledger = SqlUsageLedger(store.reader)
    assert await ledger.usage(GetUsage(tenant)) == expected
    window = GetUsage(tenant, DAY_START + 1, DAY_START + 2)
    [bucket] = await ledger.usage(window)
    assert (bucket.model, bucket.responses, bucket.input_tokens) == ("m", 1, 5)

    backfill = SqlUsageBackfill(store)
    while await backfill.fill(BATCH) == BATCH:  # other tests' rows too
        pass
    assert await columns(store, tenant) == {
        saved[0].id: ("m", 10, 2),
        saved[1].id: ("", None, None),
        older[0].id: ("m", 5, 1),
        older[1].id: ("m\ufffd", 1, 1),
        older[2].id: ("n", None, None),
        older[3].id: ("", None, None),
        running.id: (None, None, None),
    }
    assert await ledger.usage(GetUsage(tenant)) == expected

    rewrite = update(responses).where(
        responses.c.tenant_id == tenant, responses.c.id == older[0].id
    )
    async with store.engine.begin() as connection:
        await connection.execute(rewrite.values(body='{"model": "other"}', input_tokens=6))
    assert (await ledger.usage(GetUsage(tenant)))[1].input_tokens == 16


async def test_an_unfilled_body_that_is_no_json_object_counts_as_no_model_without_tokens(
    store: SqlResponseStore, tenant: str
) -> None:
    """A row without its columns whose body is not JSON (cut short, or written by hand) or
    JSON that is no object counts as a response of no model with no tokens, as a body
    without them does, and is filled in so: one such row neither fails every tenant's
    usage, nor every sweep's backfill (which would find it again first each time)."""
    bodies = ["", "not json", '{"model": "m", "usage": {"input_', "[]", '"x"', "null"]
    kept = response(tenant, "m", DAY_START + 1, (5, 1))
    await _plant_unfilled(store, kept)
    plant = text(
        "INSERT INTO responses (tenant_id, id, status, created_at, body)"
        " VALUES (:tenant, :id, 'completed', :created_at, :body)"
    )
    odd = {f"resp_odd_{index}": body for index, body in enumerate(bodies)}
    async with store.engine.begin() as connection:
        for response_id, body in odd.items():
            values = {"tenant": tenant, "id": response_id, "created_at": DAY_START + 2}
            await connection.execute(plant, values | {"body": body})
    expected = [
        UsageBucket(tenant, "", NOV_14, responses=len(bodies), input_tokens=0, output_tokens=0),
        UsageBucket(tenant, "m", NOV_14, responses=1, input_tokens=5, output_tokens=1),
    ]
    ledger = SqlUsageLedger(store.reader)
    assert await ledger.usage(GetUsage(tenant)) == expected
    everyone = await ledger.usage(GetUsage(None, DAY_START, DAY_START + 86_400))
    assert [bucket for bucket in everyone if bucket.tenant_id == tenant] == expected

    backfill = SqlUsageBackfill(store)
    while await backfill.fill(BATCH) == BATCH:  # other tests' rows too
        pass
    assert await columns(store, tenant) == {
        kept.id: ("m", 5, 1),
        **{response_id: ("", None, None) for response_id in odd},
    }
    assert await ledger.usage(GetUsage(tenant)) == expected


async def test_counts_summing_past_what_an_integer_holds_fail_no_ones_usage(
    store: SqlResponseStore, tenant: str
) -> None:
    """Each count kept is under 10**18, but ten of them sum past a 64-bit integer, where
    SQLite's ``sum`` fails the whole query (every tenant's usage with it): the sum is
    read as exactly as the database can, PostgreSQL's exactly, SQLite's as a double."""
    huge = 10**18 - 1
    for _ in range(10):
        await store.save(response(tenant, "m", DAY_START, (huge, 1)))
    ledger = SqlUsageLedger(store.reader)
    [bucket] = await ledger.usage(GetUsage(tenant))
    assert (bucket.responses, bucket.output_tokens) == (10, 10)
    assert bucket.input_tokens == pytest.approx(10 * huge, rel=1e-15)
    everyone = await ledger.usage(GetUsage(None, DAY_START, DAY_START + 86_400))
    assert bucket in everyone


async def test_counts_at_the_bound_are_kept_alike_saved_and_read_from_a_body(
    store: SqlResponseStore, tenant: str
) -> None:
    """18 digits are kept, 19 are not, either sign: as a save copies them out, and as the
    usage query and the backfill read them out of a body."""
    bounds = [(10**18 - 1, 10**18), (-(10**18) + 1, -(10**18))]
    saved = [response(tenant, "m", DAY_START, counts) for counts in bounds]
    older = [response(tenant, "m", DAY_START, counts) for counts in bounds]
    for record in saved:
        await store.save(record)
    for record in older:
        await _plant_unfilled(store, record)
    ledger = SqlUsageLedger(store.reader)
    [bucket] = await ledger.usage(GetUsage(tenant))
    assert (bucket.input_tokens, bucket.output_tokens) == (0, 0)  # each sign twice
    backfill = SqlUsageBackfill(store)
    while await backfill.fill(BATCH) == BATCH:  # other tests' rows too
        pass
    kept = {("m", 10**18 - 1, None), ("m", -(10**18) + 1, None)}
    assert set((await columns(store, tenant)).values()) == kept
    assert len(await columns(store, tenant)) == 4
