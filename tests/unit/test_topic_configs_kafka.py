"""Kafka 4.4's standard topic configs (issue 17 item 7a): every one Kafka lists is accepted,
and bad values are refused with the message the reference broker gave for each (CreateTopics
validate_only against Apache Kafka 4.4)."""

from __future__ import annotations

import pytest

from groupcoord.coordinator.topics.configs import (
    TOPIC_CONFIGS,
    InvalidConfig,
    validate_topic_configs,
)

# The 37 topic configs a Kafka 4.4 broker describes for a new topic.
KAFKA_4_4_TOPIC_CONFIGS = """cleanup.policy compression.gzip.level compression.lz4.level
compression.type compression.zstd.level delete.retention.ms errors.deadletterqueue.group.enable
file.delete.delay.ms flush.messages flush.ms follower.replication.throttled.replicas
index.interval.bytes leader.replication.throttled.replicas local.retention.bytes
local.retention.ms max.compaction.lag.ms max.decompressed.message.bytes max.message.bytes
message.timestamp.after.max.ms message.timestamp.before.max.ms message.timestamp.type
min.cleanable.dirty.ratio min.compaction.lag.ms min.insync.replicas preallocate
remote.copy.lag.bytes remote.copy.lag.ms remote.log.copy.disable remote.log.delete.on.disable
remote.storage.enable retention.bytes retention.ms segment.bytes segment.index.bytes
segment.jitter.ms segment.ms unclean.leader.election.enable""".split()

ONE_OF = "uncompressed, zstd, lz4, snappy, gzip, producer"
THROTTLED = (
    "must be the literal '*' or a list of replicas in the following format: "
    "[partitionId]:[brokerId],[partitionId]:[brokerId],..."
)


def test_every_kafka_topic_config_is_known() -> None:
    assert sorted(TOPIC_CONFIGS) == sorted(KAFKA_4_4_TOPIC_CONFIGS)


@pytest.mark.parametrize(
    ("name", "value"),
    [
        ("compression.type", "lz4"),
        ("compression.type", " lz4"),
        ("compression.type", "uncompressed"),
        ("compression.gzip.level", "-1"),
        ("compression.gzip.level", "9"),
        ("compression.lz4.level", "17"),
        ("compression.zstd.level", "-131072"),
        ("compression.zstd.level", "22"),
        ("flush.messages", "1"),
        ("flush.ms", "0"),
        ("preallocate", "TRUE"),
        ("segment.index.bytes", "4"),
        ("index.interval.bytes", "0"),
        ("local.retention.ms", "-2"),
        ("remote.copy.lag.ms", "-1"),
        ("remote.storage.enable", "false"),
        ("unclean.leader.election.enable", "true"),
        ("leader.replication.throttled.replicas", "*"),
        ("follower.replication.throttled.replicas", "0:1,1:2"),
        ("leader.replication.throttled.replicas", ""),
    ],
)
def test_kafka_accepts(name: str, value: str) -> None:
    validate_topic_configs({name: value})


@pytest.mark.parametrize(
    ("name", "value", "message"),
    [
        (
            "compression.type",
            "none",
            f"Invalid value none for configuration compression.type: "
            f"String must be one of: {ONE_OF}",
        ),
        (
            "compression.type",
            "LZ4",
            f"Invalid value LZ4 for configuration compression.type: "
            f"String must be one of: {ONE_OF}",
        ),
        (
            "compression.gzip.level",
            "0",
            "Invalid value 0 for configuration "
            "compression.gzip.level: Value must be between 1 and 9 or equal to -1",
        ),
        (
            "compression.lz4.level",
            "18",
            "Invalid value 18 for configuration "
            "compression.lz4.level: Value must be no more than 17",
        ),
        (
            "compression.zstd.level",
            "-131073",
            "Invalid value -131073 for configuration "
            "compression.zstd.level: Value must be at least -131072",
        ),
        (
            "flush.messages",
            "0",
            "Invalid value 0 for configuration flush.messages: Value must be at least 1",
        ),
        ("flush.ms", "-1", "Invalid value -1 for configuration flush.ms: Value must be at least 0"),
        (
            "preallocate",
            "yes",
            "Invalid value yes for configuration preallocate: "
            "Expected value to be either true or false",
        ),
        (
            "segment.index.bytes",
            "3",
            "Invalid value 3 for configuration segment.index.bytes: Value must be at least 4",
        ),
        (
            "max.decompressed.message.bytes",
            "0",
            "Invalid value 0 for configuration "
            "max.decompressed.message.bytes: Value must be at least 1",
        ),
        (
            "remote.copy.lag.bytes",
            "-2",
            "Invalid value -2 for configuration remote.copy.lag.bytes: Value must be at least -1",
        ),
        (
            "remote.storage.enable",
            "true",
            "Tiered Storage functionality is disabled in the "
            "broker. Topic cannot be configured with remote log storage.",
        ),
        (
            "leader.replication.throttled.replicas",
            "foo",
            "Invalid value [foo] for "
            "configuration leader.replication.throttled.replicas: "
            f"leader.replication.throttled.replicas {THROTTLED}",
        ),
        (
            "follower.replication.throttled.replicas",
            "0:x",
            "Invalid value [0:x] for "
            "configuration follower.replication.throttled.replicas: "
            f"follower.replication.throttled.replicas {THROTTLED}",
        ),
    ],
)
def test_kafka_refuses(name: str, value: str, message: str) -> None:
    with pytest.raises(InvalidConfig) as refused:
        validate_topic_configs({name: value})
    assert str(refused.value) == message
