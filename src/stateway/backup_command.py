"""``stateway backup PATH``: a consistent copy of the SQLite database a gateway uses, made
while it serves (:mod:`stateway.storage.sql.backup`).

The database is the one ``migrate`` and ``keys`` use (``--config``, ``--database``, or
``STATEWAY_DATABASE``). On success one line on stdout names the database, the copy and
its size and schema revision; a database at an older revision than this release's is
copied as it is, and a note on stderr says so (a gateway of this release started on the
copy upgrades it). Exit 2: what was asked cannot be done (PATH exists without
``--force``, or is the database itself; a PostgreSQL database, which ``pg_dump`` backs
up: the message gives the command); exit 1: the copy failed, nothing left at PATH. A
``SIGINT`` (Ctrl+C), ``SIGTERM`` (a service manager's, a timeout's) or ``SIGHUP`` (a
closed terminal) stops the copy between two of its steps, removes its temporary file and
ends the command by that signal, as their default actions would but for what they leave.
"""

from __future__ import annotations

import argparse
import shlex
import signal
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from types import FrameType
from typing import Any, Final

from stateway.cli import end_by
from stateway.config import ConfigError, Overrides, load_config
from stateway.storage.sql.backup import BackupFailed, TargetExists, back_up
from stateway.storage.sql.engine import async_url, describe_url, is_sqlite
from stateway.storage.sql.migrator import HEAD_REVISION

STOPPING: Final = (signal.SIGTERM, signal.SIGHUP)
"""The signals that stop a copy as Ctrl+C's ``KeyboardInterrupt`` does (else they would
end the process with its temporary file left beside the target)."""

_LIBPQ_VARIABLES: Final = {
    "ssl": "PGSSLMODE",
    "target_session_attrs": "PGTARGETSESSIONATTRS",
    "passfile": "PGPASSFILE",
    "krbsrvname": "PGKRBSRVNAME",
}
"""The environment variables libpq reads a database URL's parameters from."""


class _Stopped(BaseException):
    """One of :data:`STOPPING` came: unwinds the copy (its temporary file removed)."""

    def __init__(self, signum: int) -> None:
        super().__init__(signum)
        self.signum = signum


def add_parser(commands: Any) -> None:
    """The ``backup`` command, on ``stateway``'s subparsers."""
    backup = commands.add_parser(
        "backup", help="copy the SQLite database, consistently, while a gateway serves it"
    )
    backup.add_argument("path", help="the file to write (refused if it exists)")
    backup.add_argument("--force", action="store_true", help="replace PATH if it exists")
    backup.add_argument("--config", help="TOML configuration file")
    backup.add_argument("--database", help="sqlite:///file.db")


def run(args: argparse.Namespace) -> int:
    try:
        config = load_config(Overrides(config=args.config, database=args.database))
    except ConfigError as exc:
        print(f"stateway: {exc}", file=sys.stderr)
        return 2
    url = async_url(config.database_url)
    target = Path(args.path).absolute()
    if not is_sqlite(url):
        print(f"stateway: {_use_pg_dump(config.database_url, target)}", file=sys.stderr)
        return 2
    database = Path(str(url.database))
    try:
        with _stopped_by_signals():
            backup = back_up(database, target, replace=args.force)
    except _Stopped as stopped:
        end_by(stopped.signum)
        return 128 + stopped.signum  # pragma: no cover - the signal ended the process
    except TargetExists as exc:
        print(f"stateway: {exc}", file=sys.stderr)
        return 2
    except BackupFailed as exc:
        print(f"stateway: {exc}; nothing was written to {target}", file=sys.stderr)
        return 1
    print(
        f"backed up {describe_url(config.database_url)} to {backup.path} "
        f"({backup.size} bytes, schema revision {backup.revision})"
    )
    if backup.revision < HEAD_REVISION:  # revisions are zero-padded numbers
        print(
            f"stateway: note: the database is at schema revision {backup.revision}, older "
            f"than this release's {HEAD_REVISION}: copied as it is; a gateway of this "
            "release started on the copy upgrades it",
            file=sys.stderr,
        )
    return 0


@contextmanager
def _stopped_by_signals() -> Iterator[None]:
    """:data:`STOPPING` raise :class:`_Stopped` meanwhile; their handlers as they were
    after."""

    def stop(signum: int, _frame: FrameType | None) -> None:
        raise _Stopped(signum)

    before = {signum: signal.signal(signum, stop) for signum in STOPPING}
    try:
        yield
    finally:
        for signum, handler in before.items():
            signal.signal(signum, handler)


def _use_pg_dump(database_url: str, target: Path) -> str:
    """The refusal of a PostgreSQL database, with the ``pg_dump`` command that backs it up,
    connecting as the gateway does: its hosts as options, its parameters (``sslmode``, a
    certificate checked; ``target_session_attrs``; ``passfile``; ``krbsrvname``) as
    libpq's environment, which pg_dump has no options for; its password left out
    (``pg_dump`` asks for it, or reads ``PGPASSWORD`` or the password file)."""
    url = async_url(database_url)
    query = dict(url.query)  # sslmode as asyncpg's ssl: the same modes
    listed = query.pop("host", ())  # SQLAlchemy's hosts (host=h1:5432&host=h2)
    hosts = [listed] if isinstance(listed, str) else list(listed)
    command = ["pg_dump", "--format=custom", f"--file={target}"]
    if hosts:
        names, ports = zip(*map(_host_port, hosts), strict=True)
        command.append(f"--host={','.join(names)}")
        if any(ports):
            command.append(f"--port={','.join(ports)}")  # an empty one: the default
    else:
        if url.host:
            command.append(f"--host={url.host}")
        if url.port:
            command.append(f"--port={url.port}")
    if url.username:
        command.append(f"--username={url.username}")
    if url.database:
        command.append(url.database)
    settings = [
        f"{variable}={shlex.quote(str(query[name]))} "
        for name, variable in _LIBPQ_VARIABLES.items()
        if name in query
    ]
    return (
        f"{describe_url(database_url)}: stateway backup copies SQLite databases only; back "
        f"up PostgreSQL with its own tools: {''.join(settings)}{shlex.join(command)} "
        "(restore with pg_restore)"
    )


def _host_port(host: str) -> tuple[str, str]:
    """A host of a URL's ``host`` parameters (``name:port``, ``name``, or a socket's
    directory), and its port (empty: none given); an IPv6 address without its brackets,
    which libpq does not take."""
    if host.startswith("["):  # [address] or [address]:port
        name, _, rest = host[1:].partition("]")
        port = rest.removeprefix(":")
        return name, port if port.isdigit() else ""
    if not host.startswith("/") and host.count(":") == 1:  # else a bare IPv6 address
        name, _, port = host.partition(":")
        if port.isdigit():
            return name, port
    return host, ""
