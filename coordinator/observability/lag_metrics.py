"""Consumer lag and members per group in `/metrics`: measured and rendered before each
scrape (`refresh`, awaited by the HTTP endpoint), appended to the registry's text (`text`).

`refresh` reads one shard at a time (its committed offsets and member counts, between
events) and yields to the loop after each shard and whenever a step of rows, header reads
or rendered lines has taken ~2 ms, so a scrape of many offsets never holds the loop for
long. It renders the Prometheus text itself for the same reason: prometheus_client's
generate_latest renders synchronously, ~20 us a sample, too slow for tens of thousands of
series in one go. What it computes and how the series stay bounded: lag.py."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Iterator
from typing import Protocol

from .lag import LagLevel, LagRow, LagSeries, bounded_series, lag_rows, lag_seconds
from .lag_status import LagStatuses, PartitionStatus, group_status
from .logging import get_logger

log = get_logger("groupcoord.lag")

# Rows computed, headers read or series rendered between two checks of the time taken.
_STEP = 50
# Loop time after which a step yields to the loop.
_SLICE_S = 0.002

Sources = Callable[[], Iterator[tuple[list[tuple[str, str, int, int, int]], dict[str, int]]]]

_PREFIX = {
    LagLevel.PARTITION: "groupcoord_group_lag",
    LagLevel.TOPIC: "groupcoord_group_topic_lag",
    LagLevel.GROUP: "groupcoord_group_total_lag",
    LagLevel.ALL: "groupcoord_groups_lag",
}


class PartitionEndsView(Protocol):
    """topics/lag_reads.py's PartitionEnds."""

    def high_watermark(self, topic: str, partition: int) -> int | None: ...

    def timestamp_ms(self, topic: str, partition: int, offset: int) -> int | None: ...

    def begin_scrape(self) -> None: ...


def _wall_clock_ms() -> int:
    return time.time_ns() // 1_000_000


class LagMetrics:
    def __init__(
        self,
        sources: Sources,
        ends: PartitionEndsView,
        series_max: int,
        clock_ms: Callable[[], int] = _wall_clock_ms,
        status_intervals: int = 10,
        status_min_distance_ms: int = 1000,
        name_labels: bool = True,
    ) -> None:
        """`sources()`: per active shard, its committed offsets (group, topic, partition,
        offset, commit time) and members per group (CoordinatorService.lag_sources);
        `series_max`: metrics_lag_partition_series_max; `status_*`: the window of
        Burrow's statuses (lag_status.py; metrics_lag_status_*); `name_labels` False
        (metrics_name_labels): no series names a group or topic (members and lag summed
        over every group)."""
        self.name_labels = name_labels
        self.sources = sources
        self.ends = ends
        self.series_max = series_max
        self.clock_ms = clock_ms
        self.statuses = LagStatuses(status_intervals, status_min_distance_ms)
        self._text = _render_empty()

    def text(self) -> bytes:
        """The metrics as the last `refresh` measured them (Prometheus text format)."""
        return self._text

    async def scrape(self) -> bytes:
        """`refresh`, then `text` (what the HTTP endpoint appends to /metrics). A failure
        to measure is logged and the last measurement served: /metrics still answers."""
        try:
            await self.refresh()
        except Exception:
            log.exception("consumer lag not measured")
        return self._text

    async def refresh(self) -> None:
        """Measure lag now and render it (what `text` returns next)."""
        slicer = LoopSlicer()
        rows: list[LagRow] = []
        members: dict[str, int] = {}
        high_watermark = self.ends.high_watermark
        statuses = self.statuses
        now_ms = self.clock_ms()
        self.ends.begin_scrape()
        for committed, counts in self.sources():
            members.update(counts)
            for start in range(0, len(committed), _STEP):
                chunk = lag_rows(committed[start : start + _STEP], high_watermark)
                statuses.offer(chunk, now_ms)
                rows += chunk
                await slicer.step()
            await slicer.yield_now()  # between shards: the next one is read after its events
        by_status = statuses.finish()
        level, series = bounded_series(rows, self.series_max, self.name_labels)
        timestamp_ms = self.ends.timestamp_ms
        for i, one in enumerate(series):
            probe = one.probe
            first_ms = None
            if probe.records:
                first_ms = timestamp_ms(probe.topic, probe.partition, probe.committed)
            one.seconds = lag_seconds(now_ms, probe.records, first_ms)
            # A header read not cached may take a fraction of a millisecond: check each.
            if probe.records or i % _STEP == _STEP - 1:
                await slicer.step()
        self._text = await _render(level, series, members, len(rows), slicer)
        self._text += _render_statuses(by_status, self.name_labels)


class LoopSlicer:
    """Yields to the loop once a slice of loop time is used."""

    def __init__(self) -> None:
        self.end = time.perf_counter() + _SLICE_S

    async def step(self) -> None:
        if time.perf_counter() > self.end:
            await self.yield_now()

    async def yield_now(self) -> None:
        await asyncio.sleep(0)
        self.end = time.perf_counter() + _SLICE_S


def _escape(value: str) -> str:
    if "\\" in value or '"' in value or "\n" in value:
        return value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")
    return value


def _head(name: str, help_text: str) -> str:
    return f"# HELP {name} {help_text}\n# TYPE {name} gauge\n"


def _label_text(series: LagSeries, level: LagLevel) -> str:
    """The series' labels with their braces ("" at level ALL)."""
    if level is LagLevel.ALL:
        return ""
    group = _escape(series.group)
    if level is LagLevel.GROUP:
        return f'{{group="{group}"}}'
    topic = _escape(series.probe.topic)
    if level is LagLevel.TOPIC:
        return f'{{group="{group}",topic="{topic}"}}'
    return f'{{group="{group}",topic="{topic}",partition="{series.probe.partition}"}}'


def _helps(level: LagLevel) -> tuple[str, str]:
    per = level.value
    if level is LagLevel.ALL:
        return (
            "Consumer lag in records summed over every group-partition (metrics_name_labels off)",
            "Consumer lag in time of the group-partition most behind in records"
            " (metrics_name_labels off)",
        )
    if level is LagLevel.PARTITION:
        return (
            "Consumer lag in records (high watermark - committed offset) per group-partition",
            "Consumer lag in time: now - timestamp of the first unconsumed record (0: no"
            " lag) per group-partition",
        )
    return (
        f"Consumer lag in records per {per}, summed over its partitions (above"
        " metrics_lag_partition_series_max)",
        f"Consumer lag in time per {per}: of its partition most behind in records (above"
        " metrics_lag_partition_series_max)",
    )


def _render_empty() -> bytes:
    return "".join(_heads(LagLevel.PARTITION, {}, 0)).encode()


def _heads(level: LagLevel, members: dict[str, int], partitions: int) -> list[str]:
    out = [_head("groupcoord_group_members", "Members per group (0: empty)")]
    if level is LagLevel.ALL:  # names off: the members of every group
        out.append(f"groupcoord_group_members {sum(members.values())}\n")
    else:
        out += [
            f'groupcoord_group_members{{group="{_escape(g)}"}} {n}\n' for g, n in members.items()
        ]
    out.append(
        _head(
            "groupcoord_group_lag_partitions",
            "Group-partitions with a committed offset on an existing partition; above"
            " metrics_lag_partition_series_max, lag is exported per group and topic"
            " (groupcoord_group_topic_lag_*), or per group (groupcoord_group_total_lag_*)",
        )
    )
    out.append(f"groupcoord_group_lag_partitions {partitions}\n")
    return out


def _render_statuses(by_status: dict[str, dict[PartitionStatus, int]], names: bool) -> bytes:
    """Burrow's status per group (1 OK, 2 WARNING, 3 ERROR) and its partitions per status
    (the statuses it has; at most five series a group). Without `names`: the worst group's
    status, and the partitions per status of every group."""
    if not names:
        totals: dict[PartitionStatus, int] = {}
        for counts in by_status.values():
            for status, n in counts.items():
                totals[status] = totals.get(status, 0) + n
        by_status = {"": totals} if totals else {}
    out = [
        _head(
            "groupcoord_group_status",
            "Burrow's evaluation of the group's commits over a sliding window: 1 OK,"
            " 2 WARNING (a partition's lag not decreasing), 3 ERROR (a partition STOPPED,"
            " STALLED or REWOUND)",
        )
    ]
    out += [
        f"groupcoord_group_status{_group_label(g, names)} {group_status(list(c)).value}\n"
        for g, c in by_status.items()
    ]
    out.append(
        _head(
            "groupcoord_group_partitions_status",
            "Group-partitions per Burrow status: OK, WARNING, STOPPED (no commit for longer"
            " than the window spans), STALLED (committing the same offset), REWOUND",
        )
    )
    for g, counts in by_status.items():
        group = f'group="{_escape(g)}",' if names else ""
        out += [
            f'groupcoord_group_partitions_status{{{group}status="{s.name}"}} {n}\n'
            for s, n in counts.items()
        ]
    return "".join(out).encode()


def _group_label(group: str, names: bool) -> str:
    """{group="..."}, or nothing (names off: the one series of every group)."""
    return f'{{group="{_escape(group)}"}}' if names else ""


async def _render(
    level: LagLevel,
    series: list[LagSeries],
    members: dict[str, int],
    partitions: int,
    slicer: LoopSlicer,
) -> bytes:
    """The Prometheus text of one measurement: members, then the series of `level` (the
    committed offsets and high watermarks too at partition level)."""
    out = _heads(level, members, partitions)
    labels: list[str] = []
    for start in range(0, len(series), _STEP * 4):
        labels += [_label_text(one, level) for one in series[start : start + _STEP * 4]]
        await slicer.step()
    prefix = _PREFIX[level]
    records_help, seconds_help = _helps(level)
    families: list[tuple[str, str, Callable[[LagSeries], object]]] = [
        (f"{prefix}_records", records_help, lambda one: one.records),
        (f"{prefix}_seconds", seconds_help, lambda one: one.seconds),
    ]
    if level is LagLevel.PARTITION:
        families += [
            (
                "groupcoord_group_committed_offset",
                "Committed offset per group-partition",
                lambda one: one.probe.committed,
            ),
            (
                "groupcoord_group_log_end_offset",
                "High watermark of each partition a group committed on, per group-partition",
                lambda one: one.probe.end_offset,
            ),
        ]
    for name, help_text, value_of in families:
        out.append(_head(name, help_text))
        for start in range(0, len(series), _STEP * 4):
            for i in range(start, min(start + _STEP * 4, len(series))):
                value = value_of(series[i])
                if value is not None:  # a lag in time that could not be read
                    out.append(f"{name}{labels[i]} {value}\n")
            await slicer.step()
    chunks: list[bytes] = []
    for start in range(0, len(out), _STEP * 40):
        chunks.append("".join(out[start : start + _STEP * 40]).encode())
        await slicer.step()
    return b"".join(chunks)
