"""Mass member expiry: how long the event loop stalls while 20,000 members of one group
expire at once, and how long until all are gone (issue 16, item 11).

    python tests/bench/bench_mass_expiry.py [--members 20000] [--session-ms 10000]
                                             [--kinds consumer,classic] [--json PATH]

For each kind of group, in-process (the shard directly, as the server runs it): a real
ShardRunner (its log on disk, the group committer's fsyncs, the server's uvloop, GC
thresholds and thread switch interval), one topic of 100 partitions, and

* consumer: --members KIP-848 members join one group (ConsumerGroupHeartbeat, epoch 0,
  subscribed to the topic; the target is computed off the loop as the server does);
* classic: the record of a Stable classic group of --members members, as its leader's
  SyncGroup writes it.

Then the shard is loaded again from its log, as after a restart whose clients never come
back: every member's session starts at the same instant and ends one session timeout
(--session-ms) later, all together: the worst case of a mass expiry. From the end of the
load, a probe task sleeps 1 ms in a loop and records how late each wake-up is (a loop
stall: nothing else could run meanwhile), until the group has no member left.

Prints per kind: the longest stall and the p99 of the probe's wake-up delays, the loop
thread's own CPU time in the longest gap (on a loaded machine a gap may be the OS running
other processes: the CPU time is what the loop itself spent), the CPU time of the costliest
single shard event (a timer's or a slice's), the longest garbage collection (in any
thread: one in the offload's worker thread holds the GIL), the time from the end of the
load until the last member was gone (and from the first removal to the last, with the loop
thread's CPU time then), and the targets (no stall over 5 ms; all gone within one session
timeout + 1 s). Never asserts: figures only.

Telling the loop's stalls from the machine's: each probe gap is split into the loop
thread's CPU time (busy), its time runnable but waiting for a CPU (the kernel's run-queue
wait, /proc/thread-self/schedstat: other processes, or kernel threads, had the cores), and
the rest (blocked: the GIL held by another thread of this process, or a blocking call);
with the CPU time the process's other threads used meanwhile, and the share of the
machine's CPU other processes used while the members expired (/proc/stat). A stall that is
mostly run-queue wait is the machine's, not the server's. And each batch the shard appends
to its log, wall vs CPU time: a write blocked behind an fsync would be the server's.

Logging is set up as the server sets it up (JSON lines on stderr at --log-level, repeated
lines limited): every expired member is one "group event" line, part of what the loop
pays. Redirect stderr (2>/dev/null or a file) to read the figures.
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import json
import os
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

REPO_ROOT = Path(__file__).resolve().parents[2]
if str(REPO_ROOT) not in sys.path:
    sys.path.insert(0, str(REPO_ROOT))

from groupcoord.coordinator.groups.config import GroupConfig  # noqa: E402
from groupcoord.coordinator.groups.consumer.messages import HeartbeatRequest  # noqa: E402
from groupcoord.coordinator.groups.result import Result  # noqa: E402
from groupcoord.coordinator.groups.topics import StaticTopicImage  # noqa: E402
from groupcoord.coordinator.observability.logging import setup_logging  # noqa: E402
from groupcoord.coordinator.runtime.runner import ShardRunner  # noqa: E402
from groupcoord.protocol.records import (  # noqa: E402
    GroupMetadataKey,
    GroupMetadataValue,
    MemberMetadata,
)
from groupcoord.storage import GroupCommitter, LogConfig  # noqa: E402

TOPIC = "events"
GROUP = "mass"
CHUNK = 200  # requests per loop turn while the group forms
PROBE_S = 0.001


def subscription() -> bytes:
    """ConsumerProtocolSubscription v0 of TOPIC."""
    name = TOPIC.encode()
    return b"\x00\x00\x00\x00\x00\x01" + len(name).to_bytes(2, "big") + name + b"\xff\xff\xff\xff"


async def until(predicate: Any, timeout_s: float = 600.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not predicate():
        if time.monotonic() > deadline:
            raise TimeoutError("the group did not form in time")
        await asyncio.sleep(0.01)


async def form_consumer_group(runner: ShardRunner, members: int) -> None:
    answered: list[Any] = []
    for start in range(0, members, CHUNK):
        for i in range(start, min(start + CHUNK, members)):
            request = HeartbeatRequest(
                group_id=GROUP,
                member_id=f"member-{i:06d}",
                member_epoch=0,
                rebalance_timeout_ms=60_000,
                subscribed_topic_names=[TOPIC],
                topic_partitions=[],
                client_id="bench",
                client_host="/127.0.0.1",
            )
            runner.run(
                lambda now_ms, r=request: runner.shard.consumer_group_heartbeat(
                    r, answered.append, now_ms
                )
            )
        await asyncio.sleep(0)
    await until(lambda: len(answered) == members)
    errors = [r for r in answered if getattr(r, "error_code", 0)]
    assert not errors, errors[:3]


async def form_classic_group(runner: ShardRunner, members: int, session_ms: int) -> None:
    """The group's record as the leader's SyncGroup writes it (the classic group a restart
    loads), written directly: forming it through 20,000 JoinGroups takes minutes on a tree
    whose joins are O(members) each, and this figure is about the expiry."""
    value = GroupMetadataValue(
        protocol_type="consumer",
        generation=1,
        protocol="range",
        leader="member-000000",
        current_state_timestamp=runner.clock_ms(),
        members=tuple(
            MemberMetadata(
                member_id=f"member-{i:06d}",
                group_instance_id=None,
                client_id="bench",
                client_host="/127.0.0.1",
                rebalance_timeout=60_000,
                session_timeout=session_ms,
                subscription=subscription(),
                assignment=b"",
            )
            for i in range(members)
        ),
    )
    runner.run(lambda now_ms: Result(applied_records=[(GroupMetadataKey(GROUP), value)]))


def member_count(runner: ShardRunner, kind: str) -> int:
    shard = runner.shard
    if kind == "consumer":
        group = shard.consumer_group(GROUP)
        return 0 if group is None else len(group.metadata)
    classic = shard.classic_group(GROUP)
    return 0 if classic is None else len(classic.members)


def time_collections() -> tuple[list[float], Any]:
    """The wall time of each cyclic garbage collection from now on, whichever thread runs
    it (one in the offload's worker thread holds the GIL: the loop waits as long), and the
    gc callback to remove when done."""
    spent: list[float] = []
    started = [0.0]

    def callback(phase: str, info: dict[str, int]) -> None:
        if phase == "start":
            started[0] = time.perf_counter()
        else:
            spent.append(time.perf_counter() - started[0])

    gc.callbacks.append(callback)
    return spent, callback


class RunQueueWait:
    """The loop thread's time runnable but not running (seconds, cumulative), from the
    kernel's schedstat of the thread that makes this object; 0.0 where there is none."""

    def __init__(self) -> None:
        try:
            self._fd: int | None = os.open("/proc/thread-self/schedstat", os.O_RDONLY)
        except OSError:
            self._fd = None

    def __call__(self) -> float:
        if self._fd is None:
            return 0.0
        return int(os.pread(self._fd, 100, 0).split()[1]) / 1e9

    def close(self) -> None:
        if self._fd is not None:
            os.close(self._fd)


def machine_cpu_s() -> tuple[float, float]:
    """(busy, total) CPU seconds of the whole machine so far (/proc/stat; zeros elsewhere)."""
    try:
        with open("/proc/stat") as stat:
            fields = [int(f) for f in stat.readline().split()[1:]]
    except OSError:
        return 0.0, 0.0
    tick = os.sysconf("SC_CLK_TCK")
    idle = fields[3] + fields[4]  # idle, iowait
    return (sum(fields) - idle) / tick, sum(fields) / tick


def time_appends(runner: ShardRunner) -> list[tuple[float, float, float]]:
    """(wall, loop-thread CPU, run-queue wait) seconds of each batch the shard seals and
    appends to its log from now on: wall well above both is the loop blocked in the kernel
    in the write (an append to ext4 may wait for a journal commit, which any fsync on the
    filesystem starts), a stall of the server's own."""
    spent: list[tuple[float, float, float]] = []
    seal = runner._seal
    run_queue = RunQueueWait()

    def timed() -> None:
        started, cpu, wait = time.perf_counter(), time.thread_time(), run_queue()
        seal()
        spent.append((time.perf_counter() - started, time.thread_time() - cpu, run_queue() - wait))

    runner._seal = timed  # type: ignore[method-assign]
    return spent


def time_events(runner: ShardRunner) -> list[float]:
    """The loop thread's CPU time of each timer event of the shard from now on (its
    callback, the replay and encoding of its records), in a list that fills as they run."""
    spent: list[float] = []
    timer = runner.timer
    fire = timer._fire

    def timed(callback: Any, late_s: float | None) -> None:
        started = time.thread_time()
        fire(callback, late_s)
        spent.append(time.thread_time() - started)

    timer._fire = timed
    return spent


async def run_kind(kind: str, members: int, session_ms: int, directory: Path) -> dict[str, Any]:
    def settings(consumer_session_ms: int) -> GroupConfig:
        return GroupConfig(
            initial_rebalance_delay_ms=100,
            min_session_timeout_ms=min(6_000, session_ms),
            consumer_session_timeout_ms=consumer_session_ms,
            consumer_min_session_timeout_ms=min(session_ms, consumer_session_ms),
            consumer_max_session_timeout_ms=max(session_ms, consumer_session_ms),
            consumer_heartbeat_interval_ms=min(5_000, session_ms // 2),
            consumer_min_heartbeat_interval_ms=min(5_000, session_ms // 2),
        )

    config = settings(session_ms)
    topics = StaticTopicImage()
    topics.add(TOPIC, 100)
    committer = GroupCommitter()
    # While the group forms, consumer sessions last an hour (20,000 joins take longer than
    # a session): only the restart below starts the sessions that end together.
    runner = ShardRunner(0, directory, settings(3_600_000), LogConfig(), committer, topics=topics)
    await runner.load()
    formed = time.monotonic()
    if kind == "consumer":
        await form_consumer_group(runner, members)
    else:
        await form_classic_group(runner, members, session_ms)
    formed_s = time.monotonic() - formed
    await runner.close()

    # The restart: every member's session starts at the end of this load.
    runner = ShardRunner(0, directory, config, LogConfig(), committer, topics=topics)
    await runner.load()
    gc.freeze()  # as the server does after its load
    events = time_events(runner)
    appends = time_appends(runner)
    collections, gc_callback = time_collections()
    loaded = time.monotonic()
    assert member_count(runner, kind) == members, member_count(runner, kind)
    stalls: list[float] = []
    busy: list[float] = []
    waits: list[float] = []  # per gap: run-queue wait (a CPU was not free)
    others: list[float] = []  # per gap: CPU time of the process's other threads
    run_queue = RunQueueWait()
    worst = -1.0
    worst_at_s = 0.0
    worst_split = (0.0, 0.0, 0.0, 0.0)  # the worst gap's busy, wait, blocked, other threads
    machine_before: tuple[float, float] | None = None
    process_before = 0.0
    machine_share = None
    gone_s = None
    first_gone: tuple[float, float] | None = None  # (wall, loop CPU) at the first removal
    expiring = (0.0, 0.0)
    limit_s = session_ms / 1000 + 30
    while time.monotonic() - loaded < limit_s:
        before, cpu_before = time.perf_counter(), time.thread_time()
        wait_before, process_cpu = run_queue(), time.process_time()
        await asyncio.sleep(PROBE_S)
        stall = max(0.0, time.perf_counter() - before - PROBE_S)
        # The loop thread's own CPU time in that gap: a gap on a loaded machine may be the
        # OS running other processes; this part was the loop busy.
        spent = max(0.0, time.thread_time() - cpu_before)
        wait = run_queue() - wait_before
        other = max(0.0, time.process_time() - process_cpu - spent)
        if stall > worst:  # (a running maximum: max(stalls) made each probe O(probes))
            worst, worst_at_s = stall, time.monotonic() - loaded
            worst_split = (spent, wait, max(0.0, stall - spent - wait), other)
        stalls.append(stall)
        busy.append(spent)
        waits.append(wait)
        others.append(other)
        left = member_count(runner, kind)
        if first_gone is None and left < members:
            first_gone = (time.monotonic(), time.thread_time())
            machine_before, process_before = machine_cpu_s(), time.process_time()
        if left == 0:
            gone_s = time.monotonic() - loaded
            if machine_before is not None:
                busy_s, total_s = machine_cpu_s()
                mine_s = time.process_time() - process_before
                if total_s > machine_before[1]:
                    machine_share = (busy_s - machine_before[0] - mine_s) / (
                        total_s - machine_before[1]
                    )
            if first_gone is not None:
                expiring = (
                    time.monotonic() - first_gone[0],
                    time.thread_time() - first_gone[1],
                )
            break
    gc.callbacks.remove(gc_callback)
    run_queue.close()
    # Stalls over 5 ms by what filled most of them: the loop busy, the loop thread waiting
    # for a CPU (the machine), or off the CPU beyond the probe's sleep (blocked: another
    # thread's GIL, a blocking call).
    over = [(s, b, w) for s, b, w in zip(stalls, busy, waits, strict=True) if s > 0.005]
    # The gap most blocked (off the CPU beyond the sleep, not waiting for one), with the
    # CPU time other threads of the process used in it: about as much is their GIL.
    blocked_gaps = [
        (max(0.0, s - b - w), o) for s, b, w, o in zip(stalls, busy, waits, others, strict=True)
    ]
    worst_blocked = max(blocked_gaps, default=(0.0, 0.0))
    by_cause = {"loop": 0, "machine": 0, "blocked": 0}
    for s, b, w in over:
        blocked = max(0.0, s - b - w)  # off the CPU beyond the probe's own sleep
        by_cause["loop" if b >= max(w, blocked) else "machine" if w >= blocked else "blocked"] += 1
    await runner.close()
    await committer.close()
    gc.unfreeze()
    stalls.sort()
    busy.sort()
    return {
        "kind": kind,
        "members": members,
        "formed_s": round(formed_s, 2),
        "session_s": session_ms / 1000,
        "all_expired_s": None if gone_s is None else round(gone_s, 3),
        "worst_stall_ms": round(stalls[-1] * 1000, 2),
        "p99_stall_ms": round(stalls[int(len(stalls) * 0.99)] * 1000, 2),
        "stalls_over_5ms": sum(1 for s in stalls if s > 0.005),
        "worst_stall_at_s": round(worst_at_s, 3),
        "worst_stall_busy_wait_blocked_other_ms": [round(x * 1000, 2) for x in worst_split],
        "stalls_over_5ms_by_cause": by_cause,
        "worst_run_queue_wait_ms": round(max(waits, default=0.0) * 1000, 2),
        "worst_blocked_and_other_threads_ms": [round(x * 1000, 2) for x in worst_blocked],
        "worst_other_threads_ms": round(max(others, default=0.0) * 1000, 2),
        "others_cpu_share_expiring": None if machine_share is None else round(machine_share, 2),
        "worst_append_wall_cpu_wait_ms": [
            round(x * 1000, 2) for x in max(appends, default=(0.0, 0.0, 0.0))
        ],
        "appends_blocked_over_1ms": sum(1 for w, c, q in appends if w - c - q > 0.001),
        "worst_busy_ms": round(busy[-1] * 1000, 2),
        "busy_over_5ms": sum(1 for b in busy if b > 0.005),
        "worst_event_ms": round(max(events, default=0.0) * 1000, 2),
        "events_over_5ms": sum(1 for e in events if e > 0.005),
        "collections": len(collections),
        "worst_collection_ms": round(max(collections, default=0.0) * 1000, 2),
        "expiring_s": round(expiring[0], 3),
        "expiring_cpu_s": round(expiring[1], 3),
    }


async def main_async(args: argparse.Namespace) -> list[dict[str, Any]]:
    rows = []
    with tempfile.TemporaryDirectory(prefix="bench-mass-expiry-") as tmp:
        for kind in args.kinds.split(","):
            rows.append(await run_kind(kind, args.members, args.session_ms, Path(tmp) / kind))
            print(json.dumps(rows[-1]), flush=True)
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--members", type=int, default=20_000)
    parser.add_argument("--session-ms", type=int, default=10_000)
    parser.add_argument("--kinds", default="consumer,classic")
    parser.add_argument("--json", type=Path)
    parser.add_argument("--log-level", default="info", help="the server's log_level")
    args = parser.parse_args()
    setup_logging(args.log_level, 10_000)  # the server's log_repeat_window_ms default
    sys.setswitchinterval(0.0001)  # the server's thread_switch_interval_us default
    gc.set_threshold(50_000, 50, 100)  # the server's
    try:
        import uvloop

        rows = uvloop.run(main_async(args))
    except ImportError:
        rows = asyncio.run(main_async(args))
    print(
        f"{'group':<9} {'members':>8} {'worst stall ms':>15} {'p99 ms':>7} {'>5 ms':>6} "
        f"{'worst busy ms':>14} {'busy >5 ms':>11} {'all expired s':>14} {'target s':>9} "
        f"{'expiring s':>11} {'loop CPU s':>11} {'worst event ms':>15} {'worst GC ms':>12}"
    )
    for row in rows:
        print(
            f"{row['kind']:<9} {row['members']:>8} {row['worst_stall_ms']:>15} "
            f"{row['p99_stall_ms']:>7} {row['stalls_over_5ms']:>6} {row['worst_busy_ms']:>14} "
            f"{row['busy_over_5ms']:>11} {str(row['all_expired_s']):>14} "
            f"{row['session_s'] + 1:>9} {row['expiring_s']:>11} {row['expiring_cpu_s']:>11} "
            f"{row['worst_event_ms']:>15} {row['worst_collection_ms']:>12}"
        )
    for row in rows:
        busy_ms, wait_ms, blocked_ms, other_ms = row["worst_stall_busy_wait_blocked_other_ms"]
        print(
            f"{row['kind']}: worst stall = {busy_ms} ms busy + {wait_ms} ms waiting for a CPU"
            f" + {blocked_ms} ms blocked (other threads' CPU {other_ms} ms); stalls over 5 ms"
            f" by cause {row['stalls_over_5ms_by_cause']}; other processes' share of the"
            f" machine's CPU while expiring {row['others_cpu_share_expiring']}; longest log"
            f" append {row['worst_append_wall_cpu_wait_ms']} ms (wall, CPU, waiting for a"
            f" CPU), appends blocked in the kernel over 1 ms {row['appends_blocked_over_1ms']};"
            f" most blocked gap and other threads' CPU in it"
            f" {row['worst_blocked_and_other_threads_ms']} ms"
        )
    print(
        "stall: how late the 1 ms probe woke; busy: the loop thread's CPU time in that gap; "
        "waiting for a CPU: its run-queue wait then (the machine's load); blocked: neither "
        "(another thread's GIL, a blocking call); "
        "expiring: from the first removal to the last, and the loop thread's CPU time then"
    )
    print("targets: no loop stall over 5 ms; all expired within one session timeout + 1 s")
    if args.json is not None:
        args.json.write_text(json.dumps(rows, indent=2))


if __name__ == "__main__":
    main()
