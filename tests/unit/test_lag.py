"""Consumer lag, the pure computation (observability/lag.py) and its collector fed by
stand-ins for the shards and the data plane (no sockets, no server)."""

from __future__ import annotations

from collections.abc import Iterator

from prometheus_client.parser import text_string_to_metric_families

from groupcoord.coordinator.observability.lag import (
    LagLevel,
    LagRow,
    bounded_series,
    lag_rows,
    lag_seconds,
)
from groupcoord.coordinator.observability.lag_metrics import LagMetrics

ENDS = {("t", 0): 100, ("t", 1): 50, ("u", 0): 10}


def _hw(topic: str, partition: int) -> int | None:
    return ENDS.get((topic, partition))


def test_rows_lag_is_the_high_watermark_minus_the_committed_offset() -> None:
    rows = lag_rows(
        [("g", "t", 0, 40, 0), ("g", "t", 1, 50, 0), ("g", "u", 0, 12, 0), ("g", "gone", 0, 3, 0)],
        _hw,
    )
    assert rows == [
        LagRow("g", "t", 0, 40, 100, 60, 0),
        LagRow("g", "t", 1, 50, 50, 0, 0),
        LagRow("g", "u", 0, 12, 10, 0, 0),  # committed past the end (truncated): no lag
    ]  # an offset of a topic that does not exist: no row


def test_series_per_partition_up_to_the_cap() -> None:
    rows = lag_rows([("g", "t", 0, 40, 0), ("g", "t", 1, 45, 0)], _hw)
    level, series = bounded_series(rows, 2)
    assert level is LagLevel.PARTITION
    assert [(s.group, s.topic, s.partition, s.records) for s in series] == [
        ("g", "t", 0, 60),
        ("g", "t", 1, 5),
    ]


def test_series_per_group_and_topic_then_per_group_above_the_cap() -> None:
    committed = [
        ("g", "t", 0, 90, 0),
        ("g", "t", 1, 20, 0),
        ("g", "u", 0, 4, 0),
        ("h", "u", 0, 9, 0),
    ]
    rows = lag_rows(committed, _hw)
    level, series = bounded_series(rows, 3)
    assert level is LagLevel.TOPIC
    by_key = {(s.group, s.topic): s for s in series}
    assert {k: s.records for k, s in by_key.items()} == {
        ("g", "t"): 10 + 30,
        ("g", "u"): 6,
        ("h", "u"): 1,
    }
    # The age of a topic's series is its partition most behind in records.
    assert (by_key["g", "t"].probe.partition, by_key["g", "t"].partition) == (1, None)
    level, series = bounded_series(rows, 2)
    assert level is LagLevel.GROUP
    assert {(s.group, s.topic): s.records for s in series} == {("g", None): 46, ("h", None): 1}
    assert {s.group: s.probe.topic for s in series} == {"g": "t", "h": "u"}


def test_lag_seconds() -> None:
    assert lag_seconds(10_000, 0, None) == 0.0  # nothing to consume: no age
    assert lag_seconds(10_000, 5, 7_500) == 2.5
    assert lag_seconds(10_000, 5, 12_000) == 0.0  # a producer clock ahead of ours
    assert lag_seconds(10_000, 5, None) is None  # unreadable: no sample
    assert lag_seconds(10_000, 5, -1) is None  # a record without a timestamp


class _Ends:
    def __init__(self) -> None:
        self.reads: list[tuple[str, int, int]] = []

    def high_watermark(self, topic: str, partition: int) -> int | None:
        return _hw(topic, partition)

    def timestamps_ms(self, topic: str, partition: int, offsets: list[int]) -> list[int | None]:
        self.reads += [(topic, partition, offset) for offset in offsets]
        return [1_000 + offset for offset in offsets]

    def begin_scrape(self) -> None:
        pass


def _sources() -> Iterator[tuple[list[tuple[str, str, int, int, int]], dict[str, int]]]:
    yield [("g", "t", 0, 40, 0), ("g", "t", 1, 50, 0)], {"g": 0}
    yield [("h", "u", 0, 4, 0)], {"h": 2, "idle": 0}


def _scrape(lag: LagMetrics) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    return {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for family in text_string_to_metric_families(lag.text().decode())
        for s in family.samples
    }


async def test_lag_metrics_exports_what_refresh_measured() -> None:
    ends = _Ends()
    collector = LagMetrics(_sources, ends, series_max=10, clock_ms=lambda: 11_040)
    assert not [k for k in _scrape(collector) if k[0] == "groupcoord_group_lag_records"]
    await collector.refresh()
    m = _scrape(collector)
    p0 = (("group", "g"), ("partition", "0"), ("topic", "t"))
    p1 = (("group", "g"), ("partition", "1"), ("topic", "t"))
    assert m["groupcoord_group_lag_records", p0] == 60
    assert m["groupcoord_group_lag_seconds", p0] == 10.0  # 11_040 - (1_000 + 40)
    assert m["groupcoord_group_committed_offset", p0] == 40
    assert m["groupcoord_group_log_end_offset", p0] == 100
    assert m["groupcoord_group_lag_records", p1] == 0
    assert m["groupcoord_group_lag_seconds", p1] == 0
    assert m["groupcoord_group_members", (("group", "idle"),)] == 0
    assert m["groupcoord_group_members", (("group", "h"),)] == 2
    assert m["groupcoord_group_lag_partitions", ()] == 3
    # Only partitions behind are read, once each.
    assert sorted(ends.reads) == [("t", 0, 40), ("u", 0, 4)]


async def test_lag_metrics_above_the_cap_reads_one_probe_per_series() -> None:
    ends = _Ends()
    collector = LagMetrics(_sources, ends, series_max=2, clock_ms=lambda: 11_040)
    await collector.refresh()
    m = _scrape(collector)
    assert not [k for k in m if k[0] == "groupcoord_group_lag_records"]
    assert not [k for k in m if k[0] == "groupcoord_group_committed_offset"]
    assert m["groupcoord_group_topic_lag_records", (("group", "g"), ("topic", "t"))] == 60
    assert m["groupcoord_group_topic_lag_seconds", (("group", "g"), ("topic", "t"))] == 10.0
    assert m["groupcoord_group_topic_lag_records", (("group", "h"), ("topic", "u"))] == 6
    assert sorted(ends.reads) == [("t", 0, 40), ("u", 0, 4)]


async def test_without_names_one_series_sums_every_group_and_topic() -> None:
    """metrics_name_labels off: no series names a group or topic (members and lag summed;
    the age is of the partition most behind in records)."""
    collector = LagMetrics(
        _sources, _Ends(), series_max=10, clock_ms=lambda: 11_040, name_labels=False
    )
    await collector.refresh()
    m = _scrape(collector)
    assert not [labels for _, labels in m if {"group", "topic"} & {k for k, _ in labels}]
    assert m["groupcoord_group_status", ()] == 1  # the worst group's
    assert m["groupcoord_group_partitions_status", (("status", "OK"),)] == 3
    assert m["groupcoord_groups_lag_records", ()] == 60 + 0 + 6
    assert m["groupcoord_groups_lag_seconds", ()] == 10.0  # t-0, 60 behind
    assert m["groupcoord_group_members", ()] == 2
    level, series = bounded_series(lag_rows([("g", "t", 0, 40, 0)], _hw), 10, names=False)
    assert level is LagLevel.ALL and [s.records for s in series] == [60]
