"""End-to-end fixtures: the real ``stateway serve`` process in front of the real fake
upstream, driven by the official ``openai`` SDK.

The gateway fixture is parametrized over storage (SQLite, PostgreSQL) and upstream API
shape (Chat Completions, stateless Responses), so every test runs against each.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import ExitStack

import pytest
from anthropic import Anthropic
from openai import AsyncOpenAI, OpenAI

from stateway.fake_upstream.launch import start_fake_upstream
from stateway.launch import start_gateway
from tests.e2e.configured import RunningGateway, configured_gateway
from tests.support.fake_search import FakeSearch

MAX_BODY_BYTES = 256 * 1024


@pytest.fixture(scope="session")
def fake_upstream() -> Iterator[str]:
    with start_fake_upstream() as base_url:
        yield base_url


@pytest.fixture(scope="module")
def second_upstream() -> Iterator[str]:
    """Another fake upstream, for a module's routes with two candidates."""
    with start_fake_upstream() as url:
        yield url


@pytest.fixture(scope="module")
def searching() -> Iterator[FakeSearch]:
    """The fake search APIs (:mod:`tests.support.fake_search`), for a module's gateways to
    search with ``searching.gateway_env(api)``."""
    with FakeSearch() as fake:
        yield fake


@pytest.fixture(scope="session")
def gateways(
    request: pytest.FixtureRequest, fake_upstream: str, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Callable[[str], str]]:
    """Starts the shared gateway of a kind (``sqlite-chat``, ``postgres-responses``...) at
    its first use and keeps it for the whole session: pytest tears a parametrized fixture
    down each time its parameter changes, and with a file per worker at a time
    (``--dist loadfile``) that was each file's four gateways started anew."""
    with ExitStack() as running:
        started: dict[str, str] = {}

        def gateway_of(kind: str) -> str:
            if kind not in started:
                database_kind, api = kind.split("-")
                if database_kind == "sqlite":
                    database = f"sqlite:///{tmp_path_factory.mktemp('db') / 'stateway.db'}"
                else:
                    database = request.getfixturevalue("postgres_url")
                env = {"STATEWAY_MAX_BODY_BYTES": str(MAX_BODY_BYTES)}
                args = ["--upstream", fake_upstream, "--upstream-api", api, "--database", database]
                started[kind] = running.enter_context(start_gateway(args, env=env))
            return started[kind]

        yield gateway_of


@pytest.fixture(scope="session")
def anthropic_gateway(
    fake_upstream: str, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[RunningGateway]:
    """A gateway over the fake's Anthropic wire, configured by default (a catch-all
    ``api = "anthropic"`` backend), shared by the tests that need no other setting: each
    sends its own markers and chains its own responses."""
    backend = {"url": fake_upstream, "api": "anthropic"}
    with configured_gateway(tmp_path_factory.mktemp("anthropic"), backend) as running:
        yield running


@pytest.fixture(
    scope="session",
    params=[
        "sqlite-chat",
        "sqlite-responses",
        pytest.param("postgres-chat", marks=pytest.mark.postgres),
        pytest.param("postgres-responses", marks=pytest.mark.postgres),
    ],
)
def gateway(request: pytest.FixtureRequest, gateways: Callable[[str], str]) -> str:
    """The shared gateway of each storage and upstream API shape, for the tests of every
    module that does not start its own."""
    return gateways(request.param)


@pytest.fixture
def client(gateway: str) -> Iterator[OpenAI]:
    with OpenAI(base_url=gateway + "/v1", api_key="sk-test", max_retries=0) as sdk:
        yield sdk


@pytest.fixture
async def async_client(gateway: str) -> AsyncOpenAI:
    return AsyncOpenAI(base_url=gateway + "/v1", api_key="sk-test", max_retries=0)


@pytest.fixture
def claude(gateway: str) -> Iterator[Anthropic]:
    """The ``anthropic`` SDK on the module's gateway (a module's own ``gateway`` fixture
    may stand in for the one above)."""
    with Anthropic(base_url=gateway, api_key="client-key", max_retries=0) as sdk:
        yield sdk
