"""Consumer lag and members per group in `/metrics`: measured and rendered before each
scrape (`refresh`, awaited by the HTTP endpoint), appended to the registry's text (`text`).

`refresh` reads one shard at a time (its member counts, then its committed offsets a few
groups at a time, between events) and yields to the loop after each of those and whenever
a step of rows, header reads or rendered lines has taken ~2 ms, so a scrape of many offsets
never holds the loop for long. It renders the Prometheus text itself for the same reason:
prometheus_client's generate_latest renders synchronously, ~20 us a sample, too slow for
tens of thousands of series in one go. What it computes and how the series stay bounded:
lag.py.

Loop time (issue 20's target: 10,000 group-partitions in under 100 ms a scrape, the first
one included; tests/bench/bench_lag.py). What a scrape repeats is kept from the one before:
each series' label text, each group-partition's Burrow verdict (lag_status.py: re-evaluated
when a commit arrives, else only against the time now), the timestamps of first unconsumed
records (topics/lag_reads.py, by offset). What it reads once per partition rather than per
group-partition: the high watermark, and the timestamps not cached, found for every group
behind on the partition in the log's table of its newest batches' timestamps
(storage/batch_times.py), else in one walk of its headers (storage/batch_timestamps.py).
Rows are tuples, and the text is rendered a family at a time by comprehension. A first
scrape (after a start, or of offsets not cached) reads the headers it must (of batches the
logs did not note) in one walk a partition, keeps a group-partition's first commit as a
tuple (no window to evaluate: one commit is OK), and keeps labels and windows by (group,
topic) then partition, so it leaves about one object per group-partition for the cyclic
collector (by triples, ~7: a collector pass of ~5 ms fell inside one of its steps). tests/unit/
test_lag_output.py holds the text byte for byte as it was before these changes."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Iterator
from operator import attrgetter
from typing import Protocol

from .lag import (
    LagLevel,
    LagRow,
    LagSeries,
    add_series,
    group_topics,
    lag_rows,
    lag_seconds,
    series_level,
)
from .lag_status import LagStatuses, PartitionStatus, group_status
from .logging import get_logger

log = get_logger("groupcoord.lag")

# Rows computed or series rendered between two checks of the time taken (each a few
# microseconds), and offsets of one partition whose timestamps are asked for at once (a
# walk of at most an index interval of headers each when not cached).
_ROWS = 100
_LINES = 500
_READS = 100
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

    def timestamps_ms(self, topic: str, partition: int, offsets: list[int]) -> list[int | None]: ...

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
        """`sources()`: pieces of committed offsets (group, topic, partition, offset,
        commit time) with members per group, a shard's in one or more pieces, the loop
        free between two (CoordinatorService.lag_sources);
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
        # Label text by (group, topic), then partition, of the series last rendered, at
        # _labels_level. Nested rather than keyed by triples: a first scrape would keep
        # 10,000 new tuples, which the collector then walks in one pass of a few ms.
        self._labels: dict[tuple[str, str | None], dict[int | None, str]] = {}
        self._labels_level = LagLevel.PARTITION

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
        statuses = self.statuses
        now_ms = self.clock_ms()
        self.ends.begin_scrape()
        high_watermark = _per_scrape(self.ends.high_watermark)
        for committed, counts in self.sources():
            members.update(counts)
            for start in range(0, len(committed), _ROWS):
                chunk = lag_rows(committed[start : start + _ROWS], high_watermark)
                statuses.offer(chunk, now_ms)
                rows += chunk
                await slicer.step()
            await slicer.yield_now()  # between shards: the next one is read after its events
        by_status = statuses.finish()
        level, series = await self._series(rows, slicer)
        await self._measure_ages(series, now_ms, slicer)
        text = await self._render(level, series, members, len(rows), slicer)
        text.append(_render_statuses(by_status, self.name_labels))
        await slicer.yield_now()  # a step of its own: one copy of megabytes
        self._text = b"".join(text)
        # What the scrape built goes a slice at a time: freed at once, on return, the
        # objects of 10,000 group-partitions took ~10 ms of loop time.
        for built in (text, series, rows):
            while built:
                del built[-_LINES:]
                await slicer.step()

    async def _series(
        self, rows: list[LagRow], slicer: LoopSlicer
    ) -> tuple[LagLevel, list[LagSeries]]:
        """lag.py's bounded_series, a chunk of rows at a time."""
        pairs: set[tuple[str, str]] = set()
        if self.name_labels and len(rows) > self.series_max:
            for start in range(0, len(rows), _ROWS):
                pairs |= group_topics(rows[start : start + _ROWS])
                await slicer.step()
        level = series_level(rows, self.series_max, self.name_labels, pairs)
        series: list[LagSeries] = []
        sums: dict[tuple[str, str | None], LagSeries] = {}
        for start in range(0, len(rows), _ROWS):
            add_series(rows[start : start + _ROWS], level, series, sums)
            await slicer.step()
        return level, series if level is LagLevel.PARTITION else list(sums.values())

    async def _measure_ages(self, series: list[LagSeries], now_ms: int, slicer: LoopSlicer) -> None:
        """Each series' lag in time, from its probe's first unconsumed record: the probes
        of one partition read together (one walk of its headers for those not cached)."""
        behind: dict[tuple[str, int], list[LagSeries]] = {}
        for start in range(0, len(series), _ROWS):
            for one in series[start : start + _ROWS]:
                probe = one.probe
                if probe.records:
                    key = (probe.topic, probe.partition)
                    on_partition = behind.get(key)
                    if on_partition is None:
                        behind[key] = [one]
                    else:
                        on_partition.append(one)
                else:
                    one.seconds = 0.0
            await slicer.step()
        timestamps_ms = self.ends.timestamps_ms
        for (topic, partition), on_partition in behind.items():
            for start in range(0, len(on_partition), _READS):
                some = on_partition[start : start + _READS]
                firsts = timestamps_ms(topic, partition, [one.probe.committed for one in some])
                for one, first_ms in zip(some, firsts, strict=True):
                    one.seconds = lag_seconds(now_ms, one.probe.records, first_ms)
                await slicer.step()

    async def _render(
        self,
        level: LagLevel,
        series: list[LagSeries],
        members: dict[str, int],
        partitions: int,
        slicer: LoopSlicer,
    ) -> list[bytes]:
        """The Prometheus text of one measurement, in pieces: members, then the series of
        `level` (the committed offsets and high watermarks too at partition level). A
        series' labels are rendered once and kept while it is exported scrape after
        scrape."""
        out = ["".join(_heads(level, members, partitions)).encode()]
        labels: list[str] = []
        kept = self._labels if level is self._labels_level else {}
        self._labels, self._labels_level = {}, level
        now = self._labels
        partition_level = level is LagLevel.PARTITION
        group = topic = prefix = None
        kept_pair: dict[int | None, str] = {}
        now_pair: dict[int | None, str] = {}
        for start in range(0, len(series), _LINES):
            for one in series[start : start + _LINES]:
                if one.group != group or one.topic != topic:  # a pair's series come together
                    group, topic, prefix = one.group, one.topic, None
                    pair = (group, topic)
                    kept_pair = kept.get(pair, {})
                    now_pair = now.setdefault(pair, {})
                text = kept_pair.get(one.partition)
                if text is None:
                    if partition_level:
                        # A new series' labels: its group and topic's, then the partition's.
                        if prefix is None:
                            prefix = _partition_label_prefix(one)
                        text = f'{prefix}{one.partition}"}}'
                    else:
                        text = _label_text(one, level)
                now_pair[one.partition] = text
                labels.append(text)
            await slicer.step()
        prefix = _PREFIX[level]
        records_help, seconds_help = _helps(level)
        families = [
            (f"{prefix}_records", records_help, attrgetter("records")),
            (f"{prefix}_seconds", seconds_help, attrgetter("seconds")),
        ]
        if level is LagLevel.PARTITION:
            families += [
                (
                    "groupcoord_group_committed_offset",
                    "Committed offset per group-partition",
                    attrgetter("probe.committed"),
                ),
                (
                    "groupcoord_group_log_end_offset",
                    "High watermark of each partition a group committed on, per group-partition",
                    attrgetter("probe.end_offset"),
                ),
            ]
        for name, help_text, value_of in families:
            out.append(_head(name, help_text).encode())
            for start in range(0, len(series), _LINES):
                end = start + _LINES
                values = map(value_of, series[start:end])
                lines = [
                    f"{name}{label} {value}\n"
                    for label, value in zip(labels[start:end], values, strict=True)
                    if value is not None  # a lag in time that could not be read
                ]
                out.append("".join(lines).encode())
                await slicer.step()
        return out


def _per_scrape(read: Callable[[str, int], int | None]) -> Callable[[str, int], int | None]:
    """`read`, asked once per partition in a scrape (many groups commit on each)."""
    seen: dict[tuple[str, int], int | None] = {}

    def cached(topic: str, partition: int) -> int | None:
        key = (topic, partition)
        try:
            return seen[key]
        except KeyError:
            value = seen[key] = read(topic, partition)
            return value

    return cached


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


def _partition_label_prefix(series: LagSeries) -> str:
    """_label_text at partition level up to the partition number's quote."""
    return f'{{group="{_escape(series.group)}",topic="{_escape(series.probe.topic)}",partition="'


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
