"""confluent-kafka consumers on the consumer rebalance protocol (KIP-848,
`group.protocol=consumer`) against the real server: server-side assignors, members leaving
and joining under continuous production with every message consumed once by its owner,
static membership across a consumer restart, the admin view of consumer groups, committed
offsets surviving a SIGKILL of the server, and live members riding one out."""

from __future__ import annotations

import threading
import time
from collections import Counter, defaultdict
from collections.abc import Iterator
from pathlib import Path

import pytest
from confluent_kafka import (
    Consumer,
    ConsumerGroupState,
    ConsumerGroupType,
    KafkaError,
    KafkaException,
    Producer,
    TopicPartition,
)
from confluent_kafka.admin import AdminClient, ConsumerGroupDescription

from tests.integration.group_support import GroupLog, Member, produce, wait_until
from tests.integration.test_clients import create_topic
from tests.integration.test_kip848_raw import describe as raw_describe
from tests.rawclient import RawClient
from tests.support import ServerProcess, serving

PARTITIONS = 6


@pytest.fixture
def server(tmp_path: Path) -> Iterator[ServerProcess]:
    with serving(
        tmp_path / "data",
        group_consumer_heartbeat_interval_ms=500,
        group_consumer_session_timeout_ms=10000,
        group_consumer_assignment_interval_ms=200,
    ) as proc:
        yield proc


@pytest.fixture
def crew(server: ServerProcess) -> Iterator[list[threading.Thread]]:
    """Threads a test started (members, producers): stopped at teardown, before the server
    is, even when the test failed."""
    threads: list[threading.Thread] = []
    yield threads
    for t in threads:
        t.stop_event.set()  # type: ignore[attr-defined]
    for t in threads:
        t.join(10)


@pytest.fixture
def admin(server: ServerProcess) -> AdminClient:
    return AdminClient({"bootstrap.servers": server.bootstrap})


def launch(crew: list[threading.Thread], *threads: threading.Thread) -> None:
    for t in threads:
        crew.append(t)
        t.start()


class ConsumerMember(Member):
    """group_support's Member on the consumer protocol. librdkafka refuses the classic
    settings (session timeout, heartbeat interval, assignment strategy) when
    group.protocol=consumer: the coordinator owns them, the assignor is
    group.remote.assignor. Commits synchronously on revocation, like Member."""

    def __init__(
        self,
        name: str,
        bootstrap: str,
        group: str,
        topic: str,
        log: GroupLog,
        assignor: str | None = None,
        instance_id: str | None = None,
        commit_every_s: float | None = None,
    ) -> None:
        threading.Thread.__init__(self, name=name, daemon=True)
        self.commit_every_s = commit_every_s
        self.member = name
        self.topic = topic
        self.log = log
        self.cooperative = True
        conf: dict[str, object] = {
            "bootstrap.servers": bootstrap,
            "group.id": group,
            "group.protocol": "consumer",
            "client.id": name,
            "enable.auto.commit": False,
            "auto.offset.reset": "earliest",
            "fetch.wait.max.ms": 100,
            "error_cb": self._on_error,
        }
        if assignor is not None:
            conf["group.remote.assignor"] = assignor
        self.static = instance_id is not None
        if instance_id is not None:
            conf["group.instance.id"] = instance_id
        self.consumer = Consumer(conf)
        self.owned: set[int] = set()
        self.positions: dict[int, int] = {}
        self.stop_event = threading.Event()
        self.closed = threading.Event()
        self.fatal: KafkaError | None = None


class BackgroundProducer(threading.Thread):
    """Produces to every partition in turn until stopped; stop() returns every value sent
    once all are acknowledged."""

    def __init__(self, bootstrap: str, topic: str, partitions: int, tag: str) -> None:
        super().__init__(daemon=True)
        self.producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5})
        self.topic = topic
        self.partitions = partitions
        self.tag = tag
        self.stop_event = threading.Event()
        self.values: list[bytes] = []
        self.failed: list[KafkaError] = []

    def _delivered(self, err: KafkaError | None, msg: object) -> None:
        if err is not None:
            self.failed.append(err)

    def run(self) -> None:
        i = 0
        while not self.stop_event.is_set():
            for p in range(self.partitions):
                value = f"{self.tag}-{p}-{i}".encode()
                self.producer.produce(
                    self.topic, value=value, partition=p, on_delivery=self._delivered
                )
                self.values.append(value)
            i += 1
            self.producer.poll(0)
            time.sleep(0.02)

    def stop(self) -> list[bytes]:
        self.stop_event.set()
        self.join(10)
        assert self.producer.flush(30) == 0
        assert self.failed == []
        return self.values


def settled(members: list[ConsumerMember], partitions: int) -> bool:
    """Every partition owned by exactly one member, and the partitions spread evenly."""
    owners: Counter[int] = Counter()
    for m in members:
        owners.update(m.owned)
    sizes = sorted(len(m.owned) for m in members)
    return (
        sorted(owners) == list(range(partitions))
        and all(n == 1 for n in owners.values())
        and sizes[-1] - sizes[0] <= 1
    )


def describe_group(admin: AdminClient, group: str) -> ConsumerGroupDescription:
    return admin.describe_consumer_groups([group], request_timeout=10)[group].result()


def assignments_by_client(description: ConsumerGroupDescription) -> dict[str, set[int]]:
    return {
        m.client_id: {tp.partition for tp in m.assignment.topic_partitions}
        for m in description.members
    }


def range_layout(member_ids: list[str], partitions: int) -> dict[str, set[int]]:
    """Kafka's range assignor for one topic and dynamic members: sorted by member id, each
    gets the next contiguous range, the first P % N one partition more."""
    ordered = sorted(member_ids)
    quota, extra = divmod(partitions, len(ordered))
    out: dict[str, set[int]] = {}
    start = 0
    for i, member_id in enumerate(ordered):
        n = quota + (1 if i < extra else 0)
        out[member_id] = set(range(start, start + n))
        start += n
    return out


def check_assignment(
    admin: AdminClient, group: str, members: list[ConsumerMember], assignor: str
) -> None:
    """The coordinator's view (ConsumerGroupDescribe) is what the consumers own and, for
    range, the contiguous layout over the sorted (client-generated) member ids."""
    description = describe_group(admin, group)
    assert description.type == ConsumerGroupType.CONSUMER
    assert description.partition_assignor == assignor
    by_client = assignments_by_client(description)
    assert by_client == {m.member: m.owned for m in members}
    for m in description.members:
        # Reconciled: the target is what the member has.
        assert m.target_assignment is not None
        assert {tp.partition for tp in m.target_assignment.topic_partitions} == by_client[
            m.client_id
        ]
    if assignor == "range":
        expected = range_layout([m.member_id for m in description.members], PARTITIONS)
        assert {m.client_id: expected[m.member_id] for m in description.members} == by_client


def wait_settled(
    admin: AdminClient, group: str, members: list[ConsumerMember], assignor: str, what: str
) -> None:
    def ok() -> bool:
        if not settled(members, PARTITIONS):
            return False
        try:
            check_assignment(admin, group, members, assignor)
        except AssertionError:
            return False
        return True

    wait_until(ok, 30, what)
    check_assignment(admin, group, members, assignor)


def assert_once_by_owner(log: GroupLog, expected: list[bytes]) -> None:
    counts = Counter(log.values())
    assert sorted(counts) == sorted(expected)  # none lost, nothing unexpected
    assert [v for v, n in counts.items() if n > 1] == []  # none twice
    assert all(c.owned for c in log.consumed)  # each by the partition's owner at the time
    with log.lock:
        assert [e for e in log.events if e[1] == "lost"] == []
        assert [e for _, e in log.errors if e.fatal()] == []


# -- a. members leave and join ---------------------------------------------------------------


@pytest.mark.parametrize("assignor", ["uniform", "range"])
def test_leave_and_join_every_message_once_by_its_owner(
    server: ServerProcess, crew: list[threading.Thread], admin: AdminClient, assignor: str
) -> None:
    bootstrap = server.bootstrap
    topic, group = f"k848-{assignor}", f"k848-{assignor}"
    create_topic(bootstrap, topic, PARTITIONS)
    log = GroupLog()
    members = [
        ConsumerMember(f"{assignor}-{i}", bootstrap, group, topic, log, assignor) for i in range(3)
    ]
    launch(crew, *members)
    wait_settled(admin, group, members, assignor, "3 members to converge")
    assert all(len(m.owned) == 2 for m in members)

    producer = BackgroundProducer(bootstrap, topic, PARTITIONS, "live")
    launch(crew, producer)
    wait_until(lambda: len(log.values()) >= 60, 30, "consumption to start")

    # One member leaves (close()): the other two take over its partitions.
    before = {m.member: set(m.owned) for m in members}
    leaving = members.pop(1)
    leaving.stop()
    wait_settled(admin, group, members, assignor, "2 members to take over")
    assert all(len(m.owned) == 3 for m in members)
    if assignor == "uniform":
        # Sticky: the survivors kept what they had and split the leaver's partitions.
        assert all(before[m.member] <= m.owned for m in members)
    seen = len(log.values())
    wait_until(lambda: len(log.values()) >= seen + 60, 30, "consumption by 2 members")

    # A new member joins and gets its share.
    before = {m.member: set(m.owned) for m in members}
    events_before = len(log.events)
    newcomer = ConsumerMember(f"{assignor}-new", bootstrap, group, topic, log, assignor)
    launch(crew, newcomer)
    members.append(newcomer)
    wait_settled(admin, group, members, assignor, "the newcomer to get its share")
    assert all(len(m.owned) == 2 for m in members)
    if assignor == "uniform":
        # Incremental: a survivor only gave up partitions, and only to the newcomer.
        with log.lock:
            revoked = {
                p
                for who, kind, ps in log.events[events_before:]
                if kind == "revoke" and who != newcomer.member
                for p in ps
            }
        assert all(m.owned <= before[m.member] for m in members[:-1])
        assert revoked == newcomer.owned
    seen = len(log.values())
    wait_until(lambda: len(log.values()) >= seen + 60, 30, "consumption by 3 members")

    expected = producer.stop()
    wait_until(lambda: set(expected) <= set(log.values()), 30, "every message consumed")
    for m in members:
        m.stop()
    assert_once_by_owner(log, expected)


# -- b. static membership ----------------------------------------------------------------------


def test_static_member_restart_keeps_partitions_without_rebalance(
    server: ServerProcess, crew: list[threading.Thread], admin: AdminClient
) -> None:
    bootstrap = server.bootstrap
    topic, group = "k848-static", "k848-static"
    create_topic(bootstrap, topic, PARTITIONS)
    log = GroupLog()
    members = [
        ConsumerMember(f"s{i}", bootstrap, group, topic, log, instance_id=f"inst-{i}")
        for i in range(3)
    ]
    launch(crew, *members)
    wait_settled(admin, group, members, "uniform", "static members to converge")
    with RawClient(bootstrap) as c:
        epoch_before = raw_describe(c, group).group_epoch
    events_before = len(log.events)

    old = members[0]
    had = set(old.owned)
    old.stop()  # a static member's close() is a temporary leave (epoch -2): it keeps its place
    new = ConsumerMember("s0-restarted", bootstrap, group, topic, log, instance_id="inst-0")
    launch(crew, new)
    members[0] = new
    wait_until(lambda: new.owned == had, 15, "the restarted member to get its partitions back")
    wait_settled(admin, group, members, "uniform", "the group to be whole again")

    with log.lock:
        others = [e for e in log.events[events_before:] if e[0] not in ("s0", "s0-restarted")]
    assert others == []  # nobody else saw a revocation or an assignment

    description = describe_group(admin, group)
    assert description.type == ConsumerGroupType.CONSUMER  # answered by ConsumerGroupDescribe
    assert description.state == ConsumerGroupState.STABLE
    assert sorted(m.group_instance_id for m in description.members) == [
        "inst-0",
        "inst-1",
        "inst-2",
    ]
    assert assignments_by_client(description) == {m.member: m.owned for m in members}
    assert _requests(server, "CONSUMER_GROUP_DESCRIBE") > 0
    with RawClient(bootstrap) as c:
        after = raw_describe(c, group)
    assert after.group_state == "Stable"
    assert after.group_epoch == epoch_before  # the replacement was no rebalance
    expected = produce(bootstrap, topic, PARTITIONS, 10, "after")
    wait_until(lambda: set(expected) <= set(log.values()), 30, "consumption after the restart")
    for m in members:
        m.stop()
    assert_once_by_owner(log, expected)


def _requests(server: ServerProcess, api: str, error: int | None = None) -> float:
    """Requests of one API the server answered (with `error`, if given) since it started."""
    total = 0.0
    for line in server.metrics_text().splitlines():
        if not line.startswith("groupcoord_requests_total{") or f'api="{api}"' not in line:
            continue
        if error is None or f'error="{error}"' in line:
            total += float(line.split()[-1])
    return total


# -- c. admin ----------------------------------------------------------------------------------


def test_admin_lists_describes_and_deletes_consumer_groups(
    server: ServerProcess, crew: list[threading.Thread], admin: AdminClient
) -> None:
    bootstrap = server.bootstrap
    topic, group = "k848-admin", "k848-admin"
    create_topic(bootstrap, topic, PARTITIONS)
    log = GroupLog()
    members = [ConsumerMember(f"a{i}", bootstrap, group, topic, log) for i in range(2)]
    launch(crew, *members)
    wait_settled(admin, group, members, "uniform", "2 members to converge")
    produce(bootstrap, topic, PARTITIONS, 5, "x")
    wait_until(lambda: len(log.values()) >= PARTITIONS * 5, 30, "consumption")

    def listing(**kwargs: object) -> dict[str, object]:
        result = admin.list_consumer_groups(request_timeout=10, **kwargs).result()
        assert result.errors == []
        return {g.group_id: g for g in result.valid}

    listed = listing()[group]
    assert listed.type == ConsumerGroupType.CONSUMER  # type: ignore[attr-defined]
    assert listed.state == ConsumerGroupState.STABLE  # type: ignore[attr-defined]
    assert listed.is_simple_consumer_group is False  # type: ignore[attr-defined]
    assert group in listing(types={ConsumerGroupType.CONSUMER})
    assert group not in listing(types={ConsumerGroupType.CLASSIC})
    assert group in listing(states={ConsumerGroupState.STABLE})
    assert group not in listing(states={ConsumerGroupState.EMPTY})

    description = describe_group(admin, group)
    assert description.state == ConsumerGroupState.STABLE
    assert description.type == ConsumerGroupType.CONSUMER
    assert description.partition_assignor == "uniform"
    assert sorted(m.client_id for m in description.members) == ["a0", "a1"]
    assert all(m.host for m in description.members)
    assert assignments_by_client(description) == {m.member: m.owned for m in members}

    with pytest.raises(KafkaException) as info:
        admin.delete_consumer_groups([group], request_timeout=10)[group].result()
    assert info.value.args[0].code() == KafkaError.NON_EMPTY_GROUP
    assert group in listing()

    for m in members:
        m.stop()
    wait_until(
        lambda: describe_group(admin, group).state == ConsumerGroupState.EMPTY,
        15,
        "the group to be empty",
    )
    assert listing()[group].state == ConsumerGroupState.EMPTY  # type: ignore[attr-defined]
    committed = _committed(bootstrap, group, topic)
    assert committed == {p: 5 for p in range(PARTITIONS)}
    admin.delete_consumer_groups([group], request_timeout=10)[group].result()
    assert group not in listing()
    assert _committed(bootstrap, group, topic) == {}  # the offsets went with it
    with RawClient(bootstrap) as c:
        assert raw_describe(c, group).error_code == KafkaError.GROUP_ID_NOT_FOUND


def _committed(bootstrap: str, group: str, topic: str) -> dict[int, int]:
    consumer = Consumer(
        {"bootstrap.servers": bootstrap, "group.id": group, "group.protocol": "consumer"}
    )
    try:
        tps = consumer.committed([TopicPartition(topic, p) for p in range(PARTITIONS)], timeout=10)
    finally:
        consumer.close()
    return {tp.partition: tp.offset for tp in tps if tp.offset >= 0}


# -- d. committed offsets survive SIGKILL ------------------------------------------------------


def test_committed_offsets_survive_sigkill_and_consumers_resume(
    server: ServerProcess, crew: list[threading.Thread]
) -> None:
    bootstrap = server.bootstrap
    topic, group = "k848-resume", "k848-resume"
    partitions = 4
    create_topic(bootstrap, topic, partitions)
    first = produce(bootstrap, topic, partitions, 20, "first")

    # Two members consume everything and commit it (on revocation and when closing).
    log = GroupLog()
    members = [ConsumerMember(f"r{i}", bootstrap, group, topic, log) for i in range(2)]
    launch(crew, *members)
    wait_until(lambda: set(first) <= set(log.values()), 30, "the first batch consumed")
    for m in members:
        m.stop()
    assert_once_by_owner(log, first)

    # One more consumer reads the second batch but commits only its first half: the rest
    # is the uncommitted tail that a restart must deliver again.
    second = produce(bootstrap, topic, partitions, 20, "second")
    tail_consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": group,
            "group.protocol": "consumer",
            "enable.auto.commit": False,
            "auto.offset.reset": "earliest",
            "fetch.wait.max.ms": 100,
        }
    )
    committed = {p: 30 for p in range(partitions)}  # 20 of the first batch + 10
    try:
        tail_consumer.subscribe([topic])
        got: dict[int, list[int]] = defaultdict(list)
        deadline = time.monotonic() + 30
        while sum(len(v) for v in got.values()) < len(second):
            assert time.monotonic() < deadline, "the second batch was not consumed"
            msg = tail_consumer.poll(0.1)
            if msg is not None and not msg.error():
                got[msg.partition()].append(msg.offset())
        # It started where the members had committed.
        assert {p: min(offs) for p, offs in got.items()} == {p: 20 for p in range(partitions)}
        tail_consumer.commit(
            offsets=[TopicPartition(topic, p, o) for p, o in committed.items()],
            asynchronous=False,
        )
    finally:
        tail_consumer.close()  # no auto-commit: offsets 30-39 stay uncommitted
    with RawClient(bootstrap) as c:
        epoch_before = raw_describe(c, group).group_epoch

    server.restart()  # SIGKILL, then start on the same data dir

    third = produce(bootstrap, topic, partitions, 5, "third")
    log = GroupLog()
    members = [ConsumerMember(f"after{i}", bootstrap, group, topic, log) for i in range(2)]
    launch(crew, *members)
    tail = [v for v in second if int(v.split(b"-")[-1]) >= 10]
    expected = tail + third
    wait_until(lambda: set(expected) <= set(log.values()), 30, "the tail and the third batch")
    for m in members:
        m.stop()
    # Each partition resumed exactly at its committed offset: nothing before it again.
    with log.lock:
        first_offsets = {
            p: min(c.offset for c in log.consumed if c.partition == p) for p in range(partitions)
        }
    assert first_offsets == committed
    assert_once_by_owner(log, expected)
    with RawClient(bootstrap) as c:
        after = raw_describe(c, group)
    # The group itself came back from the log: its epoch went on from where it was.
    assert after.error_code == 0 and after.group_epoch > epoch_before


def test_live_members_ride_out_a_coordinator_sigkill(
    server: ServerProcess, crew: list[threading.Thread], admin: AdminClient
) -> None:
    bootstrap = server.bootstrap
    topic, group = "k848-live", "k848-live"
    create_topic(bootstrap, topic, PARTITIONS)
    log = GroupLog()
    members = [ConsumerMember(f"l{i}", bootstrap, group, topic, log) for i in range(3)]
    launch(crew, *members)
    wait_settled(admin, group, members, "uniform", "3 members to converge")
    expected = produce(bootstrap, topic, PARTITIONS, 10, "before")
    wait_until(lambda: set(expected) <= set(log.values()), 30, "consumption before the crash")
    with RawClient(bootstrap) as c:
        before = raw_describe(c, group)
    owned = {m.member: set(m.owned) for m in members}
    events_before = len(log.events)

    server.restart()  # SIGKILL with the members heartbeating, then start on the same dir

    expected += produce(bootstrap, topic, PARTITIONS, 10, "after")
    wait_until(lambda: set(expected) <= set(log.values()), 30, "consumption after the crash")
    # Each member heartbeats to the restarted coordinator a few times (500 ms interval).
    wait_until(
        lambda: _requests(server, "CONSUMER_GROUP_HEARTBEAT", 0) >= 3 * 3,
        15,
        "heartbeats answered by the restarted coordinator",
    )
    # None was fenced or forgotten (they would have had to rejoin).
    assert _requests(server, "CONSUMER_GROUP_HEARTBEAT", KafkaError.FENCED_MEMBER_EPOCH) == 0
    assert _requests(server, "CONSUMER_GROUP_HEARTBEAT", KafkaError.UNKNOWN_MEMBER_ID) == 0
    with RawClient(bootstrap) as c:
        after = raw_describe(c, group)
    # The members were restored from the log and kept going: same ids, epochs, partitions.
    assert after.group_state == "Stable"
    assert after.group_epoch == before.group_epoch
    assert {(m.member_id, m.member_epoch) for m in after.members} == {
        (m.member_id, m.member_epoch) for m in before.members
    }
    assert {m.member: m.owned for m in members} == owned
    with log.lock:
        assert log.events[events_before:] == []  # no revocation, no loss, no reassignment
    for m in members:
        m.stop()
    assert_once_by_owner(log, expected)
