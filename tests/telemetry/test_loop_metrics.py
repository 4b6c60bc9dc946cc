"""The loop's counters and histograms expose what prometheus_client's own would, byte
for byte: the same events fed to both, the same text scraped."""

from __future__ import annotations

import pytest
from prometheus_client import (
    CollectorRegistry,
    Counter,
    Histogram,
    disable_created_metrics,
    generate_latest,
)

from stateway.telemetry.loop_metrics import LoopCounter, LoopHistogram
from stateway.telemetry.metrics import LATENCY_BUCKETS

DOC = "What is counted, with a backslash \\ and\na line break."


@pytest.fixture(autouse=True)
def _no_created_series() -> None:
    """As :class:`~stateway.telemetry.metrics.PrometheusMetrics` sets the library (for
    the whole process): its metrics then have no ``_created`` series, as ours never do."""
    disable_created_metrics()  # type: ignore[no-untyped-call]


def test_a_counter_exposes_what_the_librarys_does() -> None:
    ours, theirs = CollectorRegistry(), CollectorRegistry()
    loop = LoopCounter("things", DOC, ["kind", "outcome"], ours)
    library = Counter("things", DOC, ["kind", "outcome"], registry=theirs)
    for kind, outcome, amount in [("a", "ok", 1), ("b", "failed", 3), ("a", "ok", 2.5)]:
        loop.labels(kind, outcome).value += amount
        library.labels(kind, outcome).inc(amount)
    loop.labels("c", "ok")  # made, never counted: shown as 0, as the library's
    library.labels("c", "ok")
    assert generate_latest(ours) == generate_latest(theirs)


def test_a_histogram_exposes_what_the_librarys_does() -> None:
    ours, theirs = CollectorRegistry(), CollectorRegistry()
    loop = LoopHistogram("seconds", DOC, ["route"], LATENCY_BUCKETS, ours)
    library = Histogram("seconds", DOC, ["route"], buckets=LATENCY_BUCKETS, registry=theirs)
    observed = [("/a", 0.0), ("/a", 0.005), ("/a", 0.0051), ("/b", 0.7), ("/a", 600.0)]
    observed += [("/b", 601.0), ("/a", 1e-9), ("/b", 30.0), ("/b", 0.3)]
    for route, seconds in observed:
        loop.labels(route).observe(seconds)
        library.labels(route).observe(seconds)
    assert generate_latest(ours) == generate_latest(theirs)


def test_families_are_described_so_a_clash_of_names_is_refused() -> None:
    registry = CollectorRegistry()
    LoopCounter("things", DOC, ["kind"], registry)
    LoopHistogram("seconds", DOC, ["route"], LATENCY_BUCKETS, registry)
    with pytest.raises(ValueError, match="Duplicated timeseries"):
        Counter("things", DOC, registry=registry)
    with pytest.raises(ValueError, match="Duplicated timeseries"):
        Histogram("seconds", DOC, registry=registry)
