"""Topic timestamp configs with real clients: a LogAppendTime topic created with
confluent-kafka's AdminClient stamps records with the broker's clock (confluent-kafka and
kafka-python both read TIMESTAMP_LOG_APPEND_TIME and the append time, whatever timestamp the
producer set; offsets_for_times finds the record by its append time), and a CreateTime topic
with message.timestamp.after.max.ms refuses a record an hour ahead with INVALID_TIMESTAMP,
which the producer reports as a delivery error."""

from __future__ import annotations

import time
from typing import Any

from confluent_kafka import (
    TIMESTAMP_CREATE_TIME,
    TIMESTAMP_LOG_APPEND_TIME,
    Consumer,
    KafkaError,
    Producer,
    TopicPartition,
)
from confluent_kafka.admin import AdminClient, ConfigResource, NewTopic, ResourceType

from tests.support import ServerProcess

OLD_MS = 1_000_000_000_000  # 2001-09-09: the producer's own (old) timestamp
HOUR_MS = 3_600_000


def _now_ms() -> int:
    return time.time_ns() // 1_000_000


def _create(bootstrap: str, name: str, configs: dict[str, str]) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    topic = NewTopic(name, num_partitions=1, replication_factor=1, config=configs)
    admin.create_topics([topic])[name].result(timeout=10)


def _produce(bootstrap: str, topic: str, timestamp: int) -> Any:
    """Produce one record with `timestamp`; returns (error, delivered message)."""
    reports: list[tuple[Any, Any]] = []
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 0})
    producer.produce(
        topic,
        key=b"k",
        value=b"v",
        partition=0,
        timestamp=timestamp,
        on_delivery=lambda err, msg: reports.append((err, msg)),
    )
    assert producer.flush(15) == 0
    ((err, msg),) = reports
    return err, msg


def test_log_append_time_topic_with_confluent_and_kafka_python(server: ServerProcess) -> None:
    topic = "appended"
    _create(server.bootstrap, topic, {"message.timestamp.type": "LogAppendTime"})
    admin = AdminClient({"bootstrap.servers": server.bootstrap})
    resource = ConfigResource(ResourceType.TOPIC, topic)
    described = admin.describe_configs([resource])[resource].result(timeout=10)
    assert described["message.timestamp.type"].value == "LogAppendTime"
    assert described["message.timestamp.after.max.ms"].value == "3600000"

    before = _now_ms()
    err, delivered = _produce(server.bootstrap, topic, OLD_MS)
    after = _now_ms()
    assert err is None
    # The delivery report carries the Produce response's log_append_time.
    kind, append_time = delivered.timestamp()
    assert kind == TIMESTAMP_LOG_APPEND_TIME
    assert before <= append_time <= after

    consumer = Consumer(
        {"bootstrap.servers": server.bootstrap, "group.id": "lat", "enable.auto.commit": False}
    )
    try:
        consumer.assign([TopicPartition(topic, 0, 0)])
        msg = None
        deadline = time.monotonic() + 15
        while msg is None and time.monotonic() < deadline:
            msg = consumer.poll(0.5)
        assert msg is not None and msg.error() is None
        assert msg.timestamp() == (TIMESTAMP_LOG_APPEND_TIME, append_time)
        # ListOffsets by timestamp uses the append time, not the producer's.
        for wanted, offset in ((OLD_MS, 0), (append_time, 0), (append_time + 1, -1)):
            (found,) = consumer.offsets_for_times([TopicPartition(topic, 0, wanted)], timeout=10)
            assert found.offset == offset, wanted
    finally:
        consumer.close()

    from kafka import KafkaConsumer
    from kafka import TopicPartition as KpTopicPartition

    kp = KafkaConsumer(bootstrap_servers=server.bootstrap, enable_auto_commit=False)
    try:
        tp = KpTopicPartition(topic, 0)
        kp.assign([tp])
        kp.seek_to_beginning(tp)
        records = kp.poll(timeout_ms=10_000).get(tp, [])
        assert [(r.timestamp_type, r.timestamp) for r in records] == [(1, append_time)]
        found = kp.offsets_for_times({tp: append_time})[tp]
        assert (found.offset, found.timestamp) == (0, append_time)
    finally:
        kp.close()


def test_create_time_topic_refuses_a_record_an_hour_ahead(server: ServerProcess) -> None:
    topic = "bounded"
    _create(server.bootstrap, topic, {"message.timestamp.after.max.ms": "1000"})
    err, _ = _produce(server.bootstrap, topic, _now_ms() + HOUR_MS)
    assert err is not None and err.code() == KafkaError.INVALID_TIMESTAMP
    # Within the bound, the producer's own timestamp is kept (CreateTime).
    now = _now_ms()
    err, delivered = _produce(server.bootstrap, topic, now)
    assert err is None
    assert delivered.offset() == 0  # the refused record took no offset
    assert delivered.timestamp() == (TIMESTAMP_CREATE_TIME, now)
