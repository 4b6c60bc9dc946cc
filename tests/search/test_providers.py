"""Each search provider against the fake search APIs on loopback: what is sent, what comes
back, and how every failure reaches the model."""

from __future__ import annotations

import asyncio
import socket
from collections.abc import AsyncIterator
from typing import Any

import pytest
from aiohttp import web
from aiohttp.test_utils import TestServer

from stateway.core.tools.ports import (
    INVALID_PARAMS,
    SearchHit,
    SearchProvider,
    SearchQuery,
    ToolFailure,
)
from stateway.search import build_search_provider, transport
from stateway.search.brave import BraveProvider
from stateway.search.searxng import SearxngProvider
from stateway.search.tavily import TavilyProvider
from stateway.search.transport import SearchTransport
from stateway.tool_config import WebSearchConfig, apply_tool_env
from tests.support.fake_search import Api, FakeSearch, results_for

APIS: list[Api] = ["searxng", "brave", "tavily"]
HOSTED: list[Api] = ["brave", "tavily"]
PROVIDER_NAME = {"searxng": "SearXNG", "brave": "Brave Search", "tavily": "Tavily"}


def build(fake: FakeSearch, api: Api, **overrides: Any) -> SearchProvider:
    provider = build_search_provider(fake.config(api, **overrides), fake.environ(api))
    assert provider is not None
    return provider


@pytest.fixture(params=APIS)
def api(request: pytest.FixtureRequest) -> Api:
    api: Api = request.param
    return api


@pytest.fixture(params=HOSTED)
def hosted(request: pytest.FixtureRequest) -> Api:
    api: Api = request.param
    return api


@pytest.fixture
async def provider(fake: FakeSearch, api: Api) -> AsyncIterator[SearchProvider]:
    provider = build(fake, api, max_results=10)
    yield provider
    await provider.aclose()


def expected(query: str, *numbers: int) -> list[SearchHit]:
    every = results_for(query, 20)
    return [SearchHit(every[n - 1].title, every[n - 1].url, every[n - 1].snippet) for n in numbers]


# -- what comes back ----------------------------------------------------------------------


async def test_hits_are_parsed_from_each_api(provider: SearchProvider) -> None:
    hits = await provider.search(SearchQuery("stateful gateways", max_results=3))
    assert hits == expected("stateful gateways", 1, 2, 3)


async def test_brave_markup_is_removed_from_titles_and_snippets(fake: FakeSearch) -> None:
    query = 'C++ & "<templates>"'  # the fake escapes it and wraps it in <strong>
    provider = build(fake, "brave")
    try:
        hits = await provider.search(SearchQuery(query, max_results=1))
    finally:
        await provider.aclose()
    assert hits == expected(query, 1)
    assert hits[0].snippet == f"Result 1 about {query}."


async def test_no_more_hits_than_the_query_or_the_config_allows(fake: FakeSearch, api: Api) -> None:
    provider = build(fake, api, max_results=3)
    try:
        assert len(await provider.search(SearchQuery("q", max_results=5))) == 3
        assert len(await provider.search(SearchQuery("q", max_results=2))) == 2
    finally:
        await provider.aclose()


async def test_hosted_apis_are_asked_for_the_count_needed(fake: FakeSearch, hosted: Api) -> None:
    provider = build(fake, hosted, max_results=4)
    try:
        await provider.search(SearchQuery("q", max_results=7))
    finally:
        await provider.aclose()
    assert fake.queries[-1].max_results == 4


async def test_only_allowed_domains_and_their_subdomains(
    provider: SearchProvider, fake: FakeSearch, api: Api
) -> None:
    # results cycle through example.com, docs.example.com, example.org, notexample.com
    query = SearchQuery("docs", max_results=4, allowed_domains=("https://Example.COM/",))
    hits = await provider.search(query)
    assert hits == expected("docs", 1, 2, 5, 6)
    if api == "tavily":
        assert fake.queries[-1].body["include_domains"] == ["example.com"]
    if api == "brave":
        assert fake.queries[-1].max_results == 20  # headroom for the filter


async def test_blocked_domains_and_their_subdomains_are_left_out(
    provider: SearchProvider, fake: FakeSearch, api: Api
) -> None:
    query = SearchQuery("docs", max_results=4, blocked_domains=("*.Example.com",))
    hits = await provider.search(query)
    assert hits == expected("docs", 3, 4, 7, 8)  # example.org and notexample.com only
    if api == "tavily":
        assert fake.queries[-1].body["exclude_domains"] == ["example.com"]
    if api == "brave":
        assert fake.queries[-1].max_results == 20  # headroom for the filter


async def test_an_allowed_domain_with_a_path_allows_only_pages_under_it(
    provider: SearchProvider, fake: FakeSearch, api: Api
) -> None:
    """As Anthropic's web search reads ``example.com/blog``: that path (and the pages
    under it) on the domain and its subdomains, not the whole site; ``/docs/1`` is not a
    prefix of ``/docs/10``."""
    query = SearchQuery("docs", max_results=4, allowed_domains=("example.com/docs/1/",))
    hits = await provider.search(query)
    assert hits == expected("docs", 1)
    if api == "tavily":  # Tavily filters by site; the path is applied to what it finds
        assert fake.queries[-1].body["include_domains"] == ["example.com"]


async def test_a_blocked_domain_with_a_path_blocks_only_pages_under_it(
    provider: SearchProvider, fake: FakeSearch, api: Api
) -> None:
    query = SearchQuery("docs", max_results=4, blocked_domains=("example.com/docs/1",))
    hits = await provider.search(query)
    assert hits == expected("docs", 2, 3, 4, 5)
    if api == "tavily":  # not excluded by site: that would leave out the rest of it
        assert "exclude_domains" not in fake.queries[-1].body


async def test_each_url_is_returned_once(provider: SearchProvider, fake: FakeSearch) -> None:
    fake.duplicate_urls = True
    hits = await provider.search(SearchQuery("twice", max_results=3))
    assert hits == expected("twice", 1, 2, 3)


async def test_results_without_http_urls_are_skipped(fake: FakeSearch) -> None:
    provider = build(fake, "searxng")
    fake.result_count = 2
    try:
        hits = await provider.search(SearchQuery("javascript:alert(1)", max_results=5))
    finally:
        await provider.aclose()
    assert [hit.url for hit in hits] == [r.url for r in results_for("javascript:alert(1)", 2)]


async def test_an_empty_query_is_refused_before_sending(
    provider: SearchProvider, fake: FakeSearch
) -> None:
    with pytest.raises(ToolFailure, match="query is empty") as caught:
        await provider.search(SearchQuery("  "))
    assert fake.queries == []
    assert (caught.value.error.kind, caught.value.error.code) == ("protocol", INVALID_PARAMS)


# -- what is sent ---------------------------------------------------------------------------


async def test_each_api_receives_the_query_and_its_credentials(
    provider: SearchProvider, fake: FakeSearch, api: Api
) -> None:
    await provider.search(SearchQuery("what is sent"))
    [received] = fake.queries
    assert received.api == api
    assert received.query == "what is sent"
    if api == "searxng":
        assert received.body["format"] == "json"
    if api == "brave":
        assert received.headers["X-Subscription-Token"] == fake.api_key
        assert received.headers["Accept"] == "application/json"
    if api == "tavily":
        assert received.headers["Authorization"] == f"Bearer {fake.api_key}"
        assert received.headers["Content-Type"] == "application/json"


async def test_a_rejected_key_is_reported_as_such(fake: FakeSearch, hosted: Api) -> None:
    provider = build_search_provider(
        fake.config(hosted), {fake.environ(hosted).popitem()[0]: "wrong"}
    )
    assert provider is not None
    try:
        with pytest.raises(ToolFailure, match="rejected the API key") as caught:
            await provider.search(SearchQuery("q"))
    finally:
        await provider.aclose()
    assert caught.value.message.startswith(PROVIDER_NAME[hosted])


# -- failures -------------------------------------------------------------------------------

FAILURES = [
    pytest.param({"status": 429}, "rate limited", id="429"),
    pytest.param({"status": 500}, r"unavailable \(HTTP 500\)", id="500"),
    pytest.param({"status": 503}, r"unavailable \(HTTP 503\)", id="503"),
    pytest.param({"status": 400}, r"rejected the search \(HTTP 400\)", id="400"),
    pytest.param({"malformed": True}, "invalid JSON", id="malformed"),
    pytest.param({"wrong_shape": True}, "unexpected answer", id="wrong-shape"),
]


@pytest.mark.parametrize(("switches", "message"), FAILURES)
async def test_failures_become_tool_failures_naming_the_provider(
    provider: SearchProvider, fake: FakeSearch, api: Api, switches: dict[str, Any], message: str
) -> None:
    for name, value in switches.items():
        setattr(fake, name, value)
    with pytest.raises(ToolFailure, match=message) as caught:
        await provider.search(SearchQuery("q"))
    assert caught.value.message.startswith(PROVIDER_NAME[api])
    assert fake.api_key not in caught.value.message


@pytest.mark.parametrize("status", [429, 503, 400])
async def test_an_error_status_is_kept_as_an_http_error(
    provider: SearchProvider, fake: FakeSearch, status: int
) -> None:
    """What names the cause (a 429: rate limited) without reading the message."""
    fake.status = status
    with pytest.raises(ToolFailure) as caught:
        await provider.search(SearchQuery("q"))
    assert (caught.value.error.kind, caught.value.error.code) == ("http", status)


async def test_a_large_answer_read_in_many_chunks_is_parsed_whole(fake: FakeSearch) -> None:
    fake.result_count = 5000  # about 700 KB
    provider = build(fake, "searxng")
    try:
        hits = await provider.search(SearchQuery("big", max_results=5))
    finally:
        await provider.aclose()
    assert hits == expected("big", 1, 2, 3, 4, 5)


async def test_an_oversized_answer_is_refused(
    provider: SearchProvider, fake: FakeSearch, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(transport, "MAX_RESPONSE_BYTES", 1000)
    fake.result_count = 20  # about 3 KB in every shape
    with pytest.raises(ToolFailure, match="oversized answer"):
        await provider.search(SearchQuery("q"))


async def test_searxng_403_says_how_to_enable_json(fake: FakeSearch) -> None:
    provider = build(fake, "searxng")
    fake.status = 403
    try:
        with pytest.raises(ToolFailure, match=r"enable `json` in `search.formats`"):
            await provider.search(SearchQuery("q"))
    finally:
        await provider.aclose()


@pytest.mark.parametrize("status", [401, 403])
async def test_hosted_auth_statuses(fake: FakeSearch, hosted: Api, status: int) -> None:
    provider = build(fake, hosted)
    fake.status = status
    expected_text = "rejected the API key" if status == 401 else "refused the search"
    try:
        with pytest.raises(ToolFailure, match=expected_text):
            await provider.search(SearchQuery("q"))
    finally:
        await provider.aclose()


@pytest.mark.parametrize("status", [432, 433])
async def test_tavily_plan_limits(fake: FakeSearch, status: int) -> None:
    provider = build(fake, "tavily")
    fake.status = status
    try:
        with pytest.raises(ToolFailure, match=f"usage limit .* \\(HTTP {status}\\)"):
            await provider.search(SearchQuery("q"))
    finally:
        await provider.aclose()


async def test_a_search_that_hangs_times_out(fake: FakeSearch, api: Api) -> None:
    provider = build(fake, api, timeout=1.0)  # long enough to be sent on a busy machine
    fake.hang = True
    try:
        with pytest.raises(ToolFailure, match=r"search timed out after 1s"):
            # the outer bound only keeps a broken deadline from hanging the suite
            await asyncio.wait_for(provider.search(SearchQuery("q")), 10)
    finally:
        await provider.aclose()
    # it was sent, then given up (the fake's thread may record it a moment later)
    assert len(await asyncio.to_thread(fake.wait_for_queries, 1)) == 1


async def test_a_provider_cancelled_mid_search_still_works(fake: FakeSearch, api: Api) -> None:
    provider = build(fake, api)
    fake.hang = True
    try:
        task = asyncio.create_task(provider.search(SearchQuery("first")))
        await asyncio.to_thread(fake.wait_for_queries, 1)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        fake.hang = False
        fake.release()
        assert await provider.search(SearchQuery("second", max_results=1)) == expected("second", 1)
    finally:
        await provider.aclose()


def provider_at(api: Api, url: str) -> SearchProvider:
    """``api``'s provider, its requests sent to ``url``."""
    where = {"searxng_url": url} if api == "searxng" else {"base_url": url}
    config = WebSearchConfig.model_validate({"provider": api, **where})
    provider = build_search_provider(config, {"BRAVE_API_KEY": "k", "TAVILY_API_KEY": "k"})
    assert provider is not None
    return provider


async def test_an_unreachable_api_is_reported(api: Api) -> None:
    with socket.socket() as sock:  # a port nothing listens on
        sock.bind(("127.0.0.1", 0))
        url = f"http://127.0.0.1:{sock.getsockname()[1]}"
    provider = provider_at(api, url)
    try:
        with pytest.raises(ToolFailure) as failed:
            await provider.search(SearchQuery("q"))
        assert str(failed.value) == f"{PROVIDER_NAME[api]} is unreachable"  # no class name
    finally:
        await provider.aclose()


async def test_a_connection_closed_unanswered_is_reported_in_words(
    api: Api, caplog: pytest.LogCaptureFixture
) -> None:
    async def hang_up(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await reader.readuntil(b"\r\n\r\n")
        writer.close()  # no answer

    server = await asyncio.start_server(hang_up, "127.0.0.1", 0)
    url = f"http://127.0.0.1:{server.sockets[0].getsockname()[1]}"
    provider = provider_at(api, url)
    try:
        with pytest.raises(ToolFailure) as failed:
            await provider.search(SearchQuery("q"))
        assert str(failed.value) == f"The connection to {PROVIDER_NAME[api]} failed"
        assert "ServerDisconnectedError" in caplog.text  # the detail is the operator's
    finally:
        await provider.aclose()
        server.close()


async def test_an_answer_that_is_not_http_is_reported_and_logged_without_the_key(
    hosted: Api, caplog: pytest.LogCaptureFixture
) -> None:
    """aiohttp's error for a status line or headers it cannot parse carries the request's
    headers (the key among them) and its URL (the query) in its repr: neither is logged."""

    async def garble(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await reader.readuntil(b"\r\n\r\n")
        writer.write(b"HTTP/1.1 200 OK\r\nContent-Length: abc\r\n\r\n")
        await writer.drain()
        writer.close()

    server = await asyncio.start_server(garble, "127.0.0.1", 0)
    url = f"http://127.0.0.1:{server.sockets[0].getsockname()[1]}"
    key = "bsa-Kq7Mw2Zx9Lp4Rt6"
    where = {"base_url": url}
    config = WebSearchConfig.model_validate({"provider": hosted, **where})
    provider = build_search_provider(config, {"BRAVE_API_KEY": key, "TAVILY_API_KEY": key})
    assert provider is not None
    try:
        with caplog.at_level("DEBUG"), pytest.raises(ToolFailure) as failed:
            await provider.search(SearchQuery("private question"))
        assert str(failed.value) == f"{PROVIDER_NAME[hosted]} sent an answer that is not HTTP"
        assert key not in caplog.text
        assert "private question" not in caplog.text
    finally:
        await provider.aclose()
        server.close()


async def test_the_key_never_appears_in_a_failure(fake: FakeSearch, hosted: Api) -> None:
    provider = build(fake, hosted, timeout=0.2)
    messages: list[str] = []
    modes: list[dict[str, Any]] = [{"status": s} for s in (400, 401, 403, 422, 429, 432, 500)] + [
        {"malformed": True},
        {"wrong_shape": True},
        {"hang": True},
    ]
    try:
        for mode in modes:
            fake.reset()
            for name, value in mode.items():
                setattr(fake, name, value)
            with pytest.raises(ToolFailure) as caught:
                await provider.search(SearchQuery("q"))
            messages += [caught.value.message, str(caught.value), repr(caught.value)]
    finally:
        await provider.aclose()
    assert len(messages) == 3 * len(modes)
    assert not [m for m in messages if fake.api_key in m]


async def test_the_key_is_scrubbed_even_from_a_message_that_quotes_it() -> None:
    transport = SearchTransport(
        "Echo", timeout=1, secret="sk-secret-123", classify_error=lambda s, b: "key sk-secret-123"
    )
    assert transport._failure("said sk-secret-123 twice: sk-secret-123").message == (
        "said *** twice: ***"
    )


async def test_aclose_closes_the_session_and_a_later_search_opens_one(
    provider: SearchProvider,
) -> None:
    await provider.search(SearchQuery("q", max_results=1))
    transport: SearchTransport = provider._transport  # type: ignore[attr-defined]
    session = transport._session
    assert session is not None
    await provider.aclose()
    assert session.closed
    assert transport._session is None
    assert len(await provider.search(SearchQuery("q", max_results=1))) == 1


# -- the factory ----------------------------------------------------------------------------


def test_no_provider_configured_builds_none() -> None:
    assert build_search_provider(WebSearchConfig(), {}) is None


def test_each_provider_is_built_with_its_defaults() -> None:
    env = {"BRAVE_API_KEY": "b", "TAVILY_API_KEY": "t"}
    searxng = build_search_provider(
        WebSearchConfig(provider="searxng", searxng_url="http://s:8888/"), env
    )
    brave = build_search_provider(WebSearchConfig(provider="brave"), env)
    tavily = build_search_provider(WebSearchConfig(provider="tavily"), env)
    assert isinstance(searxng, SearxngProvider)
    assert searxng.endpoint == "http://s:8888/search"
    assert isinstance(brave, BraveProvider)
    assert brave.endpoint == "https://api.search.brave.com/res/v1/web/search"
    assert isinstance(tavily, TavilyProvider)
    assert tavily.endpoint == "https://api.tavily.com/search"
    assert [p.name for p in (searxng, brave, tavily)] == ["searxng", "brave", "tavily"]


@pytest.mark.parametrize(
    ("provider", "api_key_env", "variable"),
    [
        ("brave", None, "BRAVE_API_KEY"),
        ("tavily", None, "TAVILY_API_KEY"),
        ("brave", "SEARCH_TOKEN", "SEARCH_TOKEN"),
    ],
)
@pytest.mark.parametrize("environ", [{}, {"BRAVE_API_KEY": " ", "TAVILY_API_KEY": ""}])
def test_a_missing_key_variable_is_a_readable_error(
    provider: str, api_key_env: str | None, variable: str, environ: dict[str, str]
) -> None:
    config = WebSearchConfig.model_validate({"provider": provider, "api_key_env": api_key_env})
    with pytest.raises(ValueError, match=f"environment variable {variable}, which is not set"):
        build_search_provider(config, environ)


def test_api_key_env_names_the_variable_read() -> None:
    config = WebSearchConfig(provider="tavily", api_key_env="SEARCH_TOKEN")
    assert isinstance(build_search_provider(config, {"SEARCH_TOKEN": "x"}), TavilyProvider)


def test_the_environment_sets_the_hosted_base_url() -> None:
    data: dict[str, Any] = {}
    apply_tool_env(
        data,
        {"STATEWAY_WEB_SEARCH_PROVIDER": "brave", "STATEWAY_WEB_SEARCH_BASE_URL": "http://p"},
    )
    config = WebSearchConfig.model_validate(data["web_search"])
    provider = build_search_provider(config, {"BRAVE_API_KEY": "k"})
    assert isinstance(provider, BraveProvider)
    assert provider.endpoint == "http://p/res/v1/web/search"


async def test_a_redirect_is_not_followed_so_the_key_stays_home(hosted: Api) -> None:
    """A search API (or a proxy in front of it) that redirects elsewhere must not get the
    key sent there: Brave's header is not one a client drops on a cross-origin redirect."""
    received: list[dict[str, str]] = []

    async def elsewhere(request: web.Request) -> web.Response:
        received.append(dict(request.headers))
        return web.json_response({"results": []})

    other = web.Application()
    other.router.add_route("*", "/{tail:.*}", elsewhere)
    async with TestServer(other, host="127.0.0.1") as thief:

        async def redirect(request: web.Request) -> web.Response:
            raise web.HTTPFound(str(thief.make_url("/steal")))

        api = web.Application()
        api.router.add_route("*", "/{tail:.*}", redirect)
        async with TestServer(api, host="127.0.0.1") as origin:
            base = str(origin.make_url("")).rstrip("/")
            config = WebSearchConfig.model_validate({"provider": hosted, "base_url": base})
            key = "sk-redirected-key"
            environ = {"BRAVE_API_KEY": key, "TAVILY_API_KEY": key}
            provider = build_search_provider(config, environ)
            assert provider is not None
            try:
                with pytest.raises(ToolFailure, match="redirected the search \\(HTTP 302\\)"):
                    await provider.search(SearchQuery("q"))
            finally:
                await provider.aclose()
    assert received == []
