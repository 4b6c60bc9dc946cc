"""The edges of the providers' rules: a base URL's trailing slash, a query for one hit, an
HTTP 300, a failure without a status, the size cap of an answer with and without a declared
length, and Brave answers of the wrong shape (read in memory: a malformed answer is a
failure naming the provider, never a crash)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any, cast

import pytest
from aiohttp import ClientResponse

from stateway.core.tools.ports import SearchHit, SearchQuery, ToolError, ToolFailure
from stateway.response_bodies import read_capped
from stateway.search import build_search_provider
from stateway.search.brave import BraveProvider, from_brave
from stateway.search.tavily import TavilyProvider
from tests.search.test_providers import build
from tests.support.fake_search import Api, FakeSearch


def test_a_base_url_with_a_trailing_slash_reaches_the_same_endpoint() -> None:
    brave = BraveProvider(api_key="k", base_url="http://p/", max_results=5, timeout=1)
    tavily = TavilyProvider(api_key="k", base_url="http://p/", max_results=5, timeout=1)
    assert brave.endpoint == "http://p/res/v1/web/search"
    assert tavily.endpoint == "http://p/search"


@pytest.mark.parametrize("api", ["brave", "tavily"])
async def test_a_hosted_api_is_asked_for_one_hit_when_one_is_wanted(
    fake: FakeSearch, api: Api
) -> None:
    provider = build(fake, api, max_results=5)
    try:
        await provider.search(SearchQuery("q", max_results=1))
    finally:
        await provider.aclose()
    assert fake.queries[-1].max_results == 1


async def test_an_http_300_is_told_as_a_redirect(fake: FakeSearch) -> None:
    provider = build(fake, "searxng")
    fake.status = 300
    try:
        with pytest.raises(ToolFailure) as caught:
            await provider.search(SearchQuery("q"))
    finally:
        await provider.aclose()
    assert caught.value.message == (
        "SearXNG redirected the search (HTTP 300); configure its final URL"
    )


async def test_a_failure_without_a_status_is_no_http_error(fake: FakeSearch) -> None:
    """Only an HTTP error status makes an ``http`` error (what the Messages API names a
    cause by): an unreadable answer is a plain failure."""
    provider = build(fake, "searxng")
    fake.malformed = True
    try:
        with pytest.raises(ToolFailure) as caught:
            await provider.search(SearchQuery("q"))
    finally:
        await provider.aclose()
    assert caught.value.error == ToolError("SearXNG returned invalid JSON")


class Undeclared:
    """An answer without ``Content-Length`` (chunked), arriving in ``chunks``."""

    content_length = None

    def __init__(self, *chunks: bytes) -> None:
        self.content = self
        self._chunks = chunks

    async def iter_any(self) -> AsyncIterator[bytes]:
        for chunk in self._chunks:
            yield chunk


@pytest.mark.parametrize(
    ("chunks", "read"),
    [
        ((b"x" * 600, b"x" * 400), True),  # exactly the limit
        ((b"x" * 600, b"x" * 401), False),
        ((b"x" * 400, b"x" * 400, b"x" * 400), False),  # each chunk under it
    ],
    ids=["at-the-limit", "one-past", "in-small-chunks"],
)
async def test_an_undeclared_answer_is_read_up_to_the_limit(
    chunks: tuple[bytes, ...], read: bool
) -> None:
    body = await read_capped(cast(ClientResponse, Undeclared(*chunks)), 1000)
    assert body == (b"".join(chunks) if read else None)


@pytest.mark.parametrize(("declared", "read"), [(1000, True), (1001, False)])
async def test_a_declared_length_is_checked_before_reading(declared: int, read: bool) -> None:
    """Refused on its ``Content-Length`` alone, whatever it then sends (here, less)."""
    answer = Undeclared(b"x" * 10)
    answer.content_length = declared  # type: ignore[assignment]
    body = await read_capped(cast(ClientResponse, answer), 1000)
    assert body == (b"x" * 10 if read else None)


@pytest.mark.parametrize(
    ("answer", "message"),
    [
        ([], "Brave Search returned an unexpected answer (not an object)"),
        ({"web": []}, "Brave Search returned an unexpected answer (no web.results list)"),
        ({"web": "none"}, "Brave Search returned an unexpected answer (no web.results list)"),
    ],
    ids=["list", "web-list", "web-text"],
)
def test_a_brave_answer_of_the_wrong_shape_is_a_failure(answer: Any, message: str) -> None:
    with pytest.raises(ToolFailure) as caught:
        from_brave(answer)
    assert caught.value.message == message


def test_brave_results_without_a_url_are_skipped() -> None:
    answer = {
        "web": {
            "results": [
                {"title": "no url", "description": "d"},
                {"title": "a number", "url": 7},
                "not a result",
                {"title": "kept", "url": "https://example.com/", "description": "d"},
            ]
        }
    }
    assert from_brave(answer) == [SearchHit("kept", "https://example.com/", "d")]


async def test_the_key_is_read_from_the_process_environment_by_default(
    fake: FakeSearch, monkeypatch: pytest.MonkeyPatch
) -> None:
    """As the gateway builds its tools: no environment passed."""
    for name, value in fake.environ("brave").items():
        monkeypatch.setenv(name, value)
    provider = build_search_provider(fake.config("brave"))
    assert provider is not None
    try:
        await provider.search(SearchQuery("q"))
    finally:
        await provider.aclose()
    assert fake.queries[-1].headers["X-Subscription-Token"] == fake.api_key
