"""The cyclic GC and a large group's target computed off the loop (issue 16, item 11): no
collection runs in the worker thread while it builds the target (one there holds the GIL:
the loop stalled 23-56 ms at 20,000 members), and the result it hands back holds no
GC-tracked object per record (20,000 members' records as objects were young when the GC
resumed: the collection that walked them stalled the loop as long). Structural checks
(what is tracked, whether the GC is enabled), no timings."""

from __future__ import annotations

import gc
from collections.abc import Callable
from typing import Any

from groupcoord.coordinator.groups.result import OffloadFinish, Result
from groupcoord.coordinator.runtime.gc_pause import pause_gc, pauses, resume_gc
from groupcoord.coordinator.runtime.timers import LoopTimer
from groupcoord.protocol.records import ConsumerGroupTargetAssignmentMemberKey
from tests.unit.consumer_support import Client, Harness
from tests.unit.waits import Executor

MEMBERS = 300
INTERVAL_MS = 5_000


async def test_a_built_in_computation_runs_with_the_gc_paused_and_resumed_after() -> None:
    computations = Executor()
    finished: list[Any] = []
    timer = LoopTimer(lambda callback, _late_s: callback(0))

    def finish(value: Any, now_ms: int) -> Result:
        finished.append(value)
        return Result()

    assert gc.isenabled()
    timer.offload("k", gc.isenabled, finish)
    await computations.done()
    assert finished == [False]
    assert gc.isenabled() and pauses() == 0

    # A pause held meanwhile (a shard's load) outlives the computation's.
    finished.clear()
    pause_gc()
    try:
        timer.offload("k", gc.isenabled, finish)
        await computations.done()
        assert finished == [False] and not gc.isenabled()
    finally:
        resume_gc()
    assert gc.isenabled() and pauses() == 0

    # A failing computation releases its pause too.
    finished.clear()
    timer.offload("err", lambda: 1 / 0, finish)
    await computations.done()
    assert isinstance(finished[0], ZeroDivisionError)
    assert gc.isenabled() and pauses() == 0


def test_an_offloaded_target_holds_no_tracked_object_per_record() -> None:
    """MEMBERS members join during an assignment interval: one computation, off the loop,
    gives each its first target. What the computation's result keeps alive is counted: the
    tracked objects that were not there before it ran (the GC held off meanwhile)."""
    h = Harness(
        {"foo": 2 * MEMBERS},
        consumer_offload_min_members=2,
        consumer_assignment_interval_ms=INTERVAL_MS,
    )
    kept: list[int] = []
    offload = h.timer.offload

    def counted(
        key: str, compute: Callable[[], Any], finish: OffloadFinish, *, plugin: bool = False
    ) -> None:
        def measured() -> Any:
            gc.collect()
            gc.disable()
            try:
                before = {id(o) for o in gc.get_objects()}
                value = compute()
                kept.append(sum(1 for o in gc.get_objects() if id(o) not in before))
                return value
            finally:
                gc.enable()

        offload(key, measured, finish, plugin=plugin)

    h.timer.offload = counted  # type: ignore[method-assign]
    clients = [Client(h, f"m{i:04d}") for i in range(MEMBERS)]
    for client in clients:
        client.join(["foo"])
    # The interval ends: the target is computed off the loop, then written in slices.
    records = h.sleep(INTERVAL_MS).records
    written = [k for k, _ in records if isinstance(k, ConsumerGroupTargetAssignmentMemberKey)]
    assert len(kept) == 1, kept
    assert len(written) >= MEMBERS - 1  # (the first member's target was computed at once)
    # As objects (a key, a value, a tuple of topics each), the records kept 3 tracked
    # objects per member; as bytes, a few containers in all.
    assert kept[0] < 20, (kept, len(written))
    assert h.group().assignment_epoch == h.group().group_epoch
    h.assert_replayed()
