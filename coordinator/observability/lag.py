"""Consumer lag, the pure part: from committed offsets and high watermarks to the series
`/metrics` exports (lag_metrics.py reads the state and does the I/O).

Theory of operation. A group's lag on a partition is the high watermark minus its committed
offset, in records (never below 0), and the age of the first record it has not consumed,
in seconds (now minus that record's timestamp; 0 with no lag), as kminion and Burrow
measure it. Groups are measured whether or not they have members: an emptied group keeps
its offsets, so its lag keeps growing as records arrive.

Cardinality. Up to `series_max` group-partitions, each is its own series. Above it, the
series are per group and topic (records summed, the age of the partition with the most
records behind); if those too are more than `series_max`, per group. Only a series' one
probe partition is read for its age, so a scrape reads at most max(series_max, groups)
batch headers whatever the number of offsets. With names off (metrics_name_labels), one
series sums every group-partition (ALL: no group or topic label)."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass
from enum import Enum


class LagLevel(Enum):
    PARTITION = "partition"
    TOPIC = "topic"
    GROUP = "group"
    ALL = "all"


@dataclass(frozen=True, slots=True)
class LagRow:
    """One group-partition: its committed offset, the high watermark, lag in records, and
    when the offset was committed."""

    group: str
    topic: str
    partition: int
    committed: int
    end_offset: int
    records: int
    commit_ms: int


@dataclass(slots=True)
class LagSeries:
    """One exported series. `topic`/`partition` are None above their level; `probe` is the
    row whose first unconsumed record gives the series' age (its own row per partition,
    else the one with the most records behind). `seconds`: None until measured, or when
    the record could not be read."""

    group: str
    topic: str | None
    partition: int | None
    records: int
    probe: LagRow
    seconds: float | None = None


def lag_rows(
    committed: Iterable[tuple[str, str, int, int, int]],
    high_watermark: Callable[[str, int], int | None],
) -> list[LagRow]:
    """A row per (group, topic, partition, committed offset, commit time) whose partition
    exists (an offset of a deleted topic has no lag to speak of)."""
    rows = []
    for group, topic, partition, offset, commit_ms in committed:
        end = high_watermark(topic, partition)
        if end is not None:
            records = max(end - offset, 0)
            rows.append(LagRow(group, topic, partition, offset, end, records, commit_ms))
    return rows


def bounded_series(
    rows: list[LagRow], series_max: int, names: bool = True
) -> tuple[LagLevel, list[LagSeries]]:
    """The series to export, at the finest level that keeps them within `series_max`
    (group level, bounded by groups_max, whatever their number); without `names`, one
    series of them all (none without rows)."""
    if not names:
        return LagLevel.ALL, _aggregate(rows, lambda r: ("", None))
    if len(rows) <= series_max:
        series = [LagSeries(r.group, r.topic, r.partition, r.records, r) for r in rows]
        return LagLevel.PARTITION, series
    by_topic = _aggregate(rows, lambda r: (r.group, r.topic))
    if len(by_topic) <= series_max:
        return LagLevel.TOPIC, by_topic
    return LagLevel.GROUP, _aggregate(rows, lambda r: (r.group, None))


def _aggregate(
    rows: list[LagRow], key: Callable[[LagRow], tuple[str, str | None]]
) -> list[LagSeries]:
    out: dict[tuple[str, str | None], LagSeries] = {}
    for row in rows:
        k = key(row)
        series = out.get(k)
        if series is None:
            out[k] = LagSeries(k[0], k[1], None, row.records, row)
        else:
            series.records += row.records
            if row.records > series.probe.records:
                series.probe = row
    return list(out.values())


def lag_seconds(now_ms: int, records: int, first_unconsumed_ms: int | None) -> float | None:
    """Age of the first unconsumed record: 0 with nothing to consume, None when its
    timestamp is unknown, never negative (a producer's clock ahead of ours)."""
    if records == 0:
        return 0.0
    if first_unconsumed_ms is None or first_unconsumed_ms < 0:
        return None
    return max(now_ms - first_unconsumed_ms, 0) / 1000.0
