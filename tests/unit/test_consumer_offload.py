"""Target assignments computed off the shard's loop (large consumer groups): the shard
side with the ManualTimer (compute at once, finish as a 0-delay timer) and LoopTimer's
offload on a real event loop."""

from __future__ import annotations

import dataclasses
import threading
from typing import Any

import pytest

from groupcoord.coordinator.groups.consumer import offload
from groupcoord.coordinator.groups.result import Result
from groupcoord.coordinator.runtime.timers import LoopTimer
from groupcoord.protocol.errors import ErrorCode
from groupcoord.protocol.records import (
    ConsumerGroupCurrentMemberAssignmentKey,
    ConsumerGroupTargetAssignmentMemberKey,
    ConsumerGroupTargetAssignmentMetadataKey,
)
from tests.unit.consumer_support import GROUP, Client, Harness, settle
from tests.unit.waits import Executor


def offloading(**config: Any) -> Harness:
    config.setdefault("consumer_assignment_interval_ms", 0)
    return Harness({"foo": 6}, consumer_offload_min_members=2, **config)


def test_large_group_target_is_computed_off_the_loop_and_written_after() -> None:
    h = offloading()
    a, b = Client(h, "a"), Client(h, "b")
    assert a.join(["foo"]).member_epoch == 2  # a new group: computed inline
    assert h.timer.offloaded == 0
    response = b.join(["foo"])
    # The epoch moved (3) but the target is computed elsewhere: b reconciles towards the
    # current target (epoch 2) meanwhile and gets nothing yet.
    assert h.timer.offloaded == 1
    assert (h.group().group_epoch, h.group().assignment_epoch) == (3, 2)
    assert response.member_epoch == 2 and response.assignment == []
    assert h.group().assigning_epoch == 3
    # Heartbeats meanwhile start no second computation.
    a.ack()
    assert h.timer.offloaded == 1

    written = h.sleep(0)  # the finish event
    assert h.group().assignment_epoch == 3 and h.group().assigning_epoch is None
    keys = [type(k) for k, _ in written.records]
    assert keys[-1] is ConsumerGroupTargetAssignmentMetadataKey
    assert set(keys[:-1]) == {ConsumerGroupTargetAssignmentMemberKey}
    settle(h, a, b)
    sizes = sorted(
        len(ps)
        for _, member in h.group().iter_members()
        for ps in member.assigned_partitions.values()
    )
    assert sizes == [3, 3]
    h.assert_replayed()


def test_members_that_leave_during_the_computation_are_skipped() -> None:
    h = offloading()
    a, b, c = Client(h, "a"), Client(h, "b"), Client(h, "c")
    a.join(["foo"])
    b.join(["foo"])
    h.sleep(0)
    settle(h, a, b)
    c.join(["foo"])  # offloaded: the target for epoch 4 gives c a third
    assert h.group().assigning_epoch == 4
    c.leave()  # c goes before the result is written (epoch 5)
    written = h.sleep(0)
    members = {k.member_id for k, _ in written.records if hasattr(k, "member_id")}
    assert "c" not in members and "c" not in h.group().target
    assert h.group().assignment_epoch == 4 and h.group().group_epoch == 5
    # The next heartbeat computes the target for epoch 5 (offloaded again).
    a.ack()
    h.sleep(0)
    assert h.group().assignment_epoch == 5
    settle(h, a, b)
    assert sorted(len(ps) for ps in h.group().target.values() for ps in ps.values()) == [3, 3]
    h.assert_replayed()


def test_static_member_replaced_during_the_computation_takes_over_its_new_target() -> None:
    """A static member replaced (B.4.4: its target goes to the new id, no epoch moves)
    while the target is computed: the result's entry for the old id is written for the
    new one, so no partition is in two targets and the group settles."""
    h = offloading()
    a, b = Client(h, "a"), Client(h, "b", instance_id="sb")
    a.join(["foo"])
    b.join(["foo"])
    h.sleep(0)
    settle(h, a, b)
    c = Client(h, "c")
    c.join(["foo"])  # offloaded: the target for epoch 4 (a, b, c)
    assert h.group().assigning_epoch == 4
    b.leave(-2)
    b2 = Client(h, "b2", instance_id="sb")
    assert b2.join(["foo"]).error_code == 0  # takes b's place and its (old) target
    assert h.group().group_epoch == 4

    written = h.sleep(0)
    group = h.group()
    assert group.assignment_epoch == 4 and "b" not in group.target
    members = {k.member_id for k, _ in written.records if hasattr(k, "member_id")}
    assert "b" not in members
    holders: dict[tuple[object, int], list[str]] = {}
    for member_id, target in group.target.items():
        for topic, partitions in target.items():
            for p in partitions:
                holders.setdefault((topic, p), []).append(member_id)
    assert len(holders) == 6 and all(len(ms) == 1 for ms in holders.values()), holders
    settle(h, a, b2, c)
    assert sorted(group.target_sizes.values()) == [2, 2, 2]
    h.assert_replayed()


def test_the_result_is_written_in_slices_metadata_last(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(offload, "OFFLOAD_SLICE", 1)
    h = offloading()
    clients = [Client(h, name) for name in "abc"]
    clients[0].join(["foo"])
    h.sleep(0)
    clients[1].join(["foo"])
    clients[2].join(["foo"])  # still computing epoch 3: no second computation
    events: list[Result] = []
    h.timer.on_result = lambda r: (events.append(r), h.apply(r))  # type: ignore[func-returns-value]
    h.sleep(0)
    slices = [e for e in events if e.records]
    assert len(slices) >= 2  # one member per event
    for s in slices[:-1]:
        assert all(type(k) is ConsumerGroupTargetAssignmentMemberKey for k, _ in s.records)
    assert type(slices[-1].records[-1][0]) is ConsumerGroupTargetAssignmentMetadataKey
    h.timer.on_result = h.apply
    clients[0].ack()
    h.sleep(0)
    settle(h, *clients)
    h.assert_replayed()


def test_offload_can_be_switched_off_per_group() -> None:
    h = offloading()
    h.shard.group_configs = _Configs({"consumer.assignor.offload.enable": "false"})
    a, b = Client(h, "a"), Client(h, "b")
    a.join(["foo"])
    assert b.join(["foo"]).member_epoch == 3  # computed inline
    assert h.timer.offloaded == 0


class _Configs:
    def __init__(self, overrides: dict[str, str]) -> None:
        self._overrides = overrides

    def overrides(self, group_id: str) -> dict[str, str]:
        return self._overrides


async def test_loop_timer_offload_runs_in_a_thread_and_finishes_on_the_loop() -> None:
    computations = Executor()
    finished: list[tuple[Any, int]] = []
    loop_thread = threading.get_ident()
    timer = LoopTimer(lambda callback, _late_s: callback(7))

    def finish(value: Any, now_ms: int) -> Result:
        assert threading.get_ident() == loop_thread
        finished.append((value, now_ms))
        return Result()

    timer.offload("k", threading.get_ident, finish)
    await computations.done()
    assert finished and finished[0][0] != loop_thread and finished[0][1] == 7

    # A newer offload of the key supersedes the older; a cancelled one never finishes.
    finished.clear()
    release = threading.Event()
    timer.offload("k", lambda: release.wait(5) and "old", finish)
    timer.offload("k", lambda: "new", finish)
    release.set()
    timer.offload("gone", lambda: "x", finish)
    timer.cancel("gone")
    await computations.done()
    assert [v for v, _ in finished] == ["new"]

    # An exception in compute reaches finish as the value.
    finished.clear()
    timer.offload("err", lambda: 1 / 0, finish)
    await computations.done()
    assert isinstance(finished[0][0], ZeroDivisionError)


def test_a_computation_for_an_epoch_never_written_is_dropped() -> None:
    """A heartbeat bumps the epoch and starts the off-loop computation, then fails
    (FENCED_MEMBER_EPOCH: a member in a state this coordinator does not know reports
    partitions); its records, the epoch bump among them, are dropped. The computation's
    result must be dropped too: written, it put the assignment epoch ahead of the group
    epoch, and the next bump to that epoch computed no new target."""
    h = offloading()
    a, b = Client(h, "a"), Client(h, "b")
    a.join(["foo"])
    b.join(["foo"])
    h.sleep(0)
    settle(h, a, b)
    group = h.group()
    epoch = group.group_epoch
    unknown = dataclasses.replace(group.members["a"].to_record(), state=127)
    h.apply(Result(records=[(ConsumerGroupCurrentMemberAssignmentKey(GROUP, "a"), unknown)]))
    response = a.ack(subscribed_topic_names=["foo", "bar"])
    assert response.error_code is ErrorCode.FENCED_MEMBER_EPOCH
    h.sleep(0)  # the offloaded computation finishes
    assert group.group_epoch == epoch and group.assignment_epoch <= group.group_epoch
    assert group.assigning_epoch is None


# -- a large group's inputs copied in slices (issue 16, item 11) -------------------------------


def _settle(h: Harness, *clients: Client) -> None:
    """settle, with the offloaded computations finishing between rounds."""
    for _ in range(10):
        h.sleep(0)
        for client in clients:
            assert client.ack().error_code == 0
        h.sleep(0)
        if h.group().state().value == "Stable":
            return
    raise AssertionError(f"group not stable: {h.group().state()}")


def _grown_group(h: Harness, members: int) -> list[Client]:
    """`members` members settled on their targets, then two of them gone (their targets
    departed), then one more joining: the heartbeat that starts a computation."""
    clients = [Client(h, f"m{i:03d}") for i in range(members)]
    clients[0].join(["foo"])
    for c in clients[1:]:
        c.join(["foo"])
        h.sleep(0)
    _settle(h, *clients)
    for c in clients[-2:]:
        c.leave()
        h.sleep(0)
    clients = clients[:-2]
    _settle(h, *clients)
    return clients


def _copied_per_step(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """Entries each SlicedCopy.step copies, in a list that fills as they run."""
    steps: list[int] = []
    step = offload.SlicedCopy.step

    def counted(self: offload.SlicedCopy, budget: int) -> bool:
        before = sum(map(len, self.copies))
        done = step(self, budget)
        steps.append(sum(map(len, self.copies)) - before)
        return done

    monkeypatch.setattr(offload.SlicedCopy, "step", counted)
    return steps


@pytest.mark.parametrize("regex", [False, True])
def test_a_large_groups_inputs_are_copied_in_slices_with_the_same_result(
    monkeypatch: pytest.MonkeyPatch, regex: bool
) -> None:
    """The records written, and the group they leave, are those of the copy made at once;
    no shard event copies more than SNAPSHOT_SLICE entries."""

    def run(slice_entries: int) -> tuple[list[Any], dict[str, Any], list[int]]:
        with monkeypatch.context() as m:
            m.setattr(offload, "SNAPSHOT_SLICE", slice_entries)
            steps = _copied_per_step(m)
            h = offloading()
            h.topics.add("foo2", 4)
            clients = _grown_group(h, 12)
            events: list[Result] = []
            h.timer.on_result = lambda r: (events.append(r), h.apply(r))  # type: ignore[func-returns-value]
            late = Client(h, "zz")
            if regex:
                late.join(None, subscribed_topic_regex="foo.*")
            else:
                late.join(["foo", "foo2"])
            h.sleep(0)
            h.timer.on_result = h.apply
            _settle(h, *clients, late)
            h.assert_replayed()
            written = [r for e in events for r in e.records]
            return written, dict(h.group().target), steps

    at_once, target_at_once, no_steps = run(1_000_000)
    sliced, target_sliced, steps = run(7)
    assert not no_steps  # a small group's inputs are copied at once, as before
    assert len(steps) > 4 and max(steps) <= 7
    assert sliced == at_once and target_sliced == target_at_once


def test_a_change_between_two_slices_starts_the_copy_again(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A member leaving between two slices of the copy: the copy starts again, for the
    group's epoch then; its target leaves that member out and the group settles."""
    monkeypatch.setattr(offload, "SNAPSHOT_SLICE", 7)
    steps = _copied_per_step(monkeypatch)
    h = offloading()
    clients = _grown_group(h, 12)
    late = Client(h, "zz")
    offloaded = h.timer.offloaded
    steps.clear()
    late.join(["foo"])
    epoch = h.group().group_epoch
    # A large group: the copy starts with the next event, the computation after it.
    assert h.group().assigning_epoch == epoch and h.timer.offloaded == offloaded
    left = clients.pop()

    def after(result: Result) -> None:
        h.apply(result)
        if len(steps) == 2:  # between the second and third slice: a member leaves
            left.leave()

    h.timer.on_result = after
    h.sleep(0)
    h.timer.on_result = h.apply
    group = h.group()
    assert group.group_epoch == epoch + 1 and group.assignment_epoch == epoch + 1
    assert h.timer.offloaded == offloaded + 1  # one computation, from the second copy
    assert left.member_id not in group.target and left.member_id not in group.metadata
    assert sum(steps) > offload.snapshot_entries(group)  # copied again from the start
    _settle(h, *clients, late)
    h.assert_replayed()
