"""A confluent-kafka consumer on the consumer rebalance protocol subscribing to a literal
topic and a regular expression (librdkafka sends the pattern as SubscribedTopicRegex): as
with Kafka 4.4, the regex is resolved after the join's heartbeat, so the first assignment
holds the literal topic's partitions only and the regex's arrive in a later one (issue 17
item 7b; tests/conformance compares the same steps with Kafka's answers)."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from confluent_kafka import Consumer, TopicPartition

from tests.integration.test_clients import create_topic
from tests.support import ServerProcess, serving

pytestmark = pytest.mark.integration


@pytest.fixture
def server(tmp_path: Path) -> Iterator[ServerProcess]:
    with serving(
        tmp_path / "data",
        group_consumer_heartbeat_interval_ms=500,
        group_consumer_assignment_interval_ms=0,
    ) as proc:
        yield proc


def test_regex_topics_are_assigned_one_heartbeat_after_the_literal_one(
    server: ServerProcess,
) -> None:
    create_topic(server.bootstrap, "lit-orders", 2)
    create_topic(server.bootstrap, "rx-payments", 3)
    create_topic(server.bootstrap, "rx-refunds", 1)
    assigned: list[set[tuple[str, int]]] = []
    lock = threading.Lock()

    def on_assign(consumer: Consumer, partitions: list[TopicPartition]) -> None:
        with lock:
            assigned.append({(tp.topic, tp.partition) for tp in partitions})

    consumer = Consumer(
        {
            "bootstrap.servers": server.bootstrap,
            "group.id": "regex-two-steps",
            "group.protocol": "consumer",
            "enable.auto.commit": False,
            "auto.offset.reset": "earliest",
        }
    )
    try:
        consumer.subscribe(["lit-orders", "^rx-.*"], on_assign=on_assign)
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            consumer.poll(0.2)
            with lock:
                if len(assigned) >= 2:
                    break
        with lock:
            steps = list(assigned)
    finally:
        consumer.close()
    # librdkafka's consumer protocol calls on_assign with the partitions added each time.
    assert len(steps) >= 2, steps
    assert steps[0] == {("lit-orders", 0), ("lit-orders", 1)}
    assert steps[1] == {
        ("rx-payments", 0),
        ("rx-payments", 1),
        ("rx-payments", 2),
        ("rx-refunds", 0),
    }
