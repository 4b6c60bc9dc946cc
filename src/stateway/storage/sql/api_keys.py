"""``SqlKeyStore``: API keys in ``api_keys`` (the identity package's ``KeyStore``).

Keys are written by ``stateway keys`` (another process) and read by gateways through
their key cache; each method is one short transaction on the engine it is given.
"""

from __future__ import annotations

from sqlalchemy import RowMapping, func, insert, select, update
from sqlalchemy.ext.asyncio import AsyncEngine

from stateway.identity.keys import ApiKey
from stateway.storage.sql.errors import storage_errors
from stateway.storage.sql.schema import api_keys

_COLUMNS = (
    api_keys.c.id,
    api_keys.c.tenant_id,
    api_keys.c.name,
    api_keys.c.digest,
    api_keys.c.created_at,
    api_keys.c.expires_at,
    api_keys.c.revoked_at,
)
"""In the order of :class:`ApiKey`'s fields, which have the columns' names."""


class SqlKeyStore:
    def __init__(self, engine: AsyncEngine) -> None:
        self._engine = engine

    async def add(self, key: ApiKey) -> None:
        row = {column.name: getattr(key, column.name) for column in _COLUMNS}
        with storage_errors("storing an API key"):
            async with self._engine.begin() as connection:
                await connection.execute(insert(api_keys).values(**row))

    async def find(self, digest: str) -> ApiKey | None:
        with storage_errors("looking up an API key"):
            async with self._engine.connect() as connection:
                found = await connection.execute(
                    select(*_COLUMNS).where(api_keys.c.digest == digest)
                )
                row = found.mappings().first()
        return None if row is None else _key(row)

    async def list(self) -> list[ApiKey]:
        query = select(*_COLUMNS).order_by(api_keys.c.created_at, api_keys.c.id)
        with storage_errors("listing API keys"):
            async with self._engine.connect() as connection:
                rows = (await connection.execute(query)).mappings().all()
        return [_key(row) for row in rows]

    async def revoke(self, key_id: str, now: float) -> ApiKey | None:
        change = (
            update(api_keys)
            .where(api_keys.c.id == key_id)
            .values(revoked_at=func.coalesce(api_keys.c.revoked_at, now))
        )
        with storage_errors("revoking an API key"):
            async with self._engine.begin() as connection:
                await connection.execute(change)
                found = await connection.execute(select(*_COLUMNS).where(api_keys.c.id == key_id))
                row = found.mappings().first()
        return None if row is None else _key(row)


def _key(row: RowMapping) -> ApiKey:
    return ApiKey(**{str(name): value for name, value in row.items()})
