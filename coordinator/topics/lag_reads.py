"""What consumer lag reads of the data plane: a partition's high watermark and the timestamp
of the first record a group has not consumed (observability/lag_metrics.py).

The timestamp is that of the batch holding that offset, as its header gives it: the
batch's append time for a LogAppendTime batch, else its first record's timestamp. The log
notes it for its newest batches as it appends or recovers them (storage/batch_times.py:
no read at all); older batches' headers are read. It is exact when the committed
offset starts its batch; otherwise it is that batch's first record's, so the lag in time is
over-stated by at most the time the producer spent filling one batch (linger.ms).

A scrape asks for the offsets of every group on a partition at once (`timestamps_ms`): the
ones not cached nor noted are found in one walk of the partition's headers
(storage/batch_timestamps.py), not one lookup each.

serve --cluster: a partition stored in PostgreSQL holds only its tail in memory (none
right after a takeover). An offset below it (NotInMemory) is read from the rows in the
background, as Fetch awaits its NotInMemory reads, never on the scrape's own steps: the
scrape answers None for it (no lag in time this once) and the value read lands in the
cache, for the next scrape. At most STORED_READS_MAX partitions are read at a time, one
read per partition, at most STORED_OFFSETS_MAX offsets each."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from typing import Any

from groupcoord.protocol.batches import BatchHeader
from groupcoord.storage import PartitionLog, StorageError
from groupcoord.storage.batch_timestamps import batch_timestamps
from groupcoord.storage.errors import NotInMemory

from ..observability.logging import get_logger
from .registry import TopicRegistry

log = get_logger("groupcoord.lag")

# serve --cluster: background reads of stored partitions' timestamps (module docstring).
STORED_READS_MAX = 4
STORED_OFFSETS_MAX = 64
# What _read answers for an offset being read from the rows: not cached.
_PENDING = -(2**63)


class PartitionEnds:
    def __init__(self, topics: TopicRegistry) -> None:
        self.topics = topics
        # Timestamps read in this scrape and the one before, by (topic id, partition, log
        # generation), then offset: a group that stopped, or a slow one, is behind at the
        # same offset scrape after scrape, and the record there does not change (a topic
        # deleted and created again has a new id; compaction, a new generation). Two
        # rounds bound the cache by two scrapes' reads.
        self._current: dict[tuple[object, int, int], dict[int, int | None]] = {}
        self._previous: dict[tuple[object, int, int], dict[int, int | None]] = {}
        # serve --cluster: reads of stored partitions' rows in flight, by partition key.
        self._stored_reads: dict[tuple[object, int, int], asyncio.Task[None]] = {}

    def begin_scrape(self) -> None:
        """A new scrape: timestamps not read again since the one before are forgotten."""
        self._previous = self._current
        self._current = {}

    def high_watermark(self, topic: str, partition: int) -> int | None:
        """The partition's high watermark; None for a partition that does not exist (or an
        internal topic's shard log not open)."""
        found = self.topics.partition(topic, partition)
        if found is None or found.log is None:
            return None
        return found.high_watermark

    def timestamp_ms(self, topic: str, partition: int, offset: int) -> int | None:
        """The timestamp of the record at `offset` as the module docstring says; None when
        it cannot be read (outside the log, a damaged batch, a log closed meanwhile)."""
        return self.timestamps_ms(topic, partition, (offset,))[0]

    def timestamps_ms(self, topic: str, partition: int, offsets: Sequence[int]) -> list[int | None]:
        """`timestamp_ms` of each of `offsets` (any order) of one partition; those not
        cached are read in one walk of its headers."""
        found = self.topics.partition(topic, partition)
        if found is None or found.log is None:
            return [None] * len(offsets)
        log = found.log
        # Records below the log start were deleted unread: the first left is the oldest.
        log_start = log.log_start_offset
        high_watermark = found.high_watermark
        # Compaction rewrites batches (a new generation): what was read before may differ.
        partition_key = (found.topic.topic_id, partition, log.generation)
        current = self._current.get(partition_key)
        if current is None:
            current = self._current[partition_key] = {}
        previous = self._previous.get(partition_key, current)
        wanted = [log_start if offset < log_start else offset for offset in offsets]
        missing = {
            offset
            for offset in wanted
            if offset < high_watermark and offset not in current and offset not in previous
        }
        if missing:
            ascending = sorted(missing)
            reads = self._read_all(log, ascending)
            if _PENDING not in reads:
                current.update(zip(ascending, reads, strict=True))
            else:  # serve --cluster: some only the database holds
                stored: list[int] = []
                for offset, read in zip(ascending, reads, strict=True):
                    if read == _PENDING:
                        stored.append(offset)
                    else:
                        current[offset] = read
                self._read_stored(partition_key, log, stored)
        out: list[int | None] = []
        for offset in wanted:
            if offset >= high_watermark:
                out.append(None)
            elif offset in current:
                out.append(current[offset])
            elif offset in previous:  # read in the scrape before
                read = current[offset] = previous[offset]
                out.append(read)
            else:  # being read from the rows
                out.append(None)
        return out

    def _read_stored(
        self, partition_key: tuple[object, int, int], log_: Any, offsets: list[int]
    ) -> None:
        """Start the background read of `offsets` from a stored partition's rows, unless
        one runs for the partition or too many run (module docstring)."""
        reads = self._stored_reads
        if partition_key in reads or len(reads) >= STORED_READS_MAX:
            return
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:  # no loop (a synchronous caller): nothing read
            return
        offsets = offsets[:STORED_OFFSETS_MAX]
        reads[partition_key] = loop.create_task(self._stored(partition_key, log_, offsets))

    async def _stored(
        self, partition_key: tuple[object, int, int], log_: Any, offsets: list[int]
    ) -> None:
        try:
            headers: list[BatchHeader | None] = await log_.batch_headers_stored(offsets)
        except Exception as e:  # the database away, the lease lost: the next scrape asks
            log.warning("lag timestamps not read from the database", error=repr(e))
            return
        finally:
            self._stored_reads.pop(partition_key, None)
        cache = self._current.setdefault(partition_key, {})
        for offset, header in zip(offsets, headers, strict=True):
            cache[offset] = None if header is None else _timestamp(header)

    def _read_all(self, log: PartitionLog, offsets: list[int]) -> list[int | None]:
        """The timestamps of ascending `offsets`: one walk, or one read each where the walk
        meets damage (a read reports it) or the log is closed or failed meanwhile."""
        try:
            walked = batch_timestamps(log, offsets)
        except (StorageError, OSError):
            walked = None
        if walked is not None:
            return walked
        return [self._read(log, offset) for offset in offsets]

    @staticmethod
    def _read(log: PartitionLog, offset: int) -> int | None:
        """_PENDING for an offset that only the database holds."""
        try:
            header = next(log.batch_headers(offset), None)
        except NotInMemory:
            return _PENDING
        except (StorageError, OSError):
            return None
        if header is None:
            return None
        return _timestamp(header)


def _timestamp(header: BatchHeader) -> int:
    return header.max_timestamp if header.is_log_append_time else header.base_timestamp
