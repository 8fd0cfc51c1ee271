"""Online migration between the classic and the consumer rebalance protocols (reference
B.14) with real confluent-kafka clients: a KIP-848 consumer (`group.protocol=consumer`)
joining a live classic group upgrades it to a consumer group in which the classic consumer
goes on as a classic-protocol member; when the last KIP-848 member leaves, the group goes
back to a classic group and rebalances; a classic member joining a consumer group keeps it
one; and a SIGKILL of the server while the group is mixed.

Every phase runs under continuous production; each message must be consumed by the
partition's owner at the time and, without a crash, exactly once (members commit
synchronously when partitions are revoked and when they close). An ownership monitor
samples what every member holds and records any partition held by two at once."""

from __future__ import annotations

import threading
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import pytest
from confluent_kafka import (
    ConsumerGroupState,
    ConsumerGroupTopicPartitions,
    ConsumerGroupType,
    KafkaException,
    TopicPartition,
)
from confluent_kafka.admin import AdminClient

from tests.integration.group_support import GroupLog, Member, produce, wait_until
from tests.integration.test_clients import create_topic
from tests.integration.test_kip848_confluent import (
    BackgroundProducer,
    ConsumerMember,
    assignments_by_client,
    describe_group,
    launch,
    settled,
)
from tests.support import ServerProcess, serving

PARTITIONS = 6
ALL = set(range(PARTITIONS))


@pytest.fixture
def server(tmp_path: Path) -> Iterator[ServerProcess]:
    with serving(
        tmp_path / "data",
        group_consumer_heartbeat_interval_ms=500,
        group_consumer_session_timeout_ms=10000,
        group_consumer_assignment_interval_ms=200,
        group_initial_rebalance_delay_ms=300,
    ) as proc:
        yield proc


@pytest.fixture
def crew(server: ServerProcess) -> Iterator[list[threading.Thread]]:
    """Threads a test started (members, producers, the monitor): stopped at teardown,
    before the server is, even when the test failed."""
    threads: list[threading.Thread] = []
    yield threads
    for t in threads:
        t.stop_event.set()  # type: ignore[attr-defined]
    for t in threads:
        t.join(10)


@pytest.fixture
def admin(server: ServerProcess) -> AdminClient:
    return AdminClient({"bootstrap.servers": server.bootstrap})


# -- helpers -----------------------------------------------------------------------------------


class OwnershipMonitor(threading.Thread):
    """Samples every member's owned partitions; records each partition two members held at
    once. A member drops a revoked partition from `owned` in its callback, before it tells
    the coordinator it let it go, so a sample shows an overlap only if the coordinator gave
    out a partition that was still held (or fenced a member that was still consuming)."""

    def __init__(self, members: list[Member]) -> None:
        super().__init__(daemon=True)
        self.members = members  # the test appends newcomers
        self.stop_event = threading.Event()
        self.overlaps: list[tuple[int, list[str]]] = []

    def run(self) -> None:
        while not self.stop_event.is_set():
            holders: dict[int, list[str]] = {}
            for m in list(self.members):
                for p in set(m.owned):
                    holders.setdefault(p, []).append(m.member)
            for p, who in holders.items():
                if len(who) > 1 and (p, who) not in self.overlaps:
                    self.overlaps.append((p, who))
            time.sleep(0.01)


def group_type(admin: AdminClient, group: str) -> ConsumerGroupType | None:
    """The group's type as ListGroups reports it (None: not listed)."""
    listing = admin.list_consumer_groups(request_timeout=10).result()
    assert listing.errors == []
    return {g.group_id: g.type for g in listing.valid}.get(group)


def consumed_by(log: GroupLog, member: Member, since: int = 0) -> int:
    with log.lock:
        return sum(1 for c in log.consumed[since:] if c.member == member.member)


def mixed_view_ok(admin: AdminClient, group: str, members: list[Member]) -> bool:
    """Every partition owned by exactly one member, each member owning some, the spread
    even, and the coordinator's ConsumerGroupDescribe (type CONSUMER) agreeing."""
    if not settled(members, PARTITIONS) or not all(m.owned for m in members):  # type: ignore[arg-type]
        return False
    description = describe_group(admin, group)
    return description.type == ConsumerGroupType.CONSUMER and assignments_by_client(
        description
    ) == {m.member: m.owned for m in members}


def wait_mixed(admin: AdminClient, group: str, members: list[Member], what: str) -> None:
    wait_until(lambda: mixed_view_ok(admin, group, members), 30, what)
    assert group_type(admin, group) == ConsumerGroupType.CONSUMER


def wait_classic(admin: AdminClient, group: str, classic: Member, what: str) -> None:
    """The group is a classic group again (ListGroups and DescribeGroups), Stable, with the
    classic member alone owning every partition."""

    def ok() -> bool:
        if group_type(admin, group) != ConsumerGroupType.CLASSIC or classic.owned != ALL:
            return False
        description = describe_group(admin, group)
        return (
            description.type == ConsumerGroupType.CLASSIC
            and description.state == ConsumerGroupState.STABLE
            and assignments_by_client(description) == {classic.member: ALL}
        )

    wait_until(ok, 30, what)


def wait_consuming(log: GroupLog, members: list[Member], n: int, what: str) -> None:
    """Each member consumes n more messages from now on."""
    mark = len(log.consumed)
    wait_until(lambda: all(consumed_by(log, m, mark) >= n for m in members), 30, what)


def check_log(
    log: GroupLog, monitor: OwnershipMonitor, members: list[Member], allow_lost: bool = False
) -> None:
    """No partition held twice, every message by its owner, no fatal client error and,
    unless allowed, no partition lost (taken away without a revocation, so uncommitted)."""
    assert monitor.overlaps == []
    assert all(c.owned for c in log.consumed)  # by the partition's owner at the time
    with log.lock:
        if not allow_lost:
            assert [e for e in log.events if e[1] == "lost"] == []
        assert [e for _, e in log.errors if e.fatal()] == []
    assert [m.member for m in members if m.fatal is not None] == []


def assert_exactly_once(log: GroupLog, expected: list[bytes]) -> None:
    counts = Counter(log.values())
    assert sorted(counts) == sorted(expected)  # none lost, nothing unexpected
    assert [v for v, n in counts.items() if n > 1] == []  # none twice


def committed(admin: AdminClient, group: str, topic: str) -> dict[int, int]:
    request = ConsumerGroupTopicPartitions(
        group, [TopicPartition(topic, p) for p in range(PARTITIONS)]
    )
    result = admin.list_consumer_group_offsets([request], request_timeout=10)[group].result()
    return {tp.partition: tp.offset for tp in result.topic_partitions if tp.offset >= 0}


def start_monitor(crew: list[threading.Thread], members: list[Member]) -> OwnershipMonitor:
    monitor = OwnershipMonitor(members)
    launch(crew, monitor)
    return monitor


# -- 1/2. upgrade by a KIP-848 member, downgrade when it leaves --------------------------------


@pytest.mark.parametrize("strategy", ["cooperative-sticky", "range"])
def test_kip848_member_upgrades_a_classic_group_and_its_leave_downgrades_it(
    server: ServerProcess,
    crew: list[threading.Thread],
    admin: AdminClient,
    strategy: str,
) -> None:
    """A classic consumer owns all 6 partitions; a KIP-848 consumer joins: the group becomes
    a consumer group, the two share the partitions and every message is consumed once by its
    owner. With the eager `range` strategy the classic member gives up all its partitions
    (committing them) at each rebalance and gets its share back: still exactly once, since
    nobody consumes a partition before the previous owner committed it and let it go."""
    bootstrap = server.bootstrap
    topic = group = f"mig-up-{strategy}"
    create_topic(bootstrap, topic, PARTITIONS)
    log = GroupLog()
    classic = Member("classic", bootstrap, group, topic, log, strategy)
    members: list[Member] = [classic]
    monitor = start_monitor(crew, members)
    launch(crew, classic)
    wait_until(lambda: classic.owned == ALL, 30, "the classic consumer to own everything")
    assert group_type(admin, group) == ConsumerGroupType.CLASSIC

    producer = BackgroundProducer(bootstrap, topic, PARTITIONS, "live")
    launch(crew, producer)
    wait_consuming(log, [classic], 60, "the classic consumer to consume")

    # Upgrade: a KIP-848 consumer joins the same group id.
    modern = ConsumerMember("modern", bootstrap, group, topic, log)
    members.append(modern)
    launch(crew, modern)
    wait_until(
        lambda: group_type(admin, group) == ConsumerGroupType.CONSUMER,
        15,
        "the group to become a consumer group",
    )
    wait_mixed(admin, group, members, "the classic and the KIP-848 member to share")
    assert len(classic.owned) == len(modern.owned) == PARTITIONS // 2
    description = describe_group(admin, group)
    assert sorted(m.client_id for m in description.members) == ["classic", "modern"]
    wait_consuming(log, members, 30, "both members to consume")

    # Downgrade: the KIP-848 member leaves; the classic member is the group again.
    modern.stop()
    members.remove(modern)
    wait_classic(admin, group, classic, "the group to be a classic group again")
    wait_consuming(log, [classic], 60, "the classic consumer to consume alone")
    assert group_type(admin, group) == ConsumerGroupType.CLASSIC

    expected = producer.stop()
    wait_until(lambda: set(expected) <= set(log.values()), 30, "every message consumed")
    classic.stop()
    check_log(log, monitor, [classic, modern])
    assert_exactly_once(log, expected)
    assert committed(admin, group, topic) == {p: len(expected) // PARTITIONS for p in ALL}


# -- 3. a classic member in a consumer group ---------------------------------------------------


@pytest.mark.parametrize("first_to_leave", ["kip848-members", "classic-member"])
def test_classic_member_in_a_consumer_group(
    server: ServerProcess,
    crew: list[threading.Thread],
    admin: AdminClient,
    first_to_leave: str,
) -> None:
    """Two KIP-848 members form a consumer group; a classic consumer (cooperative-sticky)
    joins: it stays a consumer group with a classic member that gets its share. Then either
    both KIP-848 members leave (one at a time): the group is downgraded to a classic group
    owned by the classic member; or the classic member leaves: it stays a consumer group."""
    bootstrap = server.bootstrap
    topic = group = f"mig-mixed-{first_to_leave}"
    create_topic(bootstrap, topic, PARTITIONS)
    log = GroupLog()
    modern = [ConsumerMember(f"modern-{i}", bootstrap, group, topic, log) for i in range(2)]
    members: list[Member] = list(modern)
    monitor = start_monitor(crew, members)
    launch(crew, *modern)
    wait_mixed(admin, group, members, "the KIP-848 members to converge")

    producer = BackgroundProducer(bootstrap, topic, PARTITIONS, "live")
    launch(crew, producer)
    wait_consuming(log, members, 30, "the KIP-848 members to consume")

    classic = Member("classic", bootstrap, group, topic, log, "cooperative-sticky")
    members.append(classic)
    launch(crew, classic)
    wait_mixed(admin, group, members, "the classic member to get its share")
    assert all(len(m.owned) == 2 for m in members)
    wait_consuming(log, members, 20, "all three members to consume")

    if first_to_leave == "kip848-members":
        modern[0].stop()
        members.remove(modern[0])
        wait_mixed(admin, group, members, "the other two to take over")
        assert group_type(admin, group) == ConsumerGroupType.CONSUMER  # a KIP-848 member is left
        wait_consuming(log, members, 20, "the remaining two to consume")
        modern[1].stop()
        members.remove(modern[1])
        wait_classic(admin, group, classic, "the group to become a classic group")
        wait_consuming(log, [classic], 60, "the classic member to consume alone")
        assert group_type(admin, group) == ConsumerGroupType.CLASSIC
    else:
        classic.stop()
        members.remove(classic)
        wait_mixed(admin, group, members, "the KIP-848 members to take over")
        assert all(len(m.owned) == 3 for m in members)
        wait_consuming(log, members, 30, "the KIP-848 members to consume again")
        assert group_type(admin, group) == ConsumerGroupType.CONSUMER
        assert sorted(m.client_id for m in describe_group(admin, group).members) == [
            "modern-0",
            "modern-1",
        ]

    expected = producer.stop()
    wait_until(lambda: set(expected) <= set(log.values()), 30, "every message consumed")
    for m in members:
        m.stop()
    check_log(log, monitor, [*modern, classic])
    assert_exactly_once(log, expected)
    assert committed(admin, group, topic) == {p: len(expected) // PARTITIONS for p in ALL}


# -- 4. SIGKILL while the group is mixed -------------------------------------------------------


class _PeriodicCommits:
    """Wraps a member's consumer so that its poll loop also commits what it consumed every
    `interval_s` (synchronously; failures while the coordinator is down are only noted)."""

    def __init__(self, member: Member, interval_s: float) -> None:
        self.inner = member.consumer
        self.member = member
        self.interval_s = interval_s
        self.last = time.monotonic()
        self.failures: list[KafkaException] = []

    def poll(self, timeout: float) -> object:
        if time.monotonic() - self.last >= self.interval_s:
            self.last = time.monotonic()
            try:
                self.member._commit(sorted(self.member.owned))
            except KafkaException as e:
                self.failures.append(e)
        return self.inner.poll(timeout)

    def __getattr__(self, name: str) -> object:
        return getattr(self.inner, name)


def test_mixed_group_rides_out_a_coordinator_sigkill(
    server: ServerProcess, crew: list[threading.Thread], admin: AdminClient
) -> None:
    """A consumer group with a KIP-848 and a classic member, both committing as they go; the
    server is SIGKILLed and restarted on the same data dir. The members carry on (rejoining
    if they must), no partition is ever held by two, every message is consumed, nothing
    below the offsets committed before the crash is consumed again, and the commits survive."""
    bootstrap = server.bootstrap
    topic = group = "mig-sigkill"
    create_topic(bootstrap, topic, PARTITIONS)
    log = GroupLog()
    modern = ConsumerMember("modern", bootstrap, group, topic, log)
    classic = Member("classic", bootstrap, group, topic, log, "cooperative-sticky")
    members: list[Member] = [modern, classic]
    for m in members:
        m.consumer = _PeriodicCommits(m, 0.2)  # type: ignore[assignment]
    monitor = start_monitor(crew, members)
    launch(crew, modern)
    wait_until(lambda: modern.owned == ALL, 30, "the KIP-848 member to own everything")
    launch(crew, classic)
    wait_mixed(admin, group, members, "the classic member to get its share")

    expected = produce(bootstrap, topic, PARTITIONS, 20, "before")
    wait_until(lambda: set(expected) <= set(log.values()), 30, "consumption before the crash")
    wait_until(
        lambda: committed(admin, group, topic) == {p: 20 for p in ALL},
        15,
        "the members to commit what they consumed",
    )
    consumed_before = len(log.consumed)

    server.restart()  # SIGKILL with both members live, then start on the same data dir
    # A new admin client: librdkafka 2.16's re-bootstrap after the disconnect can drop an
    # admin request's FindCoordinator and leave it waiting for its whole timeout
    # (confluentinc/librdkafka#5511).
    admin = AdminClient({"bootstrap.servers": bootstrap})

    assert committed(admin, group, topic) == {p: 20 for p in ALL}  # committed progress kept
    assert group_type(admin, group) == ConsumerGroupType.CONSUMER
    expected += produce(bootstrap, topic, PARTITIONS, 20, "after")
    wait_until(lambda: set(expected) <= set(log.values()), 30, "consumption after the crash")
    wait_mixed(admin, group, members, "the mixed group to be whole after the crash")
    wait_until(
        lambda: all(consumed_by(log, m, consumed_before) > 0 for m in members),
        30,
        "both members to consume after the crash",
    )
    expected += produce(bootstrap, topic, PARTITIONS, 5, "later")
    wait_until(lambda: set(expected) <= set(log.values()), 30, "consumption of a later batch")

    # The classic member first: it leaves a consumer group, which stays one. (Stopping the
    # KIP-848 member first would downgrade the group and make the classic member rejoin
    # while it closes: librdkafka's closing commit then carries the generation that rejoin
    # just ended and gets ILLEGAL_GENERATION, from Kafka as well.)
    classic.stop()
    modern.stop()
    check_log(log, monitor, members, allow_lost=True)
    counts = Counter(log.values())
    assert sorted(counts) == sorted(expected)  # all consumed at least once, nothing else
    with log.lock:
        # What was committed before the crash is never delivered again ...
        again = [c for c in log.consumed[consumed_before:] if c.offset < 20]
        lost = [e for e in log.events if e[1] == "lost"]
    assert again == []
    # ... and unless a member lost partitions (fenced: no commit on the way out), nothing
    # was delivered twice: revocations commit first, and members that were not fenced
    # carried on from their positions.
    if not lost:
        assert [v for v, n in counts.items() if n > 1] == []
    assert committed(admin, group, topic) == {p: 45 for p in ALL}
