"""Usage by tenant, model and UTC day from the responses table, on SQLite and PostgreSQL:
one aggregate query; unfinished responses left out, deleted ones counted; time and tenant
filters; day boundaries floored, never rounded."""

from __future__ import annotations

import datetime
import uuid
from typing import Any

from stateway.core.accounting import UsageBucket
from stateway.core.commands import GetUsage
from stateway.core.ports import ResponseRecord
from stateway.storage.sql import SqlResponseStore
from stateway.storage.sql.accounting import SqlUsageLedger

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
