"""A fake of the three web search APIs on one loopback port, for provider and end-to-end
tests.

It speaks each real API's shape: SearXNG (``GET /search?q=&format=json``), Brave
(``GET /res/v1/web/search?q=&count=`` with ``X-Subscription-Token``) and Tavily
(``POST /search`` with ``Authorization: Bearer``); it refuses a wrong or missing key the way
the real API does (Brave: 422 ``SUBSCRIPTION_TOKEN_INVALID``; Tavily: 401). Results are
derived from the query only (:func:`results_for`), so tests can predict them.

The server runs on its own event loop in a thread, so both synchronous tests (the gateway in
a subprocess, driven by the sync SDK) and async tests can use it (and ``python -m
tests.support.fake_search`` serves it in a process of its own, announcing its URL, for a
gateway that cannot reach this process: the real-client tests' offline namespace)::

    from tests.support.fake_search import FakeSearch

    with FakeSearch() as fake:                   # or: async with FakeSearch() as fake:
        env = fake.gateway_env("brave")          # STATEWAY_WEB_SEARCH_* + BRAVE_API_KEY
        config = fake.config("tavily")           # a WebSearchConfig pointing here
        ...
        assert fake.queries[0].query == "..."    # every request, as it arrived
        fake.status = 429                        # failure modes, until fake.reset()
        fake.malformed = True
        fake.hang = True

Switches apply to every API and every request until :meth:`FakeSearch.reset`.
"""

from __future__ import annotations

import asyncio
import html
import socket
import threading
from collections.abc import Mapping
from dataclasses import dataclass, field
from types import TracebackType
from typing import Any, Literal
from urllib.parse import quote

from aiohttp import web

from stateway.tool_config import WebSearchConfig

Api = Literal["searxng", "brave", "tavily"]

FAKE_API_KEY = "fake-search-key-0123456789"
KEY_ENV = {"brave": "BRAVE_API_KEY", "tavily": "TAVILY_API_KEY"}
HOSTS = ("example.com", "docs.example.com", "example.org", "notexample.com")
"""Result ``i`` (from 1) is on ``HOSTS[(i - 1) % 4]``: a domain, its subdomain, another
domain and a look-alike, so domain filters are observable."""
SEARXNG_RESULTS = 10
"""SearXNG has no count parameter: it always answers this many (unless ``result_count``)."""


@dataclass(frozen=True, slots=True)
class FakeResult:
    title: str
    url: str
    snippet: str


def results_for(query: str, count: int) -> list[FakeResult]:
    """The deterministic results of ``query``: ``count`` of them, best first."""
    slug = quote(query.lower().replace(" ", "-"), safe="-")
    return [
        FakeResult(
            title=f"{query} ({i})",
            url=f"https://{HOSTS[(i - 1) % len(HOSTS)]}/{slug}/{i}",
            snippet=f"Result {i} about {query}.",
        )
        for i in range(1, count + 1)
    ]


@dataclass(frozen=True, slots=True)
class ReceivedQuery:
    api: Api
    query: str
    max_results: int | None
    """Brave's ``count`` or Tavily's ``max_results``; None for SearXNG."""
    headers: Mapping[str, str]
    body: Mapping[str, Any] = field(default_factory=dict)
    """Tavily's JSON body; query parameters for the GET APIs."""


class FakeSearch:
    """The fake search server. Start with ``with``/``async with`` (or :meth:`start` /
    :meth:`stop`); the URL is known once started."""

    def __init__(self, api_key: str = FAKE_API_KEY) -> None:
        self.api_key = api_key
        self.queries: list[ReceivedQuery] = []
        self.status: int | None = None
        """Answer every request with this status and the API's error body."""
        self.malformed = False
        """Answer 200 with a body that is not JSON."""
        self.wrong_shape = False
        """Answer 200 with JSON that lacks the results list."""
        self.hang = False
        """Hold every request open until :meth:`release`, :meth:`reset` or :meth:`stop`."""
        self.duplicate_urls = False
        """Follow every result with a second one at the same URL (as real engines do)."""
        self.result_count: int | None = None
        """Answer this many results instead of what was asked for."""
        self.port = 0
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._runner: web.AppRunner | None = None
        self._released: asyncio.Event | None = None
        self._arrived = threading.Condition()

    # -- addresses and configuration ---------------------------------------------------

    @property
    def url(self) -> str:
        """``http://127.0.0.1:<port>``: SearXNG's ``searxng_url`` and the hosted APIs'
        ``base_url``."""
        if not self.port:
            raise RuntimeError("the fake search server is not started")
        return f"http://127.0.0.1:{self.port}"

    def environ(self, api: Api) -> dict[str, str]:
        """The API-key variable of ``api`` (none for SearXNG) set to this fake's key."""
        return {KEY_ENV[api]: self.api_key} if api in KEY_ENV else {}

    def config(self, api: Api, **overrides: Any) -> WebSearchConfig:
        """A ``[web_search]`` config using ``api`` here (``max_results``, ``timeout``...)."""
        where = {"searxng_url": self.url} if api == "searxng" else {"base_url": self.url}
        return WebSearchConfig.model_validate({"provider": api, **where, **overrides})

    def gateway_env(self, api: Api) -> dict[str, str]:
        """Environment for a ``stateway serve`` subprocess searching with ``api`` here."""
        env = {"STATEWAY_WEB_SEARCH_PROVIDER": api, **self.environ(api)}
        if api == "searxng":
            env["STATEWAY_SEARXNG_URL"] = self.url
        else:
            env["STATEWAY_WEB_SEARCH_BASE_URL"] = self.url
        return env

    # -- switches and observations ------------------------------------------------------

    def reset(self) -> None:
        """Back to answering normally; the recorded queries are forgotten; hung requests
        are released."""
        self.status = None
        self.malformed = self.wrong_shape = self.hang = self.duplicate_urls = False
        self.result_count = None
        self.release()
        with self._arrived:
            self.queries.clear()

    def release(self) -> None:
        """Let the requests held by ``hang`` finish (they answer normally)."""
        loop = self._loop
        if loop is not None and not loop.is_closed():
            loop.call_soon_threadsafe(self._release_now)

    def _release_now(self) -> None:
        """In the server's loop: wake the held requests; later ones are held anew."""
        held, self._released = self._released, asyncio.Event()
        if held is not None:
            held.set()

    def wait_for_queries(self, count: int, timeout: float = 10.0) -> list[ReceivedQuery]:
        """Block until ``count`` requests arrived (or fail after ``timeout`` seconds)."""
        with self._arrived:
            if not self._arrived.wait_for(lambda: len(self.queries) >= count, timeout):
                raise AssertionError(f"{len(self.queries)} of {count} search requests arrived")
            return list(self.queries)

    # -- lifetime --------------------------------------------------------------------------

    def start(self) -> FakeSearch:
        loop = asyncio.new_event_loop()
        thread = threading.Thread(target=loop.run_forever, name="fake-search", daemon=True)
        thread.start()
        self._loop, self._thread = loop, thread
        self.port = asyncio.run_coroutine_threadsafe(self._serve(), loop).result(timeout=10)
        return self

    def stop(self) -> None:
        loop, thread = self._loop, self._thread
        if loop is None or thread is None:
            return
        self.release()
        asyncio.run_coroutine_threadsafe(self._shutdown(), loop).result(timeout=10)
        loop.call_soon_threadsafe(loop.stop)
        thread.join(timeout=10)
        loop.close()
        self._loop = self._thread = None
        self.port = 0

    def __enter__(self) -> FakeSearch:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    async def __aenter__(self) -> FakeSearch:
        return await asyncio.to_thread(self.start)

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        await asyncio.to_thread(self.stop)

    async def _serve(self) -> int:
        self._released = asyncio.Event()
        app = web.Application()
        app.router.add_get("/search", self._searxng)
        app.router.add_post("/search", self._tavily)
        app.router.add_get("/res/v1/web/search", self._brave)
        runner = web.AppRunner(app, handle_signals=False, access_log=None)
        await runner.setup()
        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        sock.bind(("127.0.0.1", 0))
        await web.SockSite(runner, sock).start()
        self._runner = runner
        port: int = sock.getsockname()[1]
        return port

    async def _shutdown(self) -> None:
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None

    # -- the three APIs ----------------------------------------------------------------

    async def _searxng(self, request: web.Request) -> web.StreamResponse:
        query = request.query.get("q", "")
        self._record("searxng", query, None, request, dict(request.query))
        if (failure := await self._failure("searxng")) is not None:
            return failure
        if request.query.get("format") != "json":
            return web.Response(status=403, text="Forbidden")
        results = self._results(query, SEARXNG_RESULTS)
        return web.json_response(
            {
                "query": query,
                "number_of_results": len(results),
                "results": [
                    {"title": r.title, "url": r.url, "content": r.snippet, "engine": "fake"}
                    for r in results
                ],
                "answers": [],
                "infoboxes": [],
                "suggestions": [],
            }
        )

    async def _brave(self, request: web.Request) -> web.StreamResponse:
        query = request.query.get("q", "")
        count = int(request.query.get("count", "20"))
        self._record("brave", query, count, request, dict(request.query))
        if request.headers.get("X-Subscription-Token") != self.api_key:
            return _brave_error(422, "SUBSCRIPTION_TOKEN_INVALID", "The token is invalid.")
        if (failure := await self._failure("brave")) is not None:
            return failure
        if not query or not 1 <= count <= 20:
            return _brave_error(422, "VALIDATION", "Unable to validate request parameter(s)")
        results = self._results(query, count)
        return web.json_response(
            {
                "type": "search",
                "query": {"original": query},
                "web": {
                    "type": "search",
                    "results": [
                        {
                            "title": html.escape(r.title),
                            "url": r.url,
                            "description": _brave_markup(r.snippet, query),
                        }
                        for r in results
                    ],
                },
            }
        )

    async def _tavily(self, request: web.Request) -> web.StreamResponse:
        try:
            body = await request.json()
        except ValueError:
            body = None
        if not isinstance(body, dict):
            body = {}
        query = body.get("query")
        max_results = body.get("max_results", 5)
        self._record("tavily", str(query or ""), max_results, request, body)
        if request.headers.get("Authorization") != f"Bearer {self.api_key}":
            return web.json_response(
                {"detail": {"error": "Unauthorized: missing or invalid API key."}}, status=401
            )
        if (failure := await self._failure("tavily")) is not None:
            return failure
        if not isinstance(query, str) or not isinstance(max_results, int):
            return web.json_response({"detail": {"error": "Invalid request"}}, status=400)
        if not 0 <= max_results <= 20:
            return web.json_response({"detail": {"error": "max_results: 0..20"}}, status=400)
        domains = body.get("include_domains") or []
        excluded = body.get("exclude_domains") or []
        if domains or excluded:  # like Tavily: up to max_results hits, filtered by domain
            found = self._results(query, max_results * len(HOSTS))
            results = [
                r
                for r in found
                if (not domains or _on_domains(r.url, domains))
                and not (excluded and _on_domains(r.url, excluded))
            ][:max_results]
        else:
            results = self._results(query, max_results)
        return web.json_response(
            {
                "query": query,
                "answer": None,
                "images": [],
                "results": [
                    {"title": r.title, "url": r.url, "content": r.snippet, "score": 0.5}
                    for r in results
                ],
                "response_time": 0.01,
            }
        )

    # -- shared behaviour --------------------------------------------------------------

    def _record(
        self,
        api: Api,
        query: str,
        max_results: int | None,
        request: web.Request,
        body: Mapping[str, Any],
    ) -> None:
        received = ReceivedQuery(api, query, max_results, dict(request.headers), body)
        with self._arrived:
            self.queries.append(received)
            self._arrived.notify_all()

    async def _failure(self, api: Api) -> web.StreamResponse | None:
        """The response a switched-on failure mode gives, or None to answer normally."""
        if self.hang:
            assert self._released is not None
            await self._released.wait()
            return None
        if self.status is not None:
            return _error(api, self.status)
        if self.malformed:
            return web.Response(text='{"results": [', content_type="application/json")
        if self.wrong_shape:
            shape = {"web": {"results": "none"}} if api == "brave" else {"results": None}
            return web.json_response(shape)
        return None

    def _results(self, query: str, count: int) -> list[FakeResult]:
        results = results_for(query, self.result_count or count)
        if not self.duplicate_urls:
            return results
        doubled: list[FakeResult] = []
        for r in results:
            doubled += [r, FakeResult(r.title + " (again)", r.url, r.snippet)]
        return doubled


def _error(api: Api, status: int) -> web.Response:
    if api == "searxng":
        return web.Response(status=status, text=f"HTTP {status}")
    if api == "brave":
        return _brave_error(status, "RATE_LIMITED" if status == 429 else "ERROR", "error")
    return web.json_response({"detail": {"error": f"HTTP {status}"}}, status=status)


def _brave_markup(snippet: str, query: str) -> str:
    """The snippet as Brave sends it: HTML-escaped, the query's words in ``<strong>``."""
    lead = snippet.removesuffix(f"{query}.")
    return f"{html.escape(lead)}<strong>{html.escape(query)}</strong>."


def _brave_error(status: int, code: str, detail: str) -> web.Response:
    return web.json_response(
        {
            "type": "ErrorResponse",
            "error": {"code": code, "detail": detail, "status": status},
        },
        status=status,
    )


def _on_domains(url: str, domains: list[str]) -> bool:
    host = url.split("/")[2]
    return any(host == d or host.endswith("." + d) for d in domains)


ANNOUNCEMENT = "fake-search listening on "


def main() -> None:
    """Serve until the process is stopped, announcing the URL on stdout."""
    fake = FakeSearch().start()
    print(f"{ANNOUNCEMENT}{fake.url}", flush=True)
    threading.Event().wait()


if __name__ == "__main__":
    main()
