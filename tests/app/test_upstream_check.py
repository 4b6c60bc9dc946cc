"""The start-up check of each upstream (``GET /models``): what it warns of, naming the
backend and its URL, and the lease on its generation it gives back."""

from __future__ import annotations

import logging

import pytest

from stateway.app import build_gateway, compile_generation
from stateway.app.upstream_check import NOT_FOUND_HINT, check_generation, check_upstreams
from stateway.config import Overrides
from stateway.core.errors import GatewayError, UpstreamRejected, UpstreamUnavailable
from tests.core.fakes import MemoryStore, ScriptedBackend


class Listing(ScriptedBackend):
    """A model server whose listing fails with ``failure`` (None: it lists one model)."""

    def __init__(self, name: str, failure: GatewayError | None = None) -> None:
        super().__init__([])
        self.name = name
        self.failure = failure

    async def list_models(self) -> list[str]:
        if self.failure is not None:
            raise self.failure
        return ["m"]


def warnings(caplog: pytest.LogCaptureFixture) -> list[str]:
    return sorted(
        record.getMessage()
        for record in caplog.records
        if record.name == "stateway.upstreams" and record.levelno == logging.WARNING
    )


async def test_each_failing_upstream_is_warned_of_a_404_as_a_url_without_its_base_path(
    caplog: pytest.LogCaptureFixture,
) -> None:
    backends = [
        Listing("gpu", UpstreamRejected("no such route", status=404)),
        Listing("cpu", UpstreamUnavailable("connection refused")),
        Listing("up"),
        Listing("unnamed", UpstreamRejected("bad key", status=401)),
    ]
    urls = {"gpu": "http://gpu:8000", "cpu": "http://cpu:8000/v1", "up": "http://up/v1"}
    with caplog.at_level(logging.WARNING, logger="stateway.upstreams"):
        await check_upstreams(backends, urls)
    failed = "GET /models failed at start-up"
    routed = "requests routed to it fail until it answers"
    assert warnings(caplog) == [
        f"upstream cpu at http://cpu:8000/v1: {failed} ({routed}): connection refused",
        f"upstream gpu at http://gpu:8000: {failed} ({NOT_FOUND_HINT}): no such route",
        f"upstream unnamed at ?: {failed} ({routed}): bad key",
    ]


async def test_the_check_of_a_generation_gives_its_lease_back(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """The configured upstream does not answer (nothing listens on port 9): warned of by
    its configured name and URL, and its generation's lease is given back."""
    flags = Overrides(upstream="http://127.0.0.1:9/v1")
    parts = build_gateway(compile_generation(flags), flags, MemoryStore())
    generations = parts.gateway.generations
    generation = generations.acquire()
    [backend] = generation.router.backends
    try:
        with caplog.at_level(logging.WARNING, logger="stateway.upstreams"):
            await check_generation(generations, generation, {backend.name: "the URL"})
    finally:
        await generations.aclose()
    assert generation.leases == 0
    [warning] = warnings(caplog)
    assert warning.startswith(f"upstream {backend.name} at the URL: GET /models failed")
