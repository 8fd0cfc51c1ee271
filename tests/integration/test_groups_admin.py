"""Group administration with AdminClient: list, describe, delete groups; list and alter
group offsets; removing static members (LeaveGroup by instance id, as Java's
removeMembersFromConsumerGroup sends)."""

from __future__ import annotations

import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from confluent_kafka import Consumer, ConsumerGroupTopicPartitions, TopicPartition
from confluent_kafka.admin import AdminClient

from tests.integration.group_support import GroupLog, Member, produce, wait_until
from tests.integration.test_clients import create_topic
from tests.rawclient import RawClient, request_class
from tests.support import ServerProcess, serving


@pytest.fixture
def group_server(tmp_path: Path) -> Iterator[ServerProcess]:
    with serving(tmp_path / "data", group_initial_rebalance_delay_ms=300) as proc:
        yield proc


def test_admin_groups_and_offsets(group_server: ServerProcess) -> None:
    bootstrap = group_server.bootstrap
    admin = AdminClient({"bootstrap.servers": bootstrap})
    create_topic(bootstrap, "admin-topic", 3)
    produce(bootstrap, "admin-topic", 3, 10, "x")
    log = GroupLog()
    members = [
        Member(
            f"a{i}",
            bootstrap,
            "live-group",
            "admin-topic",
            log,
            "range",
            f"inst-{i}",
            {"session.timeout.ms": 30000},
        )
        for i in range(2)
    ]
    for m in members:
        m.start()
    wait_until(lambda: sum(len(m.owned) for m in members) == 3, 30, "members to settle")

    # An offsets-only group (simple consumer commits, generation -1).
    altered = admin.alter_consumer_group_offsets(
        [
            ConsumerGroupTopicPartitions(
                "offsets-only", [TopicPartition("admin-topic", p, 5 + p) for p in range(3)]
            )
        ]
    )
    altered["offsets-only"].result(10)

    listed = admin.list_consumer_groups().result(10)
    states = {g.group_id: str(g.state) for g in listed.valid}
    assert "live-group" in states and "offsets-only" in states
    assert "STABLE" in states["live-group"].upper()
    assert "EMPTY" in states["offsets-only"].upper()

    described = admin.describe_consumer_groups(["live-group", "offsets-only"])
    live = described["live-group"].result(10)
    assert "STABLE" in str(live.state).upper()
    assert sorted(m.group_instance_id for m in live.members) == ["inst-0", "inst-1"]
    owned = sorted(tp.partition for m in live.members for tp in m.assignment.topic_partitions)
    assert owned == [0, 1, 2]
    assert live.partition_assignor == "range"

    offsets = admin.list_consumer_group_offsets(
        [
            ConsumerGroupTopicPartitions(
                "offsets-only", [TopicPartition("admin-topic", p) for p in range(3)]
            )
        ]
    )
    got = offsets["offsets-only"].result(10)
    assert sorted((tp.partition, tp.offset) for tp in got.topic_partitions) == [
        (0, 5),
        (1, 6),
        (2, 7),
    ]

    # A non-empty group cannot be deleted; an empty one can, offsets and all.
    deleted = admin.delete_consumer_groups(["live-group", "offsets-only"])
    with pytest.raises(Exception) as info:
        deleted["live-group"].result(10)
    assert "NON_EMPTY_GROUP" in str(info.value)
    deleted["offsets-only"].result(10)
    offsets = admin.list_consumer_group_offsets(
        [ConsumerGroupTopicPartitions("offsets-only", [TopicPartition("admin-topic", 0)])]
    )
    assert offsets["offsets-only"].result(10).topic_partitions[0].offset < 0

    # A static member that went away without leaving keeps its partitions until its session
    # times out (30 s here); removing it by instance id, as an admin tool does, hands them
    # over at once.
    members[1].stop()
    m = sys.modules[request_class(13, 5).__module__]
    with RawClient(bootstrap) as client:
        resp = client.request(
            13,
            5,
            m.LeaveGroupRequest(
                group_id="live-group",
                members=(
                    m.MemberIdentity(member_id="", group_instance_id="inst-1", reason="admin"),
                ),
            ),
        )
    assert resp.error_code == 0
    assert [(x.member_id, x.group_instance_id, x.error_code) for x in resp.members] == [
        ("", "inst-1", 0)
    ]
    wait_until(lambda: len(members[0].owned) == 3, 15, "the remaining member to take over")
    members[0].stop()


def _committed(bootstrap: str, group: str, topic: str) -> int:
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": group})
    try:
        return int(consumer.committed([TopicPartition(topic, 0)], timeout=10)[0].offset)
    finally:
        consumer.close()


def test_deleting_a_topic_deletes_its_committed_offsets(group_server: ServerProcess) -> None:
    """As Kafka's onPartitionsDeleted: a topic deleted and re-created under its name is read
    from its start by a group that had committed in the old one, not from the old offset
    (which would skip the new topic's first records); the tombstones survive a SIGKILL."""
    bootstrap = group_server.bootstrap
    admin = AdminClient({"bootstrap.servers": bootstrap})
    create_topic(bootstrap, "recreated", 1)
    produce(bootstrap, "recreated", 1, 5, "old")
    for group in ("reader", "bystander"):
        committer = Consumer(
            {"bootstrap.servers": bootstrap, "group.id": group, "enable.auto.commit": False}
        )
        committer.commit(offsets=[TopicPartition("recreated", 0, 5)], asynchronous=False)
        committer.close()
    assert _committed(bootstrap, "bystander", "recreated") == 5

    admin.delete_topics(["recreated"])["recreated"].result(10)
    create_topic(bootstrap, "recreated", 1)
    fresh = produce(bootstrap, "recreated", 1, 8, "new")
    reader = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": "reader",
            "auto.offset.reset": "earliest",
            "enable.auto.commit": False,
        }
    )
    reader.subscribe(["recreated"])
    got: list[bytes] = []
    deadline = time.monotonic() + 30
    while len(got) < len(fresh) and time.monotonic() < deadline:
        message = reader.poll(0.5)
        if message is not None and message.error() is None:
            got.append(message.value())
    reader.close()
    assert got == fresh  # from offset 0: nothing skipped

    group_server.restart()  # SIGKILL, then the same data directory
    assert _committed(group_server.bootstrap, "bystander", "recreated") == -1001  # none
