"""``SqlSecrets``: server-wide secrets in ``gateway_secrets`` (not tenant data).

:meth:`SqlSecrets.put_if_absent` reads the value first: one stored already (every start
but a database's first) needs no write, so a gateway starts on a database that takes no
writes (read-only, full, locked by another process) as long as its key is there. Only a
name not found is written: inserted only when its name is still free (``INSERT ... ON
CONFLICT DO NOTHING`` on both databases) and read back, in one transaction, so processes
that start together on a fresh database all come away with the value of whichever
insert landed first.
"""

from __future__ import annotations

import time

from sqlalchemy import select
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.ext.asyncio import AsyncEngine

from stateway.storage.sql.engine import is_sqlite
from stateway.storage.sql.errors import storage_errors
from stateway.storage.sql.schema import gateway_secrets


class SqlSecrets:
    def __init__(self, engine: AsyncEngine) -> None:
        self._engine = engine

    async def put_if_absent(self, name: str, value: str) -> str:
        dialect = sqlite if is_sqlite(self._engine.url) else postgresql
        insert = (
            dialect.insert(gateway_secrets)
            .values(name=name, value=value, created_at=time.time())
            .on_conflict_do_nothing(index_elements=[gateway_secrets.c.name])
        )
        read = select(gateway_secrets.c.value).where(gateway_secrets.c.name == name)
        with storage_errors("reading a gateway secret"):
            async with self._engine.connect() as connection:
                found: str | None = (await connection.execute(read)).scalar_one_or_none()
        if found is not None:
            return found
        with storage_errors("storing a gateway secret"):
            async with self._engine.begin() as connection:
                await connection.execute(insert)
                stored: str = (await connection.execute(read)).scalar_one()
        return stored
