"""``cache_salt = "tenant"`` end to end: a real gateway taking API keys of two tenants, in
front of the fake upstream's Chat and Responses wires. Every call it makes to the model
server carries the caller's tenant's salt (Responses, Chat Completions and Messages
clients; translated, relayed by the fast path, or to a Responses upstream): the same for
two keys of one tenant and after a restart, another for another tenant, never the
client's own. Without the setting nothing is added."""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from anthropic import Anthropic
from openai import OpenAI

from tests.e2e.authenticated import API_KEYS, create_key
from tests.e2e.configured import RunningGateway, configured_gateway
from tests.e2e.test_upstream_mapping import clear, upstream_requests

MODEL = "fake-model"
SALT = re.compile(r"[A-Za-z0-9_-]{43}")


@dataclass(frozen=True)
class Salted:
    gateway: RunningGateway
    upstream: str
    api: str
    keys: dict[str, str]
    """By name: ``acme`` and ``acme-2`` (tenant ``acme``), ``globex``."""


@pytest.fixture(scope="module", params=["chat", "responses"])
def salted(
    request: pytest.FixtureRequest, fake_upstream: str, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Salted]:
    api = request.param
    backend = {"url": fake_upstream, "api": api, "cache_salt": "tenant"}
    directory = tmp_path_factory.mktemp(f"salted-{api}")
    with configured_gateway(directory, backend, tables=API_KEYS) as gateway:
        database = f"sqlite:///{gateway.database}"
        keys = {
            "acme": create_key(database, "acme"),
            "acme-2": create_key(database, "acme"),
            "globex": create_key(database, "globex"),
        }
        yield Salted(gateway, fake_upstream, api, keys)


def sent(upstream: str, call: Callable[[], object]) -> dict[str, Any]:
    """What the model server received for ``call``'s one upstream request."""
    clear(upstream)
    call()
    [logged] = upstream_requests(upstream)
    return logged


@contextmanager
def calls(url: str, key: str) -> Iterator[dict[str, Callable[[], object]]]:
    """One call of each frontend, by name, with ``key``."""
    hi: Any = [{"role": "user", "content": "hi"}]
    with (
        OpenAI(base_url=url + "/v1", api_key=key, max_retries=0) as sdk,
        Anthropic(base_url=url, api_key=key, max_retries=0) as claude,
    ):
        yield {
            "responses": lambda: sdk.responses.create(model=MODEL, input="hi", store=False),
            "chat": lambda: sdk.chat.completions.create(model=MODEL, messages=hi),
            "messages": lambda: claude.messages.create(model=MODEL, max_tokens=20, messages=hi),
        }


def test_every_call_carries_its_tenants_salt(salted: Salted) -> None:
    salts: dict[str, set[str]] = {}
    for name, key in salted.keys.items():
        with calls(salted.gateway.url, key) as frontends:
            for frontend, call in frontends.items():
                logged = sent(salted.upstream, call)
                body = logged["body"]
                path = "/chat/completions" if salted.api == "chat" else "/responses"
                assert logged["path"].endswith(path)
                if frontend == "chat" and salted.api == "chat":  # the fast path: untouched
                    assert body["messages"] == [{"role": "user", "content": "hi"}]
                salts.setdefault(name, set()).add(body["cache_salt"])
    [acme], [acme_2], [globex] = salts["acme"], salts["acme-2"], salts["globex"]
    assert acme == acme_2  # one tenant, one salt, whichever key and frontend
    assert acme != globex
    for tenant, salt in (("acme", acme), ("globex", globex)):
        assert SALT.fullmatch(salt)
        assert tenant not in salt.lower()


def test_a_clients_own_cache_salt_does_not_reach_the_model_server(salted: Salted) -> None:
    mine = {"cache_salt": "mine"}
    hi: Any = [{"role": "user", "content": "hi"}]
    key = salted.keys["globex"]
    with OpenAI(base_url=salted.gateway.url + "/v1", api_key=key, max_retries=0) as sdk:
        own = sent(
            salted.upstream, lambda: sdk.responses.create(model=MODEL, input="hi", store=False)
        )["body"]["cache_salt"]
        for call in (
            lambda: sdk.chat.completions.create(model=MODEL, messages=hi, extra_body=mine),
            lambda: sdk.responses.create(model=MODEL, input="hi", store=False, extra_body=mine),
        ):
            assert sent(salted.upstream, call)["body"]["cache_salt"] == own


def test_a_restarted_gateway_gives_a_tenant_the_same_salt(
    fake_upstream: str, tmp_path: Path
) -> None:
    """The salt comes from the server key the database keeps, so it outlives a process
    (and is shared by replicas on that database)."""
    backend = {"url": fake_upstream, "cache_salt": "tenant"}
    salts = []
    key = None
    for _ in range(2):
        with configured_gateway(tmp_path, backend, tables=API_KEYS) as gateway:
            key = key or create_key(f"sqlite:///{gateway.database}", "acme")
            with calls(gateway.url, key) as frontends:
                logged = sent(fake_upstream, frontends["responses"])
            salts.append(logged["body"]["cache_salt"])
    assert salts[0] == salts[1]


def test_without_the_setting_no_call_carries_a_salt(fake_upstream: str, tmp_path: Path) -> None:
    with configured_gateway(tmp_path, {"url": fake_upstream}, tables=API_KEYS) as gateway:
        key = create_key(f"sqlite:///{gateway.database}", "acme")
        with calls(gateway.url, key) as frontends:
            for frontend, call in frontends.items():
                body = sent(fake_upstream, call)["body"]
                assert "cache_salt" not in body, frontend
                if frontend == "chat":  # the fast path's: the client's (its bytes: see
                    # test_chat_fast_path.py)
                    hi = [{"role": "user", "content": "hi"}]
                    assert body == {"model": MODEL, "messages": hi}
