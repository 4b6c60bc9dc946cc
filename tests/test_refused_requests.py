"""Answers written before any app runs (the header guard's 431, uvicorn's 400 for a
request it cannot parse) are counted in ``stateway_requests_total`` under ``route``
``unmatched`` (no route was looked up), not timed; a request whose app runs is the app's
to count, though the guard answers it. In memory, with the real metrics."""

from __future__ import annotations

import asyncio
import re

import uvicorn
from uvicorn.server import ServerState

from stateway.header_guard import HeaderGuardedProtocol, HeaderLimits, guarded_http
from stateway.telemetry.metrics import PrometheusMetrics
from tests.test_header_guard import (
    CHUNKED,
    REQUEST,
    TIMEOUT,
    TRAILER,
    App,
    Leaving,
    Transport,
)

BIG = b"GET / HTTP/1.1\r\nX-Big: " + b"a" * 4096


def connect(app: App, metrics: PrometheusMetrics) -> tuple[HeaderGuardedProtocol, Transport]:
    limits = HeaderLimits(max_bytes=2048, timeout=TIMEOUT, max_drain_bytes=8192)
    protocol_class = guarded_http(limits, refused=metrics)
    config = uvicorn.Config(app, http=protocol_class, log_level="warning")
    protocol = protocol_class(config=config, server_state=ServerState(), app_state={})
    transport = Transport()
    protocol.connection_made(transport)
    return protocol, transport


def counted(metrics: PrometheusMetrics) -> dict[tuple[str, str], float]:
    """``stateway_requests_total`` by (route, status)."""
    text = metrics.exposition()[0].decode()
    found = re.findall(
        r'^stateway_requests_total\{route="([^"]*)",status="(\d+)"\} (\S+)$', text, re.M
    )
    return {(route, status): float(value) for route, status, value in found}


def timed(metrics: PrometheusMetrics) -> str:
    text = metrics.exposition()[0].decode()
    return "\n".join(re.findall(r"^stateway_request_duration_seconds_count.*$", text, re.M))


async def test_oversized_headers_are_counted_as_a_431() -> None:
    metrics = PrometheusMetrics()
    protocol, transport = connect(App(), metrics)
    protocol.data_received(BIG)
    protocol.data_received(b"a" * 4096)  # dropped while lingering: not another
    assert b"".join(transport.writes).startswith(b"HTTP/1.1 431 ")
    assert counted(metrics) == {("unmatched", "431"): 1.0}
    assert timed(metrics) == ""


async def test_an_unparsable_request_is_counted_as_a_400() -> None:
    metrics = PrometheusMetrics()
    for _ in range(2):
        protocol, transport = connect(App(), metrics)
        protocol.data_received(b"GARBAGE\r\n\r\n")
        assert b"".join(transport.writes).startswith(b"HTTP/1.1 400 ")
    assert counted(metrics) == {("unmatched", "400"): 2.0}


async def test_oversized_headers_behind_a_response_are_counted_once_answered() -> None:
    app = App()
    metrics = PrometheusMetrics()
    protocol, transport = connect(app, metrics)
    protocol.data_received(REQUEST + b"GET / HTTP/1.1\r\nX-Big: ")
    protocol.data_received(b"a" * 4096)
    assert counted(metrics) == {}  # not answered yet
    app.release.set()
    await asyncio.wait_for(transport.shut.wait(), TIMEOUT)
    assert counted(metrics) == {("unmatched", "431"): 1.0}  # the 200 is its app's to count


async def test_trailers_refused_in_the_pipeline_are_counted_as_a_431() -> None:
    app = App()
    metrics = PrometheusMetrics()
    protocol, transport = connect(app, metrics)
    protocol.data_received(REQUEST + CHUNKED + b"2\r\n{}\r\n0\r\n")
    for _ in range(3):
        protocol.data_received(TRAILER)
    app.release.set()
    await asyncio.wait_for(transport.shut.wait(), TIMEOUT)
    assert b"HTTP/1.1 431 " in b"".join(transport.writes)
    assert counted(metrics) == {("unmatched", "431"): 1.0}


async def test_trailers_refused_while_the_app_runs_are_left_to_it() -> None:
    """Its app runs (and reports the request when it ends): counted once, by it."""
    metrics = PrometheusMetrics()
    protocol, transport = connect(App(), metrics)
    protocol.data_received(CHUNKED + b"2\r\n{}\r\n0\r\n")
    for _ in range(3):
        protocol.data_received(TRAILER)
    assert b"".join(transport.writes).startswith(b"HTTP/1.1 431 ")
    assert counted(metrics) == {}


async def test_a_refusal_never_written_is_not_counted() -> None:
    app = Leaving()
    metrics = PrometheusMetrics()
    protocol, transport = connect(app, metrics)
    app.transport = transport
    protocol.data_received(REQUEST + CHUNKED + b"2\r\n{}\r\n0\r\n")
    for _ in range(3):
        protocol.data_received(TRAILER)
    app.release.set()
    await asyncio.wait_for(transport.closed.wait(), TIMEOUT)
    await asyncio.wait_for(asyncio.gather(*protocol.tasks), TIMEOUT)
    assert b"431" not in b"".join(transport.writes)
    assert counted(metrics) == {}


async def test_without_metrics_a_refusal_is_answered_all_the_same() -> None:
    limits = HeaderLimits(max_bytes=2048, timeout=TIMEOUT)
    protocol_class = guarded_http(limits)
    config = uvicorn.Config(App(), http=protocol_class, log_level="warning")
    protocol = protocol_class(config=config, server_state=ServerState(), app_state={})
    transport = Transport()
    protocol.connection_made(transport)
    protocol.data_received(b"GARBAGE\r\n\r\n")
    assert b"".join(transport.writes).startswith(b"HTTP/1.1 400 ")
