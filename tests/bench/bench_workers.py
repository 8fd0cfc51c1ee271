"""Closed-loop durable offset commits: `serve` (one process) against `serve --workers 2`,
in the same run, with the server's CPU per commit.

    python -m tests.bench.bench_workers [--duration 10] [--conns 40] [--inflight 8] [--rounds 2]

Each connection is a closed loop of OffsetCommit v9 (bench_groups.py's CommitDriver: one
group per connection, `--inflight` keys each, one request in flight per key), sent to the
node that coordinates its group (with two workers: the owner of the group's shard, as a
client's FindCoordinator would say). The load generator runs in this process, on the same
machine: on 2 cores it takes a core of its own, so the rate with two workers is bounded by
what is left; the figure that does not depend on it is the server's CPU seconds per
commit (utime + stime of the server's process group: the parent and its workers), and the
rate per core of server CPU it projects. `preempted_per_1k_commits` counts the times the
kernel took a core from a server process (involuntary context switches, per 1000
commits): with two workers and the load generator on 2 cores it rises, and with it the
CPU per commit (cold caches after each switch), while the Python work per commit stays
the same (a cProfile of each worker over the same window, normalised per OffsetCommit
request: the same calls per request, rounds of group commit 0.015 per request instead of
0.009). The runs alternate (one, two, one, two, ...) so
that the machine's other load falls on both alike; the table shows each run and the ratio
of the medians. Afterwards every key's committed offset is fetched back and must equal the
last acknowledged one.
"""

from __future__ import annotations

import argparse
import asyncio
import socket
import statistics
import sys
import tempfile
import time
from pathlib import Path

from groupcoord.coordinator.ownership import shard_owner_index
from groupcoord.coordinator.runtime.partitioning import shard_for
from tests.bench import groupload as gl
from tests.bench.bench_data_plane import (
    _group_pids,
    client_cpu_seconds,
    create_topics,
    group_cpu_seconds,
)
from tests.bench.peers import run_groupcoord
from tests.support import free_ports

TOPIC = "bench-workers-commit"
MARKER = 0x0123456789ABCDEF
SHARDS = 50


def group_preemptions(pgid: int) -> int:
    """Involuntary context switches of every process in the group so far."""
    total = 0
    for pid in _group_pids(pgid):
        try:
            with open(f"/proc/{pid}/status") as f:
                for line in f:
                    if line.startswith("nonvoluntary_ctxt_switches:"):
                        total += int(line.split()[1])
        except OSError:
            continue
    return total


def wait_listening(port: int, timeout_s: float = 120) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            return
        except OSError:
            time.sleep(0.1)
    raise RuntimeError(f"nothing listens on {port}")


async def closed_loop(ports: list[int], pid: int, args: argparse.Namespace) -> dict[str, float]:
    workers = len(ports)
    groups = [f"bench-workers-{i:03d}" for i in range(args.conns)]
    conns = [
        await gl.Conn.open(f"127.0.0.1:{ports[shard_owner_index(workers, shard_for(g, SHARDS))]}")
        for g in groups
    ]
    try:
        stats = gl.LoadStats()
        drivers = [
            gl.CommitDriver(c, g, TOPIC, args.inflight, stats, MARKER)
            for c, g in zip(conns, groups, strict=True)
        ]
        stats.t_start = time.perf_counter() + args.warmup
        stats.t_end = stats.t_start + args.duration
        for d in drivers:
            d.start()
        await asyncio.sleep(args.warmup)
        server0, client0 = group_cpu_seconds(pid), client_cpu_seconds()
        switches0 = group_preemptions(pid)
        await asyncio.sleep(args.duration)
        server1, client1 = group_cpu_seconds(pid), client_cpu_seconds()
        switches1 = group_preemptions(pid)
        stats.running = False
        drain = time.perf_counter()
        while any(d.outstanding for d in drivers) and time.perf_counter() - drain < 30:
            await asyncio.sleep(0.01)
        for c in conns:
            c.on_raw = None
        mismatches = 0
        for d in drivers:
            resp = await d.conn.call(
                gl.OFFSET_FETCH,
                8,
                gl.offset_fetch_body(d.group, {TOPIC: list(range(len(d.acked)))}),
            )
            got = {
                p.partition_index: p.committed_offset
                for t in resp.groups[0].topics
                for p in t.partitions
            }
            mismatches += sum(1 for j, want in enumerate(d.acked) if got.get(j) != want)
        commits = stats.done
        server_cpu = server1 - server0
        return {
            "commits_per_s": commits / args.duration,
            "p99_ms": statistics.quantiles(stats.latencies, n=100)[98] * 1000
            if commits > 100
            else 0.0,
            "server_cpu_s": server_cpu,
            "server_cpu_us_per_commit": server_cpu / max(commits, 1) * 1e6,
            "client_cpu_s": client1 - client0,
            "commits_per_server_cpu_s": commits / server_cpu if server_cpu else 0.0,
            "preempted_per_1k_commits": (switches1 - switches0) / max(commits, 1) * 1000,
            "errors": float(sum(stats.errors.values())),
            "mismatches": float(mismatches),
        }
    finally:
        for c in conns:
            c.close()


def run_one(workers: int, args: argparse.Namespace, root: Path) -> dict[str, float]:
    base = free_ports(workers)
    metrics = free_ports(workers)
    extra = ["--workers", str(workers), "--metrics-listen", f"127.0.0.1:{metrics}"]
    data = root / f"w{workers}-{time.monotonic_ns()}"
    with run_groupcoord(base, data, extra) as peer:
        for i in range(workers):
            wait_listening(base + i)
        create_topics(str(peer), [(TOPIC, args.inflight)])
        time.sleep(1)  # the topic reaches the other worker
        return asyncio.run(closed_loop([base + i for i in range(workers)], peer.pid, args))


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--duration", type=float, default=10.0)
    ap.add_argument("--warmup", type=float, default=2.0)
    ap.add_argument("--conns", type=int, default=40)
    ap.add_argument("--inflight", type=int, default=8)
    ap.add_argument("--rounds", type=int, default=2)
    args = ap.parse_args(argv)
    results: dict[int, list[dict[str, float]]] = {1: [], 2: []}
    with tempfile.TemporaryDirectory(prefix="bench-workers-") as tmp:
        for _ in range(args.rounds):
            for workers in (1, 2):
                results[workers].append(run_one(workers, args, Path(tmp)))
    names = list(results[1][0])
    print(f"{'workers':>7} {'run':>3} " + " ".join(f"{n:>26}" for n in names))
    for workers, runs in results.items():
        for k, r in enumerate(runs):
            print(f"{workers:>7} {k + 1:>3} " + " ".join(f"{r[n]:>26,.2f}" for n in names))
    med = {
        w: {n: statistics.median(r[n] for r in runs) for n in runs[0]}
        for w, runs in results.items()
    }
    rate = med[2]["commits_per_s"] / med[1]["commits_per_s"]
    cpu = med[2]["server_cpu_us_per_commit"] / med[1]["server_cpu_us_per_commit"]
    print(
        f"\nmedians: 2 workers / 1 process: commits/s x{rate:.2f}, server CPU per commit x{cpu:.2f}"
        "\nprojected commits/s per core of server CPU: "
        f"1 process {med[1]['commits_per_server_cpu_s']:,.0f}, "
        f"2 workers {med[2]['commits_per_server_cpu_s']:,.0f}"
    )
    bad = sum(r["mismatches"] + r["errors"] for runs in results.values() for r in runs)
    if bad:
        print(f"errors or acknowledged commits not fetched back: {bad:.0f}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
