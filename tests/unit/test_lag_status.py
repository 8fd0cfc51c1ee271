"""Burrow's rules (observability/lag_status.py), each case the one of Burrow's
caching_test.go it mirrors: a window of (offset, commit time, lag) entries and the status."""

from __future__ import annotations

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
