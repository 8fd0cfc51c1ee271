"""Coordinator durability by SIGKILL: acknowledged commits survive; groups, members and
generations are restored; members that keep heartbeating continue without rejoining."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from confluent_kafka import Consumer, TopicPartition
from confluent_kafka.admin import AdminClient, ConfigResource, ResourceType

from tests.integration.raw_groups import commit, fetch_offsets, heartbeat, join_until_member, sync
from tests.integration.test_clients import create_topic
from tests.rawclient import RawClient
from tests.support import ServerProcess, serving

GROUPS = 8
PARTITIONS = 4


@pytest.fixture
def group_server(tmp_path: Path) -> Iterator[ServerProcess]:
    with serving(tmp_path / "data", group_initial_rebalance_delay_ms=0) as proc:
        yield proc


def test_sigkill_under_commit_load_keeps_every_acknowledged_commit(
    group_server: ServerProcess,
) -> None:
    create_topic(group_server.bootstrap, "t", PARTITIONS)
    acked: dict[tuple[str, int], int] = {}
    attempted: dict[tuple[str, int], int] = {}
    lock = threading.Lock()
    stop = threading.Event()

    def committer(index: int) -> None:
        group = f"load-{index}"
        try:
            with RawClient(group_server.bootstrap, timeout_s=5) as client:
                offset = 0
                while not stop.is_set():
                    offset += 1
                    batch = {("t", p): offset for p in range(PARTITIONS)}
                    with lock:
                        for p in range(PARTITIONS):
                            attempted[(group, p)] = offset
                    resp = commit(client, group, batch)
                    assert all(p.error_code == 0 for t in resp.topics for p in t.partitions)
                    with lock:
                        for p in range(PARTITIONS):
                            acked[(group, p)] = offset
        except (ConnectionError, OSError):
            pass  # the server was killed

    threads = [threading.Thread(target=committer, args=(i,)) for i in range(GROUPS)]
    for t in threads:
        t.start()
    time.sleep(2)
    group_server.kill()
    with lock:
        acked_at_kill = dict(acked)
        attempted_at_kill = dict(attempted)
    stop.set()
    for t in threads:
        t.join(10)
    assert sum(acked_at_kill.values()) > 100, "the commit load did not get going"

    group_server.start()
    with RawClient(group_server.bootstrap) as client:
        for i in range(GROUPS):
            group = f"load-{i}"
            stored = fetch_offsets(client, group, {"t": list(range(PARTITIONS))})
            for p in range(PARTITIONS):
                key = (group, p)
                # Every acknowledged commit is there; at most an unacknowledged later one.
                assert acked_at_kill.get(key, -1) <= stored[("t", p)] <= attempted_at_kill[key]


def test_group_and_heartbeating_members_survive_a_crash(group_server: ServerProcess) -> None:
    with RawClient(group_server.bootstrap) as a, RawClient(group_server.bootstrap) as b:
        joined_a = join_until_member(a, "survivors", instance_id="static-a")
        assert joined_a.error_code == 0
        # The second member's join makes a new generation; answer both joins.
        results: dict[str, object] = {}

        def join_b() -> None:
            results["b"] = join_until_member(b, "survivors")

        thread = threading.Thread(target=join_b)
        thread.start()
        time.sleep(0.3)
        rejoin_a = join_until_member(
            a, "survivors", member_id=joined_a.member_id, instance_id="static-a"
        )
        thread.join(10)
        joined_b = results["b"]
        generation = rejoin_a.generation_id
        assert joined_b.generation_id == generation == 2  # type: ignore[attr-defined]
        leader = rejoin_a.leader
        assignments = {rejoin_a.member_id: b"for-a", joined_b.member_id: b"for-b"}  # type: ignore[attr-defined]

        def sync_b() -> None:
            results["sync_b"] = sync(b, "survivors", generation, joined_b.member_id)  # type: ignore[attr-defined]

        thread = threading.Thread(target=sync_b)
        thread.start()
        assert leader == rejoin_a.member_id
        synced_a = sync(
            a, "survivors", generation, rejoin_a.member_id, assignments, instance_id="static-a"
        )
        thread.join(10)
        assert synced_a.error_code == 0 and synced_a.assignment == b"for-a"
        assert results["sync_b"].assignment == b"for-b"  # type: ignore[attr-defined]
        member_a, member_b = rejoin_a.member_id, joined_b.member_id  # type: ignore[attr-defined]

    group_server.restart()
    with RawClient(group_server.bootstrap) as a, RawClient(group_server.bootstrap) as b:
        # Both keep heartbeating with the generation they had: no rejoin needed.
        deadline = time.monotonic() + 10
        while True:
            hb_a = heartbeat(a, "survivors", generation, member_a, instance_id="static-a")
            if hb_a.error_code != 14 or time.monotonic() > deadline:  # still loading
                break
            time.sleep(0.1)
        assert hb_a.error_code == 0
        assert heartbeat(b, "survivors", generation, member_b).error_code == 0
        # The stored assignment is served again.
        again = sync(b, "survivors", generation, member_b)
        assert again.error_code == 0 and again.assignment == b"for-b"


def test_a_changed_shard_count_setting_keeps_the_data_directorys_groups(tmp_path: Path) -> None:
    """offsets_partitions applies to a new data directory only, as Kafka's
    offsets.topic.num.partitions to a new __consumer_offsets: restarted (after a SIGKILL)
    with another value, the server keeps serving the directory's shards, so a group's
    committed offset is still found where its hash put it."""
    data = tmp_path / "data"
    with serving(data) as first:
        create_topic(first.bootstrap, "t", 2)
        consumer = Consumer(
            {"bootstrap.servers": first.bootstrap, "group.id": "kept", "enable.auto.commit": False}
        )
        consumer.commit(offsets=[TopicPartition("t", 1, 42)], asynchronous=False)
        consumer.close()
        first.kill()
    with serving(data, offsets_partitions=7) as second:
        consumer = Consumer({"bootstrap.servers": second.bootstrap, "group.id": "kept"})
        committed = consumer.committed([TopicPartition("t", 1)], timeout=10)
        consumer.close()
        assert committed[0].offset == 42
        broker = ConfigResource(ResourceType.BROKER, "0")
        admin = AdminClient({"bootstrap.servers": second.bootstrap})
        configs = admin.describe_configs([broker])[broker].result(timeout=10)
        assert configs["offsets.topic.num.partitions"].value == "50"
