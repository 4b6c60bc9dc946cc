"""The SQL response store: SQLite (aiosqlite) or PostgreSQL (asyncpg) through SQLAlchemy Core.

    store = open_store("sqlite:///stateway.db")   # builds the engine; no I/O yet
    await migrate("sqlite:///stateway.db")        # explicit: upgrade the schema to head
    await store.save(record)

Modules: :mod:`.engine` turns user URLs into async engines, :mod:`.schema` declares the
tables, :mod:`.migrator` runs the Alembic migrations shipped in ``migrations/``,
:mod:`.queries` holds the prebuilt statements, :mod:`.store` implements the port (its
readiness: :mod:`.ping`, whether the database answers and takes writes, after
:mod:`.refusals`, the refusal a write last met) and :mod:`.errors` turns database
failures into ``StorageError``. Conversations:
:mod:`.conversations` implements their port over the response store's engine,
:mod:`.conversation_queries` holds their statements and :mod:`.conversation_rows` the
writes a turn makes inside the response store's transactions.
"""

from stateway.storage.sql.conversations import SqlConversationStore
from stateway.storage.sql.engine import create_engine, describe_url
from stateway.storage.sql.migrator import migrate
from stateway.storage.sql.store import SqlResponseStore, open_store

__all__ = [
    "SqlConversationStore",
    "SqlResponseStore",
    "create_engine",
    "describe_url",
    "migrate",
    "open_store",
]
