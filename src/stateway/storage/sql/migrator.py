"""Running the schema migrations shipped in ``migrations/``, without an ``alembic.ini``.

:func:`migrate` upgrades a database to the newest revision. It is meant to run on every
start-up: on an up-to-date database it reads the version table and changes nothing,
without even importing Alembic (:data:`HEAD_REVISION` names the newest revision; a test
holds it to the scripts), which keeps a serving process ~10 MiB smaller. An upgrade
holds a lock for the whole upgrade, so two processes starting together against the same
database take turns and the second finds the work done: a transaction-scoped advisory
lock on PostgreSQL, ``BEGIN IMMEDIATE`` (the database write lock) on SQLite, waited for
up to :data:`SQLITE_LOCK_WAIT` there rather than the busy timeout a serving write waits:
another process's upgrade may take longer than that. Either way the upgrade is a single
transaction, and the revision is read again once the lock is held: the process that held
it may have been a newer release (refused as such).

The Alembic configuration is built in code (:func:`alembic_config`), with the script
location pointing into this package, so it works from a source tree, an editable install
or a wheel. Developers adding a revision can use it with Alembic's command API::

    from alembic import command
    from stateway.storage.sql.migrator import alembic_config

    command.revision(alembic_config("sqlite:///dev.db"), "add things", autogenerate=True)
"""

from __future__ import annotations

import asyncio
import sqlite3
from pathlib import Path
from typing import TYPE_CHECKING, Final

from sqlalchemy import Connection, text
from sqlalchemy.exc import DBAPIError
from sqlalchemy.ext.asyncio import AsyncConnection

from stateway.core.errors import StorageError
from stateway.storage.sql.engine import create_engine, is_sqlite
from stateway.storage.sql.errors import storage_errors

if TYPE_CHECKING:
    from alembic.config import Config

MIGRATIONS_DIR: Final = Path(__file__).resolve().with_name("migrations")

HEAD_REVISION: Final = "0019"
"""The newest revision in ``migrations/versions`` (raise it with each new revision)."""

ADVISORY_LOCK_KEY: Final = 0x5354415445574159
"""``pg_advisory_xact_lock`` key serializing migrations: ASCII ``STATEWAY``."""

SQLITE_NO_CASCADES: Final = "PRAGMA foreign_keys=OFF"
"""Run on a SQLite connection before it migrates (outside a transaction, where alone it
takes effect): SQLite alters most of a table by copying it and dropping the original
(Alembic's batch mode, as a column is dropped), and with foreign keys enforced, as the
gateway's connections have them, that ``DROP TABLE`` would delete every row referencing
the table (``ON DELETE CASCADE``: a response's items and event log)."""

SQLITE_LOCK_WAIT: Final = 600.0
"""Seconds an upgrade waits for a SQLite database's write lock: as long as another
process's upgrade of a large file may take (PostgreSQL's advisory lock is waited for
without a bound; on SQLite any writer may hold the lock, a ``sqlite3`` shell left in a
transaction too, which should not hang a start-up for ever)."""


def alembic_config(url: str | None = None) -> Config:
    """An Alembic configuration for the shipped migrations, optionally bound to ``url``.

    ``url`` is a user URL as accepted by :func:`~stateway.storage.sql.engine.async_url`;
    it is only needed when Alembic opens the connection itself (command-line style use).
    """
    from alembic.config import Config  # only when migrating: a sizeable import

    config = Config()
    config.set_main_option("script_location", str(MIGRATIONS_DIR))
    if url is not None:
        # The configuration is a ConfigParser: '%' would start an interpolation.
        config.set_main_option("sqlalchemy.url", url.replace("%", "%%"))
    return config


async def migrate(url: str) -> None:
    """Upgrade the database at ``url`` to the newest schema revision.

    Raises :class:`~stateway.core.errors.StorageError` when the database cannot be reached,
    is at a revision these migrations do not know (a newer stateway's), or the upgrade
    fails; a failed upgrade leaves the schema as it was.
    """
    engine = create_engine(url)
    try:
        with storage_errors("migrating the database"):
            if is_sqlite(engine.url):
                await asyncio.to_thread(_open_sqlite, str(engine.url.database))
            async with engine.connect() as connection:
                revision = await _revision(connection)
                if revision == HEAD_REVISION:
                    return
                if revision is not None and not _known(revision):
                    raise _unknown_revision(revision)
                await connection.rollback()
                await lock_for_migrating(connection)
                await connection.run_sync(_upgrade_to_head)
                await connection.commit()
    finally:
        await engine.dispose()


def _open_sqlite(path: str) -> None:
    """Raise ``OSError`` (what the system said: a directory, no permission to read) or
    ``sqlite3.Error`` if SQLite cannot open the file at all: found here, not by
    aiosqlite, whose worker thread a failed connect leaves to report a closed event loop
    with a traceback once the command has exited (omnilib/aiosqlite#389), and said
    better than SQLite's "unable to open database file"."""
    Path(path).open("rb").close()
    sqlite3.connect(path).close()


async def _revision(connection: AsyncConnection) -> str | None:
    """The database's schema revision; None before the first migration."""
    try:
        result = await connection.execute(text("SELECT version_num FROM alembic_version"))
    except DBAPIError:  # no version table yet
        return None
    return result.scalar_one_or_none()


def _known(revision: str) -> bool:
    """Whether ``revision`` is one of the shipped scripts'."""
    from alembic.script import ScriptDirectory
    from alembic.util import CommandError

    try:
        return ScriptDirectory.from_config(alembic_config()).get_revision(revision) is not None
    except CommandError:  # alembic's ResolutionError is one
        return False


def _unknown_revision(revision: str) -> StorageError:
    from stateway import __version__

    return StorageError(
        f"The database is at schema revision {revision!r}, which stateway {__version__} does "
        f"not know (its newest is {HEAD_REVISION!r}): a newer stateway has migrated it. "
        "Serve it with that version (a schema is never downgraded on start-up)."
    )


async def lock_for_migrating(connection: AsyncConnection) -> None:
    """Begin the transaction ``connection`` migrates in, holding the migration lock (the
    module's doc); ``connection`` must not be in a transaction yet. Used by ``env.py``
    too, so that Alembic's command API migrates as start-up does."""
    if connection.dialect.name == "sqlite":
        await connection.exec_driver_sql(SQLITE_NO_CASCADES)  # before the transaction
        await connection.exec_driver_sql(f"PRAGMA busy_timeout={int(SQLITE_LOCK_WAIT * 1000)}")
        # The sqlite3 module would only open a transaction at the first INSERT, leaving the
        # DDL before it in autocommit mode; an explicit BEGIN makes the upgrade one unit.
        await connection.exec_driver_sql("BEGIN IMMEDIATE")
    else:
        await connection.execute(
            text("SELECT pg_advisory_xact_lock(:key)"), {"key": ADVISORY_LOCK_KEY}
        )


def _upgrade_to_head(connection: Connection) -> None:
    from alembic import command
    from alembic.migration import MigrationContext

    # Read again under the lock: the process that held it may have upgraded the database,
    # to this head (nothing left to do) or to a newer release's (Alembic cannot place it).
    revision = MigrationContext.configure(connection).get_current_revision()
    if revision == HEAD_REVISION:
        return
    if revision is not None and not _known(revision):
        raise _unknown_revision(revision)
    config = alembic_config()
    # env.py runs the migrations on this connection, inside the transaction opened above.
    config.attributes["connection"] = connection
    command.upgrade(config, "head")
