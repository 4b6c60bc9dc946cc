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
from collections.abc import Callable, Sequence
from typing import Generic, TypeVar

from prometheus_client import CollectorRegistry
from prometheus_client.metrics_core import CounterMetricFamily, HistogramMetricFamily, Metric
from prometheus_client.utils import INF, floatToGoString

C = TypeVar("C")


class Count:
    """One label set's counter."""

    __slots__ = ("value",)

    def __init__(self) -> None:
        self.value = 0.0


class _LoopFamily(Generic[C]):
    """A metric family's label children by label values (made at first use by ``make``),
    a collector of ``registry``."""

    def __init__(
        self,
        name: str,
        documentation: str,
        labelnames: Sequence[str],
        registry: CollectorRegistry,
        make: Callable[[], C],
    ) -> None:
        self._name = name
        self._documentation = documentation
        self._labelnames = tuple(labelnames)
        self._make = make
        self._children: dict[tuple[str, ...], C] = {}
        registry.register(self)

    def labels(self, *values: str) -> C:
        """The child of one label set (made at its first use)."""
        child = self._children.get(values)
        if child is None:
            child = self._children[values] = self._make()
        return child

    def collect(self) -> list[Metric]:
        """The family's samples, as prometheus_client's metric of its kind shows them."""
        raise NotImplementedError


class LoopCounter(_LoopFamily[Count]):
    """A counter family by label values (exposed as ``name_total``); a child counts with
    ``.value += n``."""

    def __init__(
        self,
        name: str,
        documentation: str,
        labelnames: Sequence[str],
        registry: CollectorRegistry,
    ) -> None:
        super().__init__(name, documentation, labelnames, registry, Count)

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


class LoopHistogram(_LoopFamily[Observed]):
    """A histogram family by label values over ``buckets`` (``+Inf`` added)."""

    def __init__(
        self,
        name: str,
        documentation: str,
        labelnames: Sequence[str],
        buckets: Sequence[float],
        registry: CollectorRegistry,
    ) -> None:
        bounds = [float(bound) for bound in buckets]
        if bounds[-1] != INF:
            bounds.append(INF)
        self._bounds = tuple(bounds)
        self._les = [floatToGoString(bound) for bound in bounds]  # type: ignore[no-untyped-call]
        super().__init__(name, documentation, labelnames, registry, self._observed)

    def _observed(self) -> Observed:
        return Observed(self._bounds)

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
