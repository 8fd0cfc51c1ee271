"""Topic configs with confluent-kafka's AdminClient: IncrementalAlterConfigs on a TOPIC
resource (SET, DELETE), seen by DescribeConfigs with its source and kept across a SIGKILL;
a broker config Kafka cannot update dynamically is refused, dynamic ones kept and applied;
and CreateTopics refuses a name that collides with an existing topic once '.' and '_' are
unified."""

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

from tests.support import ServerProcess, serving

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

        # A broker config Kafka cannot update dynamically is refused as Kafka refuses it.
        with pytest.raises(KafkaException) as bad:
            alter(admin, ResourceType.BROKER, "0", ("log.dirs", "/tmp/elsewhere"))
        assert bad.value.args[0].name() == "INVALID_REQUEST"
        assert bad.value.args[0].str() == "Cannot update these configs dynamically: [log.dirs]"

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


def test_dynamic_broker_configs_apply_and_survive_sigkill(tmp_path: Any) -> None:
    """IncrementalAlterConfigs on BROKER resources as Kafka 4.4 answers it (issue 17 item
    7c): dynamic configs are accepted (log.retention.ms becomes the retention of topics
    without their own, compression.type, max.connections and a name Kafka does not know
    are kept), bad values refused with Kafka's message; DescribeConfigs shows them with
    Kafka's sources; a SIGKILL and a restart keep them."""
    with serving(tmp_path / "data") as server:
        admin = AdminClient({"bootstrap.servers": server.bootstrap})
        create(admin, "plain")
        alter(admin, ResourceType.BROKER, "0", ("log.retention.ms", "3600000"))
        alter(
            admin,
            ResourceType.BROKER,
            "0",
            ("log.retention.ms", "3600000"),
            ("compression.type", "gzip"),
            ("max.connections", "500"),
            ("custom.plugin.setting", "x"),
        )
        with pytest.raises(KafkaException) as bad:
            alter(admin, ResourceType.BROKER, "0", ("max.connections", "-5"))
        assert bad.value.args[0].name() == "INVALID_REQUEST"
        assert bad.value.args[0].str() == (
            "Invalid value -5 for configuration max.connections: Value must be at least 0"
        )
        with pytest.raises(KafkaException) as bad:
            alter(admin, ResourceType.BROKER, "0", ("compression.type", "nope"))
        assert bad.value.args[0].str() == (
            "Invalid value nope for configuration compression.type: String must be one of: "
            "uncompressed, zstd, lz4, snappy, gzip, producer"
        )

        def check(admin: AdminClient) -> None:
            broker = ConfigResource(ResourceType.BROKER, "0")
            described = admin.describe_configs([broker])[broker].result(timeout=10)
            retention = described["log.retention.ms"]
            assert retention.value == "3600000"
            assert retention.source == ConfigSource.DYNAMIC_BROKER_CONFIG.value
            assert not retention.is_read_only
            assert described["compression.type"].value == "gzip"
            assert described["max.connections"].value == "500"
            assert described["log.dirs"].is_read_only
            topic = describe(admin, "plain")
            assert topic["retention.ms"].value == "3600000"

        check(admin)
        server.kill()
        server.restart()
        check(AdminClient({"bootstrap.servers": server.bootstrap}))
