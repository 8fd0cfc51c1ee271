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
from typing import NamedTuple


class LagLevel(Enum):
    PARTITION = "partition"
    TOPIC = "topic"
    GROUP = "group"
    ALL = "all"


class LagRow(NamedTuple):
    """One group-partition: its committed offset, the high watermark, lag in records, and
    when the offset was committed. A tuple: a scrape makes one per group-partition."""

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
    append = rows.append
    new = tuple.__new__
    for group, topic, partition, offset, commit_ms in committed:
        end = high_watermark(topic, partition)
        if end is not None:
            records = end - offset if end > offset else 0
            append(new(LagRow, (group, topic, partition, offset, end, records, commit_ms)))
    return rows


def bounded_series(
    rows: list[LagRow], series_max: int, names: bool = True
) -> tuple[LagLevel, list[LagSeries]]:
    """The series to export, at the finest level that keeps them within `series_max`
    (group level, bounded by groups_max, whatever their number); without `names`, one
    series of them all (none without rows)."""
    level = series_level(rows, series_max, names, group_topics(rows))
    series: list[LagSeries] = []
    sums: dict[tuple[str, str | None], LagSeries] = {}
    add_series(rows, level, series, sums)
    return level, series if level is LagLevel.PARTITION else list(sums.values())


def group_topics(rows: Iterable[LagRow]) -> set[tuple[str, str]]:
    """The (group, topic) pairs of `rows` (what the topic level would export)."""
    return {(row.group, row.topic) for row in rows}


def series_level(
    rows: list[LagRow], series_max: int, names: bool, group_topics: set[tuple[str, str]]
) -> LagLevel:
    """The finest level whose series fit in `series_max` (`group_topics`: of the rows,
    needed only above the cap)."""
    if not names:
        return LagLevel.ALL
    if len(rows) <= series_max:
        return LagLevel.PARTITION
    return LagLevel.TOPIC if len(group_topics) <= series_max else LagLevel.GROUP


def add_series(
    rows: Iterable[LagRow],
    level: LagLevel,
    series: list[LagSeries],
    sums: dict[tuple[str, str | None], LagSeries],
) -> None:
    """The series of `rows` at `level`: appended to `series` at partition level, else
    summed into `sums` (its values in the order of their first row). Rows may come in
    chunks, each added to the series so far."""
    if level is LagLevel.PARTITION:
        series += [LagSeries(r.group, r.topic, r.partition, r.records, r) for r in rows]
        return
    for row in rows:
        if level is LagLevel.ALL:
            key: tuple[str, str | None] = ("", None)
        elif level is LagLevel.TOPIC:
            key = (row.group, row.topic)
        else:
            key = (row.group, None)
        one = sums.get(key)
        if one is None:
            sums[key] = LagSeries(key[0], key[1], None, row.records, row)
        else:
            one.records += row.records
            if row.records > one.probe.records:
                one.probe = row


def lag_seconds(now_ms: int, records: int, first_unconsumed_ms: int | None) -> float | None:
    """Age of the first unconsumed record: 0 with nothing to consume, None when its
    timestamp is unknown, never negative (a producer's clock ahead of ours)."""
    if records == 0:
        return 0.0
    if first_unconsumed_ms is None or first_unconsumed_ms < 0:
        return None
    return max(now_ms - first_unconsumed_ms, 0) / 1000.0
