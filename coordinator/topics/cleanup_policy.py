"""A topic's cleanup.policy and compaction settings, as Kafka's LogConfig reads them, and the
check Kafka's LogValidator makes of records produced to a compacted topic.

- cleanup.policy is a list of `delete` and `compact` (either order, both, or neither).
  `delete`: retention.ms / retention.bytes delete old segments (storage/log.py). `compact`:
  the log cleaner keeps the latest record of each key (topics/compaction.py). Without
  `delete`, retention deletes nothing (Kafka's deleteOldSegments).
- A compacted topic refuses a record without a key: INVALID_RECORD, with a record error
  per keyless record and Kafka's message (LogValidator.validateKey / processRecordErrors).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import TYPE_CHECKING

from groupcoord.protocol.batches import BatchHeader, record_keys
from groupcoord.protocol.errors import ErrorCode

from .timestamps import RecordsUnreadable
from .views import PartitionView, TopicView

if TYPE_CHECKING:
    from ..config import Config


COMPACT = "compact"
DELETE = "delete"
POLICIES = (COMPACT, DELETE)
# Kafka's ConfigDef LIST parsing: items split at commas, whitespace around them dropped.
_COMMA = re.compile(r"\s*,\s*")


def policy_items(value: str) -> list[str]:
    """The items of a cleanup.policy value, as Kafka's ConfigDef parses a LIST."""
    text = value.strip()
    return _COMMA.split(text) if text else []


def compacts(value: str) -> bool:
    """Whether a cleanup.policy value includes compact."""
    return COMPACT in value and COMPACT in policy_items(value)


@dataclass(frozen=True, slots=True)
class CleanupPolicy:
    """A topic's cleanup settings, read from its configs (live: altering them applies at
    the next retention or cleaner pass)."""

    compact: bool
    delete: bool
    delete_retention_ms: int  # delete.retention.ms: how long tombstones stay once cleaned
    min_lag_ms: int  # min.compaction.lag.ms
    max_lag_ms: int  # max.compaction.lag.ms
    min_dirty_ratio: float  # min.cleanable.dirty.ratio

    @classmethod
    def of(cls, topic: TopicView, config: Config) -> CleanupPolicy:
        items = policy_items(topic.config_value("cleanup.policy", config))
        return cls(
            COMPACT in items,
            DELETE in items,
            int(topic.config_value("delete.retention.ms", config)),
            int(topic.config_value("min.compaction.lag.ms", config)),
            int(topic.config_value("max.compaction.lag.ms", config)),
            float(topic.config_value("min.cleanable.dirty.ratio", config)),
        )


def lag_conflict(topic: TopicView, config: Config) -> str | None:
    """Kafka's LogConfig.validateValues message when min.compaction.lag.ms exceeds
    max.compaction.lag.ms (an INVALID_CONFIG), else None."""
    low = int(topic.config_value("min.compaction.lag.ms", config))
    high = int(topic.config_value("max.compaction.lag.ms", config))
    if low <= high:
        return None
    return (
        f"conflict topic config setting min.compaction.lag.ms ({low}) > "
        f"max.compaction.lag.ms ({high})"
    )


def refuse_keyless(
    partition: PartitionView, records: bytes, headers: list[BatchHeader], config: Config
) -> tuple[ErrorCode, str, list[tuple[int, str]]] | None:
    """For a produce to a compacted topic: (INVALID_RECORD, Kafka's message, record errors
    as (index in batch, message)) for the first batch holding records without a key, or
    for records that cannot be decoded (no record errors then); None when every record
    has a key or the topic is not compacted. Only compacted topics' records are read."""
    topic = partition.topic
    if not compacts(topic.config_value("cleanup.policy", config)):
        return None
    try:
        errors = _keyless_records(records, headers, f"{topic.name}-{partition.index}")
    except RecordsUnreadable as e:
        return ErrorCode.INVALID_RECORD, str(e), []
    if not errors:
        return None
    shown = ", ".join(f"RecordError(batchIndex={i}, message='{text}')" for i, text in errors[:3])
    message = (
        f"One or more records have been rejected due to {len(errors)} record errors in total,"
        f" and only showing the first three errors at most: [{shown}]"
    )
    return ErrorCode.INVALID_RECORD, message, errors


def _keyless_records(
    records: bytes, headers: list[BatchHeader], topic_partition: str
) -> list[tuple[int, str]]:
    message = (
        f"Compacted topic cannot accept message without key in topic partition {topic_partition}"
    )
    view = memoryview(records)
    pos = 0
    for header in headers:
        try:
            keys = record_keys(view[pos : pos + header.size_bytes])
            errors = [(i, message) for i, key in enumerate(keys) if key is None]
        except Exception as e:  # aiokafka, gzip, cramjam: each raises its own kind
            raise RecordsUnreadable(f"records cannot be read: {e}") from None
        if errors:
            return errors
        pos += header.size_bytes
    return []
