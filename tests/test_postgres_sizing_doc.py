"""README's sizing of PostgreSQL's own ``max_connections`` (the "PostgreSQL connections"
entry of "Operating it", and the ``STATEWAY_DATABASE_MAX_CONNECTIONS`` row) says what a
gateway process really holds: the connections it keeps open and those it opens beyond
them, how long one lives, and what that makes of a server's default limit across
replicas. Read off an engine built as serving builds it (no connection opened), so a
changed pool cannot leave the doc behind."""

from __future__ import annotations

import re
from pathlib import Path
from typing import cast

from sqlalchemy.pool import QueuePool

from stateway.storage.sql.engine import create_engine
from stateway.storage_config import StorageConfig

ROOT = Path(__file__).resolve().parent.parent
_README = (ROOT / "README.md").read_text(encoding="utf-8")
_ENTRY = " ".join(
    _README.split("\n- **PostgreSQL connections.**", 1)[-1].split("\n- **", 1)[0].split()
)
"""The entry, its lines joined."""
_ROW = next(line for line in _README.splitlines() if "`STATEWAY_DATABASE_MAX_CONNECTIONS`" in line)

SERVER_LIMIT = 100
"""PostgreSQL's default ``max_connections``."""
RESERVED = 3
"""PostgreSQL's default ``superuser_reserved_connections``: of the limit, kept for
superusers."""


def _pool() -> QueuePool:
    """The pool of a process serving the default ``[storage]`` on PostgreSQL."""
    storage = StorageConfig()
    engine = create_engine(
        "postgresql://u@h/db",
        timeout=storage.database_timeout,
        max_connections=storage.max_connections,
    )
    return cast(QueuePool, engine.pool)


def _said(pattern: str, text: str = _ENTRY) -> list[int]:
    found = re.search(pattern, text)
    assert found, f"README no longer says {pattern!r}"
    return [int(number) for number in found.groups()]


def test_the_connections_a_process_holds_are_its_pools() -> None:
    pool = _pool()
    kept, beyond = pool.size(), pool._max_overflow
    assert _said(r"at most `\[storage\] max_connections` \(default (\d+)\)") == [kept + beyond]
    assert _said(r"(\d+) kept open") == [kept]
    assert _said(r"the other (\d+) opened") == [beyond]
    assert _said(r"replaced once (\d+) minutes old") == [pool._recycle // 60]
    assert _said(r"(\d+) kept open", _ROW) == [kept]


def test_the_replicas_a_default_server_is_said_to_fit_do() -> None:
    held = _pool().size() + _pool()._max_overflow
    room = SERVER_LIMIT - RESERVED
    fit = room // held
    assert _said(r"`max_connections` \(default (\d+), (\d+) of them") == [SERVER_LIMIT, RESERVED]
    assert _said(r"(\d+) replicas \((\d+) connections\) fit") == [fit, fit * held]
    assert _said(r"(\d+) need `\[storage\] max_connections = (\d+)`") == [
        fit + 1,
        room // (fit + 1),
    ]
