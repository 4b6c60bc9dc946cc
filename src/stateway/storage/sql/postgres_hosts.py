"""The hosts a PostgreSQL URL names as ``host`` parameters, and what asyncpg takes of them.

A URL's authority holds one host; the others, and a Unix socket's directory, which has no
place there, are ``host`` parameters: ``?host=/run/postgresql``, or several hosts tried in
turn (a primary and its standbys, ``target_session_attrs`` choosing among them). SQLAlchemy's
asyncpg dialect takes several only each with its port, each in a parameter of its own
(``?host=h1:5432&host=h2:5432``). Any other way (a host without its port, several in one
parameter, ``?host=h1,h2``, which it would take with a ``port`` parameter, not taken here)
failed each command as it connected, with SQLAlchemy's traceback ("All ports are required
to be present for asyncpg multiple host URL"), and passed ``check-config``: it is refused
as the URL is read (:func:`check_hosts`), the fix said with the URL's own hosts. One host
is taken as given (a socket's directory, an IPv6 address: SQLAlchemy passes it on).
"""

from __future__ import annotations

from typing import Final

DEFAULT_PORT: Final = 5432

_MAX_PORT: Final = 65535
_EXAMPLE: Final = "?host=h1:5432&host=h2:5432"


def listed_hosts(value: str | tuple[str, ...]) -> list[str]:
    """The hosts the ``host`` parameter's ``value`` names: each of its values (one, or one
    per time it is given), each split at its commas."""
    values = [value] if isinstance(value, str) else list(value)
    return [host for each in values for host in each.split(",") if host]


def check_hosts(value: str | tuple[str, ...], port: int | None) -> None:
    """Raise :class:`ValueError`, saying what to write instead, unless the ``host``
    parameter's ``value`` names one host, given once, or several (given more than once:
    SQLAlchemy's several hosts) each with its port in a parameter of its own. ``port``:
    the URL's authority's, for the hosts the fix gives without theirs. No message shows
    the URL: it may hold a password."""
    if isinstance(value, str) and "," not in value:
        return
    hosts = listed_hosts(value)
    for host in hosts:
        name, colon, number = host.partition(":")
        if colon and (not name or not number.isdigit()):
            raise ValueError(
                f"The database URL's host {host!r} is not a host and its port, as each of "
                f"several must be (e.g. {_EXAMPLE})"
            )
        if colon and not 0 < int(number) <= _MAX_PORT:
            raise ValueError(
                f"The database URL's port {number} (of host {name}) is out of range (1 to "
                f"{_MAX_PORT}); e.g. {_EXAMPLE}"
            )
    apart = not isinstance(value, str) and list(value) == hosts
    if not apart or not all(":" in host for host in hosts):
        fix = "&".join(f"host={_with_port(host, port)}" for host in hosts)
        raise ValueError(
            "The database URL names several hosts; give each its port, in a host parameter "
            f"of its own: ?{fix}"
        )


def _with_port(host: str, port: int | None) -> str:
    return host if ":" in host else f"{host}:{port or DEFAULT_PORT}"
