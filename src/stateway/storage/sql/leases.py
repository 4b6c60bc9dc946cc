"""``SqlOwnerLeases``: the :class:`~stateway.core.ports.OwnerLeases` port over ``run_owners``.

A beat is one ``UPDATE`` of the owner's own row, whatever the number of runs it owns;
reading every beat is one ``SELECT`` of a table holding one row per live process (and the
dead ones until a survivor removes them). Each call is its own short transaction, outside
the group committer: none of them waits for, or holds up, the saves of runs. They run on
the engine of the :class:`~stateway.storage.sql.store.SqlResponseStore` they are built
from, and a heartbeat the database refuses for a lasting cause (read-only, out of space)
fails that store's ping as a refused save does (:mod:`~stateway.storage.sql.refusals`).
"""

from __future__ import annotations

import time

from sqlalchemy import delete, select, update
from sqlalchemy.dialects import postgresql, sqlite

from stateway.core.ports import Heartbeat
from stateway.storage.sql.engine import is_sqlite
from stateway.storage.sql.errors import storage_errors
from stateway.storage.sql.schema import run_owners
from stateway.storage.sql.store import SqlResponseStore


class SqlOwnerLeases:
    def __init__(self, store: SqlResponseStore) -> None:
        self._engine = store.engine
        self._refusals = store.refusals
        self._dialect = sqlite if is_sqlite(store.engine.url) else postgresql

    async def register(self, owner: str, lease: float) -> None:
        insert = (
            self._dialect.insert(run_owners)
            .values(owner=owner, beat=0, lease_timeout=lease, renewed_at=time.time())
            .on_conflict_do_nothing(index_elements=[run_owners.c.owner])
        )
        with storage_errors("registering a run owner", self._refusals):
            async with self._engine.begin() as connection:
                await connection.execute(insert)

    async def renew(self, owner: str) -> bool:
        beat = (
            update(run_owners)
            .where(run_owners.c.owner == owner)
            .values(beat=run_owners.c.beat + 1, renewed_at=time.time())
        )
        with storage_errors("renewing a run owner's lease", self._refusals):
            async with self._engine.begin() as connection:
                result = await connection.execute(beat)
        return result.rowcount == 1

    async def beats(self) -> dict[str, Heartbeat]:
        columns = select(run_owners.c.owner, run_owners.c.beat, run_owners.c.lease_timeout)
        with storage_errors("reading run owners' leases"):
            async with self._engine.connect() as connection:
                rows = (await connection.execute(columns)).all()
        return {owner: Heartbeat(beat, timeout) for owner, beat, timeout in rows}

    async def forget(self, owners: list[str]) -> None:
        if not owners:
            return
        with storage_errors("removing run owners", self._refusals):
            async with self._engine.begin() as connection:
                await connection.execute(delete(run_owners).where(run_owners.c.owner.in_(owners)))
