"""__consumer_offsets and __transaction_state as Kafka's internal topics (issue 19 item 1):
listed once they exist, with is_internal; read by confluent-kafka and kafka-python, the
records decoded with the project's coordinator-record codec (a commit the test made, a
transactional commit shown to read_committed readers only once committed, an aborted one
never); Produce, DeleteTopics, CreatePartitions and config changes refused; DescribeConfigs
answering Kafka's topic configs."""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Consumer, KafkaError, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import (
    AdminClient,
    AlterConfigOpType,
    ConfigEntry,
    ConfigResource,
    NewPartitions,
    ResourceType,
)
from kafka import KafkaAdminClient, KafkaConsumer
from kafka import TopicPartition as KpTopicPartition

from groupcoord.coordinator.runtime.partitioning import shard_for
from groupcoord.protocol.records import OffsetCommitKey, OffsetCommitValue, decode_record
from tests.integration.test_clients import create_topic
from tests.rawclient import RawClient
from tests.support import ServerProcess, serving
from tests.wire_session import entity, request

OFFSETS = "__consumer_offsets"
TXN_STATE = "__transaction_state"
SHARDS = 5
TXN_SHARDS = 3
TIMEOUT_S = 30


@pytest.fixture
def server(tmp_path: Path) -> Iterator[ServerProcess]:
    with serving(
        tmp_path / "data", offsets_partitions=SHARDS, transaction_state_partitions=TXN_SHARDS
    ) as proc:
        yield proc


def commit(bootstrap: str, group: str, topic: str, offset: int, metadata: str) -> None:
    """An OffsetCommit of `group` without a subscription (a simple group)."""
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": group})
    try:
        consumer.commit(
            offsets=[TopicPartition(topic, 0, offset, metadata=metadata)], asynchronous=False
        )
    finally:
        consumer.close()


def offset_commits(records: list[tuple[bytes | None, bytes | None]], group: str) -> list[Any]:
    """(topic, partition, offset, metadata) of `group`'s offset commits among the records."""
    found = []
    for key, value in records:
        assert key is not None
        decoded_key, decoded_value = decode_record(key, value)
        if isinstance(decoded_key, OffsetCommitKey) and decoded_key.group == group:
            assert isinstance(decoded_value, OffsetCommitValue)
            found.append(
                (
                    decoded_key.topic,
                    decoded_key.partition,
                    decoded_value.offset,
                    # librdkafka sends the metadata string with its C terminator.
                    decoded_value.metadata.rstrip("\x00"),
                )
            )
    return found


def read_confluent(
    bootstrap: str, partition: int, isolation: str, until: Any
) -> list[tuple[bytes | None, bytes | None]]:
    """The records of __consumer_offsets-`partition` from its start, read until
    `until(records)` holds (or the time is up)."""
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": f"reader-{uuid.uuid4().hex[:6]}",
            "enable.auto.commit": False,
            "isolation.level": isolation,
        }
    )
    records: list[tuple[bytes | None, bytes | None]] = []
    try:
        consumer.assign([TopicPartition(OFFSETS, partition, 0)])
        deadline = time.monotonic() + TIMEOUT_S
        while time.monotonic() < deadline and not until(records):
            for message in consumer.consume(100, 0.5):
                assert message.error() is None, message.error()
                records.append((message.key(), message.value()))
    finally:
        consumer.close()
    return records


def read_kafka_python(
    bootstrap: str, partition: int, until: Any
) -> list[tuple[bytes | None, bytes | None]]:
    consumer = KafkaConsumer(
        bootstrap_servers=bootstrap, enable_auto_commit=False, auto_offset_reset="earliest"
    )
    records: list[tuple[bytes | None, bytes | None]] = []
    try:
        tp = KpTopicPartition(OFFSETS, partition)
        consumer.assign([tp])
        consumer.seek_to_beginning(tp)
        deadline = time.monotonic() + TIMEOUT_S
        while time.monotonic() < deadline and not until(records):
            for batch in consumer.poll(500).values():
                records.extend((r.key, r.value) for r in batch)
    finally:
        consumer.close()
    return records


def test_consumer_offsets_is_listed_once_it_exists_and_read_by_both_clients(
    server: ServerProcess,
) -> None:
    bootstrap = server.bootstrap
    admin = AdminClient({"bootstrap.servers": bootstrap})
    # Kafka creates the internal topics on the first FindCoordinator of their key type.
    assert not {OFFSETS, TXN_STATE} & set(admin.list_topics(timeout=10).topics)
    create_topic(bootstrap, "events", 1)
    group = "g-internal"
    commit(bootstrap, group, "events", 42, "made by the test")
    listed = admin.list_topics(timeout=10).topics
    assert OFFSETS in listed and TXN_STATE not in listed
    assert len(listed[OFFSETS].partitions) == SHARDS
    described = KafkaAdminClient(bootstrap_servers=bootstrap).describe_topics([OFFSETS])
    assert described[0]["is_internal"] is True
    assert len(described[0]["partitions"]) == SHARDS

    expected = [("events", 0, 42, "made by the test")]
    partition = shard_for(group, SHARDS)

    def found(records: list[tuple[bytes | None, bytes | None]]) -> bool:
        return offset_commits(records, group) == expected

    for isolation in ("read_committed", "read_uncommitted"):
        assert found(read_confluent(bootstrap, partition, isolation, found)), isolation
    assert found(read_kafka_python(bootstrap, partition, found))

    # A later commit reaches a reader parked in a long poll (woken by the shard's fsync).
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": "tail-reader",
            "fetch.wait.max.ms": 10_000,
        }
    )
    try:
        end = consumer.get_watermark_offsets(TopicPartition(OFFSETS, partition), TIMEOUT_S)[1]
        assert end > 0
        consumer.assign([TopicPartition(OFFSETS, partition, end)])
        consumer.consume(10, 1.0)  # parked at the end
        commit(bootstrap, group, "events", 43, "later")
        tail: list[tuple[bytes | None, bytes | None]] = []
        deadline = time.monotonic() + TIMEOUT_S
        while time.monotonic() < deadline and not offset_commits(tail, group):
            tail.extend((m.key(), m.value()) for m in consumer.consume(10, 0.5) if not m.error())
        assert offset_commits(tail, group) == [("events", 0, 43, "later")]
    finally:
        consumer.close()


def test_transactional_offset_commits_follow_their_markers(server: ServerProcess) -> None:
    """The shard log carries TxnOffsetCommit batches and their markers: a read_committed
    reader sees a committed transaction's offsets and never an aborted one's; a
    read_uncommitted reader sees both (the aborted transactions list is what tells them
    apart)."""
    bootstrap = server.bootstrap
    create_topic(bootstrap, "txn-in", 1)
    create_topic(bootstrap, "txn-out", 1)
    group = "g-txn-internal"
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": group})
    producer = Producer({"bootstrap.servers": bootstrap, "transactional.id": "internal-txn"})
    try:
        producer.init_transactions(TIMEOUT_S)
        for offset, outcome in ((99, "abort"), (7, "commit")):
            producer.begin_transaction()
            producer.produce("txn-out", b"x", partition=0)
            producer.send_offsets_to_transaction(
                [TopicPartition("txn-in", 0, offset)],
                consumer.consumer_group_metadata(),
                TIMEOUT_S,
            )
            if outcome == "abort":
                producer.flush(TIMEOUT_S)
                producer.abort_transaction(TIMEOUT_S)
            else:
                producer.commit_transaction(TIMEOUT_S)
    finally:
        consumer.close()
    partition = shard_for(group, SHARDS)

    def committed_seen(records: list[tuple[bytes | None, bytes | None]]) -> bool:
        return any(o[2] == 7 for o in offset_commits(records, group))

    committed = read_confluent(bootstrap, partition, "read_committed", committed_seen)
    assert [o[2] for o in offset_commits(committed, group)] == [7]
    uncommitted = read_confluent(bootstrap, partition, "read_uncommitted", committed_seen)
    assert [o[2] for o in offset_commits(uncommitted, group)] == [99, 7]
    listed = AdminClient({"bootstrap.servers": bootstrap}).list_topics(timeout=10).topics
    assert len(listed[TXN_STATE].partitions) == TXN_SHARDS


def _error(future: Any) -> KafkaError | None:
    try:
        future.result(TIMEOUT_S)
    except KafkaException as e:
        error: KafkaError = e.args[0]
        return error
    return None


def test_internal_topics_refuse_writes_and_describe_kafkas_configs(server: ServerProcess) -> None:
    bootstrap = server.bootstrap
    create_topic(bootstrap, "anything", 1)
    commit(bootstrap, "g-refuse", "anything", 1, "")
    admin = AdminClient({"bootstrap.servers": bootstrap})
    producer = Producer({"bootstrap.servers": bootstrap, "message.timeout.ms": 10_000})
    delivered: list[KafkaError | None] = []
    producer.produce(OFFSETS, b"x", partition=0, on_delivery=lambda e, _m: delivered.append(e))
    producer.flush(TIMEOUT_S)
    assert [e.code() if e else None for e in delivered] == [KafkaError.TOPIC_EXCEPTION]

    refusals = {
        "delete": _error(admin.delete_topics([OFFSETS])[OFFSETS]),
        "create partitions": _error(
            admin.create_partitions([NewPartitions(OFFSETS, SHARDS + 1)])[OFFSETS]
        ),
        "alter configs": _error(
            next(
                iter(
                    admin.incremental_alter_configs(
                        [
                            ConfigResource(
                                ResourceType.TOPIC,
                                OFFSETS,
                                incremental_configs=[
                                    ConfigEntry(
                                        "retention.ms",
                                        "1000",
                                        incremental_operation=AlterConfigOpType.SET,
                                    )
                                ],
                            )
                        ]
                    ).values()
                )
            )
        ),
    }
    assert {k: e.code() if e else None for k, e in refusals.items()} == dict.fromkeys(
        refusals, KafkaError.TOPIC_EXCEPTION
    )
    exists = _error(admin.create_topics([_new_topic(OFFSETS)])[OFFSETS])
    assert exists is not None and exists.code() == KafkaError.TOPIC_ALREADY_EXISTS
    # Still there, whole, and still read.
    assert len(admin.list_topics(timeout=10).topics[OFFSETS].partitions) == SHARDS

    resource = ConfigResource(ResourceType.TOPIC, OFFSETS)
    configs = admin.describe_configs([resource])[resource].result(TIMEOUT_S)
    assert configs["cleanup.policy"].value == "compact"
    assert configs["compression.type"].value == "producer"
    assert configs["cleanup.policy"].source == 1  # a topic override, as Kafka shows it


def _new_topic(name: str) -> Any:
    from confluent_kafka.admin import NewTopic

    return NewTopic(name, num_partitions=1, replication_factor=1)


def _metadata(client: Any, name: str, allow_auto: bool) -> Any:
    body = request(
        3,
        12,
        topics=(entity(3, 12, "MetadataRequestTopic", name=name, topic_id=None),),
        allow_auto_topic_creation=allow_auto,
        include_topic_authorized_operations=False,
    )
    (topic,) = client.request(3, 12, body).topics
    return topic


def test_metadata_allowing_auto_creation_makes_an_internal_topic_exist(
    server: ServerProcess,
) -> None:
    """As Kafka's AutoTopicCreationManager: an internal topic named by a Metadata request that
    allows auto-creation is created (here: listed from then on), whatever
    auto.create.topics.enable says; one that does not allow it is told the topic is
    unknown."""
    with RawClient(server.bootstrap) as client:
        refused = _metadata(client, TXN_STATE, allow_auto=False)
        assert refused.error_code == 3  # UNKNOWN_TOPIC_OR_PARTITION
        made = _metadata(client, TXN_STATE, allow_auto=True)
        assert (made.error_code, made.is_internal, len(made.partitions)) == (0, True, TXN_SHARDS)
        again = _metadata(client, TXN_STATE, allow_auto=False)
        assert (again.error_code, again.topic_id) == (0, made.topic_id)
    listed = AdminClient({"bootstrap.servers": server.bootstrap}).list_topics(timeout=10).topics
    assert TXN_STATE in listed and OFFSETS not in listed
