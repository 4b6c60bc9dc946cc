"""Counters and histograms updated on the event loop's thread only: the metrics every
request updates, kept as plain numbers and handed to prometheus_client as it collects.

prometheus_client's own ``Counter`` and ``Histogram`` are safe across threads: each update
takes a lock and makes four to six Python calls (its checks, the value's lock, the bucket
found by a scan), 1.6% of a plain request's CPU instructions for its six updates. The
request path updates these from the event loop alone, and ``GET /metrics`` collects them
there too, so they count in plain attributes and lists, and collect as the families the
library's metrics of the same names and labels would: the text exposed is the same,
sample for sample (``tests/telemetry/test_loop_metrics.py``). A metric another thread
updates (the SQLite writer's storage timings) stays the library's.
"""

from __future__ import annotations

from bisect import bisect_left
from collections.abc import Sequence

from prometheus_client import CollectorRegistry
from prometheus_client.metrics_core import CounterMetricFamily, HistogramMetricFamily, Metric
from prometheus_client.utils import INF, floatToGoString


class Count:
    """One label set's counter."""

    __slots__ = ("value",)

    def __init__(self) -> None:
        self.value = 0.0


class LoopCounter:
    """A counter family by label values (exposed as ``name_total``), a collector of
    ``registry``."""

    def __init__(
        self,
        name: str,
        documentation: str,
        labelnames: Sequence[str],
        registry: CollectorRegistry,
    ) -> None:
        self._name = name
        self._documentation = documentation
        self._labelnames = tuple(labelnames)
        self._children: dict[tuple[str, ...], Count] = {}
        registry.register(self)

    def labels(self, *values: str) -> Count:
        """The counter of one label set (made at its first use), for ``.value += n``."""
        child = self._children.get(values)
        if child is None:
            child = self._children[values] = Count()
        return child

    def describe(self) -> list[Metric]:
        return [CounterMetricFamily(self._name, self._documentation, labels=self._labelnames)]

    def collect(self) -> list[Metric]:
        family = CounterMetricFamily(self._name, self._documentation, labels=self._labelnames)
        for values, child in self._children.items():
            family.add_metric(values, child.value)
        return [family]


class Observed:
    """One label set's histogram: the observations in each bucket, and their sum."""

    __slots__ = ("_bounds", "counts", "sum")

    def __init__(self, bounds: tuple[float, ...]) -> None:
        self._bounds = bounds
        self.counts = [0.0] * len(bounds)
        self.sum = 0.0

    def observe(self, amount: float) -> None:
        """In the first bucket whose bound is not below ``amount``, as the library's."""
        self.counts[bisect_left(self._bounds, amount)] += 1.0
        self.sum += amount


class LoopHistogram:
    """A histogram family by label values over ``buckets`` (``+Inf`` added), a collector
    of ``registry``."""

    def __init__(
        self,
        name: str,
        documentation: str,
        labelnames: Sequence[str],
        buckets: Sequence[float],
        registry: CollectorRegistry,
    ) -> None:
        self._name = name
        self._documentation = documentation
        self._labelnames = tuple(labelnames)
        bounds = [float(bound) for bound in buckets]
        if bounds[-1] != INF:
            bounds.append(INF)
        self._bounds = tuple(bounds)
        self._les = [floatToGoString(bound) for bound in bounds]  # type: ignore[no-untyped-call]
        self._children: dict[tuple[str, ...], Observed] = {}
        registry.register(self)

    def labels(self, *values: str) -> Observed:
        """The histogram of one label set (made at its first use)."""
        child = self._children.get(values)
        if child is None:
            child = self._children[values] = Observed(self._bounds)
        return child

    def describe(self) -> list[Metric]:
        return [HistogramMetricFamily(self._name, self._documentation, labels=self._labelnames)]

    def collect(self) -> list[Metric]:
        family = HistogramMetricFamily(self._name, self._documentation, labels=self._labelnames)
        for values, child in self._children.items():
            cumulative = 0.0
            buckets: list[tuple[str, float]] = []
            for le, count in zip(self._les, child.counts, strict=True):
                cumulative += count
                buckets.append((le, cumulative))
            family.add_metric(values, buckets, child.sum)
        return [family]
