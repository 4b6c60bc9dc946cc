"""Fixtures running the real fake upstream on loopback, driven with the official SDK."""

from __future__ import annotations

import json
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from openai import OpenAI

from stateway.fake_upstream.launch import start_fake_upstream

RawHttp = Callable[..., tuple[int, dict[str, str], Any]]


@pytest.fixture(scope="session")
def fake_upstream_url() -> Iterator[str]:
    """Base URL (``.../v1``) of a fake upstream subprocess shared by the session."""
    with start_fake_upstream() as url:
        yield url


@pytest.fixture(scope="session")
def fake_upstream_api_key() -> str:
    return "sk-fake-test-key"


@pytest.fixture(scope="session")
def fake_upstream_keyed_url(fake_upstream_api_key: str) -> Iterator[str]:
    """Base URL of a fake upstream that requires ``Authorization: Bearer <api key>``."""
    with start_fake_upstream(api_key=fake_upstream_api_key) as url:
        yield url


@pytest.fixture
def client(fake_upstream_url: str) -> Iterator[OpenAI]:
    """An SDK client for the shared fake upstream, without retries."""
    with OpenAI(base_url=fake_upstream_url, api_key="unused", max_retries=0, timeout=10) as sdk:
        yield sdk


@pytest.fixture(scope="session")
def raw_http() -> RawHttp:
    """``raw_http(method, url, body=None, headers=None)`` -> (status, headers, JSON body)."""

    def call(
        method: str, url: str, body: bytes | None = None, headers: dict[str, str] | None = None
    ) -> tuple[int, dict[str, str], Any]:
        request = urllib.request.Request(url, data=body, method=method, headers=headers or {})
        request.add_header("content-type", "application/json")
        try:
            with urllib.request.urlopen(request, timeout=10) as response:
                return response.status, dict(response.headers), json.loads(response.read())
        except urllib.error.HTTPError as error:
            with error:
                return error.code, dict(error.headers), json.loads(error.read())

    return call
