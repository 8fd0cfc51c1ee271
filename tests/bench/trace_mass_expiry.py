"""What fills the loop's busy gaps during a mass expiry (issue 16, item 11): runs
bench_mass_expiry's scenario on asyncio's own loop (whose callbacks can be timed), and
for every probe gap with more than --busy-ms of loop-thread CPU prints what ran in it:
each loop callback with its CPU time, each shard event (timer callback) inside them, and
each garbage collection (generation, duration).

    python tests/bench/trace_mass_expiry.py [--members 20000] [--kinds consumer,classic]
                                             [--busy-ms 4] 2>/dev/null

A diagnostic, not a benchmark: timing every callback costs a few microseconds each, and
asyncio's loop is not the server's uvloop. Never asserts.
"""

from __future__ import annotations

import argparse
import asyncio
import cProfile
import dataclasses
import gc
import pstats
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
import bench_mass_expiry as bench  # noqa: E402

from groupcoord.coordinator.observability.logging import setup_logging  # noqa: E402
from groupcoord.coordinator.runtime.runner import ShardRunner  # noqa: E402
from groupcoord.storage import GroupCommitter, LogConfig  # noqa: E402

# (kind, label, perf_counter start, thread CPU seconds)
Trace = list[tuple[str, str, float, float]]


def _label(callback: Any) -> str:
    inner = getattr(callback, "__func__", callback)
    name = getattr(inner, "__qualname__", None) or type(callback).__name__
    owner = getattr(callback, "__self__", None)
    if owner is not None and type(owner).__name__ == "Task":
        coro = owner.get_coro()
        name = f"Task({getattr(coro, '__qualname__', coro)})"
    return name


def instrument(trace: Trace) -> None:
    """Time every loop callback (asyncio's Handle._run) and every collection."""
    run = asyncio.events.Handle._run

    def timed_run(handle: Any) -> None:
        started, cpu = time.perf_counter(), time.thread_time()
        run(handle)
        trace.append(("cb", _label(handle._callback), started, time.thread_time() - cpu))

    asyncio.events.Handle._run = timed_run  # type: ignore[method-assign]
    gc_started: list[float] = [0.0, 0.0]

    def on_gc(phase: str, info: dict[str, int]) -> None:
        if phase == "start":
            gc_started[0], gc_started[1] = time.perf_counter(), time.thread_time()
        else:
            trace.append(
                (
                    "gc",
                    f"gen{info['generation']} collected={info['collected']}",
                    gc_started[0],
                    time.thread_time() - gc_started[1],
                )
            )

    gc.callbacks.append(on_gc)


def time_shard_events(runner: ShardRunner, trace: Trace, profile: str | None) -> None:
    fire = runner.timer._fire

    def timed(callback: Any, late_s: float | None) -> None:
        started, cpu = time.perf_counter(), time.thread_time()
        if profile and profile in _label(callback):
            _PROFILER.runcall(fire, callback, late_s)
        else:
            fire(callback, late_s)
        trace.append(("event", _label(callback), started, time.thread_time() - cpu))

    runner.timer._fire = timed


async def run_kind(kind: str, args: argparse.Namespace, directory: Path) -> None:
    trace = _TRACE
    config = bench.GroupConfig(
        initial_rebalance_delay_ms=100,
        min_session_timeout_ms=min(6_000, args.session_ms),
        consumer_session_timeout_ms=args.session_ms,
        consumer_min_session_timeout_ms=args.session_ms,
        consumer_max_session_timeout_ms=3_600_000,
        consumer_heartbeat_interval_ms=min(5_000, args.session_ms // 2),
        consumer_min_heartbeat_interval_ms=min(5_000, args.session_ms // 2),
    )
    forming = dataclasses.replace(config, consumer_session_timeout_ms=3_600_000)
    topics = bench.StaticTopicImage()
    topics.add(bench.TOPIC, 100)
    committer = GroupCommitter()
    runner = ShardRunner(0, directory, forming, LogConfig(), committer, topics=topics)
    await runner.load()
    if kind == "consumer":
        await bench.form_consumer_group(runner, args.members)
    else:
        await bench.form_classic_group(runner, args.members, args.session_ms)
    await runner.close()
    runner = ShardRunner(0, directory, config, LogConfig(), committer, topics=topics)
    await runner.load()
    gc.freeze()
    time_shard_events(runner, trace, args.profile)
    instrument_start = len(trace)
    loaded = time.monotonic()
    gaps: list[tuple[float, float, float]] = []  # (start, end, busy CPU)
    while time.monotonic() - loaded < args.session_ms / 1000 + 30:
        before, cpu = time.perf_counter(), time.thread_time()
        await asyncio.sleep(bench.PROBE_S)
        gaps.append((before, time.perf_counter(), time.thread_time() - cpu))
        if bench.member_count(runner, kind) == 0:
            break
    gone_s = time.monotonic() - loaded
    await runner.close()
    await committer.close()
    gc.unfreeze()
    trace = trace[instrument_start:]
    _TRACE.clear()
    busy = sorted(gaps, key=lambda g: -g[2])
    print(
        f"== {kind}: all gone {gone_s:.2f} s; gaps with busy > {args.busy_ms} ms: "
        f"{sum(1 for g in gaps if g[2] * 1000 > args.busy_ms)} of {len(gaps)}"
    )
    totals: Counter[str] = Counter()
    for _, label, _, cpu in (t for t in trace if t[0] != "event"):
        totals[label] += cpu
    print("loop CPU by callback (s):", {k: round(v, 3) for k, v in totals.most_common(8)})
    events: Counter[str] = Counter()
    counts: Counter[str] = Counter()
    spans: dict[str, list[float]] = {}
    for _, label, at, cpu in (t for t in trace if t[0] == "event"):
        events[label] += cpu
        counts[label] += 1
        span = spans.setdefault(label, [at, at])
        span[1] = at
    t0 = gaps[0][0] if gaps else 0.0
    for label, cpu in events.most_common(8):
        first, last = spans[label]
        print(
            f"  event {label}: {counts[label]} x, {cpu:.3f} s CPU, "
            f"from {first - t0:.3f} s to {last - t0:.3f} s"
        )
    gcs = [t for t in trace if t[0] == "gc"]
    print(
        f"collections: {Counter(t[1].split()[0] for t in gcs)}, "
        f"worst {max((t[3] for t in gcs), default=0) * 1000:.2f} ms"
    )
    if args.profile:
        pstats.Stats(_PROFILER).sort_stats("tottime").print_stats(25)
    for _, label, at, cpu in gcs:
        if cpu > 0.001:
            print(f"  {label} at {at - t0:.3f} s: {cpu * 1000:.2f} ms")
    for start, end, cpu in busy[: args.show]:
        if cpu * 1000 <= args.busy_ms:
            break
        print(f"-- gap {(end - start) * 1000:.2f} ms wall, {cpu * 1000:.2f} ms busy")
        for kind_, label, at, spent in trace:
            if start <= at <= end and (spent * 1000 >= 0.05 or kind_ != "cb"):
                print(f"   {kind_:5} {(at - start) * 1000:7.2f} {spent * 1000:6.2f} ms  {label}")


async def main_async(args: argparse.Namespace) -> None:
    with tempfile.TemporaryDirectory(prefix="trace-mass-expiry-") as tmp:
        for kind in args.kinds.split(","):
            await run_kind(kind, args, Path(tmp) / kind)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--members", type=int, default=20_000)
    parser.add_argument("--session-ms", type=int, default=10_000)
    parser.add_argument("--kinds", default="consumer,classic")
    parser.add_argument("--busy-ms", type=float, default=4.0)
    parser.add_argument("--show", type=int, default=8)
    parser.add_argument(
        "--gc-gen0", type=int, default=50_000, help="gen-0 threshold (the server's: 50,000)"
    )
    parser.add_argument("--profile", help="cProfile the shard events whose name has this")
    args = parser.parse_args()
    setup_logging("info", 10_000)
    sys.setswitchinterval(0.0001)
    gc.set_threshold(args.gc_gen0, 50, 100)
    instrument(_TRACE)
    asyncio.run(main_async(args))


_TRACE: Trace = []
_PROFILER = cProfile.Profile()

if __name__ == "__main__":
    main()
