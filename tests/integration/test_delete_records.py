"""DeleteRecords (KIP-107) with real clients: confluent-kafka's AdminClient.delete_records and
kafka-python's KafkaAdminClient.delete_records move a partition's log start; ListOffsets
EARLIEST (the low watermark) answers it, a fetch below it is out of range and a consumer with
auto.offset.reset=earliest starts there; Kafka's per-partition errors; the new start survives
a SIGKILL, and the segments wholly below it are gone."""

from __future__ import annotations

import time
from pathlib import Path

import pytest
from confluent_kafka import Consumer, KafkaError, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic
from kafka import KafkaAdminClient
from kafka import TopicPartition as KpTopicPartition

from tests.support import ServerProcess

OFFSET_END = -1  # confluent-kafka's OFFSET_END: DeleteRecords up to the high watermark


def _create(bootstrap: str, name: str, partitions: int = 1, **configs: str) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    topic = NewTopic(name, num_partitions=partitions, replication_factor=1, config=configs)
    admin.create_topics([topic])[name].result(timeout=15)


def _produce(bootstrap: str, topic: str, partition: int, count: int, first: int = 0) -> None:
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 0})
    for i in range(first, first + count):
        producer.produce(topic, key=b"k%d" % i, value=b"v%d" % i, partition=partition)
        producer.poll(0)
    assert producer.flush(15) == 0


def _delete(bootstrap: str, offsets: dict[tuple[str, int], int]) -> dict[tuple[str, int], object]:
    """confluent-kafka's delete_records: {(topic, partition): low watermark or KafkaError}."""
    admin = AdminClient({"bootstrap.servers": bootstrap})
    futures = admin.delete_records(
        [TopicPartition(t, p, offset) for (t, p), offset in offsets.items()],
        request_timeout=15,
        operation_timeout=10,
    )
    out: dict[tuple[str, int], object] = {}
    for tp, future in futures.items():
        try:
            out[(tp.topic, tp.partition)] = future.result(timeout=20).low_watermark
        except KafkaException as e:
            out[(tp.topic, tp.partition)] = e.args[0].code()
    return out


def _watermarks(bootstrap: str, topic: str, partition: int) -> tuple[int, int]:
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "watermarks"})
    try:
        low, high = consumer.get_watermark_offsets(TopicPartition(topic, partition), timeout=10)
        return int(low), int(high)
    finally:
        consumer.close()


def _first_offset(bootstrap: str, topic: str, group: str) -> int:
    """The offset of the first record a new group's consumer (auto.offset.reset=earliest)
    reads from partition 0."""
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": group,
            "auto.offset.reset": "earliest",
            "enable.auto.commit": False,
        }
    )
    try:
        consumer.assign([TopicPartition(topic, 0)])
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:
            msg = consumer.poll(0.5)
            if msg is not None and msg.error() is None:
                return int(msg.offset())
        raise AssertionError("no record read")
    finally:
        consumer.close()


@pytest.mark.shared_server
def test_confluent_delete_records_moves_the_log_start(server: ServerProcess) -> None:
    bootstrap = server.bootstrap
    topic = "dr-confluent"
    _create(bootstrap, topic, partitions=2)
    _produce(bootstrap, topic, 0, 10)
    _produce(bootstrap, topic, 1, 6)

    moved = _delete(bootstrap, {(topic, 0): 4, (topic, 1): OFFSET_END})
    assert moved == {(topic, 0): 4, (topic, 1): 6}
    assert _watermarks(bootstrap, topic, 0) == (4, 10)
    assert _watermarks(bootstrap, topic, 1) == (6, 6)
    # A new group starts at the new log start.
    assert _first_offset(bootstrap, topic, "dr-earliest") == 4

    # Never backwards: the low watermark answered is the log start already there.
    assert _delete(bootstrap, {(topic, 0): 2}) == {(topic, 0): 4}
    # Past the high watermark (unknown topics and partitions librdkafka refuses itself,
    # from the metadata: the conformance sequences show the broker's answers).
    assert _delete(bootstrap, {(topic, 0): 11}) == {(topic, 0): KafkaError.OFFSET_OUT_OF_RANGE}
    assert _watermarks(bootstrap, topic, 0) == (4, 10)


@pytest.mark.shared_server
def test_delete_records_refused_for_compacted_and_internal_topics(server: ServerProcess) -> None:
    bootstrap = server.bootstrap
    _create(bootstrap, "dr-compact", **{"cleanup.policy": "compact"})
    _produce(bootstrap, "dr-compact", 0, 3)
    assert _delete(bootstrap, {("dr-compact", 0): 1}) == {
        ("dr-compact", 0): KafkaError.POLICY_VIOLATION
    }
    _create(bootstrap, "dr-both", **{"cleanup.policy": "compact,delete"})
    _produce(bootstrap, "dr-both", 0, 3)
    assert _delete(bootstrap, {("dr-both", 0): 1}) == {("dr-both", 0): 1}
    # __consumer_offsets exists once a group used it.
    _first_offset(bootstrap, "dr-both", "dr-internal")
    assert _delete(bootstrap, {("__consumer_offsets", 0): 0}) == {
        ("__consumer_offsets", 0): KafkaError.TOPIC_EXCEPTION
    }


@pytest.mark.shared_server
def test_kafka_python_delete_records(server: ServerProcess) -> None:
    bootstrap = server.bootstrap
    topic = "dr-kafka-python"
    _create(bootstrap, topic)
    _produce(bootstrap, topic, 0, 8)
    admin = KafkaAdminClient(bootstrap_servers=bootstrap)
    try:
        result = admin.delete_records({KpTopicPartition(topic, 0): 5}, timeout_ms=10_000)
    finally:
        admin.close()
    ((tp, answer),) = result.items()
    assert (tp.topic, tp.partition) == (topic, 0)
    assert answer["low_watermark"] == 5
    assert _watermarks(bootstrap, topic, 0) == (5, 8)


def test_log_start_survives_sigkill_and_segments_below_go(server: ServerProcess) -> None:
    bootstrap = server.bootstrap
    topic = "dr-durable"
    # Small segments: each ~60-record batch of the producer rolls one.
    _create(bootstrap, topic, **{"segment.bytes": "1024"})
    for first in range(0, 200, 20):
        _produce(bootstrap, topic, 0, 20, first)
    partition_dir = Path(server.data_dir) / "topics" / f"{topic}-0"
    before = sorted(partition_dir.glob("*.log"))
    assert len(before) > 3, before

    assert _delete(bootstrap, {(topic, 0): 150}) == {(topic, 0): 150}
    bases = [int(p.stem) for p in sorted(partition_dir.glob("*.log"))]
    # Only the segment holding offset 150 and those after it are left.
    assert bases[0] <= 150 < (bases[1] if len(bases) > 1 else 201), bases
    assert len(bases) < len(before)

    server.kill()  # SIGKILL: the new log start must already be on disk
    server.start()
    assert _watermarks(bootstrap, topic, 0) == (150, 200)
    assert _first_offset(bootstrap, topic, "dr-after-kill") == 150
