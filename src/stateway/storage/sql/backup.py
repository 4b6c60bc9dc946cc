"""An online, consistent copy of a SQLite database: ``stateway backup``'s work (the
command: :mod:`stateway.backup_command`).

It uses SQLite's online backup API (Python's ``sqlite3.Connection.backup``), inside one
read transaction, begun before it and held to its end: under write-ahead logging, as the
gateway runs its database, a reader holds up no writer, so a gateway serving from the
file goes on writing meanwhile, and the copy is the database as it was when that read
began (the commits still in the ``-wal`` file included, which copying the file would
miss). The pages are copied :data:`STEP_PAGES` at a time, so that a signal is handled
between two steps (Python runs its handlers between bytecodes, never inside SQLite): a
Ctrl+C, a ``SIGTERM`` or a ``SIGHUP`` (:mod:`stateway.backup_command`) stops the copy,
its temporary file removed, without copying a large database to its end first. Held
across the steps, the read keeps what they see as it was: a copy whose source connection
begins a read at each step (the API's own way) starts again each time another connection
writes between two of them, and under steady writes might never end. ``VACUUM INTO``
would give a consistent copy too, but rebuilds every table and index as it writes them:
more work, for as long a read, than copying the pages as they are.

The database is opened read-only: a missing file is an error, not a new empty database,
and nothing of it is changed (as any reader may, it leaves the ``-wal`` and ``-shm``
files beside it, empty when no gateway has it open: the next writer removes them as it
closes). While the copy is made, the gateway's checkpoints cannot move the log past its
read: the ``-wal`` file grows with what is written meanwhile, and shrinks at the next
checkpoint after.

The copy is written to a temporary file beside the target (``.NAME.XXXXXXXX.partial``),
readable by its owner only (``0600``, whatever the umask: it holds the sealing key and
the API keys' digests, as the database does), synced, then renamed to the target; a
backup that fails removes it, leaving nothing at the target (and a target that was there
as it was). A target there already is refused unless ``replace``
(:class:`TargetExists`), and so is the database itself, whose place a copy must never take
while a gateway writes to it.

The copy is the database as it is, at whatever schema revision it is at
(:attr:`Backup.revision`): a backup changes nothing of what it copies, and a gateway of
this release started on the copy upgrades it, as it would the original. A file holding no
stateway schema at all (no ``alembic_version``) is refused: most likely not the database
meant.

Synchronous: a command of its own, run by no event loop.
"""

from __future__ import annotations

import errno
import os
import sqlite3
import tempfile
from collections.abc import Iterator
from contextlib import closing, contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Final
from urllib.parse import quote

_SIDE_FILES: Final = ("-journal", "-wal", "-shm")
"""What SQLite may keep beside a database file while it writes it."""
_NO_LINKS: Final = frozenset({errno.EPERM, errno.EOPNOTSUPP, errno.ENOTSUP})
"""What ``link`` says on a file system that has no hard links."""
STEP_PAGES: Final = 1024
"""Pages copied a step (4 MiB of SQLite's default 4 KiB pages): between two, a signal is
handled."""


@dataclass(frozen=True, slots=True)
class Backup:
    """A copy made: where, its size in bytes, and its schema revision."""

    path: Path
    size: int
    revision: str


class BackupFailed(Exception):
    """The copy could not be made; its message says why, naming the file at fault."""


class TargetExists(BackupFailed):
    """The target is there already (or is the database itself): refused, as asked."""


def back_up(database: Path, target: Path, *, replace: bool = False) -> Backup:
    """Copy the SQLite database at ``database`` to ``target`` (the module's doc);
    ``replace``: a file at ``target`` is replaced. Raises :class:`BackupFailed`."""
    _check_target(database, target, replace=replace)
    _check_readable(database)
    with _partial(target) as partial:
        revision = _copy(database, partial)
        _place(partial, target, replace=replace)
    _sync_directory(target.parent)
    return Backup(target, target.stat().st_size, revision)


def _check_target(database: Path, target: Path, *, replace: bool) -> None:
    if target.is_dir():
        raise TargetExists(f"{target} is a directory; give the backup's file name")
    if _same_file(database, target) or any(
        _same_file(Path(f"{database}{side}"), target) for side in _SIDE_FILES
    ):
        raise TargetExists(f"{target} is the database itself; give another path")
    if target.exists() and not replace:
        raise TargetExists(f"{target} exists; give --force to replace it")


def _same_file(one: Path, other: Path) -> bool:
    try:
        return one.resolve() == other.resolve() or os.path.samefile(one, other)
    except OSError:  # either missing
        return False


def _check_readable(database: Path) -> None:
    """Refuse a database that is not there, or that this user may not read, saying so
    (SQLite would say only "unable to open database file")."""
    if not database.is_file():
        missing = "not a file" if database.exists() else "missing (no such file)"
        raise BackupFailed(f"the database {database} is {missing}")
    try:
        database.open("rb").close()
    except OSError as exc:
        raise BackupFailed(f"cannot read the database {database} ({_said(exc)})") from None


@contextmanager
def _partial(target: Path) -> Iterator[Path]:
    """A new, empty file beside ``target``, for its owner only; its name removed at the
    end, with any file SQLite kept beside it (the copy stays at ``target`` once linked or
    renamed there)."""
    try:
        handle, name = tempfile.mkstemp(
            prefix=f".{target.name}.", suffix=".partial", dir=target.parent
        )
    except OSError as exc:
        said = exc.strerror or type(exc).__name__  # not the temporary file's name
        raise BackupFailed(f"cannot write in {target.parent} ({said})") from None
    os.close(handle)  # made 0600, as mkstemp makes every file
    partial = Path(name)
    try:
        yield partial
    finally:
        for each in (partial, *(Path(f"{partial}{side}") for side in _SIDE_FILES)):
            each.unlink(missing_ok=True)


def _copy(database: Path, partial: Path) -> str:
    """Copy ``database`` into the empty file ``partial``, synced; its schema revision."""
    read_only = f"file:{quote(str(database))}?mode=ro"
    try:
        with (
            closing(sqlite3.connect(read_only, uri=True, isolation_level=None)) as source,
            closing(sqlite3.connect(partial)) as copy,
        ):
            source.execute("BEGIN")
            source.execute("SELECT count(*) FROM sqlite_master")  # the read begins: the copy's
            source.backup(copy, pages=STEP_PAGES, progress=_stepped)
            revision = _revision(copy, database)
    except sqlite3.Error as exc:
        if exc.sqlite_errorname == "SQLITE_READONLY_DIRECTORY":
            raise BackupFailed(
                f"cannot back up {database}: SQLite makes its shared-memory file (-shm) "
                f"beside it to read it, and may not write in {database.parent}; run as a "
                "user who may (the gateway's)"
            ) from None
        raise BackupFailed(f"cannot back up {database} ({exc})") from None
    try:
        with partial.open("rb") as written:
            os.fsync(written.fileno())
    except OSError as exc:
        said = exc.strerror or type(exc).__name__  # not the temporary file's name
        raise BackupFailed(f"cannot write in {partial.parent} ({said})") from None
    return revision


def _stepped(_status: int, _remaining: int, _total: int) -> None:
    """Called between two steps of the copy: Python code, where a signal's handler runs
    (what it raises stops the copy)."""


def _revision(copy: sqlite3.Connection, database: Path) -> str:
    try:
        row = copy.execute("SELECT version_num FROM alembic_version").fetchone()
    except sqlite3.OperationalError:  # no such table
        row = None
    if row is None:
        raise BackupFailed(
            f"{database} holds no stateway schema: not a gateway's database "
            "(one is made by `stateway migrate` or `stateway serve`)"
        )
    return str(row[0])


def _place(partial: Path, target: Path, *, replace: bool) -> None:
    """Rename ``partial`` to ``target``: over a file there if ``replace``; else never over
    one, even one made since it was checked (a link fails where a name is taken; on a
    file system without links, the name is checked again just before the rename)."""
    try:
        if not replace:
            try:
                os.link(partial, target)
                return
            except FileExistsError:
                raise TargetExists(f"{target} exists; give --force to replace it") from None
            except OSError as exc:
                if exc.errno not in _NO_LINKS:
                    raise
            if target.exists():
                raise TargetExists(f"{target} exists; give --force to replace it")
        partial.replace(target)
    except OSError as exc:
        raise BackupFailed(f"cannot write {target} ({_said(exc)})") from None


def _sync_directory(directory: Path) -> None:
    """Make the new name durable (a crash just after could otherwise lose it)."""
    try:
        handle = os.open(directory, os.O_RDONLY)
    except OSError:  # a directory it cannot open to sync: the copy is there all the same
        return
    try:
        os.fsync(handle)
    except OSError:
        pass
    finally:
        os.close(handle)


def _said(exc: OSError) -> str:
    said = exc.strerror or type(exc).__name__
    return said if exc.filename is None else f"{said}: {exc.filename}"
