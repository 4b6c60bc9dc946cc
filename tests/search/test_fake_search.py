"""The fake search APIs themselves, driven synchronously the way end-to-end tests (sync SDK,
gateway subprocess) use them: real auth refusals, recorded queries, clean stop."""

from __future__ import annotations

import json
import threading
import urllib.error
import urllib.request
from typing import Any
from urllib.parse import urlencode

import pytest

from tests.support.fake_search import FAKE_API_KEY, FakeSearch


def call(
    url: str, body: dict[str, Any] | None = None, headers: dict[str, str] | None = None
) -> tuple[int, Any]:
    data = None if body is None else json.dumps(body).encode()
    request = urllib.request.Request(url, data=data, headers=headers or {})
    try:
        with urllib.request.urlopen(request, timeout=10) as response:
            return response.status, json.loads(response.read())
    except urllib.error.HTTPError as error:
        with error:
            raw = error.read()
        try:
            return error.code, json.loads(raw)
        except ValueError:
            return error.code, raw.decode()


def test_hosted_apis_refuse_a_missing_key_like_the_real_ones(fake: FakeSearch) -> None:
    brave = f"{fake.url}/res/v1/web/search?{urlencode({'q': 'x'})}"
    status, body = call(brave)
    assert (status, body["error"]["code"]) == (422, "SUBSCRIPTION_TOKEN_INVALID")
    status, body = call(f"{fake.url}/search", {"query": "x"})
    assert status == 401
    assert "API key" in body["detail"]["error"]


def test_searxng_refuses_formats_other_than_json(fake: FakeSearch) -> None:
    assert call(f"{fake.url}/search?q=x&format=html")[0] == 403
    status, body = call(f"{fake.url}/search?q=x&format=json")
    assert status == 200
    assert len(body["results"]) == 10


def test_hosted_apis_answer_their_own_shapes(fake: FakeSearch) -> None:
    status, body = call(
        f"{fake.url}/res/v1/web/search?q=a&count=2", headers={"X-Subscription-Token": fake.api_key}
    )
    assert status == 200
    assert [r["description"] for r in body["web"]["results"]] == [
        "Result 1 about <strong>a</strong>.",
        "Result 2 about <strong>a</strong>.",
    ]
    status, body = call(
        f"{fake.url}/search",
        {"query": "a", "max_results": 3},
        {"Authorization": f"Bearer {fake.api_key}", "Content-Type": "application/json"},
    )
    assert status == 200
    assert len(body["results"]) == 3
    assert [q.api for q in fake.wait_for_queries(2)] == ["brave", "tavily"]


def test_config_and_gateway_env_point_here(fake: FakeSearch) -> None:
    assert fake.config("searxng").searxng_url == fake.url
    assert fake.config("brave", max_results=2).base_url == fake.url
    assert fake.gateway_env("tavily") == {
        "STATEWAY_WEB_SEARCH_PROVIDER": "tavily",
        "STATEWAY_WEB_SEARCH_BASE_URL": fake.url,
        "TAVILY_API_KEY": FAKE_API_KEY,
    }
    assert fake.gateway_env("searxng")["STATEWAY_SEARXNG_URL"] == fake.url


def test_stop_releases_held_requests() -> None:
    fake = FakeSearch().start()
    fake.hang = True
    answers: list[int] = []
    url = f"{fake.url}/search?q=x&format=json"
    worker = threading.Thread(target=lambda: answers.append(call(url)[0]))
    worker.start()
    fake.wait_for_queries(1)
    fake.stop()
    worker.join(timeout=10)
    assert not worker.is_alive()
    with pytest.raises(RuntimeError, match="not started"):
        _ = fake.url


def test_wait_for_queries_fails_when_they_do_not_arrive(fake: FakeSearch) -> None:
    with pytest.raises(AssertionError, match="0 of 1 search requests arrived"):
        fake.wait_for_queries(1, timeout=0.05)
