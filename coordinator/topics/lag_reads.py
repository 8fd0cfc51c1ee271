"""What consumer lag reads of the data plane: a partition's high watermark and the timestamp
of the first record a group has not consumed (observability/lag_metrics.py).

The timestamp is read from the header of the batch holding that offset (the in-memory
offset index, then one read of at most a few KiB): the batch's append time for a
LogAppendTime batch, else its first record's timestamp. It is exact when the committed
offset starts its batch; otherwise it is that batch's first record's, so the lag in time is
over-stated by at most the time the producer spent filling one batch (linger.ms)."""

from __future__ import annotations

from groupcoord.storage import PartitionLog, StorageError

from .registry import TopicRegistry


class PartitionEnds:
    def __init__(self, topics: TopicRegistry) -> None:
        self.topics = topics
        # Timestamps read in this scrape and the one before, by (topic id, partition,
        # offset): a group that stopped, or a slow one, is behind at the same offset scrape
        # after scrape, and the record there does not change (a topic deleted and created
        # again has a new id). Two rounds bound the cache by two scrapes' reads.
        self._current: dict[tuple[object, int, int], int | None] = {}
        self._previous: dict[tuple[object, int, int], int | None] = {}

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
        found = self.topics.partition(topic, partition)
        if found is None or found.log is None:
            return None
        log = found.log
        # Records below the log start were deleted unread: the first left is the oldest.
        offset = max(offset, log.log_start_offset)
        if offset >= found.high_watermark:
            return None
        key = (found.topic.topic_id, partition, offset)
        if key in self._current:
            return self._current[key]
        if key in self._previous:
            cached = self._current[key] = self._previous[key]
            return cached
        self._current[key] = read = self._read(found.log, offset)
        return read

    @staticmethod
    def _read(log: PartitionLog, offset: int) -> int | None:
        try:
            header = next(log.batch_headers(offset), None)
        except (StorageError, OSError):
            return None
        if header is None:
            return None
        return header.max_timestamp if header.is_log_append_time else header.base_timestamp
