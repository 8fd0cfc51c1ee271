"""Consumer lag and members per group in `/metrics`, measured before each scrape
(`refresh`, awaited by the HTTP endpoint) and exported by `collect` from that measurement.

`refresh` reads one shard at a time (its committed offsets and member counts, between
events), yields to the loop after each shard and every few hundred rows or header reads,
so a scrape of many offsets never holds the loop for long. What it computes and how the
series stay bounded: lag.py."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Protocol

from prometheus_client.core import GaugeMetricFamily
from prometheus_client.registry import Collector

from .lag import LagLevel, LagRow, LagSeries, bounded_series, lag_rows, lag_seconds

# Rows computed, or batch headers read, between two yields to the loop.
_STEP = 500

Sources = Callable[[], Iterator[tuple[list[tuple[str, str, int, int]], dict[str, int]]]]


class PartitionEndsView(Protocol):
    """topics/lag_reads.py's PartitionEnds."""

    def high_watermark(self, topic: str, partition: int) -> int | None: ...

    def timestamp_ms(self, topic: str, partition: int, offset: int) -> int | None: ...


@dataclass(slots=True)
class _Measured:
    level: LagLevel = LagLevel.PARTITION
    series: list[LagSeries] = field(default_factory=list)
    members: dict[str, int] = field(default_factory=dict)
    partitions: int = 0


def _wall_clock_ms() -> int:
    return time.time_ns() // 1_000_000


class LagCollector(Collector):
    def __init__(
        self,
        sources: Sources,
        ends: PartitionEndsView,
        series_max: int,
        clock_ms: Callable[[], int] = _wall_clock_ms,
    ) -> None:
        """`sources()`: per active shard, its committed offsets (group, topic, partition,
        offset) and members per group (CoordinatorService.lag_sources); `series_max`:
        metrics_lag_partition_series_max."""
        self.sources = sources
        self.ends = ends
        self.series_max = series_max
        self.clock_ms = clock_ms
        self._measured = _Measured()

    async def refresh(self) -> None:
        """Measure lag now (what the next `collect` exports)."""
        rows: list[LagRow] = []
        members: dict[str, int] = {}
        high_watermark = self.ends.high_watermark
        for committed, counts in self.sources():
            members.update(counts)
            for start in range(0, len(committed), _STEP):
                rows += lag_rows(committed[start : start + _STEP], high_watermark)
                await asyncio.sleep(0)
            await asyncio.sleep(0)
        level, series = bounded_series(rows, self.series_max)
        now_ms = self.clock_ms()
        timestamp_ms = self.ends.timestamp_ms
        for i, one in enumerate(series):
            probe = one.probe
            first_ms = None
            if probe.records:
                first_ms = timestamp_ms(probe.topic, probe.partition, probe.committed)
            one.seconds = lag_seconds(now_ms, probe.records, first_ms)
            if i % _STEP == _STEP - 1:
                await asyncio.sleep(0)
        self._measured = _Measured(level, series, members, len(rows))

    def collect(self) -> Iterator[GaugeMetricFamily]:
        measured = self._measured
        level = measured.level
        members = GaugeMetricFamily(
            "groupcoord_group_members", "Members per group (0: empty)", labels=["group"]
        )
        for group, count in sorted(measured.members.items()):
            members.add_metric([group], count)
        yield members
        yield GaugeMetricFamily(
            "groupcoord_group_lag_partitions",
            "Group-partitions with a committed offset on an existing partition; above"
            " metrics_lag_partition_series_max, lag is exported per group and topic"
            " (groupcoord_group_topic_lag_*), or per group (groupcoord_group_total_lag_*)",
            value=measured.partitions,
        )
        labels = {
            LagLevel.PARTITION: ["group", "topic", "partition"],
            LagLevel.TOPIC: ["group", "topic"],
            LagLevel.GROUP: ["group"],
        }
        prefix = {
            LagLevel.PARTITION: "groupcoord_group_lag",
            LagLevel.TOPIC: "groupcoord_group_topic_lag",
            LagLevel.GROUP: "groupcoord_group_total_lag",
        }
        for each in LagLevel:
            records = GaugeMetricFamily(
                f"{prefix[each]}_records",
                f"Consumer lag in records (high watermark - committed offset), per {each.value}"
                + ("" if each is LagLevel.PARTITION else ", summed"),
                labels=labels[each],
            )
            seconds = GaugeMetricFamily(
                f"{prefix[each]}_seconds",
                "Consumer lag in time: now - timestamp of the first unconsumed record"
                f" (0: no lag), per {each.value}"
                + ("" if each is LagLevel.PARTITION else ", of its partition most behind"),
                labels=labels[each],
            )
            if each is level:
                for one in measured.series:
                    values = _labels(one, each)
                    records.add_metric(values, one.records)
                    if one.seconds is not None:
                        seconds.add_metric(values, one.seconds)
            yield records
            yield seconds
        committed = GaugeMetricFamily(
            "groupcoord_group_committed_offset",
            "Committed offset per group-partition (while lag is exported per partition)",
            labels=labels[LagLevel.PARTITION],
        )
        end = GaugeMetricFamily(
            "groupcoord_group_log_end_offset",
            "High watermark of each partition a group committed on (while lag is exported"
            " per partition)",
            labels=labels[LagLevel.PARTITION],
        )
        if level is LagLevel.PARTITION:
            for one in measured.series:
                values = _labels(one, level)
                committed.add_metric(values, one.probe.committed)
                end.add_metric(values, one.probe.end_offset)
        yield committed
        yield end


def _labels(series: LagSeries, level: LagLevel) -> list[str]:
    if level is LagLevel.PARTITION:
        return [series.group, series.probe.topic, str(series.probe.partition)]
    if level is LagLevel.TOPIC:
        return [series.group, series.probe.topic]
    return [series.group]
