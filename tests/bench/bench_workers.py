"""Closed-loop durable offset commits: `serve` (one process) against `serve --workers 2`,
in the same run, with the server's CPU per commit and where it goes.

    python -m tests.bench.bench_workers [--duration 10] [--conns 80] [--inflight 8]
        [--rounds 2] [--baseline /work/main] [--ours-set NAME=VALUE ...] [--spin]

Each connection is a closed loop of OffsetCommit v9 (bench_groups.py's CommitDriver: one
group per connection, `--inflight` keys each, one request in flight per key), sent to the
node that coordinates its group (with two workers: the owner of the group's shard, as a
client's FindCoordinator would say). The load generator runs in this process, on the same
machine, so the rate with two workers is bounded by what it and the machine's other load
leave; the figure that does not depend on it is the server's CPU per commit (utime + stime
of the server's whole process group: the supervisor and its workers, every thread; the
load generator's own CPU is `client_cpu_us`, apart), and the rate per core of server CPU
it projects (commits / server CPU seconds).

Where the CPU goes, per commit over the same window: `parent_us` (the supervisor of
`--workers 2`; with one process there is none), `loop_us` (the workers' main threads: the
event loop) and `threads_us` (their other threads: the group-commit flusher and fsync
pool, in the kernel mostly); `commits_per_round` and `sync_ms_per_round` (commits over
the workers' group-commit rounds, and the time a round's sync took, from their /metrics),
`io_calls` (read/write-family system calls, /proc/PID/io), `wakeups` (voluntary context
switches: a thread that slept, e.g. the loop in epoll or the flusher on its queue or on
the GIL) and `preempted_per_1k` (involuntary ones: the kernel took a core from a server
thread). `probe_us`: the CPU time of a fixed piece of Python work in a process of its own,
sampled through the window (how fast the machine ran Python meanwhile). `--spin` adds
runs of one process with a spinning process on the other core ("1+spin": both cores busy,
as with two workers, with full rounds). The runs alternate (one, two, one, two, ...; with
`--baseline CHECKOUT` that checkout's server takes its turn after ours in each round, and
`--ours-set` gives our server settings the baseline's lacks) so that the machine's other
load falls on all alike; the table shows each run and the ratios of the medians.
Afterwards every key's committed offset is fetched back and must equal the last
acknowledged one.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import re
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

from groupcoord.coordinator.ownership import shard_owner_index
from groupcoord.coordinator.runtime.partitioning import shard_for
from tests.bench import groupload as gl
from tests.bench.bench_data_plane import _group_pids, client_cpu_seconds, create_topics
from tests.bench.peers import REPO_ROOT, run_groupcoord
from tests.support import free_ports

TOPIC = "bench-workers-commit"
MARKER = 0x0123456789ABCDEF
SHARDS = 50
CLK_TCK = os.sysconf("SC_CLK_TCK")
_ROUNDS = re.compile(rb"^groupcoord_log_sync_round_seconds_(count|sum)(?:\{[^}]*\})? (\S+)$", re.M)


def _read(path: str) -> str | None:
    try:
        with open(path) as f:
            return f.read()
    except OSError:  # the process or thread went away
        return None


def sample(pgid: int) -> dict[str, float]:
    """Counters of every process (and thread) in the server's process group so far."""
    out = dict.fromkeys(
        ("cpu_s", "parent_s", "loop_s", "threads_s", "io_calls", "wakeups", "preempted"), 0.0
    )
    pids = _group_pids(pgid)
    supervised = len(pids) > 1  # serve --workers N: the leader is the supervisor
    for pid in pids:
        io = _read(f"/proc/{pid}/io")
        if io is not None:
            fields = dict(line.split(": ") for line in io.splitlines())
            out["io_calls"] += int(fields["syscr"]) + int(fields["syscw"])
        try:
            tids = [int(t) for t in os.listdir(f"/proc/{pid}/task")]
        except OSError:
            continue
        for tid in tids:
            stat = _read(f"/proc/{pid}/task/{tid}/stat")
            status = _read(f"/proc/{pid}/task/{tid}/status")
            if stat is None or status is None:
                continue
            fields_ = stat.rsplit(")", 1)[1].split()
            cpu_s = (int(fields_[11]) + int(fields_[12])) / CLK_TCK
            out["cpu_s"] += cpu_s
            if supervised and pid == pgid:
                out["parent_s"] += cpu_s
            elif tid == pid:
                out["loop_s"] += cpu_s
            else:
                out["threads_s"] += cpu_s
            for line in status.splitlines():
                if line.startswith("voluntary_ctxt_switches:"):
                    out["wakeups"] += int(line.split()[1])
                elif line.startswith("nonvoluntary_ctxt_switches:"):
                    out["preempted"] += int(line.split()[1])
    return out


def group_commit_rounds(metrics_ports: list[int]) -> tuple[float, float]:
    """Group-commit rounds completed so far and the seconds their syncs took, summed over
    the workers' /metrics."""
    totals = {b"count": 0.0, b"sum": 0.0}
    for port in metrics_ports:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as r:
            for kind, value in _ROUNDS.findall(r.read()):
                totals[kind] += float(value)
    return totals[b"count"], totals[b"sum"]


# The probe: a fixed piece of Python work (dict, str and int operations, as a request's
# handling is made of) timed in CPU time every PROBE_PERIOD_S, in a process of its own:
# what it costs says how fast this machine runs Python at that moment (a shared or virtual
# machine's cores run slower while both are busy, or while another guest uses the host's
# core). It takes ~2% of a core.
PROBE_PERIOD_S = 0.1
PROBE = """
import sys, time
def work():
    d = {}
    for i in range(4000):
        k = "k" + str(i & 255)
        d[k] = d.get(k, 0) + i
    return len(d)
while True:
    t0 = time.thread_time_ns(); work(); t1 = time.thread_time_ns()
    print(time.time(), (t1 - t0) / 1000, flush=True)
    time.sleep(PERIOD_S)
""".replace("PERIOD_S", str(PROBE_PERIOD_S))
# --spin: a process that keeps the other core busy (pure Python, never sleeps), so that
# one process can be measured with both cores busy, as two workers keep them.
SPIN = "while True: pass"


def probe_us(lines: list[str], t0: float, t1: float) -> float:
    """The median CPU microseconds of one probe run inside the window [t0, t1] (wall)."""
    inside = [float(us) for t, us in (line.split() for line in lines) if t0 <= float(t) <= t1]
    return statistics.median(inside) if inside else 0.0


def wait_listening(port: int, timeout_s: float = 120) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            return
        except OSError:
            time.sleep(0.1)
    raise RuntimeError(f"nothing listens on {port}")


async def closed_loop(
    ports: list[int],
    pid: int,
    args: argparse.Namespace,
    metrics_ports: list[int] | None = None,
    window: list[float] | None = None,
) -> dict[str, float]:
    """The closed loop against the nodes on `ports` (worker i on ports[i]); the server's
    process group `pid`. `metrics_ports`: the workers' /metrics, for the group-commit round
    figures (0 without); `window`: given the measured window's wall-clock start and end."""
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
        before, client0 = sample(pid), client_cpu_seconds()
        (rounds0, synced0) = group_commit_rounds(metrics_ports or [])
        wall0 = time.time()
        await asyncio.sleep(args.duration)
        wall1 = time.time()
        after, client1 = sample(pid), client_cpu_seconds()
        (rounds1, synced1) = group_commit_rounds(metrics_ports or [])
        if window is not None:
            window += [wall0, wall1]
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
        commits = max(stats.done, 1)
        delta = {k: after[k] - before[k] for k in after}
        per_us = 1e6 / commits
        quantiles = statistics.quantiles(stats.latencies, n=100) if stats.done > 100 else [0.0] * 99
        return {
            "commits_per_s": stats.done / args.duration,
            "p50_ms": quantiles[49] * 1000,
            "p99_ms": quantiles[98] * 1000,
            "server_cpu_us": delta["cpu_s"] * per_us,
            "parent_us": delta["parent_s"] * per_us,
            "loop_us": delta["loop_s"] * per_us,
            "threads_us": delta["threads_s"] * per_us,
            "commits_per_server_cpu_s": stats.done / delta["cpu_s"] if delta["cpu_s"] else 0.0,
            "commits_per_round": stats.done / max(rounds1 - rounds0, 1),
            "sync_ms_per_round": (synced1 - synced0) / max(rounds1 - rounds0, 1) * 1000,
            "io_calls": delta["io_calls"] / commits,
            "wakeups": delta["wakeups"] / commits,
            "preempted_per_1k": delta["preempted"] / commits * 1000,
            "client_cpu_us": (client1 - client0) * per_us,
            "errors": float(sum(stats.errors.values())),
            "mismatches": float(mismatches),
        }
    finally:
        for c in conns:
            c.close()


def run_one(
    workers: int,
    args: argparse.Namespace,
    root: Path,
    checkout: Path,
    spin: bool = False,
    settings: list[str] | None = None,
) -> dict[str, float]:
    """One server of `workers` worker(s) from `checkout` under the closed loop; `spin`: with
    a spinning process on the other core meanwhile."""
    probe = subprocess.Popen(
        [sys.executable, "-c", PROBE], stdout=subprocess.PIPE, text=True, start_new_session=True
    )
    spinner = subprocess.Popen([sys.executable, "-c", SPIN]) if spin else None
    try:
        window: list[float] = []
        result = _run_server(workers, args, root, checkout, settings or [], window)
    finally:
        for proc in (probe, spinner):
            if proc is not None:
                proc.kill()
        lines, _ = probe.communicate()
        if spinner is not None:
            spinner.wait()
    result["probe_us"] = probe_us(lines.splitlines(), *window)
    return result


def _run_server(
    workers: int,
    args: argparse.Namespace,
    root: Path,
    checkout: Path,
    settings: list[str],
    window: list[float],
) -> dict[str, float]:
    base = free_ports(workers)
    metrics = free_ports(workers)
    extra = ["--workers", str(workers), "--metrics-listen", f"127.0.0.1:{metrics}"]
    for setting in settings:
        extra += ["--set", setting]
    data = root / f"w{workers}-{time.monotonic_ns()}"
    with run_groupcoord(base, data, extra, repo_root=checkout) as peer:
        for i in range(workers):
            wait_listening(base + i)
            wait_listening(metrics + i)
        create_topics(str(peer), [(TOPIC, args.inflight)])
        time.sleep(1)  # the topic reaches the other worker
        return asyncio.run(
            closed_loop(
                [base + i for i in range(workers)],
                peer.pid,
                args,
                [metrics + i for i in range(workers)],
                window,
            )
        )


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--duration", type=float, default=10.0)
    ap.add_argument("--warmup", type=float, default=2.0)
    # 80 x 8 in flight: each of two workers' group-commit rounds hold ~105 commits, one
    # process's ~130. At 40 x 8 two workers' rounds hold half of one process's, and the
    # rounds' fixed cost shows (session 19, quiet: x1.42 the rate, x1.05 the CPU per commit).
    ap.add_argument("--conns", type=int, default=80)
    ap.add_argument("--inflight", type=int, default=8)
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--baseline", help="another checkout whose server runs beside ours")
    ap.add_argument(
        "--ours-set",
        action="append",
        default=[],
        metavar="NAME=VALUE",
        help="a setting of our server only (not the baseline's), e.g. syncfs_min_logs=8",
    )
    ap.add_argument(
        "--spin",
        action="store_true",
        help="also one process with a spinning process on the other core (workers '1+spin')",
    )
    args = ap.parse_args(argv)
    checkouts = {"ours": REPO_ROOT}
    if args.baseline:
        checkouts["baseline"] = Path(args.baseline).resolve()
    configs = ["1", "2", "1+spin"] if args.spin else ["1", "2"]
    results: dict[tuple[str, str], list[dict[str, float]]] = {
        (label, c): [] for label in checkouts for c in configs
    }
    with tempfile.TemporaryDirectory(prefix="bench-workers-") as tmp:
        for _ in range(args.rounds):
            for label, checkout in checkouts.items():
                for c in configs:
                    workers, spin = int(c[0]), c.endswith("spin")
                    settings = args.ours_set if label == "ours" else []
                    results[label, c].append(
                        run_one(workers, args, Path(tmp), checkout, spin, settings)
                    )
    names = list(next(iter(results.values()))[0])
    shown = [n for n in names if n not in ("errors", "mismatches")]
    print(f"{'checkout':>8} {'workers':>7} {'run':>3} " + " ".join(f"{n:>13.13}" for n in shown))
    for (label, workers), runs in results.items():
        for k, r in enumerate(runs):
            print(
                f"{label:>8} {workers:>7} {k + 1:>3} " + " ".join(f"{r[n]:>13,.2f}" for n in shown)
            )
    med = {
        key: {n: statistics.median(r[n] for r in runs) for n in names}
        for key, runs in results.items()
    }
    print("\nmedians:")
    for label in checkouts:
        one, two = med[label, "1"], med[label, "2"]
        print(
            f"{label}: 2 workers / 1 process: commits/s "
            f"x{two['commits_per_s'] / one['commits_per_s']:.2f}, server CPU per commit "
            f"x{two['server_cpu_us'] / one['server_cpu_us']:.2f} "
            f"({one['server_cpu_us']:.1f} -> {two['server_cpu_us']:.1f} us), the probe's CPU "
            f"x{two['probe_us'] / max(one['probe_us'], 1e-9):.2f}; projected commits/s per "
            f"core of server CPU: 1 process {one['commits_per_server_cpu_s']:,.0f}, 2 workers "
            f"{two['commits_per_server_cpu_s']:,.0f}"
        )
        if args.spin:
            spun = med[label, "1+spin"]
            print(
                f"{label}: 1 process with the other core spinning / alone: server CPU per "
                f"commit x{spun['server_cpu_us'] / one['server_cpu_us']:.2f} "
                f"({spun['server_cpu_us']:.1f} us), the probe's CPU "
                f"x{spun['probe_us'] / max(one['probe_us'], 1e-9):.2f}"
            )
    if args.baseline:
        for c in configs:
            ours, base = med["ours", c], med["baseline", c]
            print(
                f"ours / baseline, workers {c}: server CPU per commit "
                f"x{ours['server_cpu_us'] / base['server_cpu_us']:.2f}, commits/s "
                f"x{ours['commits_per_s'] / base['commits_per_s']:.2f}, p50 "
                f"x{ours['p50_ms'] / max(base['p50_ms'], 1e-9):.2f}, p99 "
                f"x{ours['p99_ms'] / max(base['p99_ms'], 1e-9):.2f}"
            )
    bad = sum(r["mismatches"] + r["errors"] for runs in results.values() for r in runs)
    if bad:
        print(f"errors or acknowledged commits not fetched back: {bad:.0f}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
