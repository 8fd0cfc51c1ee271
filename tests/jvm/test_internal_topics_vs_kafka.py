"""__consumer_offsets against Apache Kafka 4.4 (issue 19 item 1), the same checks on both
brokers: listed with is_internal and offsets.topic.num.partitions partitions; read by
confluent-kafka and kafka-python, its records decoded by the project's coordinator-record
codec (which reads Kafka's own records as well as ours) to find the commit the test made;
Produce refused with INVALID_TOPIC_EXCEPTION; DescribeConfigs giving Kafka's topic configs
as overrides. (DeleteTopics and CreatePartitions are not compared: Kafka 4.4 without an
authorizer performs them; groupcoord refuses them, a documented decision.)"""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from confluent_kafka import KafkaError, Producer
from confluent_kafka.admin import AdminClient, ConfigResource, ResourceType
from kafka import KafkaAdminClient

from groupcoord.coordinator.runtime.partitioning import shard_for
from tests.integration.test_clients import create_topic
from tests.integration.test_internal_topics import (
    OFFSETS,
    TIMEOUT_S,
    commit,
    offset_commits,
    read_confluent,
    read_kafka_python,
)
from tests.jvm.differential import on_both
from tests.jvm.kafka_broker import KafkaBroker
from tests.support import serving

pytestmark = [pytest.mark.jvm]

# Kafka's offsets.topic.num.partitions default, and groupcoord's offsets_partitions.
SHARDS = 50


@pytest.fixture(scope="module")
def targets(
    reference_kafka: KafkaBroker, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[dict[str, str]]:
    with serving(tmp_path_factory.mktemp("groupcoord") / "data") as server:
        yield {"groupcoord": server.bootstrap, "kafka": reference_kafka.bootstrap}


def test_consumer_offsets_as_kafka_serves_it(targets: dict[str, str]) -> None:
    def scenario(target: str, bootstrap: str) -> None:
        topic, group = f"internal-{target}", f"g-internal-{target}"
        create_topic(bootstrap, topic, 1)
        commit(bootstrap, group, topic, 42, "made by the test")
        listed = AdminClient({"bootstrap.servers": bootstrap}).list_topics(timeout=10).topics
        assert len(listed[OFFSETS].partitions) == SHARDS, (
            f"{target}: {len(listed[OFFSETS].partitions)}"
        )
        described = KafkaAdminClient(bootstrap_servers=bootstrap).describe_topics([OFFSETS])
        assert described[0]["is_internal"] is True, f"{target}: {described[0]}"

        expected = [(topic, 0, 42, "made by the test")]
        partition = shard_for(group, SHARDS)

        def found(records: list[tuple[bytes | None, bytes | None]]) -> bool:
            return offset_commits(records, group) == expected

        for isolation in ("read_committed", "read_uncommitted"):
            records = read_confluent(bootstrap, partition, isolation, found)
            assert found(records), f"{target} {isolation}: {offset_commits(records, group)}"
        records = read_kafka_python(bootstrap, partition, found)
        assert found(records), f"{target} kafka-python: {offset_commits(records, group)}"

        producer = Producer({"bootstrap.servers": bootstrap, "message.timeout.ms": 10_000})
        delivered: list[KafkaError | None] = []
        producer.produce(OFFSETS, b"x", partition=0, on_delivery=lambda e, _m: delivered.append(e))
        producer.flush(TIMEOUT_S)
        codes = [e.code() if e else None for e in delivered]
        assert codes == [KafkaError.TOPIC_EXCEPTION], f"{target}: {codes}"

        resource = ConfigResource(ResourceType.TOPIC, OFFSETS)
        admin = AdminClient({"bootstrap.servers": bootstrap})
        configs = admin.describe_configs([resource])[resource].result(TIMEOUT_S)
        got = {
            name: (configs[name].value, configs[name].source)
            for name in ("cleanup.policy", "compression.type", "segment.bytes")
        }
        assert got == {
            "cleanup.policy": ("compact", 1),
            "compression.type": ("producer", 1),
            "segment.bytes": ("104857600", 1),
        }, f"{target}: {got}"

    on_both(targets, scenario)
