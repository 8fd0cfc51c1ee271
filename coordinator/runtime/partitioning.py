"""Which shard owns a group: Kafka's `Utils.abs(groupId.hashCode()) % partitions`, a
partition of the topic the shards are (whose name the data plane keeps free)."""

from __future__ import annotations

OFFSETS_TOPIC = "__consumer_offsets"
# The transaction coordinator's shard logs (txn_service.py).
TRANSACTION_STATE_TOPIC = "__transaction_state"
# Kafka's internal topics: the coordinators' shard logs, served read-only
# (topics/internal_topics.py).
INTERNAL_TOPIC_NAMES = frozenset({OFFSETS_TOPIC, TRANSACTION_STATE_TOPIC})


def java_string_hashcode(text: str) -> int:
    """Java's String.hashCode over UTF-16 code units, as a signed 32-bit int."""
    h = 0
    data = text.encode("utf-16-be")
    for i in range(0, len(data), 2):
        h = (31 * h + (data[i] << 8 | data[i + 1])) & 0xFFFFFFFF
    return h - (1 << 32) if h >= 1 << 31 else h


def shard_for(group_id: str, partitions: int) -> int:
    h = java_string_hashcode(group_id)
    # Kafka's Utils.abs maps Integer.MIN_VALUE to 0 instead of overflowing.
    return (0 if h == -(1 << 31) else abs(h)) % partitions
