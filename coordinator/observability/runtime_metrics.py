"""The coordinator runtime's gauges that Kafka's CoordinatorRuntimeMetrics has and the
histograms do not cover, computed at scrape time (nothing on the request path):

* event-queue-size: our events run on the loop thread as soon as their request is read,
  so what queues is their answer: events whose records wait in a shard's open batch or for
  the fsync that covers them (each shard's `queued_events`).
* thread-idle-ratio: one event loop thread runs every shard; its idle share since the
  previous scrape is 1 - (its CPU time / wall time). Time spent waiting for the GIL counts
  as idle, system calls as busy: close enough to see a loop near saturation.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Iterator

from prometheus_client.core import GaugeMetricFamily
from prometheus_client.registry import Collector


class RuntimeCollector(Collector):
    def __init__(
        self,
        queued_events: Callable[[], Iterable[int]],
        thread_time: Callable[[], float] = time.thread_time,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        """`queued_events()`: each shard's queued events. Collected on the loop thread (the
        HTTP endpoint runs there): `thread_time` is that thread's CPU time."""
        self.queued_events = queued_events
        self._thread_time = thread_time
        self._clock = clock
        self._last = (thread_time(), clock())

    def idle_ratio(self) -> float:
        """The loop thread's idle share since the previous call."""
        cpu, wall = self._thread_time(), self._clock()
        last_cpu, last_wall = self._last
        self._last = (cpu, wall)
        elapsed = wall - last_wall
        if elapsed <= 0:
            return 1.0
        return min(max(1.0 - (cpu - last_cpu) / elapsed, 0.0), 1.0)

    def collect(self) -> Iterator[GaugeMetricFamily]:
        yield GaugeMetricFamily(
            "groupcoord_coordinator_event_queue_size",
            "Coordinator events waiting on their shard's writes: records gathered in an"
            " open batch or waiting for the fsync that covers them (event-queue-size)",
            value=sum(self.queued_events()),
        )
        yield GaugeMetricFamily(
            "groupcoord_coordinator_thread_idle_ratio",
            "Share of time the event loop thread that runs every shard was idle since the"
            " previous scrape: 1 - its CPU time / wall time (thread-idle-ratio)",
            value=self.idle_ratio(),
        )
