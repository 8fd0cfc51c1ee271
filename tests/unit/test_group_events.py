"""Group events (coordinator/groups/events.py, event_records.py): the timeline's bounds,
and a consumer group's events derived from its records, live and rebuilt by replaying the
log (what a restart does)."""

from __future__ import annotations

import pytest

from groupcoord.coordinator.groups.events import GroupEvents
from groupcoord.coordinator.groups.events_off import NO_GROUP_EVENTS_ENV
from tests.unit.consumer_support import GROUP, Client, Harness, settle

SESSION = 45_000


def _kinds(events: GroupEvents, group: str) -> list[tuple[str, int]]:
    timeline = events.timeline(group)
    assert timeline is not None
    return [(e.event, e.generation_or_epoch) for e in timeline]


def test_timeline_keeps_the_last_events_of_each_group_within_a_total() -> None:
    events = GroupEvents(timeline_events=3, total_max=5)
    for i in range(5):
        events.emit("a", "member_joined", i, f"m{i}", "JoinGroup", 1000 + i)
    assert [e for _, e in _kinds(events, "a")] == [2, 3, 4]
    for i in range(4):
        events.emit("b", "member_joined", 100 + i, None, "JoinGroup", 2000 + i)
    # Three of b's (its own limit); the total of 5 drops the oldest of the shard: a's.
    assert [e for _, e in _kinds(events, "b")] == [101, 102, 103]
    assert [e for _, e in _kinds(events, "a")] == [3, 4]
    assert events.held() == 5
    for i in range(1000):
        events.emit(f"g{i % 10}", "member_left", i, None, "x", 3000 + i)
    assert events.held() == 5
    assert events.timeline("a") is None and events.timeline("nope") is None
    assert sum(len(events.timeline(f"g{i}") or []) for i in range(10)) == 5
    # The shard-wide order of held events stays bounded too.
    assert len(events._order) <= 2 * 5 + 64


def test_events_a_groups_own_limit_dropped_are_not_kept_alive() -> None:
    """One busy group (a mass join and expiry: three events per member) under a large
    shard total: the shard-wide order drops what the group's limit dropped, so it holds
    about what the timelines hold (it held up to 2 x the total: 200,000 events, each a
    few tracked objects that every gen-2 collection walks)."""
    events = GroupEvents(timeline_events=100, total_max=100_000)
    for i in range(20_000):
        events.emit("mass", "member_expired", i, f"m{i}", "session timeout", 1000 + i, {"n": i})
    assert events.held() == 100
    assert [e.generation_or_epoch for e in events.timeline("mass") or []] == list(
        range(19_900, 20_000)
    )
    assert len(events._order) <= 2 * 100 + 64
    # The shard total still evicts the oldest held events first.
    small = GroupEvents(timeline_events=3, total_max=4)
    for group in "abc":
        for i in range(3):
            small.emit(group, "member_joined", i, None, "JoinGroup", 1000 + i)
    assert small.timeline("a") is None
    assert [e.generation_or_epoch for e in small.timeline("b") or []] == [2]
    assert small.held() == 4


def test_a_zero_limit_keeps_nothing_but_still_hands_events_to_the_sink() -> None:
    events = GroupEvents(timeline_events=0, total_max=100)
    seen: list[str] = []
    events.sink = lambda e: seen.append(e.event)
    events.emit("a", "group_created", 0, None, "JoinGroup", 1)
    assert seen == ["group_created"] and events.timeline("a") is None


def test_consumer_group_events_live_and_replayed_from_the_log() -> None:
    """Two members join (each a rebalance started, a target moving partitions, a rebalance
    completed once both reconciled), one leaves, the other's session expires. Replaying the
    log rebuilds the same timeline; only the removals' causes are the records' own."""
    h = Harness({"foo": 4}, consumer_assignment_interval_ms=0)
    logged: list[str] = []
    h.shard.events.sink = lambda e: logged.append(e.event)
    a, b = Client(h, "a"), Client(h, "b")
    a.join(["foo"])
    settle(h, a)
    b.join(["foo"])
    settle(h, a, b)
    b.leave()
    settle(h, a)
    h.sleep(SESSION + 1)
    live = h.shard.timeline(GROUP)
    assert live is not None
    kinds = [e.event for e in live]
    assert kinds == [
        "group_created",
        "member_joined",
        "rebalance_started",
        "assignment_changed",
        "rebalance_completed",
        "member_joined",
        "rebalance_started",
        "assignment_changed",
        "rebalance_completed",
        "member_left",
        "rebalance_started",
        "assignment_changed",
        "rebalance_completed",
        "member_expired",
        "group_emptied",
    ]
    assert logged == kinds
    by_kind = [(e.event, e.member_id, e.cause) for e in live if e.member_id]
    assert by_kind == [
        ("member_joined", "a", "ConsumerGroupHeartbeat"),
        ("member_joined", "b", "ConsumerGroupHeartbeat"),
        ("member_left", "b", "left (heartbeat epoch -1)"),
        ("member_expired", "a", "session timeout"),
    ]
    second = [e for e in live if e.event == "assignment_changed"][1]
    assert second.details["revoked"] == second.details["assigned"] == 2
    assert {(m["from"], m["to"]) for m in second.details["moved"]} == {("a", "b")}
    assert [e.details["partitions_moved"] for e in live if e.event == "rebalance_completed"] == [
        4,
        2,
        2,
    ]
    started = [e for e in live if e.event == "rebalance_started"]
    assert started[2].cause == "b left: left (heartbeat epoch -1)"

    replayed = h.replayed().timeline(GROUP)
    assert replayed is not None
    assert [(e.event, e.generation_or_epoch, e.member_id) for e in replayed] == [
        (
            "member_left" if e.event == "member_expired" else e.event,
            e.generation_or_epoch,
            e.member_id,
        )
        for e in live
    ]
    # The records do not say why a member went (the loader also marks the cause as
    # "replayed from the log: ").
    for e in replayed:
        if e.event == "member_left":
            assert e.cause.endswith("removed (left, or its session or rebalance timed out)")


def test_a_member_fenced_by_its_epoch_is_an_event() -> None:
    h = Harness({"foo": 2}, consumer_assignment_interval_ms=0)
    a = Client(h, "a")
    a.join(["foo"])
    settle(h, a)
    response = h.heartbeat(member_id="a", member_epoch=a.epoch + 5)
    assert response.error_code == 110  # FENCED_MEMBER_EPOCH
    timeline = h.shard.timeline(GROUP)
    assert timeline is not None
    fenced = timeline[-1]
    assert (fenced.event, fenced.member_id, fenced.generation_or_epoch) == (
        "member_fenced",
        "a",
        a.epoch + 5,
    )
    assert "greater member epoch" in fenced.cause


def test_the_benchmarks_switch_runs_groups_without_events(monkeypatch: pytest.MonkeyPatch) -> None:
    """GROUPCOORD_TEST_NO_GROUP_EVENTS=1 (events_off.py, for bench_group_events.py): the
    same group life, the same assignments, and nothing logged, kept or derived, live or
    replayed."""

    def life() -> tuple[Harness, list[str], list[tuple[str, int, list[int]]]]:
        h = Harness({"foo": 4}, consumer_assignment_interval_ms=0)
        logged: list[str] = []
        h.shard.events.sink = lambda e: logged.append(e.event)
        a, b = Client(h, "a"), Client(h, "b")
        a.join(["foo"])
        settle(h, a)
        b.join(["foo"])
        settle(h, a, b)
        group = h.shard.consumer_groups[GROUP]
        members = [
            (
                m.member_id,
                m.member_epoch,
                sorted(p for ps in m.assigned_partitions.values() for p in ps),
            )
            for m in sorted(group.members.values(), key=lambda m: m.member_id)
        ]
        b.leave()
        settle(h, a)
        return h, logged, members

    with_events, logged, members = life()
    assert logged and with_events.shard.timeline(GROUP)
    monkeypatch.setenv(NO_GROUP_EVENTS_ENV, "1")
    without, logged_without, members_without = life()
    assert members_without == members
    assert logged_without == []
    assert without.shard.timeline(GROUP) is None
    assert without.replayed().timeline(GROUP) is None
    assert without.shard.events.held() == 0
