"""Burrow's rules (observability/lag_status.py), each case the one of Burrow's
caching_test.go it mirrors: a window of (offset, commit time, lag) entries and the status."""

from __future__ import annotations

import itertools
import random

import pytest

from groupcoord.coordinator.observability.lag import LagRow
from groupcoord.coordinator.observability.lag_status import (
    CommitWindow,
    GroupStatus,
    LagStatuses,
    PartitionStatus,
    group_status,
)


def row(group: str, offset: int, commit_ms: int, lag: int) -> LagRow:
    return LagRow(group, "t", 0, offset, offset + lag, lag, commit_ms)


def window(*entries: tuple[int, int, int]) -> CommitWindow:
    w = CommitWindow(10)
    for offset, commit_ms, lag in entries:
        w.observe(offset, commit_ms, lag, min_distance_ms=0)
    return w


@pytest.mark.parametrize(
    ("entries", "lag_now", "now_ms", "expected"),
    [
        # Lag zero now: OK whatever the window.
        ([(10, 1000, 5), (10, 2000, 5)], 0, 3000, PartitionStatus.OK),
        # Lag zero at some point of the window: OK.
        ([(10, 1000, 5), (20, 2000, 0), (20, 3000, 4)], 4, 3500, PartitionStatus.OK),
        # Offset went back: REWOUND (worst, checked first).
        ([(20, 1000, 5), (10, 2000, 15), (30, 3000, 5)], 5, 3500, PartitionStatus.REWOUND),
        # No commit for longer than the window spans: STOPPED.
        ([(10, 1000, 5), (20, 2000, 5), (30, 3000, 5)], 9, 6000, PartitionStatus.STOPPED),
        # Committing the same offset with lag: STALLED.
        ([(10, 1000, 5), (10, 2000, 7), (10, 3000, 9)], 9, 3500, PartitionStatus.STALLED),
        # Moving, but the lag never decreases: WARNING.
        ([(10, 1000, 5), (20, 2000, 6), (30, 3000, 6)], 6, 3500, PartitionStatus.WARNING),
        # Moving and the lag decreased once: OK.
        ([(10, 1000, 5), (20, 2000, 4), (30, 3000, 6)], 6, 3500, PartitionStatus.OK),
    ],
)
def test_partition_rules(
    entries: list[tuple[int, int, int]], lag_now: int, now_ms: int, expected: PartitionStatus
) -> None:
    assert window(*entries).status(lag_now, now_ms) is expected


def test_window_keeps_intervals_and_min_distance() -> None:
    w = CommitWindow(3)
    for i in range(5):
        w.observe(i, 1000 * i, 1, min_distance_ms=500)
    assert [e[0] for e in w.entries] == [2, 3, 4]
    w.observe(9, 4200, 1, min_distance_ms=500)  # closer than min distance: replaces the last
    assert [e[0] for e in w.entries] == [2, 3, 9]
    w.observe(10, 4200, 1, min_distance_ms=500)  # same commit time: already seen
    assert [e[0] for e in w.entries] == [2, 3, 9]


def test_group_status_is_the_worst_partition_capped_at_error() -> None:
    assert group_status([]) is GroupStatus.OK
    assert group_status([PartitionStatus.OK, PartitionStatus.WARNING]) is GroupStatus.WARNING
    assert group_status([PartitionStatus.STALLED, PartitionStatus.OK]) is GroupStatus.ERROR
    assert group_status([PartitionStatus.STOPPED]) is GroupStatus.ERROR


def test_statuses_across_measurements_drop_removed_offsets() -> None:
    statuses = LagStatuses(intervals=10, min_distance_ms=0)
    # A consumer that stopped committing while records arrive: STOPPED after its window.
    for t in range(1, 4):
        statuses.offer([row("g", 10 * t, 1000 * t, 5), row("h", 5, 1000 * t, 0)], 0)
        statuses.finish()
    statuses.offer([row("g", 30, 3000, 50), row("h", 5, 3000, 0)], 9000)
    counts = statuses.finish()
    assert counts == {"g": {PartitionStatus.STOPPED: 1}, "h": {PartitionStatus.OK: 1}}
    # g's offsets deleted: its window goes; a new commit starts a fresh window.
    statuses.offer([row("h", 5, 3000, 0)], 9000)
    statuses.finish()
    statuses.offer([row("g", 40, 9500, 50)], 9600)
    assert statuses.finish() == {"g": {PartitionStatus.OK: 1}}


@pytest.mark.parametrize("seed", range(40))
def test_statuses_are_those_of_a_window_per_group_partition(seed: int) -> None:
    """LagStatuses keeps a first commit as a tuple and makes its window at the second
    (a first scrape makes no windows): the statuses are those of one CommitWindow per
    group-partition observing every commit, for commits repeated, moved within and past
    the min-distance, gone back in time, and group-partitions coming and going."""
    rng = random.Random(seed)
    intervals = rng.choice([1, 2, 3, 10])
    min_distance_ms = rng.choice([0, 500, 1000])
    statuses = LagStatuses(intervals, min_distance_ms)
    windows: dict[tuple[str, str, int], CommitWindow] = {}
    commits: dict[tuple[str, str, int], tuple[int, int]] = {}
    now_ms = 10_000
    for _ in range(25):
        now_ms += rng.choice([0, 300, 1500, 6000])
        rows = []
        for key in itertools.product(["g1", "g2", "g3"], ["t", "u"], range(3)):
            if rng.random() < 0.15:
                continue  # not committed, or deleted: its window goes
            offset, commit_ms = commits.get(key, (rng.randrange(100), now_ms - 100))
            draw = rng.random()
            if draw < 0.4:
                offset += rng.randrange(-3, 10)
                commit_ms = now_ms - rng.choice([0, 100, 999, 1000, 1001])
            elif draw < 0.5:
                commit_ms -= rng.choice([1, 600])
            commits[key] = (offset, commit_ms)
            lag = rng.choice([0, 1, 5, 50])
            rows.append(LagRow(*key, offset, offset + lag, lag, commit_ms))
        if rng.random() < 0.3:
            rng.shuffle(rows)
        expected: dict[str, dict[PartitionStatus, int]] = {}
        seen = {}
        for r in rows:
            one = seen[r[:3]] = windows.get(r[:3]) or CommitWindow(intervals)
            one.observe(r.committed, r.commit_ms, r.records, min_distance_ms)
            status = one.status(r.records, now_ms) if r.records > 0 else PartitionStatus.OK
            counts = expected.setdefault(r.group, {})
            counts[status] = counts.get(status, 0) + 1
        windows = seen
        size = rng.randrange(1, 6)
        for start in range(0, len(rows), size):
            statuses.offer(rows[start : start + size], now_ms)
        assert statuses.finish() == expected
