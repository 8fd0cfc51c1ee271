"""`serve --workers 2`: two worker processes, each a broker node owning half of the
coordinator shards and of the partitions, under one parent that restarts a dead worker.

- each worker describes the cluster (both brokers, each partition's leader as
  ownership.py places it, the group's coordinator); a topic created on one worker is on
  the other with the same id; a partition's non-leader answers NOT_LEADER_OR_FOLLOWER
  (Produce, DeleteRecords) and a group's non-coordinator NOT_COORDINATOR;
- librdkafka produces to both workers, consumes and commits in a classic group and a
  KIP-848 group, one coordinated by each worker;
- a worker SIGKILLed under produce + commit load is restarted by the parent, and every
  acknowledged record and commit is there afterwards.
"""

from __future__ import annotations

import datetime
import json
import os
import signal
import sys
import threading
import time
import urllib.request
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Consumer, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import (
    AdminClient,
    AlterConfigOpType,
    ConfigEntry,
    ConfigResource,
    NewPartitions,
    NewTopic,
)

from groupcoord.coordinator.ownership import partition_owner_index, shard_owner_index
from groupcoord.coordinator.runtime.partitioning import shard_for
from groupcoord.coordinator.server.supervisor import HOLD_RESTART_ENV
from tests import wire_requests
from tests.rawclient import RawClient, delete_records, request_class
from tests.support import WorkersProcess, make_batch, serving_workers

pytestmark = pytest.mark.integration

WORKERS = 2
SHARDS = 50  # offsets_partitions' default
PARTITIONS = 4
QUIET = {"log_level": 0}
RESTART_WAIT_S = 60.0


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[WorkersProcess]:
    data = tmp_path_factory.mktemp("workers") / "data"
    # The parent holds back worker i's restart while hold_path.i exists (supervisor.py).
    hold = data.parent / "hold-restart"
    os.environ[HOLD_RESTART_ENV] = str(hold)
    try:
        with serving_workers(
            data, WORKERS, group_initial_rebalance_delay_ms=0, worker_topic_repair_interval_ms=500
        ) as proc:
            proc.hold_path = hold  # type: ignore[attr-defined]
            yield proc
    finally:
        del os.environ[HOLD_RESTART_ENV]


def group_on(worker: int, prefix: str) -> str:
    """A group id whose coordinator shard worker `worker` owns."""
    while True:
        group = f"{prefix}-{uuid.uuid4().hex[:8]}"
        if shard_owner_index(WORKERS, shard_for(group, SHARDS)) == worker:
            return group


def create_topic(bootstrap: str, name: str, partitions: int = PARTITIONS) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap, **QUIET})
    admin.create_topics([NewTopic(name, num_partitions=partitions, replication_factor=1)])[
        name
    ].result(10)


def _m(api_key: int, version: int) -> Any:
    return sys.modules[request_class(api_key, version).__module__]


def metadata(bootstrap: str, topic: str) -> Any:
    """Metadata v12 of one topic, from the worker at `bootstrap`."""
    m = _m(3, 12)
    with RawClient(bootstrap) as client:
        return client.request(
            3,
            12,
            m.MetadataRequest(
                topics=(m.MetadataRequestTopic(name=topic, topic_id=None),),
                allow_auto_topic_creation=False,
                include_topic_authorized_operations=False,
            ),
        )


def produce_one(bootstrap: str, topic: str, partition: int) -> int:
    """Produce v11 of one batch to `topic`'s `partition` at `bootstrap`: its error code."""
    m = _m(0, 11)
    with RawClient(bootstrap) as client:
        response = client.request(
            0,
            11,
            m.ProduceRequest(
                transactional_id=None,
                acks=-1,
                timeout=datetime.timedelta(seconds=5),
                topic_data=(
                    m.TopicProduceData(
                        name=topic,
                        partition_data=(
                            m.PartitionProduceData(index=partition, records=make_batch(1)),
                        ),
                    ),
                ),
            ),
        )
    return int(response.responses[0].partition_responses[0].error_code)


def find_coordinator(bootstrap: str, group: str) -> Any:
    m = _m(10, 4)
    with RawClient(bootstrap) as client:
        return client.request(
            10, 4, m.FindCoordinatorRequest(key_type=0, coordinator_keys=(group,))
        )


def offset_fetch_error(bootstrap: str, group: str) -> int:
    with RawClient(bootstrap) as client:
        response = client.request(9, 8, wire_requests.fetch(8, [(group, None)]))
    return int(response.groups[0].error_code)


def wait_for(condition: Callable[[], bool], timeout_s: float, what: str) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if condition():
            return
        time.sleep(0.1)
    raise AssertionError(f"timed out waiting for {what}")


# -- the cluster as clients see it ------------------------------------------------------------


def test_each_worker_describes_the_cluster_and_sends_clients_to_owners(
    cluster: WorkersProcess,
) -> None:
    topic = f"described-{uuid.uuid4().hex[:6]}"
    create_topic(cluster.bootstrap_of(1), topic)  # on worker 1: repeated on worker 0
    wait_for(
        lambda: metadata(cluster.bootstrap_of(0), topic).topics[0].error_code == 0,
        30,
        "the topic on worker 0",
    )
    answers = [metadata(cluster.bootstrap_of(i), topic) for i in range(WORKERS)]
    expected_brokers = [(i, "127.0.0.1", cluster.port + i) for i in range(WORKERS)]
    leaders = {p: partition_owner_index(WORKERS, topic, p) for p in range(PARTITIONS)}
    assert set(leaders.values()) == {0, 1}  # the partitions are spread over both
    for answer in answers:
        assert sorted((b.node_id, b.host, b.port) for b in answer.brokers) == expected_brokers
        (described,) = answer.topics
        assert {p.partition_index: p.leader_id for p in described.partitions} == leaders
    assert answers[0].topics[0].topic_id == answers[1].topics[0].topic_id
    assert answers[0].cluster_id == answers[1].cluster_id
    for partition, leader in leaders.items():
        assert produce_one(cluster.bootstrap_of(leader), topic, partition) == 0
        assert produce_one(cluster.bootstrap_of(1 - leader), topic, partition) == 6
        # DeleteRecords: the leader moves its log start, the other worker refuses.
        assert delete_records(cluster.bootstrap_of(1 - leader), topic, partition) == (-1, 6)
        assert delete_records(cluster.bootstrap_of(leader), topic, partition) == (1, 0)
    for worker in range(WORKERS):
        group = group_on(worker, "found")
        for asked in range(WORKERS):
            (coordinator,) = find_coordinator(cluster.bootstrap_of(asked), group).coordinators
            assert (coordinator.node_id, coordinator.port) == (worker, cluster.port + worker)
        assert offset_fetch_error(cluster.bootstrap_of(worker), group) == 0
        assert offset_fetch_error(cluster.bootstrap_of(1 - worker), group) == 16  # NOT_COORDINATOR


def test_auto_created_topic_is_made_once_for_every_worker(cluster: WorkersProcess) -> None:
    """Metadata allowing auto-creation, at the second worker: the first creates the topic
    for both (the second answers LEADER_NOT_AVAILABLE until it has it)."""
    topic = f"auto-{uuid.uuid4().hex[:6]}"
    m = _m(3, 12)
    request = m.MetadataRequest(
        topics=(m.MetadataRequestTopic(name=topic, topic_id=None),),
        allow_auto_topic_creation=True,
        include_topic_authorized_operations=False,
    )
    errors = []
    with RawClient(cluster.bootstrap_of(1)) as client:
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            answer = client.request(3, 12, request).topics[0]
            errors.append(answer.error_code)
            if answer.error_code == 0:
                break
            time.sleep(0.1)
    assert errors[0] == 5 and errors[-1] == 0, errors  # LEADER_NOT_AVAILABLE, then NONE
    first = metadata(cluster.bootstrap_of(0), topic).topics[0]
    assert first.error_code == 0 and first.topic_id == answer.topic_id
    assert len(first.partitions) == len(answer.partitions) == 1  # default_partitions


# -- librdkafka across both workers -----------------------------------------------------------


def produce(bootstrap: str, topic: str, count: int, prefix: str) -> list[tuple[int, int, bytes]]:
    """`count` records acks=all over every partition: (partition, offset, value) acked."""
    acked: list[tuple[int, int, bytes]] = []
    failed: list[object] = []

    def delivered(err: object, msg: Any) -> None:
        if err is None:
            acked.append((msg.partition(), msg.offset(), msg.value()))
        else:
            failed.append(err)

    producer = Producer({"bootstrap.servers": bootstrap, "acks": "all", **QUIET})
    for i in range(count):
        producer.produce(
            topic, value=f"{prefix}-{i}".encode(), partition=i % PARTITIONS, on_delivery=delivered
        )
    assert producer.flush(30) == 0
    assert not failed, failed[:5]
    return acked


def consume_and_commit(
    bootstrap: str, topic: str, group: str, protocol: str, count: int
) -> set[bytes]:
    settings = {
        "bootstrap.servers": bootstrap,
        "group.id": group,
        "group.protocol": protocol,
        "auto.offset.reset": "earliest",
        "enable.auto.commit": False,
        **QUIET,
    }
    consumer = Consumer(settings)
    consumer.subscribe([topic])
    seen: set[bytes] = set()
    deadline = time.monotonic() + 60
    try:
        while len(seen) < count and time.monotonic() < deadline:
            msg = consumer.poll(0.5)
            if msg is None or msg.error():
                continue
            seen.add(msg.value())
        consumer.commit(asynchronous=False)
        committed = consumer.committed(
            [TopicPartition(topic, p) for p in range(PARTITIONS)], timeout=10
        )
    finally:
        consumer.close()
    assert {tp.partition: tp.offset for tp in committed} == {
        p: count // PARTITIONS for p in range(PARTITIONS)
    }
    return seen


@pytest.mark.parametrize(
    ("protocol", "worker"), [("classic", 0), ("consumer", 1), ("classic", 1), ("consumer", 0)]
)
def test_confluent_groups_consume_and_commit_across_workers(
    cluster: WorkersProcess, protocol: str, worker: int
) -> None:
    topic = f"across-{protocol}-{worker}-{uuid.uuid4().hex[:6]}"
    create_topic(cluster.bootstrap_of(0), topic)
    acked = produce(cluster.bootstrap_of(0), topic, 200, "r")
    assert len(acked) == 200
    group = group_on(worker, protocol)
    # Bootstrapped at the other worker: the client finds its coordinator and leaders.
    seen = consume_and_commit(cluster.bootstrap_of(1 - worker), topic, group, protocol, 200)
    assert seen == {value for _, _, value in acked}


# -- transactions across workers --------------------------------------------------------------


def txn_id_on(worker: int, prefix: str) -> str:
    """A transactional id whose `__transaction_state` shard worker `worker` owns."""
    return group_on(worker, prefix)  # the same hash and shard count as groups


@pytest.mark.parametrize("coordinator", [0, 1])
def test_transactions_span_workers(cluster: WorkersProcess, coordinator: int) -> None:
    """A transaction coordinated by one worker writes to partitions led by both and
    commits offsets of a group the other coordinates: committed records and offsets are
    seen, aborted records are not (markers written on every leader)."""
    topic = f"txn-{coordinator}-{uuid.uuid4().hex[:6]}"
    create_topic(cluster.bootstrap_of(0), topic)
    group = group_on(1 - coordinator, "txn-offsets")
    producer = Producer(
        {
            "bootstrap.servers": cluster.bootstrap_of(1 - coordinator),
            "transactional.id": txn_id_on(coordinator, "txn"),
            **QUIET,
        }
    )
    producer.init_transactions(30)
    for outcome in ("commit", "abort"):
        producer.begin_transaction()
        for i in range(40):
            producer.produce(topic, value=f"{outcome}-{i}".encode(), partition=i % PARTITIONS)
        if outcome == "commit":
            consumer_meta = Consumer(
                {"bootstrap.servers": cluster.bootstrap_of(0), "group.id": group, **QUIET}
            ).consumer_group_metadata()
            producer.send_offsets_to_transaction(
                [TopicPartition(topic, p, 5) for p in range(PARTITIONS)], consumer_meta, 30
            )
            producer.commit_transaction(30)
        else:
            producer.flush(30)
            producer.abort_transaction(30)
    reader = Consumer(
        {
            "bootstrap.servers": cluster.bootstrap_of(0),
            "group.id": "txn-reader",
            "isolation.level": "read_committed",
            "enable.auto.commit": False,
            **QUIET,
        }
    )
    reader.assign([TopicPartition(topic, p, 0) for p in range(PARTITIONS)])
    seen: set[bytes] = set()
    deadline = time.monotonic() + 30
    while len(seen) < 40 and time.monotonic() < deadline:
        msg = reader.poll(0.5)
        if msg is not None and not msg.error():
            seen.add(msg.value())
    # Past the abort marker too: nothing of the aborted transaction shows up.
    end = time.monotonic() + 2
    while time.monotonic() < end:
        msg = reader.poll(0.2)
        if msg is not None and not msg.error():
            seen.add(msg.value())
    reader.close()
    assert seen == {f"commit-{i}".encode() for i in range(40)}
    assert committed(cluster.bootstrap_of(0), topic, group) == dict.fromkeys(range(PARTITIONS), 5)


# -- a worker SIGKILLed under load ------------------------------------------------------------


class Load:
    """A producer (acks=all, idempotent) and a classic group member committing what it
    consumed, each in its own thread until `stop`; what was acknowledged to them."""

    def __init__(self, bootstrap: str, topic: str, group: str) -> None:
        self.bootstrap, self.topic, self.group = bootstrap, topic, group
        self.acked: list[tuple[int, int, bytes]] = []
        self.commits: dict[int, int] = {}  # partition -> the last offset a commit acknowledged
        self.failed: list[object] = []
        self.stopping = threading.Event()
        self.threads = [
            threading.Thread(target=self._produce, daemon=True),
            threading.Thread(target=self._consume, daemon=True),
        ]

    def __enter__(self) -> Load:
        for thread in self.threads:
            thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stopping.set()
        for thread in self.threads:
            thread.join(120)

    def _produce(self) -> None:
        def delivered(err: object, msg: Any) -> None:
            if err is None:
                self.acked.append((msg.partition(), msg.offset(), msg.value()))
            else:
                self.failed.append(err)

        producer = Producer(
            {
                "bootstrap.servers": self.bootstrap,
                "acks": "all",
                "enable.idempotence": True,
                "message.timeout.ms": 120_000,
                **QUIET,
            }
        )
        i = 0
        while not self.stopping.is_set():
            producer.produce(self.topic, value=b"load-%d" % i, on_delivery=delivered)
            i += 1
            producer.poll(0)
            if i % 20 == 0:
                time.sleep(0.01)
        assert producer.flush(120) == 0

    def _consume(self) -> None:
        consumer = Consumer(
            {
                "bootstrap.servers": self.bootstrap,
                "group.id": self.group,
                "auto.offset.reset": "earliest",
                "enable.auto.commit": False,
                **QUIET,
            }
        )
        consumer.subscribe([self.topic])
        positions: dict[int, int] = {}
        while not self.stopping.is_set():
            msg = consumer.poll(0.2)
            if msg is not None and not msg.error():
                positions[msg.partition()] = msg.offset() + 1
            if len(positions) and (msg is None or msg.offset() % 25 == 0):
                offsets = [TopicPartition(self.topic, p, o) for p, o in positions.items()]
                try:
                    done = consumer.commit(offsets=offsets, asynchronous=False)
                except KafkaException:
                    continue  # the coordinator is away: committed again later
                for tp in done or ():
                    if tp.error is None:
                        self.commits[tp.partition] = max(
                            self.commits.get(tp.partition, 0), tp.offset
                        )
        consumer.close()


def read_all(bootstrap: str, topic: str) -> dict[tuple[int, int], bytes]:
    """Every record of `topic` (partition, offset) -> value, read from the start to the
    high watermark of each partition."""
    consumer = Consumer(
        {"bootstrap.servers": bootstrap, "group.id": "reader", "enable.auto.commit": False, **QUIET}
    )
    ends = {
        p: consumer.get_watermark_offsets(TopicPartition(topic, p), 10)[1]
        for p in range(PARTITIONS)
    }
    consumer.assign([TopicPartition(topic, p, 0) for p in range(PARTITIONS)])
    records: dict[tuple[int, int], bytes] = {}
    positions = dict.fromkeys(range(PARTITIONS), 0)
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline and any(positions[p] < end for p, end in ends.items()):
        msg = consumer.poll(0.5)
        if msg is not None and not msg.error():
            records[(msg.partition(), msg.offset())] = msg.value()
            positions[msg.partition()] = msg.offset() + 1
    consumer.close()
    return records


def committed(bootstrap: str, topic: str, group: str) -> dict[int, int]:
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": group, **QUIET})
    try:
        answer = consumer.committed([TopicPartition(topic, p) for p in range(PARTITIONS)], 30)
    finally:
        consumer.close()
    return {tp.partition: tp.offset for tp in answer}


def test_worker_sigkilled_under_load_is_restarted_and_loses_nothing_acknowledged(
    cluster: WorkersProcess,
) -> None:
    """Worker 1 (half the partitions, the group's coordinator) is SIGKILLed while records
    are produced and commits made: the parent restarts it; every record acknowledged is
    read back at its offset, every commit acknowledged is there (or a later one)."""
    topic = f"killed-{uuid.uuid4().hex[:6]}"
    create_topic(cluster.bootstrap_of(0), topic)
    group = group_on(1, "killed")
    victim = cluster.worker_pid(1)
    with Load(cluster.bootstrap_of(0), topic, group) as load:
        wait_for(lambda: len(load.acked) > 500 and len(load.commits) > 0, 60, "load")
        os.kill(victim, signal.SIGKILL)
        wait_for(
            lambda: cluster.worker_healthy(1) and victim not in cluster.worker_pids(),
            RESTART_WAIT_S,
            "worker 1 restarted",
        )
        acked_at_restart = len(load.acked)
        wait_for(lambda: len(load.acked) > acked_at_restart + 300, 60, "load after the restart")
    assert not load.failed, load.failed[:5]
    assert cluster.alive()
    assert "worker died: restarting" in cluster.log_tail(200)
    stored = read_all(cluster.bootstrap_of(0), topic)
    lost = [(p, o) for p, o, value in load.acked if stored.get((p, o)) != value]
    assert not lost, f"{len(lost)} acknowledged records lost or changed, e.g. {lost[:5]}"
    now = committed(cluster.bootstrap_of(0), topic, group)
    for partition, offset in load.commits.items():
        assert now[partition] >= offset, (partition, now[partition], offset)


# -- lag of partitions led by another worker ------------------------------------------------


def lag_series(cluster: WorkersProcess, worker: int, group: str, name: str) -> dict[int, float]:
    """groupcoord_group_lag_<name> per partition of `group` at worker `worker`'s /metrics."""
    url = f"http://127.0.0.1:{cluster.metrics_port + worker}/metrics"
    with urllib.request.urlopen(url, timeout=10) as r:
        text = r.read().decode()
    found: dict[int, float] = {}
    for line in text.splitlines():
        if line.startswith(f"groupcoord_group_lag_{name}{{") and f'group="{group}"' in line:
            labels, value = line.rsplit(" ", 1)
            found[int(labels.split('partition="')[1].split('"')[0])] = float(value)
    return found


def group_page(cluster: WorkersProcess, worker: int, group: str) -> dict[int, dict[str, Any]]:
    url = f"http://127.0.0.1:{cluster.metrics_port + worker}/api/groups/{group}"
    with urllib.request.urlopen(url, timeout=10) as r:
        page = json.loads(r.read())
    return {o["partition"]: o for o in page["offsets"]}


def test_lag_of_partitions_led_by_another_worker(cluster: WorkersProcess) -> None:
    """Worker 1 coordinates the group; half the topic's partitions are led by worker 0.
    Its lag metrics and web page show every partition's lag from the leader's log end
    offset, with the time lag from the first record not consumed."""
    topic = f"lagged-{uuid.uuid4().hex[:6]}"
    create_topic(cluster.bootstrap_of(0), topic)
    produce(cluster.bootstrap_of(0), topic, 40, "lag")  # 10 records a partition
    group = group_on(1, "lag")
    leaders = {p: partition_owner_index(WORKERS, topic, p) for p in range(PARTITIONS)}
    assert set(leaders.values()) == {0, 1}
    consumer = Consumer({"bootstrap.servers": cluster.bootstrap_of(1), "group.id": group, **QUIET})
    consumer.commit(
        offsets=[TopicPartition(topic, p, 3) for p in range(PARTITIONS)], asynchronous=False
    )
    consumer.close()
    wanted = dict.fromkeys(range(PARTITIONS), 7.0)
    wait_for(
        lambda: lag_series(cluster, 1, group, "records") == wanted,
        60,
        "the lag in records of every partition",
    )
    wait_for(
        lambda: (
            set(lag_series(cluster, 1, group, "seconds")) == set(range(PARTITIONS))
            and all(v > 0 for v in lag_series(cluster, 1, group, "seconds").values())
        ),
        60,
        "the lag in seconds of every partition",
    )
    wait_for(
        lambda: all(
            o["end"] == 10 and o["lag"] == 7 and o["lag_seconds"] is not None
            for o in group_page(cluster, 1, group).values()
        ),
        60,
        "the web page's lag of every partition",
    )


# -- a worker that was down converges on what it missed --------------------------------------


def group_topics(bootstrap: str, group: str) -> set[str]:
    """The topics of every offset `group` has stored (OffsetFetch of all topics)."""
    with RawClient(bootstrap) as client:
        response = client.request(9, 8, wire_requests.fetch(8, [(group, None)]))
    (answer,) = response.groups
    assert answer.error_code == 0, answer.error_code
    return {t.name for t in answer.topics}


def topic_config(bootstrap: str, topic: str, name: str) -> str | None:
    admin = AdminClient({"bootstrap.servers": bootstrap, **QUIET})
    resource = ConfigResource(ConfigResource.Type.TOPIC, topic)
    entries = admin.describe_configs([resource])[resource].result(10)
    return entries[name].value


def worker_image(bootstrap: str, topics: list[str]) -> dict[str, int | None]:
    """Each topic's partition count at one worker (None: it does not have the topic)."""
    m = _m(3, 12)
    with RawClient(bootstrap) as client:
        answer = client.request(
            3,
            12,
            m.MetadataRequest(
                topics=tuple(m.MetadataRequestTopic(name=t, topic_id=None) for t in topics),
                allow_auto_topic_creation=False,
                include_topic_authorized_operations=False,
            ),
        )
    return {t.name: None if t.error_code else len(t.partitions) for t in answer.topics}


def test_worker_down_during_topic_changes_converges_when_back(cluster: WorkersProcess) -> None:
    """Worker 1 is killed and held down while a topic is deleted, another extended and a
    third reconfigured through worker 0; worker 0 is then killed too (its queue of changes
    for worker 1 is lost) and restarted. Worker 1, let back, serves the same topics as
    worker 0 (the deleted one gone, the partitions added, the config changed) and the
    deleted topic's offsets are gone from its group shards."""
    suffix = uuid.uuid4().hex[:6]
    gone, grown, tuned = f"gone-{suffix}", f"grown-{suffix}", f"tuned-{suffix}"
    names = [gone, grown, tuned]
    for name in names:
        create_topic(cluster.bootstrap_of(0), name)
    wait_for(
        lambda: worker_image(cluster.bootstrap_of(1), names) == dict.fromkeys(names, PARTITIONS),
        30,
        "the topics on worker 1",
    )
    group = group_on(1, "repaired")
    consumer = Consumer({"bootstrap.servers": cluster.bootstrap_of(1), "group.id": group, **QUIET})
    consumer.commit(
        offsets=[TopicPartition(t, p, 3) for t in (gone, grown) for p in range(PARTITIONS)],
        asynchronous=False,
    )
    consumer.close()
    assert group_topics(cluster.bootstrap_of(1), group) == {gone, grown}

    hold = Path(f"{cluster.hold_path}.1")  # type: ignore[attr-defined]
    hold.touch()
    try:
        victim = cluster.worker_pid(1)
        os.kill(victim, signal.SIGKILL)
        wait_for(lambda: victim not in cluster.worker_pids(), 30, "worker 1 gone")
        admin = AdminClient({"bootstrap.servers": cluster.bootstrap_of(0), **QUIET})
        admin.delete_topics([gone])[gone].result(10)
        admin.create_partitions([NewPartitions(grown, PARTITIONS + 2)])[grown].result(10)
        resource = ConfigResource(
            ConfigResource.Type.TOPIC,
            tuned,
            incremental_configs=[
                ConfigEntry("retention.ms", "4321000", incremental_operation=AlterConfigOpType.SET)
            ],
        )
        admin.incremental_alter_configs([resource])[resource].result(10)
        first = cluster.worker_pid(0)
        os.kill(first, signal.SIGKILL)  # what it still had to tell worker 1 is lost
        wait_for(
            lambda: first not in cluster.worker_pids() and cluster.worker_healthy(0),
            RESTART_WAIT_S,
            "worker 0 restarted",
        )
    finally:
        hold.unlink()
    wait_for(lambda: cluster.worker_healthy(1), RESTART_WAIT_S, "worker 1 restarted")
    expected = {gone: None, grown: PARTITIONS + 2, tuned: PARTITIONS}
    assert worker_image(cluster.bootstrap_of(0), names) == expected
    wait_for(
        lambda: worker_image(cluster.bootstrap_of(1), names) == expected,
        60,
        f"worker 1 to converge (it has {worker_image(cluster.bootstrap_of(1), names)})",
    )
    wait_for(
        lambda: topic_config(cluster.bootstrap_of(1), tuned, "retention.ms") == "4321000",
        60,
        "worker 1 to take the config",
    )
    wait_for(
        lambda: group_topics(cluster.bootstrap_of(1), group) == {grown},
        60,
        "the deleted topic's offsets gone from worker 1's shard",
    )
    # Both stay so: worker 0's own repair does not bring back what worker 1 had.
    assert worker_image(cluster.bootstrap_of(0), names) == expected


def test_sigterm_stops_every_worker_cleanly(cluster: WorkersProcess) -> None:
    """Last in the module (it stops the shared cluster): the parent forwards SIGTERM, each
    worker stops cleanly, the parent exits 0."""
    workers = cluster.worker_pids()
    assert len(workers) == WORKERS
    assert cluster.terminate(timeout_s=60) == 0
    assert not [pid for pid in workers if Path(f"/proc/{pid}").exists()]
    for index in range(WORKERS):
        assert (cluster.data_dir / f"worker-{index}" / "clean_shutdown").exists()


def test_a_worker_that_refuses_its_settings_stops_the_server(tmp_path: Path) -> None:
    """An assignor that is not installed is found by each worker as it starts (exit code
    2): restarting cannot help, so the parent stops the other worker and exits 1."""
    proc = WorkersProcess(
        tmp_path / "data", WORKERS, ["--set", "group_consumer_assignors=not-installed"]
    )
    with pytest.raises(RuntimeError, match="exited with 1"):
        proc.start(timeout_s=120)
    assert "worker keeps failing: stopping the server" in proc.log_tail(50)
