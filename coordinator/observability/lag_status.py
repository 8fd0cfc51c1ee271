"""Burrow's consumer statuses, the pure part: a sliding window of each group-partition's
commits, and the rules that turn it into OK, WARNING, STOPPED, STALLED or REWOUND, and a
group's status from its partitions' (OK, WARNING or ERROR), as LinkedIn's Burrow evaluates
them (core/internal/evaluator/caching.go) -- no thresholds, only the window.

Theory of operation. Each time lag is measured (lag_metrics.py, before a scrape), every
group-partition's latest commit is offered to its window as (offset, commit time, lag in
records now). A commit already in the window (same commit time) adds nothing; one less
than `min_distance_ms` after the window's last replaces it (Burrow's min-distance); any
other is appended, the oldest dropped past `intervals` (Burrow's intervals, 10). Burrow sees
every commit in __consumer_offsets; we see the latest commit at each measurement, which is
what Burrow keeps too when commits come faster than its min-distance.

Rules, for a partition with lag now, lag in every window entry and at least two entries
(else OK; Burrow judges a single commit too, as STOPPED), worst first:
REWOUND: the committed offset went back between two entries. STOPPED: the time since the
last commit exceeds the time the window spans (the consumer stopped committing). STALLED:
every entry has the same offset (committing, not moving). WARNING: the offset moves, but
the lag never decreased from one entry to the next (the consumer is too slow)."""

from __future__ import annotations

from enum import IntEnum

from .lag import LagRow


class PartitionStatus(IntEnum):
    """Burrow's StatusConstant order: a larger value is worse."""

    OK = 1
    WARNING = 2
    STOPPED = 4
    STALLED = 5
    REWOUND = 6


class GroupStatus(IntEnum):
    OK = 1
    WARNING = 2
    ERROR = 3


class CommitWindow:
    """The last `intervals` commits of one group-partition: (offset, commit_ms, lag).
    What the rules read of the entries is kept until they change (`_trend`): most
    measurements see no new commit, and a scrape evaluates every group-partition."""

    __slots__ = ("entries", "intervals", "_trend")

    def __init__(self, intervals: int) -> None:
        # A list, not a deque: a scrape makes one window per new group-partition, and a
        # deque allocates a block of 64 slots up front (~10x the time of a small list).
        self.entries: list[tuple[int, int, int]] = []
        self.intervals = intervals
        self._trend: tuple[PartitionStatus | None, int, int, PartitionStatus] | None = None

    def observe(self, offset: int, commit_ms: int, lag: int, min_distance_ms: int) -> None:
        entries = self.entries
        if entries:
            last_commit_ms = entries[-1][1]
            if commit_ms == last_commit_ms:
                return
            self._trend = None
            if commit_ms - last_commit_ms < min_distance_ms:
                entries[-1] = (offset, commit_ms, lag)
                return
        self._trend = None
        entries.append((offset, commit_ms, lag))
        if len(entries) > self.intervals:
            del entries[0]

    def status(self, lag_now: int, now_ms: int) -> PartitionStatus:
        """Burrow's calculatePartitionStatus over this window."""
        if lag_now <= 0:
            return PartitionStatus.OK
        trend = self._trend
        if trend is None:
            trend = self._trend = self._evaluate()
        before, first_ms, last_ms, after = trend
        if before is not None:
            return before
        if now_ms - last_ms > last_ms - first_ms:
            return PartitionStatus.STOPPED
        return after

    def _evaluate(self) -> tuple[PartitionStatus | None, int, int, PartitionStatus]:
        """What the rules conclude from the entries alone: the status whatever the time
        (OK or REWOUND) or None, the window's first and last commit times (STOPPED is
        judged against the time now), and the status when not STOPPED."""
        entries = self.entries
        # One commit shows no trend: Burrow would call it STOPPED at any lag (its window
        # spans no time); we wait for a second.
        if len(entries) < 2 or any(lag == 0 for _, _, lag in entries):
            return PartitionStatus.OK, 0, 0, PartitionStatus.OK
        pairs = list(zip(entries, entries[1:], strict=False))
        if any(later[0] < earlier[0] for earlier, later in pairs):
            return PartitionStatus.REWOUND, 0, 0, PartitionStatus.REWOUND
        if all(later[0] == earlier[0] for earlier, later in pairs):
            after = PartitionStatus.STALLED
        elif all(later[2] >= earlier[2] for earlier, later in pairs):
            after = PartitionStatus.WARNING
        else:
            after = PartitionStatus.OK
        return None, entries[0][1], entries[-1][1], after


def group_status(partitions: list[PartitionStatus]) -> GroupStatus:
    """The worst of its partitions, anything past WARNING being ERROR (Burrow's rule)."""
    worst = max(partitions, default=PartitionStatus.OK)
    if worst > PartitionStatus.WARNING:
        return GroupStatus.ERROR
    return GroupStatus(worst)


# A group-partition's commits: a window, or its one commit (LagStatuses).
Window = CommitWindow | tuple[int, int, int]


class LagStatuses:
    """The windows of every group-partition with a committed offset, kept across
    measurements. A measurement offers its rows in chunks (`offer`, so the caller can yield
    to the loop between them) and then `finish`es, which drops the windows of offsets no
    longer stored and answers per group how many partitions are in each status."""

    def __init__(self, intervals: int, min_distance_ms: int) -> None:
        self.intervals = intervals
        self.min_distance_ms = min_distance_ms
        # A group-partition's window, or while it has held one commit only, that commit
        # (offset, commit_ms, lag): one commit is OK whatever the lag, and the first
        # measurement after a start offers every group-partition once, so it makes
        # tuples rather than windows (a window and its evaluation cost ~2 us each). By
        # (group, topic), then partition: keyed by triples, a first measurement would keep
        # 10,000 new tuples more for the collector to walk.
        self._windows: dict[tuple[str, str], dict[int, Window]] = {}
        self._seen: dict[tuple[str, str], dict[int, Window]] = {}
        self._counts: dict[str, dict[PartitionStatus, int]] = {}

    def offer(self, rows: list[LagRow], now_ms: int) -> None:
        """Offer each group-partition's latest commit and its lag now."""
        windows, seen, counts = self._windows, self._seen, self._counts
        intervals, min_distance_ms = self.intervals, self.min_distance_ms
        group = topic = None
        per_group: dict[PartitionStatus, int] = {}
        before: dict[int, Window] = {}
        now: dict[int, Window] = {}
        ok = PartitionStatus.OK
        for row in rows:
            if row.group != group or row.topic != topic:  # a pair's rows usually come together
                if row.group != group:
                    per_group = counts.get(row.group)  # type: ignore[assignment]
                    if per_group is None:
                        per_group = counts[row.group] = {}
                group, topic = row.group, row.topic
                pair = (group, topic)
                before = windows.get(pair, {})
                now = seen.setdefault(pair, {})
            partition = row.partition
            window = before.get(partition)
            records = row.records
            if window is None:
                now[partition] = (row.committed, row.commit_ms, records)
                status = ok
            elif isinstance(window, tuple) and (
                row.commit_ms == window[1] or row.commit_ms - window[1] < min_distance_ms
            ):
                # The same commit, kept as first seen, or one replacing it within the
                # min-distance (CommitWindow.observe's rules).
                if row.commit_ms != window[1]:
                    window = (row.committed, row.commit_ms, records)
                now[partition] = window
                status = ok
            else:
                if isinstance(window, tuple):
                    first = window
                    window = CommitWindow(intervals)
                    window.entries.append(first)
                window.observe(row.committed, row.commit_ms, records, min_distance_ms)
                now[partition] = window
                status = window.status(records, now_ms) if records > 0 else ok
            per_group[status] = per_group.get(status, 0) + 1

    def finish(self) -> dict[str, dict[PartitionStatus, int]]:
        counts = self._counts
        self._windows, self._seen, self._counts = self._seen, {}, {}
        return counts
