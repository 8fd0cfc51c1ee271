"""Record timestamps on Produce, as Kafka's LogValidator treats them (message.timestamp.*).

- LogAppendTime topic: each batch gets the timestamp-type bit and max timestamp = the append
  time (the broker's clock), its CRC recomputed; records are neither decoded nor changed, so
  a compressed batch is not decompressed (Kafka's in-place path). A batch that already
  carries the LogAppendTime bit is the producer's mistake: INVALID_TIMESTAMP for each record.
- CreateTime topic: a record whose timestamp is outside [now - message.timestamp.before.max.ms,
  now + message.timestamp.after.max.ms] fails its batch with INVALID_TIMESTAMP, naming the
  record's index; a record without a timestamp (-1) is not checked. Kafka compares
  `now - timestamp` as a Java long (it may wrap): so do we, and a bound of Long.MAX_VALUE
  therefore never refuses anything. As Kafka, the batch's max timestamp is then set to the
  largest record timestamp and its type to CreateTime (a no-op for a well-formed batch).
  When both bounds are Long.MAX_VALUE and the type bit is clear, the records are not read
  and the batch is stored as sent.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from groupcoord.protocol.batches import BatchHeader, record_timestamp_list, set_max_timestamp

from .views import TopicView

if TYPE_CHECKING:
    from ..config import Config

LONG_MAX = 2**63 - 1
NO_TIMESTAMP = -1
LOG_APPEND_TIME = "LogAppendTime"


def _java_long(value: int) -> int:
    """`value` wrapped to a signed 64-bit integer, as Java's long arithmetic does."""
    return (value + 2**63) % 2**64 - 2**63


class RecordsUnreadable(ValueError):
    """The records of a batch whose header and CRC are fine cannot be decoded."""


class InvalidTimestamps(ValueError):
    """A batch refused with INVALID_TIMESTAMP: `record_errors` are (index in batch, message)."""

    def __init__(self, record_errors: list[tuple[int, str]]) -> None:
        # Kafka's message (LogValidator.processRecordErrors) for the partition's answer.
        super().__init__("One or more records have been rejected due to invalid timestamp")
        self.record_errors = record_errors


@dataclass(frozen=True, slots=True)
class TimestampPolicy:
    log_append_time: bool
    before_max_ms: int
    after_max_ms: int

    @classmethod
    def of(cls, topic: TopicView, config: Config) -> TimestampPolicy:
        return cls(
            topic.config_value("message.timestamp.type", config) == LOG_APPEND_TIME,
            int(topic.config_value("message.timestamp.before.max.ms", config)),
            int(topic.config_value("message.timestamp.after.max.ms", config)),
        )

    def check(
        self, records: bytes | bytearray, headers: list[BatchHeader], now_ms: int
    ) -> list[int]:
        """Check every batch of a produce payload before any is appended (a refused batch
        fails the partition's whole payload). Returns, per batch, the max timestamp `stamp`
        takes for a CreateTime topic. Raises InvalidTimestamps or RecordsUnreadable."""
        largest = []
        pos = 0
        for header in headers:
            errors, top = self.record_errors(records, pos, header, now_ms)
            if errors:
                raise InvalidTimestamps(errors)
            largest.append(top)
            pos += header.size_bytes
        return largest

    def record_errors(
        self, buf: bytes | bytearray | memoryview, pos: int, header: BatchHeader, now_ms: int
    ) -> tuple[list[tuple[int, str]], int]:
        """(record errors as (index in batch, message), largest record timestamp) for the
        batch at `pos`. The largest timestamp is the header's own when the records were not
        read. Raises RecordsUnreadable when they cannot be decoded."""
        if self.log_append_time:
            if header.is_log_append_time:
                return [
                    (index, _LOG_APPEND_TIME_SET) for index in range(header.records_count)
                ], header.max_timestamp
            return [], header.max_timestamp
        before, after = self.before_max_ms, self.after_max_ms
        if before == LONG_MAX and after == LONG_MAX and not header.is_log_append_time:
            return [], header.max_timestamp
        try:
            batch = memoryview(buf)[pos : pos + header.size_bytes]
            timestamps = record_timestamp_list(batch)
        except Exception as e:  # aiokafka, gzip, cramjam: each raises its own kind
            raise RecordsUnreadable(f"records cannot be read: {e}") from None
        if not timestamps:
            return [], NO_TIMESTAMP
        # Kafka's max: over the records' timestamps, -1 when none is above -1.
        largest = max(max(timestamps), NO_TIMESTAMP)
        low, high = now_ms - before, now_ms + after
        if low <= min(timestamps) and largest <= high and not header.is_log_append_time:
            return [], largest  # the usual case, without a Python step per record
        # Record by record. Inside [low, high] (Python integers) a record passes; outside,
        # Kafka's Java long arithmetic decides (it differs only for absurd timestamps).
        errors: list[tuple[int, str]] = []
        for index, timestamp in enumerate(timestamps):
            if timestamp == NO_TIMESTAMP:
                if header.is_log_append_time:
                    errors.append((index, _LOG_APPEND_TIME_SET))
                continue
            if low <= timestamp <= high:
                continue
            diff = _java_long(now_ms - timestamp)
            if diff > before or _java_long(-diff) > after:
                errors.append(
                    (
                        index,
                        f"Timestamp {timestamp} of message with offset "
                        f"{header.base_offset + index} is out of range. The timestamp should "
                        f"be within [{_java_long(low)}, {_java_long(high)}]",
                    )
                )
        return errors, largest

    def stamp(
        self, buf: bytearray, pos: int, header: BatchHeader, largest: int, now_ms: int
    ) -> BatchHeader:
        """Write the batch's timestamp type and max timestamp as Kafka stores them (the
        append time, or the largest record timestamp); returns its new header."""
        if self.log_append_time:
            return set_max_timestamp(buf, pos, header, True, now_ms)
        return set_max_timestamp(buf, pos, header, False, largest)


_LOG_APPEND_TIME_SET = (
    "Invalid timestamp type in message. Producer should not set timestamp type to LogAppendTime."
)
