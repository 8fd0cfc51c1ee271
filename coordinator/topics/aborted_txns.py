"""The aborted-transactions index of a partition (Kafka's .txnindex, in memory): one entry
per transaction ended by an ABORT marker, in marker order: producer id, first offset,
last offset (the marker's) and the last stable offset when it was written.

A read_committed Fetch of [fetch offset, upper bound) lists the entries that overlap it
(Kafka's collectAbortedTxns): last offset >= fetch offset and first offset < upper bound.
The walk stops after the first entry whose last stable offset is at or past the upper
bound: every later entry's transaction was still open at that LSO or began after it, so
starts there or later. Commits are never indexed.

Kept in memory and rebuilt from the log at start-up (producers.py): no file of its own.
"""

from __future__ import annotations

from bisect import bisect_left
from typing import NamedTuple


class AbortedTxn(NamedTuple):
    producer_id: int
    first_offset: int
    last_offset: int
    last_stable_offset: int


class AbortedTxns:
    __slots__ = ("entries", "_last_offsets")

    def __init__(self) -> None:
        self.entries: list[AbortedTxn] = []
        self._last_offsets: list[int] = []  # the entries' last offsets, for bisect

    def __len__(self) -> int:
        return len(self.entries)

    def append(
        self, producer_id: int, first_offset: int, last_offset: int, last_stable_offset: int
    ) -> None:
        self.entries.append(AbortedTxn(producer_id, first_offset, last_offset, last_stable_offset))
        self._last_offsets.append(last_offset)

    def between(self, fetch_offset: int, upper_bound: int) -> list[tuple[int, int]]:
        """(producer id, first offset) of the entries overlapping [fetch_offset,
        upper_bound), in index order."""
        found: list[tuple[int, int]] = []
        entries = self.entries
        for i in range(bisect_left(self._last_offsets, fetch_offset), len(entries)):
            entry = entries[i]
            if entry.first_offset < upper_bound:
                found.append((entry.producer_id, entry.first_offset))
            if entry.last_stable_offset >= upper_bound:
                break
        return found

    def remove_markers(self, markers: list[tuple[int, int]]) -> None:
        """Forget the entries whose ABORT marker (producer id, offset) compaction dropped:
        without its marker an entry would hide the producer's later records."""
        gone = set(markers)
        if not gone:
            return
        kept = [e for e in self.entries if (e.producer_id, e.last_offset) not in gone]
        self.entries = kept
        self._last_offsets = [e.last_offset for e in kept]

    def drop_below(self, offset: int) -> None:
        """Forget the entries whose marker lies below `offset` (the log start)."""
        cut = bisect_left(self._last_offsets, offset)
        if cut:
            del self.entries[:cut]
            del self._last_offsets[:cut]
