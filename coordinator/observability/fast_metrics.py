"""Labelled metrics for per-request paths: a latency histogram that costs a bisect and two
list updates per observation, and a counter that costs one attribute add.

prometheus_client's Histogram walks its buckets in Python, and its Histogram and Counter
take a lock per value; at tens of thousands of requests a second that was a visible share
of each request. These are exported through Collectors in Prometheus' formats (histogram:
cumulative buckets, _sum, _count; counter: _total), so dashboards cannot tell the
difference. Only the event loop thread updates them, so they need no lock.
"""

from __future__ import annotations

from bisect import bisect_left
from collections.abc import Iterator, Sequence

from prometheus_client.core import CounterMetricFamily, HistogramMetricFamily
from prometheus_client.registry import Collector


class FastHistogram(Collector):
    def __init__(
        self, name: str, documentation: str, labelnames: Sequence[str], buckets: Sequence[float]
    ) -> None:
        self.name = name
        self.documentation = documentation
        self.labelnames = list(labelnames)
        self.bounds = list(buckets)
        self._children: dict[tuple[str, ...], Child] = {}

    def labels(self, *values: str) -> Child:
        child = self._children.get(values)
        if child is None:
            child = self._children[values] = Child(self.bounds)
        return child

    def collect(self) -> Iterator[HistogramMetricFamily]:
        family = HistogramMetricFamily(self.name, self.documentation, labels=self.labelnames)
        for values, child in list(self._children.items()):
            cumulative = 0
            buckets = []
            for bound, count in zip([*self.bounds, float("inf")], child.counts, strict=True):
                cumulative += count
                buckets.append((_fmt(bound), cumulative))
            family.add_metric(list(values), buckets, child.total)
        yield family


class Child:
    __slots__ = ("bounds", "counts", "total")

    def __init__(self, bounds: list[float]) -> None:
        self.bounds = bounds
        self.counts = [0] * (len(bounds) + 1)
        self.total = 0.0

    def observe(self, value: float) -> None:
        self.counts[bisect_left(self.bounds, value)] += 1
        self.total += value


class FastCounter(Collector):
    def __init__(self, name: str, documentation: str, labelnames: Sequence[str]) -> None:
        self.name = name
        self.documentation = documentation
        self.labelnames = list(labelnames)
        self._children: dict[tuple[str, ...], CounterChild] = {}

    def labels(self, *values: str) -> CounterChild:
        child = self._children.get(values)
        if child is None:
            child = self._children[values] = CounterChild()
        return child

    def collect(self) -> Iterator[CounterMetricFamily]:
        family = CounterMetricFamily(self.name, self.documentation, labels=self.labelnames)
        for values, child in list(self._children.items()):
            family.add_metric(list(values), child.value)
        yield family


class CounterChild:
    __slots__ = ("value",)

    def __init__(self) -> None:
        self.value = 0

    def inc(self, amount: int = 1) -> None:
        self.value += amount


def _fmt(bound: float) -> str:
    return "+Inf" if bound == float("inf") else repr(float(bound))
