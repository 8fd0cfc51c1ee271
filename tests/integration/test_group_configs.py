"""Dynamic group configs (issue 4 item 8): IncrementalAlterConfigs and DescribeConfigs on
GROUP resources with confluent-kafka's AdminClient, their effect on a consumer-protocol
member's heartbeat, and their persistence across a SIGKILL."""

from __future__ import annotations

import datetime
import sys
from typing import Any

import pytest
from confluent_kafka import KafkaException
from confluent_kafka.admin import (
    AdminClient,
    AlterConfigOpType,
    ConfigEntry,
    ConfigResource,
    ConfigSource,
    ResourceType,
)

from groupcoord.protocol.api import build
from tests.rawclient import RawClient, request_class
from tests.support import ServerProcess

HEARTBEAT = "consumer.heartbeat.interval.ms"
SESSION = "consumer.session.timeout.ms"


def alter(admin: AdminClient, group: str, *entries: tuple[str, str | None]) -> None:
    configs = [
        ConfigEntry(
            name,
            value,
            incremental_operation=AlterConfigOpType.SET
            if value is not None
            else AlterConfigOpType.DELETE,
        )
        for name, value in entries
    ]
    resource = ConfigResource(ResourceType.GROUP, group, incremental_configs=configs)
    admin.incremental_alter_configs([resource])[resource].result(timeout=10)


def describe(admin: AdminClient, group: str) -> dict[str, Any]:
    resource = ConfigResource(ResourceType.GROUP, group)
    return admin.describe_configs([resource])[resource].result(timeout=10)


def heartbeat_interval_ms(server: ServerProcess, group: str) -> int:
    """A consumer-protocol member joins `group`: the interval the coordinator gives it."""
    m = sys.modules[request_class(68, 1).__module__]
    with RawClient(server.bootstrap) as client:
        response = client.request(
            68,
            1,
            build(
                m.ConsumerGroupHeartbeatRequest,
                group_id=group,
                member_id="member-1",
                member_epoch=0,
                rebalance_timeout=datetime.timedelta(milliseconds=5000),
                subscribed_topic_names=("t",),
                topic_partitions=(),
            ),
        )
    assert response.error_code == 0, response
    return int(response.heartbeat_interval.total_seconds() * 1000)


def test_group_configs_are_described_altered_applied_and_persisted(tmp_path: Any) -> None:
    server = ServerProcess(
        tmp_path / "data", ["--set", "group_consumer_reconciling_heartbeat_interval_ms=0"]
    ).start()
    try:
        admin = AdminClient({"bootstrap.servers": server.bootstrap})
        described = describe(admin, "g1")
        assert described[HEARTBEAT].value == "5000"
        assert described[HEARTBEAT].source == ConfigSource.DEFAULT_CONFIG.value
        assert described[SESSION].value == "45000"

        alter(admin, "g1", (HEARTBEAT, "7000"), (SESSION, "50000"))
        described = describe(admin, "g1")
        assert described[HEARTBEAT].value == "7000"
        assert described[HEARTBEAT].source == ConfigSource.GROUP_CONFIG.value
        assert described[SESSION].value == "50000"
        assert describe(admin, "other")[HEARTBEAT].value == "5000"  # per group
        assert heartbeat_interval_ms(server, "g1") == 7000
        assert heartbeat_interval_ms(server, "other") == 5000

        # Kafka's bounds: INVALID_CONFIG and nothing changes.
        with pytest.raises(KafkaException) as bad:
            alter(admin, "g1", (SESSION, "1000"))
        assert bad.value.args[0].name() == "INVALID_CONFIG"
        with pytest.raises(KafkaException) as bad:
            alter(admin, "g1", (HEARTBEAT, "60000"))
        assert bad.value.args[0].name() == "INVALID_CONFIG"
        with pytest.raises(KafkaException) as bad:
            alter(admin, "g1", ("no.such.config", "1"))
        assert bad.value.args[0].name() == "INVALID_CONFIG"
        assert describe(admin, "g1")[SESSION].value == "50000"

        server.kill()
        server.restart()
        admin = AdminClient({"bootstrap.servers": server.bootstrap})
        described = describe(admin, "g1")
        assert described[HEARTBEAT].value == "7000"
        assert described[SESSION].value == "50000"

        alter(admin, "g1", (HEARTBEAT, None))  # DELETE: back to the broker's value
        assert describe(admin, "g1")[HEARTBEAT].value == "5000"
        assert describe(admin, "g1")[SESSION].value == "50000"
    finally:
        server.kill()
