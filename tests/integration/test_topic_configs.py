"""Topic configs with confluent-kafka's AdminClient: IncrementalAlterConfigs on a TOPIC
resource (SET, DELETE), seen by DescribeConfigs with its source and kept across a SIGKILL;
a broker config is refused as not dynamic; and CreateTopics refuses a name that collides
with an existing topic once '.' and '_' are unified."""

from __future__ import annotations

from typing import Any

import pytest
from confluent_kafka import KafkaException
from confluent_kafka.admin import (
    AdminClient,
    AlterConfigOpType,
    ConfigEntry,
    ConfigResource,
    ConfigSource,
    NewTopic,
    ResourceType,
)

from tests.support import ServerProcess

TOPIC = "orders.v1"


def alter(
    admin: AdminClient, rtype: ResourceType, name: str, *entries: tuple[str, str | None]
) -> None:
    configs = [
        ConfigEntry(
            config,
            value,
            incremental_operation=AlterConfigOpType.SET
            if value is not None
            else AlterConfigOpType.DELETE,
        )
        for config, value in entries
    ]
    resource = ConfigResource(rtype, name, incremental_configs=configs)
    admin.incremental_alter_configs([resource])[resource].result(timeout=10)


def describe(admin: AdminClient, name: str) -> dict[str, Any]:
    resource = ConfigResource(ResourceType.TOPIC, name)
    return admin.describe_configs([resource])[resource].result(timeout=10)


def create(admin: AdminClient, name: str) -> None:
    futures = admin.create_topics([NewTopic(name, num_partitions=1, replication_factor=1)])
    futures[name].result(timeout=10)


def test_topic_configs_are_altered_described_and_persisted(tmp_path: Any) -> None:
    server = ServerProcess(tmp_path / "data").start()
    try:
        admin = AdminClient({"bootstrap.servers": server.bootstrap})
        create(admin, TOPIC)
        default_retention = describe(admin, TOPIC)["retention.ms"].value

        alter(
            admin,
            ResourceType.TOPIC,
            TOPIC,
            ("retention.ms", "60000"),
            ("segment.bytes", "1048576"),
        )
        described = describe(admin, TOPIC)
        assert described["retention.ms"].value == "60000"
        assert described["retention.ms"].source == ConfigSource.DYNAMIC_TOPIC_CONFIG.value
        assert described["segment.bytes"].value == "1048576"

        # Invalid values, unknown topics and APPEND on a scalar config change nothing.
        with pytest.raises(KafkaException) as bad:
            alter(admin, ResourceType.TOPIC, TOPIC, ("segment.bytes", "3000000000"))
        assert bad.value.args[0].name() == "INVALID_CONFIG"
        with pytest.raises(KafkaException) as bad:
            alter(admin, ResourceType.TOPIC, "no-such-topic", ("retention.ms", "1"))
        assert bad.value.args[0].name() == "UNKNOWN_TOPIC_OR_PART"
        append = ConfigResource(
            ResourceType.TOPIC,
            TOPIC,
            incremental_configs=[
                ConfigEntry("retention.ms", "1", incremental_operation=AlterConfigOpType.APPEND)
            ],
        )
        with pytest.raises(KafkaException) as bad:
            admin.incremental_alter_configs([append])[append].result(timeout=10)
        assert bad.value.args[0].name() == "INVALID_CONFIG"
        assert describe(admin, TOPIC)["segment.bytes"].value == "1048576"

        # Broker configs are not dynamic here: refused as Kafka refuses a static one.
        with pytest.raises(KafkaException) as bad:
            alter(admin, ResourceType.BROKER, "0", ("log.retention.ms", "1"))
        assert bad.value.args[0].name() == "INVALID_REQUEST"
        assert "Cannot update these configs dynamically" in bad.value.args[0].str()

        # A colliding name is refused (Kafka: INVALID_TOPIC_EXCEPTION, 17).
        with pytest.raises(KafkaException) as bad:
            create(admin, "orders_v1")
        assert bad.value.args[0].code() == 17
        assert "collides with existing topics: orders.v1" in bad.value.args[0].str()

        server.kill()
        server.restart()
        admin = AdminClient({"bootstrap.servers": server.bootstrap})
        described = describe(admin, TOPIC)
        assert described["retention.ms"].value == "60000"
        assert described["segment.bytes"].value == "1048576"
        assert described["segment.bytes"].source == ConfigSource.DYNAMIC_TOPIC_CONFIG.value

        alter(admin, ResourceType.TOPIC, TOPIC, ("retention.ms", None))  # DELETE
        described = describe(admin, TOPIC)
        assert described["retention.ms"].value == default_retention
        assert described["retention.ms"].source == ConfigSource.DEFAULT_CONFIG.value
        assert described["segment.bytes"].value == "1048576"
    finally:
        server.kill()
