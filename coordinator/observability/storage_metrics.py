"""Storage health and the segment-file LRU as metrics, read at scrape time: nothing on a
write or read path pays for them."""

from __future__ import annotations

from collections.abc import Iterator

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
from prometheus_client.registry import Collector

from groupcoord.storage.health import StorageHealth
from groupcoord.storage.open_files import OpenFiles

WRITE_KINDS = ("append", "flush")


class StorageCollector(Collector):
    def __init__(self, health: StorageHealth, open_files: OpenFiles) -> None:
        self.health = health
        self.open_files = open_files

    def collect(self) -> Iterator[GaugeMetricFamily | CounterMetricFamily]:
        health = self.health
        yield GaugeMetricFamily(
            "groupcoord_storage_healthy",
            "1 while every log can be written, 0 while a log's last append or flush failed"
            " (full disk, I/O error): see /health for which and why",
            value=1 if health.healthy else 0,
        )
        yield GaugeMetricFamily(
            "groupcoord_storage_failing_logs",
            "Logs whose last append or flush failed and was not yet followed by a durable write",
            value=len(health.failures()),
        )
        failed = CounterMetricFamily(
            "groupcoord_storage_write_failures",
            "Failed log writes since start, by kind (append: the write; flush: the fsync)",
            labels=["kind"],
        )
        for kind in sorted({*WRITE_KINDS, *health.failed_writes}):
            failed.add_metric([kind], health.failed_writes[kind])
        yield failed
        files = self.open_files
        yield GaugeMetricFamily(
            "groupcoord_segment_files_open", "Segment files open now", value=files.open_count
        )
        yield GaugeMetricFamily(
            "groupcoord_segment_files_open_max",
            "Bound on open segment files (segment_files_open_max)",
            value=files.max_open,
        )
        yield CounterMetricFamily(
            "groupcoord_segment_file_reopens",
            "Segment files reopened after the bound on open files had closed them",
            value=files.reopens,
        )
