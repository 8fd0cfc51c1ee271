"""The timestamp of each of a segment's newest batches, kept in memory as batches are
appended or read by recovery (Segment._note_batch), so consumer lag finds the timestamp of
a group's first unconsumed record without reading headers (storage/batch_timestamps.py;
issue 20: a first scrape after a start walked ~50,000 batch headers for 10,000
group-partitions).

What is kept per batch: its last offset relative to the segment (u32) and its lag
timestamp (i64: the max timestamp of a LogAppendTime batch, else its base timestamp, what
a header read gives), 12 bytes a batch, for the newest MAX_ENTRIES batches of a segment at
most (the oldest half is dropped when full: a lagging group is most often near the end),
and only in a log's active segment and the one closed before it (`release_older`), so a
partition holds at most 2 * MAX_ENTRIES * 12 bytes (768 KiB) however much it stores
(only one with over 32,768 batches in its last two segments holds that much). Only
the topics' partition logs keep them (LogConfig.batch_times): no lag is read of the
coordinator's own logs, whose appends and replays are spared the two array appends a batch.
Offsets outside what a table covers (older segments, a segment whose closed part was
loaded from its index files at start, the oldest dropped half) are found by the header
walk as before. Kafka keeps no such table (its time index is sparse); its lag tools read
the records.

Threads: a segment's writer thread adds entries while the event loop may read them. A
table only grows at its end (the timestamp before the offset, so a reader that finds an
offset finds its timestamp), and is never shrunk in place: a trim or a reset replaces the
segment's BatchTimes object, and a reader works on the one it took."""

from __future__ import annotations

from array import array
from bisect import bisect_left, bisect_right
from collections.abc import Sequence
from typing import Protocol

# Batches a segment's table holds at most (12 bytes each: 384 KiB).
MAX_ENTRIES = 1 << 15


class BatchTimes:
    __slots__ = ("floor_rel", "last_rel", "timestamps_ms")

    def __init__(self, floor_rel: int = -1) -> None:
        # Relative offsets at or below this are not covered: the table starts with the
        # batch after them (-1: with the segment's first batch, whatever its offset).
        self.floor_rel = floor_rel
        # Segment._note_batch appends to both (the timestamp first), inline: the append
        # path pays two array appends a batch.
        self.last_rel = array("I")
        self.timestamps_ms = array("q")

    def newest_half(self) -> BatchTimes:
        """A new table of the newer half of this one's batches (a full table's trim)."""
        half = len(self.last_rel) // 2
        kept = BatchTimes(self.last_rel[half - 1] if half else self.floor_rel)
        kept.last_rel = self.last_rel[half:]
        kept.timestamps_ms = self.timestamps_ms[half:]
        return kept

    def fill(
        self, base_offset: int, offsets: Sequence[int], i: int, stop: int, out: list[int | None]
    ) -> tuple[int, int]:
        """Answer into `out` the ascending offsets[i:stop] (a segment at `base_offset`)
        that the table covers: the timestamp of the first batch whose last offset is at
        or above each. Returns (j, m): offsets[j:m] answered, offsets[i:j] below the
        table, offsets[m:stop] past its last batch."""
        last_rel = self.last_rel
        count = len(last_rel)  # entries added meanwhile are not looked at
        if not count:
            return stop, stop
        timestamps_ms = self.timestamps_ms
        j = bisect_right(offsets, base_offset + self.floor_rel, i, stop)
        m = bisect_right(offsets, base_offset + last_rel[count - 1], j, stop)
        k = 0
        for x in range(j, m):
            k = bisect_left(last_rel, offsets[x] - base_offset, k, count)
            out[x] = timestamps_ms[k]
        return j, m


class _HasBatchTimes(Protocol):
    batch_times: BatchTimes | None


def release_older(segments: Sequence[_HasBatchTimes]) -> None:
    """Drop the tables of every segment but the last two (a log's active segment and the
    one closed before it): the bound on a partition's memory (module docstring)."""
    for segment in segments[:-2]:
        if segment.batch_times is not None and segment.batch_times.last_rel:
            segment.batch_times = BatchTimes()
