"""Topic partitions of three `serve --cluster` nodes stored in PostgreSQL and led under
`partition:<topic>:<p>` leases (issue 22 item 2b), real processes, confluent-kafka clients:
Metadata names each partition's lease owner; acks=all records produced through any node
are consumed back byte for byte from the leaders; SIGKILL of a busy partition's leader
under idempotent produce + commit load: another node leads it within the lease, every
acknowledged record is read back exactly once, the rows' offsets never overlap (one
writer at a time) and the database refuses the old epoch; SIGSTOP of a leader past its
lease: its partitions move, it writes nothing more at its old epoch, and it rejoins;
DeleteRecords moves a partition's log start in the rows, kept by the next leader."""

from __future__ import annotations

import os
import signal
import threading
import time
from typing import Any

import pytest
from confluent_kafka import (
    OFFSET_BEGINNING,
    Consumer,
    KafkaError,
    KafkaException,
    Producer,
    TopicPartition,
)
from confluent_kafka.admin import AdminClient, NewTopic

from groupcoord.coordinator.cluster.schema import FENCED_WRITE_GUARD
from tests.cluster_support import (
    PARTITIONS,
    TOPIC,
    Cluster,
    CommitLoad,
    check_nothing_lost,
    cluster_fixture,
    has_topic,
    until,
)
from tests.rawclient import delete_records

pytestmark = pytest.mark.integration

cluster = pytest.fixture(scope="module", name="cluster")(cluster_fixture)


class ProduceLoad(threading.Thread):
    """An idempotent acks=all producer sending numbered values to `partitions` as fast as
    it is acknowledged; `acked[p]`: the values acknowledged for partition p, in order."""

    def __init__(self, bootstrap: str, partitions: list[int], tag: str) -> None:
        super().__init__(daemon=True)
        self.producer = Producer(
            {
                "bootstrap.servers": bootstrap,
                "enable.idempotence": True,
                "acks": "all",
                "linger.ms": 2,
                "message.timeout.ms": 120_000,
                "topic.metadata.refresh.interval.ms": 1000,
            }
        )
        self.partitions = partitions
        self.tag = tag
        self.acked: dict[int, list[bytes]] = {p: [] for p in partitions}
        self.failed = 0
        self.stopping = threading.Event()

    def _delivered(self, error: Any, message: Any) -> None:
        if error is None:
            self.acked[message.partition()].append(message.value())
        else:
            self.failed += 1

    def run(self) -> None:
        n = 0
        while not self.stopping.is_set():
            for p in self.partitions:
                value = f"{self.tag}-{p}-{n:08d}".encode() + b"x" * 100
                while True:
                    try:
                        self.producer.produce(
                            TOPIC, value, partition=p, on_delivery=self._delivered
                        )
                        break
                    except BufferError:
                        self.producer.poll(0.05)
            n += 1
            self.producer.poll(0)
            if n % 50 == 0:
                self.producer.poll(0.01)
        self.producer.flush(120)

    def stop(self) -> None:
        self.stopping.set()
        self.join(180)

    def count(self) -> int:
        return sum(len(v) for v in self.acked.values())

    def wait_acked(self, more: int) -> None:
        target = self.count() + more
        until(lambda: self.count() >= target, f"{more} more acknowledged records")


def consume_all(bootstrap: str, partition: int) -> list[tuple[int, bytes]]:
    """(offset, value) of every record of the partition, up to its high watermark."""
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": "reader",
            "enable.auto.commit": False,
            "topic.metadata.refresh.interval.ms": 1000,
        }
    )
    try:
        _, high = consumer.get_watermark_offsets(TopicPartition(TOPIC, partition), timeout=60)
        consumer.assign([TopicPartition(TOPIC, partition, OFFSET_BEGINNING)])
        found: list[tuple[int, bytes]] = []
        deadline = time.monotonic() + 120
        while (not found or found[-1][0] < high - 1) and high > 0:
            assert time.monotonic() < deadline, f"read {len(found)} records of {high}"
            message = consumer.poll(1.0)
            if message is None or message.error() is not None:
                continue
            found.append((message.offset(), message.value()))
        return found
    finally:
        consumer.close()


def wait_all_led(cluster: Cluster) -> None:
    until(
        lambda: sum(cluster.held("partition").values()) == PARTITIONS,
        "every partition leased",
    )


def offsets_contiguous(cluster: Cluster, partition: int) -> None:
    """The partition's rows cover their offsets once each: no two writers ever wrote the
    same offsets (a stale leader's rows would overlap the new leader's)."""
    rows = cluster.query(
        "SELECT base_offset, last_offset FROM partition_batches"
        " WHERE topic = $1 AND partition = $2 ORDER BY base_offset",
        TOPIC,
        partition,
    )
    for before, after in zip(rows, rows[1:], strict=False):
        assert after[0] == before[1] + 1, (before, after)


def test_metadata_names_the_lease_owners_and_records_come_back(cluster: Cluster) -> None:
    wait_all_led(cluster)
    owners = {p: cluster.partition_owner(TOPIC, p)[0] for p in range(PARTITIONS)}
    for node in cluster.nodes.values():
        admin = AdminClient({"bootstrap.servers": node.bootstrap})
        until(
            lambda admin=admin: (
                {
                    p: m.leader
                    for p, m in admin.list_topics(TOPIC, timeout=30)
                    .topics[TOPIC]
                    .partitions.items()
                }
                == owners
            ),
            "Metadata naming the lease owners",
        )
    load = ProduceLoad(cluster.nodes[1].bootstrap, list(range(PARTITIONS)), "first")
    load.start()
    load.wait_acked(400)
    load.stop()
    assert load.failed == 0
    for p in range(PARTITIONS):
        values = [value for _, value in consume_all(cluster.bootstrap, p)]
        assert values == load.acked[p]  # byte for byte, in order, once
        offsets_contiguous(cluster, p)


def test_sigkill_of_a_busy_partitions_leader(cluster: Cluster) -> None:
    wait_all_led(cluster)
    owner, epoch = cluster.partition_owner(TOPIC, 0)
    produce = ProduceLoad(cluster.bootstrap, list(range(PARTITIONS)), "kill")
    commits = CommitLoad(cluster.bootstrap, "partition-kill")
    produce.start()
    commits.start()
    victim = cluster.nodes[owner]
    try:
        produce.wait_acked(400)
        commits.wait_commits(20)
        victim.kill()
        until(
            lambda: cluster.partition_owner(TOPIC, 0)[0] not in (-1, owner),
            "another node leading the partition",
        )
        new_owner, new_epoch = cluster.partition_owner(TOPIC, 0)
        assert new_epoch > epoch
        acked_before = len(produce.acked[0])
        until(lambda: len(produce.acked[0]) > acked_before + 100, "partition 0 acknowledged again")
        commits.wait_commits(20)
    finally:
        produce.stop()
        commits.stop()
    assert produce.failed == 0
    check_nothing_lost(cluster, "partition-kill", commits)
    for p in range(PARTITIONS):
        values = [value for _, value in consume_all(cluster.bootstrap, p)]
        mine = [v for v in values if v.startswith(b"kill-")]
        assert len(mine) == len(set(mine)), "a record stored twice"
        assert set(produce.acked[p]) <= set(mine), "an acknowledged record lost"
        offsets_contiguous(cluster, p)
    # The killed leader's epoch is refused by the database's guard: it cannot write.
    refused = cluster.query(FENCED_WRITE_GUARD, f"partition:{TOPIC}:0", owner, epoch)
    assert refused == []
    victim.start()  # it rejoins (4 partitions on 3 nodes: the others may keep theirs)
    until(lambda: sorted(cluster.held().values()) == [2, 2, 2], "the shards split again")
    wait_all_led(cluster)


@pytest.mark.slow
def test_sigstop_of_a_leader_past_its_lease(cluster: Cluster) -> None:
    wait_all_led(cluster)
    owner, epoch = cluster.partition_owner(TOPIC, 1)
    paused = cluster.nodes[owner]
    produce = ProduceLoad(cluster.bootstrap, [1], "stop")
    produce.start()
    try:
        produce.wait_acked(200)
        assert paused.proc is not None
        os.killpg(paused.proc.pid, signal.SIGSTOP)
        try:
            until(
                lambda: cluster.partition_owner(TOPIC, 1)[0] not in (-1, owner),
                "the partition moving away",
            )
            produce.wait_acked(200)
        finally:
            os.killpg(paused.proc.pid, signal.SIGCONT)
        # Awake: it lost the lease and writes nothing at its old epoch.
        assert cluster.query(FENCED_WRITE_GUARD, f"partition:{TOPIC}:1", owner, epoch) == []
        until(lambda: cluster.held().get(owner, 0) >= 1, "the paused node taking a share")
        produce.wait_acked(200)
    finally:
        produce.stop()
    assert produce.failed == 0
    values = [value for _, value in consume_all(cluster.bootstrap, 1)]
    mine = [v for v in values if v.startswith(b"stop-")]
    assert len(mine) == len(set(mine)), "a record stored twice"
    assert set(produce.acked[1]) <= set(mine), "an acknowledged record lost"
    offsets_contiguous(cluster, 1)
    assert paused.alive()


def test_offsets_by_timestamp_from_the_rows_and_delete_topics_drops_them(
    cluster: Cluster,
) -> None:
    topic = "timed"
    # Topics follow the metadata store: created through one node, served by all.
    admin = AdminClient({"bootstrap.servers": cluster.nodes[1].bootstrap})
    admin.create_topics([NewTopic(topic, 1, 1)])[topic].result(30)
    until(lambda: all(has_topic(n.bootstrap, topic) for n in cluster.nodes.values()), topic)
    until(lambda: cluster.partition_owner(topic, 0)[0] != -1, "the new partition leased")
    producer = Producer({"bootstrap.servers": cluster.bootstrap, "acks": "all"})
    base_ms = 1_700_000_000_000
    for i in range(10):
        producer.produce(topic, b"r%d" % i, partition=0, timestamp=base_ms + 1000 * i)
    assert producer.flush(60) == 0
    consumer = Consumer({"bootstrap.servers": cluster.bootstrap, "group.id": "times"})
    try:
        consumer.assign([TopicPartition(topic, 0, OFFSET_BEGINNING)])  # learns its leader
        until(lambda: consumer.poll(1.0) is not None, "a record read")
        # Lookups by timestamp read the rows in PostgreSQL.
        found = consumer.offsets_for_times([TopicPartition(topic, 0, base_ms + 4500)], timeout=30)
        assert found[0].offset == 5
        found = consumer.offsets_for_times([TopicPartition(topic, 0, base_ms + 99_000)], timeout=30)
        assert found[0].offset in (-1, 10)  # none at or after it: the log end (librdkafka)
    finally:
        consumer.close()
    rows = "SELECT count(*) FROM partition_batches WHERE topic = $1"
    assert cluster.query(rows, topic)[0][0] > 0
    admin = AdminClient({"bootstrap.servers": cluster.nodes[3].bootstrap})
    admin.delete_topics([topic])[topic].result(30)
    until(lambda: cluster.query(rows, topic)[0][0] == 0, "the deleted topic's rows dropped")
    until(lambda: cluster.partition_owner(topic, 0)[0] == -1, "its lease handed back")


def test_delete_records_moves_the_stored_log_start_and_outlives_its_leader(
    cluster: Cluster,
) -> None:
    """DeleteRecords through confluent-kafka's AdminClient: the partition's leader moves the
    log start in PostgreSQL (other nodes answer NOT_LEADER_OR_FOLLOWER); the next leader,
    once the first is SIGKILLed, loads it from the rows."""
    topic = "trimmed"
    admin = AdminClient({"bootstrap.servers": cluster.nodes[2].bootstrap})
    admin.create_topics([NewTopic(topic, 1, 1)])[topic].result(30)
    until(lambda: all(has_topic(n.bootstrap, topic) for n in cluster.nodes.values()), topic)
    until(lambda: cluster.partition_owner(topic, 0)[0] != -1, "the new partition leased")
    producer = Producer({"bootstrap.servers": cluster.bootstrap, "acks": "all", "linger.ms": 0})
    for i in range(10):
        producer.produce(topic, b"r%d" % i, partition=0)
        assert producer.flush(60) == 0  # a batch each
    owner, _ = cluster.partition_owner(topic, 0)
    other = next(n for n in cluster.nodes if n != owner)
    assert delete_records(cluster.nodes[other].bootstrap, topic, 0, 6) == (-1, 6)
    assert _admin_delete_records(cluster.nodes[2].bootstrap, topic, 6).low_watermark == 6
    # The client may not tell at once (its metadata of a lease that moved): asked again.
    until(lambda: _watermarks(cluster.bootstrap, topic) == (6, 10), "the new log start")

    victim = cluster.nodes[owner]
    victim.kill()
    try:
        until(
            lambda: cluster.partition_owner(topic, 0)[0] not in (-1, owner),
            "another node leading the partition",
        )
        until(lambda: _watermarks(cluster.bootstrap, topic) == (6, 10), "the log start kept")
        consumer = Consumer(
            {
                "bootstrap.servers": cluster.bootstrap,
                "group.id": "trimmed-reader",
                "auto.offset.reset": "earliest",
            }
        )
        try:
            # From the log start by ListOffsets, not by the group's committed offset: the
            # group's coordinator may be a shard of the killed node, still moving.
            consumer.assign([TopicPartition(topic, 0, OFFSET_BEGINNING)])
            first = None
            deadline = time.monotonic() + 60
            while first is None and time.monotonic() < deadline:
                message = consumer.poll(1.0)
                if message is not None and message.error() is None:
                    first = (message.offset(), message.value())
            assert first == (6, b"r6")
        finally:
            consumer.close()
    finally:
        victim.start()
    # The module's other tests count the partition leases held: the topic goes.
    admin.delete_topics([topic])[topic].result(30)
    until(lambda: cluster.partition_owner(topic, 0)[0] == -1, "its lease handed back")
    wait_all_led(cluster)


def _admin_delete_records(bootstrap: str, topic: str, before: int) -> Any:
    """AdminClient.delete_records of partition 0 below `before`, asked again by a new
    client while librdkafka finds no leader for it: it fails at once (_NOENT, "No leaders
    found") when its metadata says -1, as Metadata does while a partition's lease moves, and
    keeps that metadata in its cache (a retry with the same client failed for 60 s in a
    fresh-clone CI run)."""
    deadline = time.monotonic() + 60
    while True:
        admin = AdminClient({"bootstrap.servers": bootstrap})
        futures = admin.delete_records([TopicPartition(topic, 0, before)], operation_timeout=30)
        try:
            return futures[TopicPartition(topic, 0)].result(30)
        except KafkaException as e:
            if e.args[0].code() != KafkaError._NOENT or time.monotonic() > deadline:
                raise
            time.sleep(1)


def _watermarks(bootstrap: str, topic: str) -> tuple[int, int] | None:
    """(low, high) of partition 0; None while the client cannot tell (a leader moving)."""
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "trimmed-marks"})
    try:
        low, high = consumer.get_watermark_offsets(TopicPartition(topic, 0), timeout=30)
        return int(low), int(high)
    except KafkaException:
        return None
    finally:
        consumer.close()
