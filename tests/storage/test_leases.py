"""Owners' leases in ``run_owners``, on SQLite and PostgreSQL."""

from __future__ import annotations

import uuid

from stateway.core.ports import Heartbeat
from stateway.storage.sql import SqlResponseStore
from stateway.storage.sql.leases import SqlOwnerLeases


def owner() -> str:
    return f"host-{uuid.uuid4().hex} 1 1"  # tests share the PostgreSQL database


async def test_a_registered_owner_beats_and_is_forgotten(store: SqlResponseStore) -> None:
    leases = SqlOwnerLeases(store)
    me, other = owner(), owner()

    assert not await leases.renew(me), "not registered yet"
    await leases.register(me, 10.0)
    await leases.register(me, 99.0)  # registering again changes nothing
    await leases.register(other, 1.5)
    assert await leases.renew(me)
    assert await leases.renew(me)

    beats = await leases.beats()
    assert (beats[me], beats[other]) == (Heartbeat(2, 10.0), Heartbeat(0, 1.5))

    await leases.forget([me])
    await leases.forget([])
    beats = await leases.beats()
    assert me not in beats
    assert other in beats
    assert not await leases.renew(me)
    await leases.forget([other])
