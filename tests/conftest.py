"""Fixtures shared by the whole test suite."""

from __future__ import annotations

import asyncio
import os
import re

import asyncpg
import pytest
from hypothesis import Phase, settings

# `make mutate` runs the fuzz tests once per mutant: there a failing example is enough,
# shrinking it only costs time (each killed mutant would otherwise shrink for seconds).
settings.register_profile(
    "mutate", phases=(Phase.explicit, Phase.reuse, Phase.generate), database=None
)
settings.load_profile(os.environ.get("STATEWAY_HYPOTHESIS_PROFILE", "default"))

DEFAULT_POSTGRES_URL = "postgresql://postgres@127.0.0.1:5432/test"


@pytest.fixture(scope="session")
def postgres_url() -> str:
    """The test PostgreSQL server's URL (``STATEWAY_TEST_POSTGRES_URL``).

    Tests using it are skipped when the server cannot be reached, except in CI (``CI`` set),
    where PostgreSQL must run and an unreachable server fails them.
    """
    url = os.environ.get("STATEWAY_TEST_POSTGRES_URL") or DEFAULT_POSTGRES_URL
    problem = asyncio.run(_connection_problem(url))
    if problem is not None:
        shown = re.sub(r"//([^:/@]*):[^@/]*@", r"//\1:***@", url)  # no password in logs
        message = f"PostgreSQL at {shown} is unreachable ({problem})"
        if os.environ.get("CI"):
            pytest.fail(f"{message}; CI must provide it", pytrace=False)
        pytest.skip(f"{message}; start it or point STATEWAY_TEST_POSTGRES_URL at one")
    return url


async def _connection_problem(url: str) -> str | None:
    dsn = url.replace("postgresql+asyncpg://", "postgresql://", 1)
    try:
        connection = await asyncpg.connect(dsn, timeout=2)
    except (OSError, asyncpg.PostgresError, asyncpg.InterfaceError) as exc:
        return f"{type(exc).__name__}: {exc}"
    await connection.close()
    return None


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Every test that asks for ``postgres_url`` carries the ``postgres`` mark (fixtures that
    reach it through ``getfixturevalue`` mark their PostgreSQL params), so ``-m postgres``
    and ``-m "not postgres"`` split the suite exactly; a test that forgot it fails here."""
    for item in items:
        uses_postgres = "postgres_url" in getattr(item, "fixturenames", ())
        if uses_postgres and item.get_closest_marker("postgres") is None:
            raise pytest.UsageError(f"{item.nodeid} uses PostgreSQL without the postgres mark")
