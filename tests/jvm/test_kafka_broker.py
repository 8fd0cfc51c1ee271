"""The reference broker starts from the Maven jars, serves a real client, and stops."""

from __future__ import annotations

import uuid
from pathlib import Path

import pytest
from confluent_kafka import Consumer, Producer

from tests.jvm.kafka_broker import kafka_broker, random_cluster_id

pytestmark = [pytest.mark.jvm]


def test_reference_kafka_starts_serves_and_stops(tmp_path: Path) -> None:
    with kafka_broker(tmp_path / "kafka") as broker:
        assert broker.start_s is not None
        print(f"reference Kafka started in {broker.start_s:.1f} s")
        topic = f"t-{uuid.uuid4().hex[:8]}"
        producer = Producer({"bootstrap.servers": broker.bootstrap})
        sent = [(b"k%d" % i, b"v%d" % i) for i in range(5)]
        for key, value in sent:
            producer.produce(topic, key=key, value=value)
        assert producer.flush(30) == 0
        del producer  # librdkafka would keep reconnecting after the broker stops
        consumer = Consumer(
            {
                "bootstrap.servers": broker.bootstrap,
                "group.id": f"g-{topic}",
                "auto.offset.reset": "earliest",
                "group.protocol": "consumer",
            }
        )
        try:
            consumer.subscribe([topic])
            got: list[tuple[bytes | None, bytes | None]] = []
            for _ in range(60):
                msg = consumer.poll(1.0)
                if msg is None:
                    if len(got) == len(sent):
                        break
                    continue
                assert msg.error() is None, msg.error()
                got.append((msg.key(), msg.value()))
            assert got == sent
            consumer.commit(asynchronous=False)
        finally:
            consumer.close()
    # SIGTERM (a controlled shutdown) ended it; nothing is left running.
    assert broker.proc is not None and broker.proc.poll() is not None


def test_cluster_ids_never_read_as_options() -> None:
    """A base64url id starting with '-' made `kafka-storage format` fail one start in 64."""
    ids = [random_cluster_id() for _ in range(2000)]
    assert all(len(i) == 22 and not i.startswith("-") for i in ids)
    assert len(set(ids)) == len(ids)
