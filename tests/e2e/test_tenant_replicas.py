"""Tenant isolation across two gateway replicas taking API keys, on one PostgreSQL database
and one Redis: a background response run by replica A, named on replica B with another
tenant's key, gets the answer a missing id gets, whether B would read it from the store,
follow it through the Redis fan-out, ask A how far it has logged, or signal A to cancel
it; and the same ``Idempotency-Key`` sent to each replica by two tenants runs apart
(command outcomes held in Redis). The owner's key on B reaches the run, which is what
makes the probes meaningful. ``test_tenant_running.py`` probes a single process."""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator
from contextlib import ExitStack
from dataclasses import dataclass

import httpx2
import pytest

from tests.e2e.authenticated import AuthGateway, auth_gateway, create_key
from tests.e2e.test_tenant_running import RESPONSE_PROBES, differences

pytestmark = [pytest.mark.postgres, pytest.mark.redis]

MODEL = "fake-model"
LONG = "[[slow:100]] [[words:300]]"
"""A run of some 30 seconds: still running while it is probed."""


@dataclass(frozen=True)
class Pair:
    a: AuthGateway
    b: AuthGateway
    alice: str
    bob: str


@pytest.fixture
def pair(
    redis_url: str,
    postgres_url: str,
    fake_upstream: str,
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[Pair]:
    shared = {"STATEWAY_REDIS_URL": redis_url, "STATEWAY_REDIS_KEY_PREFIX": f"t{uuid.uuid4().hex}:"}
    suffix = uuid.uuid4().hex[:8]
    with ExitStack() as stack:
        a, b = (
            stack.enter_context(
                auth_gateway(tmp_path_factory.mktemp(name), fake_upstream, postgres_url, env=shared)
            )
            for name in ("a", "b")
        )
        alice = create_key(postgres_url, f"alice-{suffix}")
        bob = create_key(postgres_url, f"bob-{suffix}")
        yield Pair(a, b, alice, bob)


def on(gateway: AuthGateway, key: str) -> httpx2.Client:
    headers = {"authorization": f"Bearer {key}"}
    return httpx2.Client(base_url=gateway.url, headers=headers, timeout=60)


def status(http: httpx2.Client, response_id: str) -> str:
    answer = http.get(f"/v1/responses/{response_id}")
    assert answer.status_code == 200, answer.text
    found: str = answer.json()["status"]
    return found


def test_a_run_on_one_replica_is_answered_on_the_other_as_a_missing_one(pair: Pair) -> None:
    with (
        on(pair.a, pair.alice) as alice_on_a,
        on(pair.b, pair.alice) as alice_on_b,
        on(pair.b, pair.bob) as bob_on_b,
    ):
        created = alice_on_a.post(
            "/v1/responses", json={"model": MODEL, "input": LONG, "background": True}
        )
        assert created.status_code == 200, created.text
        running = created.json()["id"]

        assert differences(bob_on_b, RESPONSE_PROBES, running) == {}
        assert status(alice_on_a, running) == "in_progress"  # nothing of Bob's reached it

        # The owner on B reaches the run A holds: its position, asked of A, and a cancel.
        past = alice_on_b.get(f"/v1/responses/{running}?stream=true&starting_after=500")
        assert past.status_code == 400, past.text
        cancelled = alice_on_b.post(f"/v1/responses/{running}/cancel")
        assert cancelled.status_code == 200, cancelled.text
        deadline = time.monotonic() + 30
        while status(alice_on_a, running) != "cancelled":
            assert time.monotonic() < deadline
            time.sleep(0.05)


def test_one_idempotency_key_runs_apart_for_each_tenant_on_each_replica(pair: Pair) -> None:
    key = {"idempotency-key": uuid.uuid4().hex}
    with (
        on(pair.a, pair.alice) as alice_on_a,
        on(pair.b, pair.alice) as alice_on_b,
        on(pair.b, pair.bob) as bob,
    ):
        first = alice_on_a.post("/v1/conversations", json={}, headers=key)
        other = bob.post("/v1/conversations", json={}, headers=key)
        again = alice_on_b.post("/v1/conversations", json={}, headers=key)
    assert first.status_code == other.status_code == again.status_code == 200
    assert again.json()["id"] == first.json()["id"]  # the key held on both: a replay
    assert other.json()["id"] != first.json()["id"]
