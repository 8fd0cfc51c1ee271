"""The timestamps of the batches holding many offsets of one partition log (consumer lag
reads the first unconsumed record of every group on a partition at once:
coordinator/topics/lag_reads.py): from the segments' tables of their newest batches'
timestamps (batch_times.py: no read at all), the others found in one forward walk of the
headers.

Looking offsets up one at a time costs an index bisect, a header walk from the index entry
and a read each: tens of microseconds an offset, so a first scrape of 10,000 lagging
group-partitions took half a second. Sorted, the offsets of one partition are answered by
one walk that reads each header between them once (reads of 8 KiB, doubled up to 64 KiB
while the walk reads on), and jumps ahead through the sparse offset index where the next
offset is at or past the next index entry (checked against that entry, not looked up for
every offset), so a far-behind group costs no more than a lookup of its own."""

from __future__ import annotations

from bisect import bisect_right
from collections.abc import Sequence

from groupcoord.protocol.batches import (
    HEADER_SIZE,
    LOG_OVERHEAD,
    MAGIC_V2,
    TIMESTAMP_TYPE_MASK,
    header_struct,
)

from .log import PartitionLog
from .segment import Segment

# What the walk reads of each batch it passes, and of each batch holding an offset asked.
_STEP_FIELDS = header_struct("base_offset", "batch_length", "magic", "last_offset_delta")
_TIME_FIELDS = header_struct("attributes", "base_timestamp", "max_timestamp")
_MIN_BATCH_LENGTH = HEADER_SIZE - LOG_OVERHEAD
# A walk's first read; each read that follows the one before without a jump is twice
# the size, up to the most (a first scrape walks whole partitions: fewer, larger reads).
_CHUNK_BYTES = 8 * 1024
_MAX_CHUNK_BYTES = 64 * 1024


def batch_timestamps(log: PartitionLog, offsets: Sequence[int]) -> list[int | None] | None:
    """For `offsets` in ascending order, each at or above the log start, the timestamp of
    the batch holding each (the first batch whose last offset is at or above it): its
    max timestamp for a LogAppendTime batch (every record's append time), else its base
    timestamp; None for an offset past the stored batches. Returns None as a whole when
    the walk meets a header that cannot be a batch's: the caller then looks the offsets up
    one by one, which reports the damage as a read does."""
    _, _, closed, active, active_size = log.segments_snapshot()
    segments = (*closed, active)
    bases = [segment.base_offset for segment in segments]
    out: list[int | None] = [None] * len(offsets)
    i = k = 0
    while i < len(offsets) and k < len(segments):
        k = max(k, bisect_right(bases, offsets[i]) - 1)
        segment = segments[k]
        end = active_size if k == len(segments) - 1 else segment.size_bytes
        # Offsets below the next segment's base are this one's; any left unanswered at its
        # end (a gap left by compaction) are the next batch's, the next segment's first.
        stop = bisect_right(offsets, bases[k + 1] - 1, i) if k + 1 < len(bases) else len(offsets)
        # The table covers the segment's newest batches: the offsets below it are walked,
        # then those past its last batch (a gap compaction left at the segment's end).
        times = segment.batch_times
        below, past = (
            times.fill(segment.base_offset, offsets, i, stop, out)
            if times is not None
            else (stop, stop)
        )
        if below > i:
            walked = _walk(segment, end, offsets, i, below, out)
            if walked is None:
                return None
            if walked < below:  # past the segment's batches (not expected below a table)
                i = walked
                k += 1
                continue
        walked = _walk(segment, end, offsets, past, stop, out) if past < stop else stop
        if walked is None:
            return None
        i = walked
        k += 1
    return out


def _walk(
    segment: Segment, end: int, offsets: Sequence[int], i: int, stop: int, out: list[int | None]
) -> int | None:
    """Answer offsets[i:stop] from `segment`'s batches up to `end`; the index of the first
    offset not answered (past the segment's batches), None on a damaged header."""
    step_fields = _STEP_FIELDS.unpack_from
    time_fields = _TIME_FIELDS.unpack_from
    target = offsets[i]
    pos = segment.lookup_position(target)
    # The next index entry past `pos`: a jump through the index helps only an offset at
    # or above it (a lookup per offset asked costs more than this check).
    entry_offset, entry_pos = segment.next_index_entry(pos)
    buf = b""
    buf_start = pos
    last_full = -1  # the last position in `buf` where a whole header starts
    chunk_bytes = _CHUNK_BYTES // 2  # doubled before each read
    while pos < end:
        rel = pos - buf_start
        if rel > last_full:
            chunk_bytes = min(2 * chunk_bytes, _MAX_CHUNK_BYTES)
            buf = segment.pread(pos, min(chunk_bytes, end - pos))
            buf_start, rel = pos, 0
            last_full = len(buf) - HEADER_SIZE
            if last_full < 0:
                return None
        while True:  # over the batches before the one holding `target`, within `buf`
            base, length, magic, last_delta = step_fields(buf, rel)
            if magic != MAGIC_V2 or length < _MIN_BATCH_LENGTH or last_delta < 0:
                return None
            last = base + last_delta
            if target <= last:
                break
            rel += length + LOG_OVERHEAD
            if rel > last_full:
                break
        if target > last:  # the next whole header is past `buf`: read on
            pos = buf_start + rel
            if pos > end:  # the batch before runs past the segment
                return None
            continue
        pos = buf_start + rel + length + LOG_OVERHEAD
        if pos > end:
            return None
        attributes, base_ms, max_ms = time_fields(buf, rel)
        timestamp = max_ms if attributes & TIMESTAMP_TYPE_MASK else base_ms
        while target <= last:
            out[i] = timestamp
            i += 1
            if i == stop:
                return i
            target = offsets[i]
        if pos >= entry_pos:
            entry_offset, entry_pos = segment.next_index_entry(pos)
        if target >= entry_offset:
            # The next offset is at or past an index entry ahead: start from its entry
            # (index entries are batch boundaries).
            jump = segment.lookup_position(target)
            if jump > pos:
                if jump > buf_start + len(buf):  # past what was read: read afresh
                    chunk_bytes = _CHUNK_BYTES // 2
                pos = jump
            entry_offset, entry_pos = segment.next_index_entry(pos)
    return i
