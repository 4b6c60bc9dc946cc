"""The fake search APIs, one server for the session, reset after each test."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.support.fake_search import FakeSearch


@pytest.fixture(scope="session")
def fake_search_server() -> Iterator[FakeSearch]:
    with FakeSearch() as fake:
        yield fake


@pytest.fixture
def fake(fake_search_server: FakeSearch) -> Iterator[FakeSearch]:
    yield fake_search_server
    fake_search_server.reset()
