"""Fixtures shared by the whole test suite."""

from __future__ import annotations

import asyncio
import gc
import os
import re
import uuid
from collections.abc import AsyncIterator, Iterator

import asyncpg
import pytest
from hypothesis import Phase, settings
from redis import Redis
from redis.exceptions import RedisError
from sqlalchemy import make_url

# `make mutate` runs the fuzz tests once per mutant: there a failing example is enough,
# shrinking it only costs time (each killed mutant would otherwise shrink for seconds).
settings.register_profile(
    "mutate", phases=(Phase.explicit, Phase.reuse, Phase.generate), database=None
)
settings.load_profile(os.environ.get("STATEWAY_HYPOTHESIS_PROFILE", "default"))

DEFAULT_POSTGRES_URL = "postgresql://postgres@127.0.0.1:5432/test"


@pytest.fixture
def young_heap() -> Iterator[None]:
    """For a test that runs the cyclic garbage collector (``gc.collect()``, directly or
    through :mod:`tests.collector`): the objects made before it are set aside while it runs
    (:func:`gc.freeze`), so its collections go through the objects made since, those it
    asks about, not the whole heap, which late in a worker's run is millions of objects and
    a second's collection. What was made before is alive (the test cannot reach garbage) or
    garbage of earlier tests, left to a later collection."""
    gc.freeze()
    try:
        yield
    finally:
        gc.unfreeze()


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


@pytest.fixture
async def fresh_postgres_url(postgres_url: str) -> AsyncIterator[str]:
    """A new, empty database on the test server, dropped afterwards."""
    name = f"stateway_test_{uuid.uuid4().hex[:12]}"
    admin = await asyncpg.connect(postgres_url.replace("+asyncpg", ""), timeout=5)
    try:
        await admin.execute(f'CREATE DATABASE "{name}"')
    except asyncpg.InsufficientPrivilegeError:
        await admin.close()
        message = "the test role may not create databases"
        if os.environ.get("CI"):
            pytest.fail(f"{message}; CI must grant CREATEDB", pytrace=False)
        pytest.skip(message)
    try:
        yield make_url(postgres_url).set(database=name).render_as_string(hide_password=False)
    finally:
        await admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        await admin.close()


DEFAULT_REDIS_URL = "redis://127.0.0.1:6379/0"


@pytest.fixture(scope="session")
def redis_url() -> str:
    """The test Redis server's URL (``STATEWAY_TEST_REDIS_URL``), decided as for
    PostgreSQL: skipped when unreachable, except in CI (``.ci/run`` starts Redis), where
    an unreachable server fails the tests. Each test uses its own key prefix."""
    url = os.environ.get("STATEWAY_TEST_REDIS_URL") or DEFAULT_REDIS_URL
    problem = _redis_problem(url)
    if problem is not None:
        message = f"Redis at {url} is unreachable ({problem})"
        if os.environ.get("CI"):
            pytest.fail(f"{message}; CI must provide it", pytrace=False)
        pytest.skip(f"{message}; start it or point STATEWAY_TEST_REDIS_URL at one")
    return url


def _redis_problem(url: str) -> str | None:
    """Asked synchronously: the fixture may be reached from inside an event loop."""
    client = Redis.from_url(url, socket_connect_timeout=2)
    try:
        client.ping()
    except RedisError as exc:
        return f"{type(exc).__name__}: {exc}"
    finally:
        client.close()
    return None


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Every test that asks for ``postgres_url`` carries the ``postgres`` mark (fixtures that
    reach it through ``getfixturevalue`` mark their PostgreSQL params), so ``-m postgres``
    and ``-m "not postgres"`` split the suite exactly; a test that forgot it fails here."""
    for item in items:
        uses_postgres = "postgres_url" in getattr(item, "fixturenames", ())
        if uses_postgres and item.get_closest_marker("postgres") is None:
            raise pytest.UsageError(f"{item.nodeid} uses PostgreSQL without the postgres mark")
        uses_redis = "redis_url" in getattr(item, "fixturenames", ())
        if uses_redis and item.get_closest_marker("redis") is None:
            raise pytest.UsageError(f"{item.nodeid} uses Redis without the redis mark")
