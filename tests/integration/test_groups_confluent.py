"""confluent-kafka consumer groups on the classic protocol, against the real server."""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import pytest
from confluent_kafka import Consumer

from tests.integration.group_support import (
    GroupLog,
    Member,
    assignment_settled,
    produce,
    wait_until,
)
from tests.integration.test_clients import create_topic
from tests.support import ServerProcess, serving

PARTITIONS = 12


@pytest.fixture
def group_server(tmp_path: Path) -> Iterator[ServerProcess]:
    with serving(tmp_path / "data", group_initial_rebalance_delay_ms=300) as proc:
        yield proc


@pytest.mark.parametrize("strategy", ["range", "roundrobin", "cooperative-sticky"])
def test_group_grows_and_shrinks_every_message_once_by_its_owner(
    group_server: ServerProcess, strategy: str
) -> None:
    bootstrap = group_server.bootstrap
    topic = f"grow-{strategy}"
    create_topic(bootstrap, topic, PARTITIONS)
    log = GroupLog()
    group = f"group-{strategy}"
    members = [Member(f"m{i}", bootstrap, group, topic, log, strategy) for i in range(3)]
    for m in members:
        m.start()
    wait_until(lambda: assignment_settled(members, PARTITIONS), 30, "3 members to settle")
    expected = produce(bootstrap, topic, PARTITIONS, 20, "a")
    wait_until(lambda: len(log.values()) >= len(expected), 30, "batch a consumed")

    # Grow to 4 members.
    events_before = len(log.events)
    owned_before = {m.member: set(m.owned) for m in members}
    completed_before = _completed_rebalances(group_server)
    from_stable_before = _samples(group_server.metrics_text()).get(
        'groupcoord_classic_group_rebalances_total{state="Stable"}', 0.0
    )
    fourth = Member("m3", bootstrap, group, topic, log, strategy)
    fourth.start()
    members.append(fourth)
    wait_until(
        lambda: assignment_settled(members, PARTITIONS) and len(fourth.owned) > 0,
        30,
        "4 members to settle",
    )
    # The growth was a rebalance from Stable, completed: both counted.
    assert _completed_rebalances(group_server) > completed_before
    samples = _samples(group_server.metrics_text())
    assert samples['groupcoord_classic_group_rebalances_total{state="Stable"}'] > from_stable_before
    expected += produce(bootstrap, topic, PARTITIONS, 20, "b")
    wait_until(lambda: len(log.values()) >= len(expected), 30, "batch b consumed")
    if strategy == "cooperative-sticky":
        # Incremental rebalance: a member only gives up partitions that move elsewhere.
        with log.lock:
            changes = log.events[events_before:]
        revoked = {p for who, kind, ps in changes if kind == "revoke" for p in ps}
        moved = {
            p
            for who, ps in owned_before.items()
            for p in ps
            if p not in next(m for m in members if m.member == who).owned
        }
        assert revoked == moved
        assert revoked <= fourth.owned

    # Shrink to 2 members, one at a time: closing a librdkafka consumer while its group is
    # still rebalancing can deadlock inside the client's close().
    live = list(members)
    for m in members[:1:-1]:
        m.stop()
        live.remove(m)
        wait_until(
            lambda: assignment_settled(live, PARTITIONS), 30, f"{len(live)} members to settle"
        )
    expected += produce(bootstrap, topic, PARTITIONS, 20, "c")
    wait_until(lambda: len(log.values()) >= len(expected), 30, "batch c consumed")
    for m in live:
        m.stop()

    consumed = log.values()
    counts = Counter(consumed)
    assert sorted(counts) == sorted(expected)
    assert [v for v, n in counts.items() if n > 1] == []  # exactly once
    assert all(c.owned for c in log.consumed)  # always by the partition's owner
    assert not [e for _, e in log.errors if e.fatal()]


def test_static_rolling_restart_causes_no_rebalance(group_server: ServerProcess) -> None:
    bootstrap = group_server.bootstrap
    topic = "static-roll"
    create_topic(bootstrap, topic, 6)
    log = GroupLog()
    extra = {"session.timeout.ms": 10000}
    members = [
        Member(f"s{i}", bootstrap, "static-group", topic, log, "range", f"inst-{i}", extra)
        for i in range(3)
    ]
    for m in members:
        m.start()
    wait_until(lambda: assignment_settled(members, 6), 30, "static members to settle")
    assignment = {m.member: set(m.owned) for m in members}
    rebalances = _completed_rebalances(group_server)
    # The members settled through at least one completed rebalance: counted.
    assert rebalances >= 1
    events_before = len(log.events)
    allowed: set[tuple[str, str]] = set()
    for i in range(3):
        old = members[i]
        old.stop()  # a static member's close() sends no LeaveGroup
        new = Member(
            f"s{i}-restarted", bootstrap, "static-group", topic, log, "range", f"inst-{i}", extra
        )
        new.start()
        members[i] = new
        wait_until(
            lambda n=new, want=assignment[old.member]: n.owned == want,
            15,
            f"restarted inst-{i} to get its partitions back",
        )
        # The closing consumer revokes its own partitions locally; the new one is assigned.
        allowed |= {(old.member, "revoke"), (new.member, "assign")}
    with log.lock:
        others = [e for e in log.events[events_before:] if (e[0], e[1]) not in allowed]
    # Nobody else saw a callback: no rebalance reached the members that stayed.
    assert others == []
    assert _completed_rebalances(group_server) == rebalances
    expected = produce(bootstrap, topic, 6, 10, "after")
    wait_until(lambda: set(expected) <= set(log.values()), 30, "consumption after the restart")
    for m in members:
        m.stop()


def test_duplicate_instance_id_fences_the_older_consumer(group_server: ServerProcess) -> None:
    bootstrap = group_server.bootstrap
    topic = "fence"
    create_topic(bootstrap, topic, 2)
    log = GroupLog()
    extra = {"session.timeout.ms": 10000}
    first = Member("first", bootstrap, "fence-group", topic, log, "range", "same", extra)
    first.start()
    wait_until(lambda: len(first.owned) == 2, 30, "first member to own everything")
    second = Member("second", bootstrap, "fence-group", topic, log, "range", "same", extra)
    second.start()
    wait_until(lambda: first.fatal is not None, 30, "the older consumer to be fenced")
    # librdkafka turns FENCED_INSTANCE_ID into a fatal error carrying the broker's text.
    assert "fenced by other consumer with same group.instance.id" in first.fatal.str()
    wait_until(lambda: len(second.owned) == 2, 30, "the new instance to take over")
    second.stop()
    first.stop()


def _completed_rebalances(server: ServerProcess) -> float:
    total = 0.0
    for line in server.metrics_text().splitlines():
        if line.startswith("groupcoord_group_completed_rebalances_total"):
            total += float(line.split()[-1])
    return total


def _samples(text: str) -> dict[str, float]:
    """Prometheus text -> {'name{labels}': value} (comments dropped)."""
    out: dict[str, float] = {}
    for line in text.splitlines():
        if line and not line.startswith("#"):
            name, _, value = line.rpartition(" ")
            out[name] = float(value)
    return out


def test_coordinator_metrics_show_a_group_at_work(group_server: ServerProcess) -> None:
    """Kafka's group-coordinator runtime metrics, read while a confluent-kafka group
    consumes and commits: events queued (requests and the initial-delay timer) and
    processed, replies held until durable, shard batches written, fsync rounds, shard
    loads, the group by state and the commits counted."""
    bootstrap = group_server.bootstrap
    create_topic(bootstrap, "metered", 2)
    produce(bootstrap, "metered", 2, 10, "metered")
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": "metered-group",
            "enable.auto.commit": False,
            "auto.offset.reset": "earliest",
        }
    )
    try:
        consumer.subscribe(["metered"])
        got = 0
        deadline = time.monotonic() + 30
        while got < 20 and time.monotonic() < deadline:
            message = consumer.poll(0.5)
            if message is not None and message.error() is None:
                got += 1
        assert got == 20
        consumer.commit(asynchronous=False)
        m = _samples(group_server.metrics_text())
    finally:
        consumer.close()
    assert m['groupcoord_classic_group_count{state="Stable"}'] >= 1
    assert m["groupcoord_offset_commits_total"] >= 2
    events = m["groupcoord_coordinator_event_processing_seconds_count"]
    # Every event is also timed in the queue: JoinGroup, SyncGroup, heartbeats, commits, and
    # the initial rebalance delay's timer (queued from its due time).
    assert events >= 5
    assert m["groupcoord_coordinator_event_queue_seconds_count"] == events
    assert m["groupcoord_coordinator_event_queue_seconds_sum"] >= 0
    # A reply waits in purgatory for the batch holding its records; each batch is written
    # once (timed) and made durable by a sync round.
    batches = m["groupcoord_coordinator_batch_flush_seconds_count"]
    assert batches >= 3  # group metadata at least once, then each commit's batch
    assert m["groupcoord_coordinator_batch_flush_seconds_sum"] > 0
    assert m["groupcoord_coordinator_event_purgatory_seconds_count"] == batches
    # And each batch's linger, from its first record to its write (batch-linger-time-ms).
    assert m["groupcoord_coordinator_batch_linger_seconds_count"] == batches
    assert 1 <= m["groupcoord_log_sync_round_seconds_count"]
    assert m["groupcoord_log_sync_round_seconds_sum"] > 0
    assert m["groupcoord_coordinator_partition_load_seconds_count"] == 50
