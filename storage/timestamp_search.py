"""The record with the largest timestamp of a log's segments (ListOffsets -3, Kafka's
MAX_TIMESTAMP): log.py's `max_timestamp`, apart to keep that module small."""

from __future__ import annotations

from collections.abc import Sequence

from groupcoord.protocol.batches import record_timestamps

from .segment import Segment


def max_timestamp_of(segments: Sequence[Segment], log_start: int) -> tuple[int, int] | None:
    """(offset, timestamp) of the record with the largest timestamp at or above
    `log_start`: the earliest batch with the largest max timestamp, then its first record
    having that timestamp. None when no readable batch is timestamped."""
    best: tuple[int, Segment, int] | None = None  # (timestamp, segment, batch offset)
    for segment in segments:
        if segment.next_offset <= log_start:
            continue
        timestamp = segment.max_timestamp_ms
        offset = segment.offset_of_max_timestamp
        if segment.base_offset < log_start and offset < log_start:
            # The log start moved inside this segment, maybe past its max batch:
            # rescan what remains readable (rare: only advance_log_start_offset).
            timestamp, offset = -1, -1
            found = segment.find_batch(log_start)
            position = found[0] if found is not None else segment.size_bytes
            for _, header in segment.iter_headers(position):
                if header.max_timestamp > timestamp:
                    timestamp, offset = header.max_timestamp, header.base_offset
        if offset >= 0 and (best is None or timestamp > best[0]):
            best = (timestamp, segment, offset)
    if best is None:
        return None
    timestamp, segment, batch_offset = best
    found = segment.find_batch(batch_offset)
    if found is None:  # pragma: no cover - the batch was located above
        return None
    position, header = found
    fallback: tuple[int, int] | None = None
    for offset, record_ts in record_timestamps(segment.pread(position, header.size_bytes)):
        if record_ts == timestamp:
            return offset, record_ts
        if fallback is None or record_ts > fallback[1]:
            fallback = (offset, record_ts)
    # The header's max timestamp matched no record (a producer's inconsistent batch).
    return fallback
