"""The earlier issues' real-client group tests against a three-node cluster (issue 22
"must be shown"): three `serve --cluster` nodes on a real PostgreSQL, every node listed as
the clients' bootstrap, a representative core of each suite with the group helpers of
those suites (group_support.Member, test_kip848_confluent.ConsumerMember):
- classic groups (confluent-kafka): members join and leave, every partition owned by one
  member at a time (range and cooperative-sticky);
- static membership (KIP-345/KIP-814), with confluent-kafka, kafka-python and aiokafka
  members: the node coordinating the group is SIGKILLed; another node takes the shard over
  and the members go on under their instance ids with their assignments, without a
  rebalance (no member sees a revocation or an assignment), the new coordinator answering
  their heartbeats;
- KIP-848 (confluent-kafka, group.protocol=consumer), one member static: the same SIGKILL;
  the members continue at their member ids and epochs on the new coordinator, none fenced.
Records are not consumed here: each node keeps its own partitions until the partition
store in PostgreSQL is wired in (the data plane of issue 22 item 2b), so what is asserted
is the groups' state: membership, instance ids, epochs and assignments.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Iterator
from typing import Any

import pytest
from confluent_kafka import KafkaError
from confluent_kafka.admin import AdminClient

from tests.cluster_support import PARTITIONS, TOPIC, Cluster, running_cluster, until
from tests.integration.group_support import GroupLog, Member, assignment_settled
from tests.integration.test_kip848_confluent import ConsumerMember, _requests
from tests.integration.test_kip848_raw import describe as raw_describe
from tests.rawclient import RawClient
from tests.support import ServerProcess

pytestmark = pytest.mark.integration

GROUP_SETTINGS = {
    "group_initial_rebalance_delay_ms": 300,
    "group_consumer_heartbeat_interval_ms": 500,
    "group_consumer_session_timeout_ms": 10000,
    "group_consumer_assignment_interval_ms": 200,
}
SESSION_MS = 10000
HEARTBEAT_MS = 500


@pytest.fixture(scope="module")
def cluster() -> Iterator[Cluster]:
    args = [a for k, v in GROUP_SETTINGS.items() for a in ("--set", f"{k}={v}")]
    with running_cluster(extra_args=args) as c:
        yield c


class KafkaPythonMember(threading.Thread):
    """A kafka-python KafkaConsumer polling on its own thread, recording its rebalance
    callbacks in the GroupLog as group_support.Member does."""

    def __init__(self, name: str, bootstrap: str, group: str, log: GroupLog, instance: str):
        super().__init__(name=name, daemon=True)
        self.member, self.bootstrap, self.group, self.log = name, bootstrap, group, log
        self.instance = instance
        self.owned: set[int] = set()
        self.stop_event = threading.Event()
        self.failure: BaseException | None = None

    def assigned(self, partitions: Any) -> None:
        got = frozenset(tp.partition for tp in partitions)
        with self.log.lock:
            self.log.events.append((self.member, "assign", got))
        self.owned |= got

    def revoked(self, partitions: Any) -> None:
        gone = frozenset(tp.partition for tp in partitions)
        with self.log.lock:
            self.log.events.append((self.member, "revoke", gone))
        self.owned -= gone

    def run(self) -> None:
        from kafka import ConsumerRebalanceListener, KafkaConsumer

        member = self

        class Listener(ConsumerRebalanceListener):  # type: ignore[misc]
            def on_partitions_revoked(self, revoked: Any) -> None:
                member.revoked(revoked)

            def on_partitions_assigned(self, assigned: Any) -> None:
                member.assigned(assigned)

        consumer = KafkaConsumer(
            bootstrap_servers=self.bootstrap.split(","),
            group_id=self.group,
            group_instance_id=self.instance,
            enable_auto_commit=False,
            session_timeout_ms=SESSION_MS,
            heartbeat_interval_ms=HEARTBEAT_MS,
            fetch_max_wait_ms=100,
        )
        try:
            consumer.subscribe([TOPIC], listener=Listener())
            while not self.stop_event.is_set():
                consumer.poll(timeout_ms=200)
        except BaseException as e:
            self.failure = e
        finally:
            consumer.close()

    def stop(self) -> None:
        self.stop_event.set()
        self.join(30)


class AiokafkaMember(KafkaPythonMember):
    """An aiokafka AIOKafkaConsumer on an event loop of its own thread."""

    def run(self) -> None:
        asyncio.run(self._run())

    async def _run(self) -> None:
        from aiokafka import AIOKafkaConsumer, ConsumerRebalanceListener

        member = self

        class Listener(ConsumerRebalanceListener):  # type: ignore[misc]
            async def on_partitions_revoked(self, revoked: Any) -> None:
                member.revoked(revoked)

            async def on_partitions_assigned(self, assigned: Any) -> None:
                member.assigned(assigned)

        consumer = AIOKafkaConsumer(
            bootstrap_servers=self.bootstrap.split(","),
            group_id=self.group,
            group_instance_id=self.instance,
            enable_auto_commit=False,
            session_timeout_ms=SESSION_MS,
            heartbeat_interval_ms=HEARTBEAT_MS,
            fetch_max_wait_ms=100,
        )
        await consumer.start()
        try:
            consumer.subscribe([TOPIC], listener=Listener())
            while not self.stop_event.is_set():
                await consumer.getmany(timeout_ms=200)
        except BaseException as e:
            self.failure = e
        finally:
            await consumer.stop()


def static_member(client: str, i: int, cluster: Cluster, group: str, log: GroupLog) -> Any:
    name, instance = f"{client}-{i}", f"inst-{i}"
    if client == "kafka-python":
        return KafkaPythonMember(name, cluster.bootstrap, group, log, instance)
    if client == "aiokafka":
        return AiokafkaMember(name, cluster.bootstrap, group, log, instance)
    extra = {"session.timeout.ms": SESSION_MS, "heartbeat.interval.ms": HEARTBEAT_MS}
    return Member(name, cluster.bootstrap, group, TOPIC, log, "range", instance, extra)


def kill_coordinator(cluster: Cluster, group: str) -> tuple[ServerProcess, ServerProcess]:
    """SIGKILL the node owning `group`'s shard; (the killed node, the new owner) once
    another node holds the lease."""
    owner, _ = cluster.owner(group)
    victim = cluster.nodes[owner]
    victim.kill()
    until(lambda: cluster.owner(group)[0] not in (-1, owner), "another node taking over")
    return victim, cluster.nodes[cluster.owner(group)[0]]


def rejoin(cluster: Cluster, victim: ServerProcess) -> None:
    victim.start()
    until(lambda: sorted(cluster.held().values()) == [2, 2, 2], "the shards split again")


# The default run keeps one variant of each (CI time); the others are marked slow.
@pytest.mark.parametrize(
    "strategy", [pytest.param("range", marks=pytest.mark.slow), "cooperative-sticky"]
)
def test_classic_group_grows_and_shrinks(cluster: Cluster, strategy: str) -> None:
    log = GroupLog()
    group = f"classic-{strategy}"
    members = [Member(f"m{i}", cluster.bootstrap, group, TOPIC, log, strategy) for i in range(3)]
    try:
        for m in members:
            m.start()
        until(lambda: assignment_settled(members, PARTITIONS), "3 members to settle")
        fourth = Member("m3", cluster.bootstrap, group, TOPIC, log, strategy)
        fourth.start()
        members.append(fourth)
        until(
            lambda: assignment_settled(members, PARTITIONS) and bool(fourth.owned),
            "4 members to settle",
        )
        for m in members[:1:-1]:  # one at a time (group_support.Member._leave)
            m.stop()
            members.remove(m)
            until(lambda: assignment_settled(members, PARTITIONS), "the group to shrink")
    finally:
        for m in members:
            m.stop()
    with log.lock:
        assert [e for _, e in log.errors if e.fatal()] == []


@pytest.mark.parametrize(
    "client",
    [
        "confluent-kafka",
        pytest.param("kafka-python", marks=pytest.mark.slow),
        pytest.param("aiokafka", marks=pytest.mark.slow),
    ],
)
def test_static_members_keep_their_assignments_across_a_coordinator_sigkill(
    cluster: Cluster, client: str
) -> None:
    log = GroupLog()
    group = f"static-{client}"
    members = [static_member(client, i, cluster, group, log) for i in range(3)]
    victim = None
    try:
        for m in members:
            m.start()
        until(lambda: assignment_settled(members, PARTITIONS), "static members to settle")
        owned = {m.member: set(m.owned) for m in members}
        events_before = len(log.events)

        victim, coordinator = kill_coordinator(cluster, group)
        answered = _requests(coordinator, "HEARTBEAT", 0)
        until(
            lambda: _requests(coordinator, "HEARTBEAT", 0) >= answered + 3 * 3,
            "heartbeats answered by the new coordinator",
        )
        # No rebalance: nobody saw a revocation or an assignment, each kept its partitions.
        assert {m.member: m.owned for m in members} == owned
        with log.lock:
            assert log.events[events_before:] == []
        described = AdminClient({"bootstrap.servers": cluster.bootstrap})
        description = described.describe_consumer_groups([group], request_timeout=30)[group]
        instances = sorted(m.group_instance_id for m in description.result().members)
        assert instances == ["inst-0", "inst-1", "inst-2"]
    finally:
        for m in members:
            m.stop()
    assert [getattr(m, "failure", None) for m in members] == [None] * 3
    if victim is not None:
        rejoin(cluster, victim)


def test_kip848_members_continue_at_their_epochs_across_a_coordinator_sigkill(
    cluster: Cluster,
) -> None:
    log = GroupLog()
    group = "kip848-takeover"
    members = [
        ConsumerMember(f"k{i}", cluster.bootstrap, group, TOPIC, log, instance_id=instance)
        for i, instance in enumerate(["inst-0", None, None])
    ]
    victim = None
    try:
        for m in members:
            m.start()
        until(lambda: assignment_settled(members, PARTITIONS), "KIP-848 members to converge")
        owner, _ = cluster.owner(group)

        def stable(node: ServerProcess) -> Any:
            with RawClient(node.bootstrap) as c:
                found = raw_describe(c, group)
            return found if found.error_code == 0 and found.group_state == "Stable" else None

        until(lambda: stable(cluster.nodes[owner]) is not None, "the group to be stable")
        before = stable(cluster.nodes[owner])
        owned = {m.member: set(m.owned) for m in members}
        events_before = len(log.events)

        victim, coordinator = kill_coordinator(cluster, group)
        answered = _requests(coordinator, "CONSUMER_GROUP_HEARTBEAT", 0)
        until(
            lambda: _requests(coordinator, "CONSUMER_GROUP_HEARTBEAT", 0) >= answered + 3 * 3,
            "heartbeats answered by the new coordinator",
        )
        for error in (KafkaError.FENCED_MEMBER_EPOCH, KafkaError.UNKNOWN_MEMBER_ID):
            assert _requests(coordinator, "CONSUMER_GROUP_HEARTBEAT", error) == 0
        after = stable(coordinator)
        assert after is not None
        assert after.group_epoch == before.group_epoch
        assert {(m.member_id, m.member_epoch, m.instance_id) for m in after.members} == {
            (m.member_id, m.member_epoch, m.instance_id) for m in before.members
        }
        assert {m.member: m.owned for m in members} == owned
        with log.lock:
            assert log.events[events_before:] == []  # no revocation, no loss, no reassignment
    finally:
        for m in members:
            m.stop()
    with log.lock:
        assert [e for _, e in log.errors if e.fatal()] == []
    if victim is not None:
        rejoin(cluster, victim)
