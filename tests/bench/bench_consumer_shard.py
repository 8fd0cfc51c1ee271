"""The consumer-group (KIP-848) shard on its own, with 10,000 members: what a target
assignment costs the shard's event loop, and a steady heartbeat's CPU.

    python tests/bench/bench_consumer_shard.py [--members 10000] [--partitions 100000]

No server and no network: a GroupShard driven like the unit tests' harness (records
replayed as the runtime does), the ManualTimer's offload timed piece by piece. Prints:
the full target of a formed group (the snapshot taken on the loop, the computation that
runs in a worker thread, the slices written back on the loop), one member joining a stable
group (same pieces), one member leaving (the next target), and steady heartbeats per
second / microseconds each.
"""

from __future__ import annotations

import argparse
import heapq
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from groupcoord.coordinator.groups.consumer import offload  # noqa: E402
from tests.unit.consumer_support import Harness  # noqa: E402


class _NoLog(list[Any]):
    def extend(self, records: Any) -> None:  # the bench keeps no record history
        pass


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--members", type=int, default=10_000)
    parser.add_argument("--partitions", type=int, default=100_000)
    args = parser.parse_args()
    n = args.members
    h = Harness(
        {"t": args.partitions},
        consumer_assignment_interval_ms=60_000,
        consumer_session_timeout_ms=10**9,
    )
    h.log = _NoLog()
    t0 = time.perf_counter()
    for i in range(n):
        h.heartbeat(
            member_id=f"m{i}",
            member_epoch=0,
            rebalance_timeout_ms=5000,
            subscribed_topic_names=["t"],
            topic_partitions=[],
        )
    print(f"{n} joins (targets held back by the interval): {time.perf_counter() - t0:.2f} s")

    timings: dict[str, list[float]] = {"snapshot": [], "compute": [], "slices": []}

    def timed_offload(key: str, compute: Any, finish: Any) -> None:
        t = time.perf_counter()
        value = compute()
        timings["compute"].append(time.perf_counter() - t)
        h.timer.schedule(key, 0, lambda now_ms: finish(value, now_ms))

    h.timer.offload = timed_offload  # type: ignore[method-assign]
    write_slice = h.shard.consumer._write_target_slice
    start_offload = h.shard.consumer._offload_target

    def timed_slice(*a: Any) -> Any:
        t = time.perf_counter()
        out = write_slice(*a)
        h.apply(out)  # the runtime replays each slice's records
        timings["slices"].append(time.perf_counter() - t)
        return type(out)()

    def timed_start(*a: Any) -> Any:
        t = time.perf_counter()
        out = start_offload(*a)
        timings["snapshot"].append(time.perf_counter() - t - sum(timings["compute"][-1:]))
        return out

    h.shard.consumer._write_target_slice = timed_slice  # type: ignore[method-assign]
    h.shard.consumer._offload_target = timed_start  # type: ignore[method-assign]

    def run_due_timers() -> None:
        heap = h.timer._heap
        while heap and heap[0][0] <= h.timer.now_ms:
            due, seq, key = heapq.heappop(heap)
            entry = h.timer._live.get(key)
            if entry is None or entry[0] != seq:
                continue
            del h.timer._live[key]
            h.apply(entry[1](due))

    def report(what: str) -> None:
        snap = 1000 * max(timings["snapshot"], default=0)
        comp = 1000 * sum(timings["compute"])
        slices = timings["slices"]
        worst = 1000 * max(slices, default=0)
        print(
            f"{what}: on the loop {snap:.1f} ms (snapshot) + {len(slices)} slice(s) of at "
            f"most {worst:.1f} ms; in the worker thread {comp:.1f} ms "
            f"(slice = {offload.OFFLOAD_SLICE} members)"
        )
        for v in timings.values():
            v.clear()

    h.timer.now_ms += 60_001
    run_due_timers()  # the held-back target: offloaded
    run_due_timers()
    report(f"full target, {n} members x {args.partitions} partitions")
    for _ in range(3):  # reconcile everybody
        for i in range(n):
            member = h.group().member(f"m{i}")
            assert member is not None
            owned = [(t, sorted(p)) for t, p in member.assigned_partitions.items()]
            h.heartbeat(member_id=f"m{i}", member_epoch=member.member_epoch, topic_partitions=owned)
    assert h.group().state().value == "Stable", h.group().state()

    h.timer.now_ms += 60_001
    t0 = time.perf_counter()
    h.heartbeat(
        member_id="joiner",
        member_epoch=0,
        rebalance_timeout_ms=5000,
        subscribed_topic_names=["t"],
        topic_partitions=[],
    )
    join_s = time.perf_counter() - t0 - sum(timings["compute"])
    run_due_timers()
    print(f"one member joins a stable group: the join heartbeat {1000 * join_s:.1f} ms on the loop")
    report("  its target")

    # One member leaves: its target tombstone keeps what it held, so the next target
    # knows the freed partitions without looking at every partition (departed targets).
    leaver = h.group().member("m0")
    assert leaver is not None
    h.heartbeat(member_id="m0", member_epoch=-1)
    h.timer.now_ms += 60_001
    other = h.group().member("m1")
    assert other is not None
    h.heartbeat(member_id="m1", member_epoch=other.member_epoch)
    run_due_timers()
    report("one member leaves: the next target")

    members = [h.group().members[f"m{i}"] for i in range(1, n)]
    t0 = time.process_time()
    for _ in range(3):
        for member in members:
            h.heartbeat(member_id=member.member_id, member_epoch=member.member_epoch)
    cpu = time.process_time() - t0
    rate, each_us = 3 * len(members) / cpu, 1e6 * cpu / (3 * len(members))
    print(f"steady heartbeats in the shard: {rate:,.0f}/s, {each_us:.1f} us each")


if __name__ == "__main__":
    main()
