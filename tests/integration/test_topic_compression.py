"""Kafka's standard topic configs with confluent-kafka's AdminClient (issue 17 item 7a):
CreateTopics accepts compression.type, flush.*, preallocate, segment.index.bytes,
segment.jitter.ms and index.interval.bytes, refuses bad values as Kafka does, and a forced
compression.type stores every batch with that codec whatever the producer sent, the
records reading back unchanged."""

from __future__ import annotations

from pathlib import Path

import pytest
from confluent_kafka import Consumer, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, ConfigResource, NewTopic, ResourceType

from groupcoord.protocol.batches import split_batches
from tests.support import ServerProcess

CODECS = {"uncompressed": 0, "gzip": 1, "snappy": 2, "lz4": 3, "zstd": 4}
RECORDS = 200


def create(admin: AdminClient, name: str, configs: dict[str, str]) -> None:
    topic = NewTopic(name, num_partitions=1, replication_factor=1, config=configs)
    admin.create_topics([topic])[name].result(timeout=15)


def stored_codecs(server: ServerProcess, topic: str) -> list[int]:
    codecs = []
    for segment in sorted((server.data_dir / "topics" / f"{topic}-0").glob("*.log")):
        codecs += [header.compression for header in split_batches(segment.read_bytes())]
    return codecs


def read_values(bootstrap: str, topic: str) -> list[bytes | None]:
    consumer = Consumer(
        {"bootstrap.servers": bootstrap, "group.id": f"read-{topic}", "enable.auto.commit": False}
    )
    try:
        consumer.assign([TopicPartition(topic, 0, 0)])
        values: list[bytes | None] = []
        for _ in range(60):
            for message in consumer.consume(RECORDS, timeout=1):
                assert message.error() is None, message.error()
                values.append(message.value())
            if len(values) >= RECORDS:
                break
        return values
    finally:
        consumer.close()


@pytest.mark.parametrize(
    ("forced", "sent"),
    [("lz4", "snappy"), ("gzip", "none"), ("uncompressed", "zstd"), ("zstd", "zstd")],
)
def test_forced_compression_type_stores_that_codec(tmp_path: Path, forced: str, sent: str) -> None:
    server = ServerProcess(tmp_path / "data").start()
    try:
        admin = AdminClient({"bootstrap.servers": server.bootstrap})
        topic = f"forced-{forced}"
        create(admin, topic, {"compression.type": forced, "compression.gzip.level": "9"})
        described = admin.describe_configs([ConfigResource(ResourceType.TOPIC, topic)])
        configs = next(iter(described.values())).result(timeout=10)
        assert configs["compression.type"].value == forced

        producer = Producer(
            {
                "bootstrap.servers": server.bootstrap,
                "compression.type": sent,
                "linger.ms": 20,
                "enable.idempotence": True,
            }
        )
        expected = [b"value-%04d-" % i + b"x" * 100 for i in range(RECORDS)]
        for value in expected:
            producer.produce(topic, value=value, partition=0)
        assert producer.flush(15) == 0

        assert read_values(server.bootstrap, topic) == expected
        codecs = stored_codecs(server, topic)
        assert codecs and set(codecs) == {CODECS[forced]}
    finally:
        server.kill()


def test_producer_compression_type_keeps_the_producers_codec(tmp_path: Path) -> None:
    server = ServerProcess(tmp_path / "data").start()
    try:
        admin = AdminClient({"bootstrap.servers": server.bootstrap})
        create(admin, "as-sent", {"compression.type": "producer"})
        # librdkafka sends a batch uncompressed when lz4 does not make it smaller (a lone
        # short record), so the values compress whatever the batching.
        producer = Producer(
            {"bootstrap.servers": server.bootstrap, "compression.type": "lz4", "linger.ms": 20}
        )
        for i in range(RECORDS):
            producer.produce("as-sent", value=b"v%04d-" % i + b"x" * 100, partition=0)
        assert producer.flush(15) == 0
        assert len(read_values(server.bootstrap, "as-sent")) == RECORDS
        assert set(stored_codecs(server, "as-sent")) == {CODECS["lz4"]}
    finally:
        server.kill()


def test_standard_topic_configs_are_accepted_and_checked(tmp_path: Path) -> None:
    server = ServerProcess(tmp_path / "data").start()
    try:
        admin = AdminClient({"bootstrap.servers": server.bootstrap})
        configs = {
            "compression.type": "zstd",
            "flush.ms": "1000",
            "flush.messages": "1",
            "preallocate": "true",
            "segment.index.bytes": "1048576",
            "segment.jitter.ms": "10",
            "index.interval.bytes": "8192",
        }
        create(admin, "standard", configs)
        described = admin.describe_configs([ConfigResource(ResourceType.TOPIC, "standard")])
        values = next(iter(described.values())).result(timeout=10)
        assert {name: values[name].value for name in configs} == configs

        refused = {
            "compression.type": (
                "none",
                "Invalid value none for configuration compression.type: String must be one "
                "of: uncompressed, zstd, lz4, snappy, gzip, producer",
            ),
            "flush.messages": (
                "0",
                "Invalid value 0 for configuration flush.messages: Value must be at least 1",
            ),
            "preallocate": (
                "yes",
                "Invalid value yes for configuration preallocate: Expected value to be "
                "either true or false",
            ),
            "compression.gzip.level": (
                "0",
                "Invalid value 0 for configuration compression.gzip.level: Value must be "
                "between 1 and 9 or equal to -1",
            ),
        }
        for name, (value, message) in refused.items():
            with pytest.raises(KafkaException) as bad:
                create(admin, f"bad-{name}", {name: value})
            assert bad.value.args[0].name() == "INVALID_CONFIG"
            assert bad.value.args[0].str() == message
    finally:
        server.kill()
