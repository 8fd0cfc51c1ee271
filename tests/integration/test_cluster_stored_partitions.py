"""Partitions stored in PostgreSQL by three `serve --cluster` nodes on a real PostgreSQL
(issue 22). Compacted topics: the partitions' rows shrink, a consumer from offset 0 reads
exactly the latest value of each key at the offset it was acknowledged at (tombstones
included), and SIGKILL of a partition's leader after a pass and while passes run loses
nothing: the new owner goes on compacting. Rows keyed by topic id: a topic deleted and
created again under the same name, under produce load, while its old leader is stopped
(its rows not dropped), reads only its own records."""

from __future__ import annotations

import os
import random
import signal
import threading
import time
from collections.abc import Iterator
from pathlib import Path
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

from tests.cluster_support import LEASE_MS, Cluster, has_topic, running_cluster, until
from tests.support import ServerProcess

pytestmark = pytest.mark.integration

COMPACTED = "compacted"
KEYS = 40
# Rows a partition keeps at most after a pass over 31 rounds of KEYS records (31+ rows).
ROWS_AFTER = 10


@pytest.fixture(scope="module")
def cluster() -> Iterator[Cluster]:
    passes = [
        "--set",
        "log_cleaner_interval_ms=300",
        "--set",
        "log_retention_check_interval_ms=1000",
    ]
    with running_cluster(extra_args=passes) as c:
        yield c


def create_compacted(cluster: Cluster, topic: str, partitions: int) -> None:
    admin = AdminClient({"bootstrap.servers": cluster.bootstrap})
    config = {"cleanup.policy": "compact", "min.cleanable.dirty.ratio": "0.01"}
    create_leased(cluster, admin, topic, partitions, config)
    until(lambda: all(has_topic(n.bootstrap, topic) for n in cluster.nodes.values()), topic)


def create_leased(
    cluster: Cluster,
    admin: AdminClient,
    topic: str,
    partitions: int = 1,
    config: dict[str, str] | None = None,
) -> None:
    """Create `topic` through `admin` and wait until every partition is led."""
    new_topic = NewTopic(topic, partitions, 1, config=config or {})
    for future in admin.create_topics([new_topic]).values():
        future.result(30)
    until(
        lambda: all(cluster.partition_owner(topic, p)[0] > 0 for p in range(partitions)),
        f"{topic} leased",
    )


class Writer:
    """An idempotent acks=all producer; `latest[(partition, key)]`: (offset, value) of the
    key's last acknowledged record."""

    def __init__(self, bootstrap: str, topic: str) -> None:
        self.topic = topic
        self.producer = Producer(
            {
                "bootstrap.servers": bootstrap,
                "enable.idempotence": True,
                "acks": "all",
                "linger.ms": 0,
                "message.timeout.ms": 120_000,
                "topic.metadata.refresh.interval.ms": 1000,
            }
        )
        self.latest: dict[tuple[int, bytes], tuple[int, bytes | None]] = {}
        self.failed = 0

    def _delivered(self, error: Any, message: Any) -> None:
        if error is not None:
            self.failed += 1
            return
        key = (message.partition(), message.key())
        offset = message.offset()
        if offset > self.latest.get(key, (-1, None))[0]:
            self.latest[key] = (offset, message.value())

    def round(self, partitions: int, tag: str, tombstone_every: int = 0) -> None:
        """One record per key per partition (every `tombstone_every`-th key a tombstone),
        flushed: at least one batch (row) per partition."""
        for p in range(partitions):
            for k in range(KEYS):
                tombstone = tombstone_every and k % tombstone_every == 0
                value = None if tombstone else f"{tag}-{k}".encode() + b"x" * 50
                self.producer.produce(
                    self.topic, value, key=b"key-%d" % k, partition=p, on_delivery=self._delivered
                )
        assert self.producer.flush(150) == 0
        assert self.failed == 0

    def end(self, partitions: int) -> None:
        """A last batch of one record per partition (the batch a pass never cleans)."""
        for p in range(partitions):
            self.producer.produce(self.topic, b"end", key=b"end", partition=p)
            assert self.producer.flush(150) == 0
            self.latest[(p, b"end")] = (-1, b"end")


def read_from_zero(bootstrap: str, topic: str, partition: int) -> list[tuple[int, Any, Any]]:
    """(offset, key, value) of every record a consumer from offset 0 reads, up to the high
    watermark; again from the start while the client fails (a leader just killed)."""
    deadline = time.monotonic() + 120
    while True:
        try:
            return _read_from_zero(bootstrap, topic, partition)
        except KafkaException:
            if time.monotonic() > deadline:
                raise
            time.sleep(1)


def _read_from_zero(bootstrap: str, topic: str, partition: int) -> list[tuple[int, Any, Any]]:
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": "compaction-reader",
            "enable.auto.commit": False,
            "topic.metadata.refresh.interval.ms": 1000,
        }
    )
    try:
        _, high = consumer.get_watermark_offsets(TopicPartition(topic, partition), timeout=60)
        consumer.assign([TopicPartition(topic, partition, OFFSET_BEGINNING)])
        found: list[tuple[int, Any, Any]] = []
        deadline = time.monotonic() + 120
        while not found or found[-1][0] < high - 1:
            assert time.monotonic() < deadline, f"read {found[-3:]} of {high}"
            message = consumer.poll(1.0)
            if message is None or message.error() is not None:
                continue
            found.append((message.offset(), message.key(), message.value()))
        return found
    finally:
        consumer.close()


def compacted(cluster: Cluster, writer: Writer, partitions: int) -> bool:
    """Every partition holds at most ROWS_AFTER rows and none below the first offset of the
    writer's latest round: a pass ran after that round, not only one during the rounds
    (which also leaves few rows, the rounds written since it; a CI run read those)."""
    for p in range(partitions):
        latest_round = min(o for (q, key), (o, _) in writer.latest.items() if q == p and o >= 0)
        count, older = cluster.query(
            "SELECT count(*), count(*) FILTER (WHERE base_offset < $3) FROM partition_batches"
            " WHERE topic = $1 AND partition = $2",
            writer.topic,
            p,
            latest_round,
        )[0]
        if count > ROWS_AFTER or older > 0:
            return False
    return True


def check_latest(cluster: Cluster, writer: Writer, partitions: int) -> None:
    """A consumer from 0 reads each key once: its latest value at its acknowledged offset."""
    for p in range(partitions):
        found = read_from_zero(cluster.bootstrap, writer.topic, p)
        keys = [key for _, key, _ in found]
        assert len(keys) == len(set(keys)), f"superseded records read: {found[:5]}"
        read = {(p, key): (offset, value) for offset, key, value in found}
        expected = {k: v for k, v in writer.latest.items() if k[0] == p}
        assert read.pop((p, b"end"))[1] == expected.pop((p, b"end"))[1]
        assert read == expected


@pytest.mark.timeout(600)
def test_compacted_rows_shrink_and_survive_takeovers(cluster: Cluster, tmp_path: Path) -> None:
    partitions = 2
    create_compacted(cluster, COMPACTED, partitions)
    writer = Writer(cluster.bootstrap, COMPACTED)
    for r in range(30):
        writer.round(partitions, f"a{r}", tombstone_every=7 if r == 29 else 0)
    writer.end(partitions)
    # 31 rows or more per partition before a pass: what stays is the latest round's
    # batches (one, or a few where librdkafka split it) and the last one.
    until(lambda: compacted(cluster, writer, partitions), "compacted rows")
    check_latest(cluster, writer, partitions)

    # After a pass: SIGKILL partition 0's leader; the new owner serves what was compacted.
    owner = cluster.partition_owner(COMPACTED, 0)[0]
    cluster.nodes[owner].kill()
    until(lambda: cluster.partition_owner(COMPACTED, 0)[0] not in (-1, owner), "a new leader")
    check_latest(cluster, writer, partitions)

    # While passes run: more rounds, partition 1's leader killed midway.
    cluster.nodes[owner].start()
    for r in range(30):
        writer.round(partitions, f"b{r}", tombstone_every=5 if r == 29 else 0)
        if r == 15:
            # The restarted node takes its share of leases meanwhile: wait for a leader.
            until(lambda: cluster.partition_owner(COMPACTED, 1)[0] > 0, "partition 1 led")
            victim = cluster.partition_owner(COMPACTED, 1)[0]
            cluster.nodes[victim].kill()
    writer.end(partitions)
    until(lambda: compacted(cluster, writer, partitions), "compacted again by the new owners")
    check_latest(cluster, writer, partitions)
    cluster.nodes[victim].start()


class TaggedLoad(threading.Thread):
    """An acks=all producer sending `tag`-numbered values to partition 0 of `topic` while
    running (`tag` may change); `acked`: the values acknowledged."""

    def __init__(self, bootstrap: str, topic: str) -> None:
        super().__init__(daemon=True)
        self.topic = topic
        self.tag = "old"
        self.producer = Producer(
            {
                "bootstrap.servers": bootstrap,
                "acks": "all",
                "linger.ms": 5,
                "message.timeout.ms": 20_000,
                "topic.metadata.refresh.interval.ms": 500,
            }
        )
        self.acked: list[bytes] = []
        self.stopping = threading.Event()

    def _delivered(self, error: Any, message: Any) -> None:
        if error is None:
            self.acked.append(message.value())

    def run(self) -> None:
        n = 0
        while not self.stopping.is_set():
            value = f"{self.tag}-{n}".encode()
            try:
                self.producer.produce(self.topic, value, partition=0, on_delivery=self._delivered)
                n += 1
            except BufferError:
                pass
            self.producer.poll(0.002)
        self.producer.flush(60)

    def acked_with(self, tag: str) -> list[bytes]:
        return [v for v in list(self.acked) if v.startswith(tag.encode() + b"-")]


# A fresh-clone CI run once found no running node leading the new topic's partition within
# 90 s. The likely cause (not caught in that run): its old leader stopped inside a round's
# COPY, holding the lease row's lock; test_a_leader_stopped_mid_copy_is_taken_over_within_
# its_lease makes that happen every time, and leases.py now fences such a backend.
@pytest.mark.timeout(400)
def test_a_topic_recreated_under_load_reads_only_its_own_records(cluster: Cluster) -> None:
    """The old leader of a topic's partition is stopped (so it cannot drop its rows) while
    the topic is deleted and created again under the same name through other nodes, under
    produce load: the new topic's leader reads none of the old topic's rows, and the sweep of
    orphan rows deletes them."""
    topic = "recreated"
    admin_of = {
        i: AdminClient({"bootstrap.servers": n.bootstrap}) for i, n in cluster.nodes.items()
    }
    create_leased(cluster, admin_of[1], topic)
    load = TaggedLoad(cluster.bootstrap, topic)
    load.start()
    stopped: ServerProcess | None = None
    try:
        until(lambda: len(load.acked_with("old")) > 200, "old records acknowledged")
        owner = cluster.partition_owner(topic, 0)[0]
        stopped = cluster.nodes[owner]
        assert stopped.proc is not None
        old_id = cluster.query("SELECT topic_id FROM topics WHERE name = $1", topic)[0][0]
        os.kill(stopped.proc.pid, signal.SIGSTOP)
        others = [i for i in cluster.nodes if i != owner]
        for future in admin_of[others[0]].delete_topics([topic]).values():
            future.result(30)
        old = set(load.acked_with("old"))

        def created() -> bool:
            try:
                for future in admin_of[others[1]].create_topics([NewTopic(topic, 1, 1)]).values():
                    future.result(30)
                return True
            except KafkaException as e:
                if e.args[0].code() != KafkaError.TOPIC_ALREADY_EXISTS:
                    raise
                return False

        until(created, f"{topic} created again")
        load.tag = "new"
        try:
            until(
                lambda: cluster.partition_owner(topic, 0)[0] in others,
                "the new topic's partition led by a running node",
            )
        except AssertionError as e:
            leases = cluster.query("SELECT * FROM leases WHERE resource LIKE 'partition:%'")
            nodes = cluster.query("SELECT node_id, alive_until, now() FROM cluster_nodes")
            raise AssertionError(f"{e}; leases {leases}; nodes {nodes}") from None
        until(lambda: len(load.acked_with("new")) > 200, "new records acknowledged")
    finally:
        if stopped is not None and stopped.proc is not None:
            os.kill(stopped.proc.pid, signal.SIGCONT)
        load.stopping.set()
        load.join(120)
    values = [value for _, _, value in read_from_zero(cluster.bootstrap, topic, 0)]
    assert not old & set(values), "records of the deleted topic read from the new one"
    new = load.acked_with("new")
    assert set(new) <= set(values) and len(values) == len(set(values))
    # The old topic's rows, which its stopped owner never dropped, are swept.
    until(
        lambda: (
            not cluster.query("SELECT 1 FROM partition_batches WHERE topic_id = $1 LIMIT 1", old_id)
        ),
        "the deleted topic's rows swept",
    )


class BigLoad(threading.Thread):
    """An acks=all producer of `value_bytes` records to partition 0 of `topic` while
    running: rounds of megabytes, so the leader spends much of its time inside a round's
    COPY. `acked`: how many were acknowledged."""

    def __init__(self, bootstrap: str, topic: str, value_bytes: int = 100_000) -> None:
        super().__init__(daemon=True)
        self.topic = topic
        self.value = b"v" * value_bytes
        self.producer = Producer(
            {
                "bootstrap.servers": bootstrap,
                "acks": "all",
                "linger.ms": 5,
                "message.timeout.ms": 60_000,
                "queue.buffering.max.kbytes": 16_384,
                "topic.metadata.refresh.interval.ms": 500,
            }
        )
        self.acked = 0
        self.stopping = threading.Event()

    def _delivered(self, error: Any, message: Any) -> None:
        if error is None:
            self.acked += 1

    def run(self) -> None:
        while not self.stopping.is_set():
            try:
                self.producer.produce(
                    self.topic, self.value, partition=0, on_delivery=self._delivered
                )
            except BufferError:
                self.producer.poll(0.01)
            self.producer.poll(0)
        self.producer.flush(30)


# A backend of a stopped node inside a round's COPY: "active" (so neither
# idle_in_transaction_session_timeout nor statement_timeout ends it), waiting for the
# client's data, and holding its lease row FOR SHARE.
_MID_COPY = """
SELECT pid FROM pg_stat_activity
 WHERE state = 'active' AND wait_event = 'ClientRead' AND query LIKE 'COPY %partition_batches%'
"""
STOPS_MAX = 150


@pytest.mark.timeout(400)
def test_a_leader_stopped_mid_copy_is_taken_over_within_its_lease(cluster: Cluster) -> None:
    """A partition's leader SIGSTOPped while its backend is inside a round's COPY (seen in
    pg_stat_activity) holds the lease row's lock for as long as its connection lives: a
    live node must still lead the partition within the lease plus a few seconds, and the
    producer's records are acknowledged again (by the new leader)."""
    topic = "stopped-mid-copy"
    create_leased(cluster, AdminClient({"bootstrap.servers": cluster.bootstrap}), topic)
    load = BigLoad(cluster.bootstrap, topic)
    load.start()
    stopped: ServerProcess | None = None
    try:
        until(lambda: load.acked > 100, "records acknowledged")
        owner = cluster.partition_owner(topic, 0)[0]
        stopped = cluster.nodes[owner]
        assert stopped.proc is not None
        pid = stopped.proc.pid
        # Stop the leader over and over, each time for a moment (well within its lease),
        # until one stop lands inside a COPY.
        stops = 0
        while True:
            stops += 1
            os.kill(pid, signal.SIGSTOP)
            time.sleep(0.3)  # the server reads what was sent, then waits for the rest
            if cluster.query(_MID_COPY):
                break
            os.kill(pid, signal.SIGCONT)
            assert stops < STOPS_MAX, f"no stop of {STOPS_MAX} landed inside a COPY"
            time.sleep(random.uniform(0.05, 0.4))
        stopped_at = time.monotonic()
        acked = load.acked
        bound_s = LEASE_MS / 1000 + 7
        try:
            until(
                lambda: cluster.partition_owner(topic, 0)[0] not in (-1, owner),
                "a running node leading the partition",
                timeout_s=bound_s,
            )
        except AssertionError as e:
            leases = cluster.query("SELECT * FROM leases WHERE resource LIKE $1", f"%{topic}%")
            stuck = cluster.query(_MID_COPY)
            raise AssertionError(f"{e} (stop {stops}); lease {leases}; mid-COPY {stuck}") from None
        took_s = time.monotonic() - stopped_at
        until(lambda: load.acked > acked + 20, "records acknowledged by the new leader")
        print(f"taken over {took_s:.1f} s after the stop (stop {stops} landed in a COPY)")
    finally:
        if stopped is not None and stopped.proc is not None:
            os.kill(stopped.proc.pid, signal.SIGCONT)
        load.stopping.set()
        load.join(60)
