"""Many members expiring at once (issue 16, item 11): the work is linear in the members and
cut into bounded slices, one loop turn or shard event each.

Checked structurally, never by wall-clock time: the records and shard events a mass
expiry produces, the Python lines the group logic runs for N and 2N members (a quadratic
path shows as a ratio near 4, a linear one near 2), and how many due timers one loop turn
fires (runtime/timers.py)."""

from __future__ import annotations

import asyncio
import gc
import sys
from collections.abc import Callable
from types import FrameType
from typing import Any

import pytest
import uvloop
from hypothesis import given, settings
from hypothesis import strategies as st

from groupcoord.coordinator.groups.classic.group import COMPACT_STEP, ClassicGroup, ClassicMember
from groupcoord.coordinator.groups.consumer.departures import FENCE_SLICE
from groupcoord.coordinator.groups.consumer.keys import session_timeout_key
from groupcoord.coordinator.groups.release import RELEASE_SLICE
from groupcoord.coordinator.groups.result import Result
from groupcoord.coordinator.runtime.clock import ManualClock
from groupcoord.coordinator.runtime.timers import FIRE_BATCH, LoopTimer
from groupcoord.protocol.errors import ErrorCode
from groupcoord.protocol.records import (
    ConsumerGroupMemberMetadataKey,
    ConsumerGroupMetadataKey,
    GroupMetadataKey,
    GroupMetadataValue,
    MemberMetadata,
)
from tests.unit import consumer_support as cs
from tests.unit.classic_support import join_request
from tests.unit.shard_context import ShardContext

SESSION_MS = 45_000  # the consumer groups' default session timeout
CLASSIC_SESSION_MS = 10_000
LINEAR = 2.4  # lines(2N) / lines(N) at most: linear work with constant overheads


def lines_run(action: Callable[[], Any]) -> int:
    """How many lines of the group logic (coordinator/groups/) `action` runs."""
    count = 0

    def local(frame: FrameType, event: str, arg: Any) -> Any:
        nonlocal count
        if event == "line":
            count += 1
        return local

    def tracer(frame: FrameType, event: str, arg: Any) -> Any:
        return local if "coordinator/groups/" in frame.f_code.co_filename else None

    sys.settrace(tracer)
    try:
        action()
    finally:
        sys.settrace(None)
    return count


# -- consumer groups (KIP-848) ---------------------------------------------------------------


def consumer_group(members: int) -> cs.Harness:
    h = cs.Harness(topics={"foo": 8})
    for i in range(members):
        assert h.join(f"m{i}", ["foo"]).error_code is ErrorCode.NONE
    return h


def test_a_mass_expiry_removes_members_in_slices_with_one_epoch_bump_each() -> None:
    members = 5 * FENCE_SLICE + 7
    h = consumer_group(members)
    epoch = h.group().group_epoch
    events: list[Result] = []
    apply = h.timer.on_result
    assert apply is not None

    def record(result: Result) -> None:
        events.append(result)
        apply(result)

    h.timer.on_result = record
    h.sleep(SESSION_MS + 1)
    group = h.shard.consumer_group(cs.GROUP)
    assert group is not None and len(group) == 0
    removals = [
        [k for k, v in e.records if type(k) is ConsumerGroupMemberMetadataKey and v is None]
        for e in events
    ]
    writes = [(e, removed) for e, removed in zip(events, removals, strict=True) if removed]
    slices = -(-members // FENCE_SLICE)
    assert len(writes) == slices  # one write per slice, not one per member
    for write, removed in writes:
        assert len(removed) <= FENCE_SLICE
        bumps = [v for k, v in write.records if type(k) is ConsumerGroupMetadataKey]
        assert len(bumps) == 1
    assert sum(len(removed) for _, removed in writes) == members
    assert group.group_epoch == epoch + slices
    h.assert_replayed()


def test_a_mass_expiry_pays_the_costs_of_a_write_once_per_fifty_members() -> None:
    """Each removal write also costs the loop a fixed part (its commit round, its group-event
    log line, the turns between slices): at 20 members a write, 20,000 members expiring
    spent a third of their loop time there and were gone 1.1 s after their sessions ended
    (issue 16: within 1 s). So a write removes at least 50 members (all but the last), and
    writes nothing per member beyond Kafka's three tombstones."""
    members = 400
    h = consumer_group(members)
    writes: list[Result] = []
    apply = h.timer.on_result
    assert apply is not None

    def record(result: Result) -> None:
        if any(type(k) is ConsumerGroupMemberMetadataKey for k, _ in result.records):
            writes.append(result)
        apply(result)

    h.timer.on_result = record
    h.sleep(SESSION_MS + 1)
    assert len(h.group()) == 0
    assert len(writes) <= -(-members // 50), len(writes)
    for write in writes:
        removed = sum(
            1 for k, v in write.records if type(k) is ConsumerGroupMemberMetadataKey and v is None
        )
        # Three tombstones a member (current and target assignments, metadata) and the
        # group's epoch bump (the last write: the target epoch too).
        assert len(write.records) <= 3 * removed + 2


def test_consumer_mass_expiry_is_linear_in_the_members() -> None:
    def expiry_lines(members: int) -> int:
        h = consumer_group(members)
        lines = lines_run(lambda: h.sleep(SESSION_MS + 1))
        assert len(h.group()) == 0
        return lines

    small, large = expiry_lines(300), expiry_lines(600)
    assert large / small < LINEAR, (small, large)


def test_a_member_whose_session_was_rearmed_before_its_slice_stays() -> None:
    h = consumer_group(2)
    group = h.group()
    consumer = h.shard.consumer
    for member_id in ("m0", "m1"):  # both sessions fired (a fired timer is no longer armed)
        key = session_timeout_key(cs.GROUP, member_id)
        h.timer.cancel(key)
        consumer.fence_later(group, member_id, key)
    # m0 heartbeats before the slice runs: its session is armed again.
    member = group.members["m0"]
    assert h.heartbeat(member_id="m0", member_epoch=member.member_epoch).error_code is (
        ErrorCode.NONE
    )
    h.sleep(0)
    assert set(group.metadata) == {"m0"}
    h.assert_replayed()


def test_classic_members_of_a_consumer_group_expiring_at_once_downgrade_it_once() -> None:
    """The downgrade check (only classic members left?) is O(removed) per slice, and the
    group becomes a classic group when the consumer-protocol members are gone."""
    h = consumer_group(3)
    classic_ids = []
    for _ in range(2):
        first = h.send_join_group(join_request(cs.GROUP, "", [("range", _subscription())]))
        member_id = first.response.member_id
        joined = h.send_join_group(join_request(cs.GROUP, member_id, [("range", _subscription())]))
        assert joined.response.error_code is ErrorCode.NONE
        classic_ids.append(member_id)
    group = h.group()
    assert group.classic_members == 2
    for member_id in ("m0", "m1", "m2"):
        key = session_timeout_key(cs.GROUP, member_id)
        h.timer.cancel(key)
        h.shard.consumer.fence_later(group, member_id, key)
    h.sleep(0)
    assert h.shard.consumer_group(cs.GROUP) is None
    classic = h.shard.classic_group(cs.GROUP)
    assert classic is not None and set(classic.members) == set(classic_ids)


def _subscription() -> bytes:
    """ConsumerProtocolSubscription v0 of topic foo."""
    return b"\x00\x00" + b"\x00\x00\x00\x01" + b"\x00\x03foo" + b"\xff\xff\xff\xff"


# -- classic groups --------------------------------------------------------------------------


def loaded_classic_group(members: int) -> ShardContext:
    """A Stable classic group of `members` loaded from its record: every session starts at
    the load, so they all end together."""
    h = ShardContext()
    value = GroupMetadataValue(
        protocol_type="consumer",
        generation=1,
        protocol="range",
        leader="m0",
        current_state_timestamp=0,
        members=tuple(
            MemberMetadata(
                member_id=f"m{i}",
                group_instance_id=None,
                client_id="client",
                client_host="/127.0.0.1",
                rebalance_timeout=CLASSIC_SESSION_MS,
                session_timeout=CLASSIC_SESSION_MS,
                subscription=_subscription(),
                assignment=b"",
            )
            for i in range(members)
        ),
    )
    h.log.append((GroupMetadataKey("g"), value))
    h.reload()
    return h


def test_classic_mass_expiry_keeps_the_member_table_compact() -> None:
    """A dict keeps the slots of removed keys until it grows, and the next leader is its
    first key: removing 20,000 members one by one walked the ever longer run of removed
    slots at every removal. The table never holds many more slots than members."""
    h = loaded_classic_group(2_000)
    group = h.shard.classic_group("g")
    assert group is not None
    apply = h.timer.on_result
    assert apply is not None
    worst = 0.0

    def check(result: Result) -> None:
        nonlocal worst
        apply(result)
        live = len(group.members)
        compact = sys.getsizeof(dict.fromkeys(range(2 * live + 32)))
        worst = max(worst, sys.getsizeof(group.members) / compact)

    h.timer.on_result = check
    h.sleep(CLASSIC_SESSION_MS + 1)
    assert not group.members
    assert worst <= 1.0, worst


def test_classic_rebalance_with_half_the_members_expiring_is_linear() -> None:
    """Half the members rejoin a rebalance (each JoinGroup asked how many had joined), the
    other half expire (each asked whether everyone had joined): both were O(members)."""

    def rebalance_lines(members: int) -> int:
        h = loaded_classic_group(members)
        group = h.shard.classic_group("g")
        assert group is not None

        def run() -> None:
            for i in range(members // 2):
                h.send_join_group(
                    join_request(
                        "g", f"m{i}", [("range", _subscription())], session=CLASSIC_SESSION_MS
                    )
                )
            h.sleep(CLASSIC_SESSION_MS + 1)

        lines = lines_run(run)
        assert group.generation_id == 2 and len(group.members) == members // 2
        return lines

    small, large = rebalance_lines(400), rebalance_lines(800)
    assert large / small < LINEAR, (small, large)


@settings(max_examples=40, deadline=None)
@given(st.lists(st.tuples(st.booleans(), st.integers(0, 3 * COMPACT_STEP)), max_size=300))
def test_the_member_table_rebuild_keeps_the_members_and_their_order(
    steps: list[tuple[bool, int]],
) -> None:
    """Whatever additions (also of a member id already there) and removals interleave
    with a rebuild in progress, the table holds the members in the order a plain dict
    would, with the member objects last added, and the next leader is the first."""
    group = ClassicGroup("g")
    expected: dict[str, ClassicMember] = {}
    for i in range(2 * COMPACT_STEP + 40):  # enough for removals to start a rebuild
        member = _member(f"m{i}")
        group.add(member)
        expected[member.member_id] = member
    for n, (add, which) in enumerate(steps + [(False, i) for i in range(3 * COMPACT_STEP)]):
        member_id = f"m{which}"
        if add:
            member = _member(member_id)
            if member_id in expected:
                group.remove(member_id)  # a rejoin under the same id goes to the end
                del expected[member_id]
            group.add(member)
            expected[member_id] = member
        else:
            group.remove(member_id)
            expected.pop(member_id, None)
        assert list(group.members.items()) == list(expected.items()), n
        assert group.leader_id == next(iter(expected), None), n


def _member(member_id: str) -> ClassicMember:
    return ClassicMember(
        member_id=member_id,
        group_instance_id=None,
        client_id="client",
        client_host="/127.0.0.1",
        rebalance_timeout_ms=CLASSIC_SESSION_MS,
        session_timeout_ms=CLASSIC_SESSION_MS,
        protocol_type="consumer",
        protocols=[("range", _subscription())],
    )


# -- the loop's timers -------------------------------------------------------------------------


def test_timers_due_together_share_a_loop_timer_and_fire_in_bounded_turns() -> None:
    turns: list[int] = []

    class CountingClock(ManualClock):
        """Counts the timers fired by each loop callback (one loop turn's work)."""

        def call_at(self, when: float, callback: Callable[..., object], *args: Any) -> Any:
            def turn(*a: Any) -> None:
                turns.append(0)
                callback(*a)

            return super().call_at(when, turn, *args)

    clock = CountingClock()
    fired: list[str] = []

    def fire(callback: Any, late_s: float | None) -> None:
        turns[-1] += 1
        callback(0)

    timer = LoopTimer(fire, clock)
    count = 5 * FIRE_BATCH + 3
    for i in range(count):
        timer.schedule(f"member-{i}", 45_000, lambda now_ms, i=i: fired.append(f"member-{i}"))
    assert clock.pending() == 1  # one loop timer for the millisecond they share
    clock.advance(45_000)
    assert fired == [f"member-{i}" for i in range(count)]  # in scheduling order
    assert max(turns) <= FIRE_BATCH  # (fewer when a turn runs out of FIRE_BUDGET_S)
    assert len([t for t in turns if t]) >= -(-count // FIRE_BATCH)


def test_a_slice_fires_alone_in_its_loop_turn() -> None:
    """The next slice of a sliced computation (a 0-delay timer: a fence slice, an offloaded
    target's records) costs up to a few milliseconds: it fires alone in its loop turn, never
    after a turn's worth of other due timers (which made one stall of both)."""
    turns: list[list[str]] = []

    class CountingClock(ManualClock):
        """Records the timers fired by each loop callback (one loop turn's work)."""

        def call_at(self, when: float, callback: Callable[..., object], *args: Any) -> Any:
            def turn(*a: Any) -> None:
                turns.append([])
                callback(*a)

            return super().call_at(when, turn, *args)

    clock = CountingClock()

    def fire(callback: Any, late_s: float | None) -> None:
        callback(0)

    timer = LoopTimer(fire, clock)
    slices = 5

    def slice_(now_ms: int) -> Result:
        nonlocal slices
        turns[-1].append("slice")
        slices -= 1
        if slices:
            timer.schedule("fence-g", 0, slice_)
        return Result()

    def expire(i: int) -> Callable[[int], Result]:
        def run(now_ms: int) -> Result:
            turns[-1].append(f"member-{i}")
            if i == 0:  # the first expiry starts the slices
                timer.schedule("fence-g", 0, slice_)
            return Result()

        return run

    count = 3 * FIRE_BATCH
    for i in range(count):
        timer.schedule(f"member-{i}", 45_000, expire(i))
    clock.advance(45_000)
    fired = [name for turn in turns for name in turn]
    assert fired.count("slice") == 5 and len(fired) == count + 5
    for turn in turns:
        assert "slice" not in turn or turn == ["slice"], turn


@pytest.mark.parametrize(
    "loop_factory", [asyncio.new_event_loop, uvloop.new_event_loop], ids=["asyncio", "uvloop"]
)
def test_a_coroutine_woken_during_a_slice_runs_before_the_next_slice(
    loop_factory: Callable[[], asyncio.AbstractEventLoop],
) -> None:
    """A read or timer that comes due during a slice wakes its coroutine one loop hop after
    its own callback: the next slice waits two hops, so that whoever waited meanwhile runs
    between two slices and sees one slice's stall, not two (bench_mass_expiry's probe saw
    gaps of two 2-3 ms turns)."""
    order: list[str] = []

    async def scenario() -> None:
        loop = asyncio.get_running_loop()
        timer = LoopTimer(lambda callback, late_s: callback(0))
        woken: asyncio.Future[None] = loop.create_future()

        def slice_(n: int) -> Callable[[int], Result]:
            def run(now_ms: int) -> Result:
                order.append(f"slice {n}")
                if n == 1:
                    loop.call_soon(woken.set_result, None)  # a read arriving meanwhile
                if n < 3:
                    timer.schedule("fence-g", 0, slice_(n + 1))
                return Result()

            return run

        async def waiter() -> None:
            await woken
            order.append("woken")

        task = asyncio.ensure_future(waiter())
        timer.schedule("fence-g", 0, slice_(1))
        while len(order) < 4:
            await asyncio.sleep(0.001)
        await task

    with asyncio.Runner(loop_factory=loop_factory) as runner:
        runner.run(scenario())
    assert order == ["slice 1", "woken", "slice 2", "slice 3"]


def test_classic_mass_expiry_rebuilds_the_member_table_a_bounded_slice_at_a_time() -> None:
    """The member table is rebuilt incrementally: no expiry event copies more than
    COMPACT_STEP members per member it removes (a copy of the whole table, 10,000 members
    at once in a 20,000-member group, stalled the loop), the table every reader sees is
    either the one before the event or the rebuild finished during it, in the same order,
    and the rebuild never stops the next leader from being the first member."""
    members = 6 * COMPACT_STEP
    h = loaded_classic_group(members)
    group = h.shard.classic_group("g")
    assert group is not None
    apply = h.timer.on_result
    assert apply is not None
    before_table = group.members
    before_order = list(before_table)
    before_fresh: set[str] = set()
    worst = 0.0
    rebuilds = 0

    def check(result: Result) -> None:
        # Called once the event ran: compare with the table as the previous event left it.
        nonlocal before_table, before_order, before_fresh, worst, rebuilds
        apply(result)
        table = group.members
        removed = len(before_order) - len(table)
        if table is not before_table:  # the rebuild in progress became the table
            rebuilds += 1
            built = table
        else:
            built = getattr(group, "_fresh", None) or {}
        copied = len(built.keys() - before_fresh)
        worst = max(worst, copied / max(removed, 1))
        assert list(table) == [m for m in before_order if m in table]  # order kept
        assert group.leader_id in (None, next(iter(table), None))
        before_table, before_order, before_fresh = (
            table,
            list(table),
            set(getattr(group, "_fresh", None) or ()),
        )

    h.timer.on_result = check
    h.sleep(CLASSIC_SESSION_MS + 1)
    assert not group.members
    assert rebuilds >= 2
    assert worst <= COMPACT_STEP, worst


# -- the record that empties a classic group, and what it lets go of ----------------------------


def per_event(h: ShardContext, measure: Callable[[], int]) -> list[int]:
    """`measure()` after each timer event of a 10 s sleep minus before it (the harness
    applies each event's Result before the next one fires)."""
    apply = h.timer.on_result
    assert apply is not None
    deltas: list[int] = []
    last = measure()

    def check(result: Result) -> None:
        nonlocal last
        apply(result)
        now = measure()
        deltas.append(now - last)
        last = now

    h.timer.on_result = check
    h.sleep(CLASSIC_SESSION_MS + 1)
    return deltas


def test_the_record_that_empties_a_classic_group_takes_no_step_per_member() -> None:
    """When the last of N expiring members goes, the event that writes the emptied record
    compares it with the previous one (N members, each announced gone live) without a
    Python step per member: it runs as many lines for 2N members as for N."""

    def final_event_lines(members: int) -> int:
        h = loaded_classic_group(members)
        group = h.shard.classic_group("g")
        assert group is not None
        counted = [0]

        def local(frame: FrameType, event: str, arg: Any) -> Any:
            if event == "line":
                counted[0] += 1
            return local

        def tracer(frame: FrameType, event: str, arg: Any) -> Any:
            return local if "coordinator/groups/" in frame.f_code.co_filename else None

        sys.settrace(tracer)
        try:
            lines = per_event(h, lambda: counted[0])
        finally:
            sys.settrace(None)
        assert not group.members and group.generation_id == 2
        writes = [i for i, r in enumerate(h.log) if type(r[0]) is GroupMetadataKey]
        assert len(writes) == 2  # the loaded record and the emptied one
        emptied = h.log[writes[-1]][1]
        assert isinstance(emptied, GroupMetadataValue) and not emptied.members
        # The emptied record is written by the event of the last member's expiry.
        return lines[members - 1]

    small, large = final_event_lines(1_000), final_event_lines(2_000)
    assert large <= small + 20, (small, large)
    h = loaded_classic_group(3)
    timeline = h.shard.events.timeline("g")
    h.sleep(CLASSIC_SESSION_MS + 1)
    timeline = h.shard.events.timeline("g")
    assert timeline is not None
    events = [(e.event, e.member_id) for e in timeline]
    assert events[-1] == ("group_emptied", None)
    assert sorted(m for e, m in events if e == "member_expired") == ["m0", "m1", "m2"]


def test_a_classic_mass_expiry_frees_memory_a_bounded_slice_per_event() -> None:
    """The previous record of an emptied group (a MemberMetadata per member) is freed
    RELEASE_SLICE members per shard event, not all in the event that writes the emptied
    record (which freed about a memory block per member). Counted in memory blocks, with
    the cyclic GC off."""
    members = 3 * RELEASE_SLICE
    h = loaded_classic_group(members)
    h.log.clear()  # the harness's log held the loaded record: only the shard does now
    gc.collect()
    gc.disable()
    try:
        before = sys.getallocatedblocks()
        deltas = per_event(h, sys.getallocatedblocks)
        h.sleep(0)  # the release's last slices
        after = sys.getallocatedblocks()
    finally:
        gc.enable()
    group = h.shard.classic_group("g")
    assert group is not None and not group.members
    assert h.shard.release.held() == 0
    assert before - after >= 2 * members  # the members and their record were freed
    assert -min(deltas) <= 2 * RELEASE_SLICE, sorted(deltas)[:3]
