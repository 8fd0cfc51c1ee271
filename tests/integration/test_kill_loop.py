"""The SIGKILL loop: the server killed and restarted on the same data directory, cycle after
cycle, while an idempotent producer writes with acks=all, a classic group and a KIP-848
group consume and commit every 200 ms, and one member of each group joins or leaves every
cycle. After each restart:

- every record the producer had acknowledged is stored, at the offset it was acknowledged
  with, with its value;
- every commit the coordinator had acknowledged is still committed (or a later one is);
- each partition has exactly one owner in each group, as the consumers see it and as the
  coordinator describes it.

CI runs a short form (5 cycles); the 30-cycle form is marked slow (`pytest -m slow`)."""

from __future__ import annotations

import threading
import time
from collections import Counter
from collections.abc import Iterator

import pytest
from confluent_kafka import Consumer, KafkaError, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import AdminClient

from tests.integration.group_support import GroupLog, Member, assignment_settled, wait_until
from tests.integration.test_clients import create_topic
from tests.integration.test_durability import read_all
from tests.integration.test_kip848_confluent import ConsumerMember
from tests.support import ServerProcess

TOPIC = "kill-loop"
PARTITIONS = 3
CLASSIC, CONSUMER = "loop-classic", "loop-consumer"
COMMIT_EVERY_S = 0.2
LOAD_S = 2.5


class AckedProducer(threading.Thread):
    """Produces about 1,000 records/s round-robin; keeps what was acknowledged, by partition
    and offset. Retries ride over the restarts (message.timeout.ms is long)."""

    def __init__(self, bootstrap: str) -> None:
        super().__init__(daemon=True)
        self.producer = Producer(
            {
                "bootstrap.servers": bootstrap,
                "acks": "all",
                "enable.idempotence": True,
                "linger.ms": 5,
                "message.timeout.ms": 120_000,
            }
        )
        self.acked: dict[tuple[int, int], bytes] = {}
        self.lock = threading.Lock()
        self.stop_event = threading.Event()

    def _delivered(self, err: KafkaError | None, msg: object) -> None:
        if err is None:
            with self.lock:
                self.acked[(msg.partition(), msg.offset())] = msg.value()  # type: ignore[attr-defined]

    def run(self) -> None:
        i = 0
        while not self.stop_event.is_set():
            try:
                self.producer.produce(
                    TOPIC, value=b"r%09d" % i, partition=i % PARTITIONS, on_delivery=self._delivered
                )
                i += 1
            except BufferError:
                pass
            self.producer.poll(0.001)

    def snapshot(self) -> dict[tuple[int, int], bytes]:
        with self.lock:
            return dict(self.acked)

    def stop(self) -> None:
        self.stop_event.set()
        self.join(10)
        assert self.producer.flush(60) == 0, "records still unacknowledged after the last restart"


def committed(bootstrap: str, group: str) -> dict[int, int]:
    """The group's committed offsets, by OffsetFetch (a consumer that does not join)."""
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": group})
    try:
        tps = consumer.committed([TopicPartition(TOPIC, p) for p in range(PARTITIONS)], timeout=20)
    finally:
        consumer.close()
    return {tp.partition: tp.offset for tp in tps}


def coordinator_owners(admin: AdminClient, group: str) -> Counter[int]:
    """How many members the coordinator's description gives each partition."""
    description = admin.describe_consumer_groups([group], request_timeout=10)[group].result()
    owners: Counter[int] = Counter()
    for member in description.members:
        owners.update(tp.partition for tp in member.assignment.topic_partitions)
    return owners


class Groups:
    """The two groups' members; one member of each joins or leaves per cycle."""

    def __init__(self, bootstrap: str) -> None:
        self.bootstrap = bootstrap
        self.logs = {CLASSIC: GroupLog(), CONSUMER: GroupLog()}
        self.members: dict[str, list[Member]] = {CLASSIC: [], CONSUMER: []}
        self.joined = 0
        self.unsettled = ""
        for _ in range(2):
            self._join(CLASSIC)
            self._join(CONSUMER)

    def _join(self, group: str) -> None:
        self.joined += 1
        name = f"{group}-{self.joined}"
        log = self.logs[group]
        member: Member
        if group == CLASSIC:
            member = Member(
                name, self.bootstrap, group, TOPIC, log, "cooperative-sticky",
                commit_every_s=COMMIT_EVERY_S,
            )  # fmt: skip
        else:
            member = ConsumerMember(
                name, self.bootstrap, group, TOPIC, log, commit_every_s=COMMIT_EVERY_S
            )
        self.members[group].append(member)
        member.start()

    def churn(self, cycle: int) -> None:
        """Odd cycles: a third member joins each group; even cycles: the newest one leaves."""
        for group in (CLASSIC, CONSUMER):
            if cycle % 2:
                self._join(group)
            elif len(self.members[group]) > 2:
                self.members[group].pop().stop(60)

    def acked_commits(self) -> dict[str, dict[int, int]]:
        out = {}
        for group, log in self.logs.items():
            with log.lock:
                out[group] = dict(log.committed)
        return out

    def settled(self, admin: AdminClient) -> bool:
        """Each partition has one owner in each group, as the members and the coordinator
        see it; otherwise `self.unsettled` says what was seen (for the failure message)."""
        for group, members in self.members.items():
            seen = {m.member: sorted(m.owned) for m in members}
            if not assignment_settled(members, PARTITIONS):
                self.unsettled = f"{group}: members own {seen}"
                return False
            try:
                owners = coordinator_owners(admin, group)
            except KafkaException as exc:  # e.g. the admin client reconnecting after a restart
                self.unsettled = f"{group}: describe failed: {exc}"
                return False
            if sorted(owners) != list(range(PARTITIONS)) or set(owners.values()) != {1}:
                self.unsettled = f"{group}: coordinator owners {dict(owners)}, members {seen}"
                return False
        return True

    def stop(self) -> None:
        for members in self.members.values():
            for member in members:
                member.stop(60)
        for log in self.logs.values():
            with log.lock:
                assert [e for _, e in log.errors if e.fatal()] == []


@pytest.fixture
def groups(server: ServerProcess) -> Iterator[Groups]:
    create_topic(server.bootstrap, TOPIC, PARTITIONS)
    crew = Groups(server.bootstrap)
    yield crew
    crew.stop()


def wait_single_owners(server: ServerProcess, groups: Groups, what: str) -> None:
    # A fresh admin client each time: librdkafka 2.16's admin client, having described a
    # classic group and then a consumer group before a broker restart, never sends the
    # consumer group's ConsumerGroupDescribe after it (its broker handle stays
    # "terminating"); a new client describes both at once.
    admin = AdminClient({"bootstrap.servers": server.bootstrap})
    try:
        wait_until(lambda: groups.settled(admin), 90, what)
    except AssertionError as exc:
        raise AssertionError(f"{exc}; last seen: {groups.unsettled}") from None


def run_loop(server: ServerProcess, groups: Groups, cycles: int) -> None:
    producer = AckedProducer(server.bootstrap)
    producer.start()
    wait_single_owners(server, groups, "both groups to form")
    for cycle in range(1, cycles + 1):
        groups.churn(cycle)
        time.sleep(LOAD_S)
        server.kill()
        acked = producer.snapshot()
        commits = groups.acked_commits()
        server.start()

        stored = read_all(server.bootstrap, TOPIC)
        by_offset = {(p, o): v for p, records in stored.items() for o, v in records}
        lost = sorted(key for key, value in acked.items() if by_offset.get(key) != value)
        assert lost == [], f"cycle {cycle}: acknowledged records lost or changed: {lost[:10]}"
        for group, acked_offsets in commits.items():
            now = committed(server.bootstrap, group)
            behind = {p: (o, now.get(p)) for p, o in acked_offsets.items() if now.get(p, -1) < o}
            assert behind == {}, f"cycle {cycle}: {group} lost acknowledged commits {behind}"
        wait_single_owners(server, groups, f"single owners after restart {cycle}")

    assert len(producer.snapshot()) > 1000 * cycles, "the load did not get going"
    for group, log in groups.logs.items():
        assert log.committed, f"{group} never had a commit acknowledged"
    producer.stop()
    # Nothing stored twice: the idempotent producer's retries across restarts were deduplicated.
    stored = read_all(server.bootstrap, TOPIC)
    values = [v for records in stored.values() for _, v in records]
    duplicates = [v for v, n in Counter(values).items() if n > 1]
    assert duplicates == [], f"stored twice: {duplicates[:10]}"
    assert {p: [o for o, _ in r] for p, r in stored.items()} == {
        p: list(range(len(r))) for p, r in stored.items()
    }, "offsets are contiguous from 0"


def test_sigkill_loop_short(server: ServerProcess, groups: Groups) -> None:
    run_loop(server, groups, cycles=5)


@pytest.mark.slow
@pytest.mark.timeout(1800)
def test_sigkill_loop_30_cycles(server: ServerProcess, groups: Groups) -> None:
    run_loop(server, groups, cycles=30)
