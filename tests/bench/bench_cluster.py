"""serve --cluster on PostgreSQL: durable commits of one cluster node against a local-mode
server in the same run, and the takeover load rate from snapshot + tail.

    python -m tests.bench.bench_cluster [--duration 10] [--conns 40] [--inflight 8]
                                        [--rounds 2] [--records 1000000]
                                        [--baseline /work/main]

Commits: bench_workers.py's closed loop (OffsetCommit v9, one group per connection) against
`serve` (local segment store, fsync per round) and against `serve --cluster` alone on a
throwaway PostgreSQL (initdb, fsync on) holding every shard (each round one fenced
transaction); the runs alternate. The server's CPU per commit excludes PostgreSQL's (a
separate process group), which is reported beside it.

`--baseline CHECKOUT`: the same runs of `serve --cluster` with another checkout's code
(e.g. main's; mode `base`) alternate with ours, and the takeover runs against its code too
(a child process importing `groupcoord` from there): before/after ratios from one run.

Takeover: a shard runner fills a shard with `--records` offset commit records (in rounds
of 10,000, as the runner batches them), writes its snapshot and a tail of 100 more rounds;
a second runner then restores it from the database (snapshot + tail rows -> local log)
and replays it: records per second of the whole takeover, and of each half, and per CPU
second of this process (every thread; the database's CPU is not in it), the figure a
loaded machine distorts least.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import asyncpg

from groupcoord.coordinator.cluster.leases import LeaseManager, NodeInfo, open_pool
from groupcoord.coordinator.cluster.replicated_commit import PgThread, ReplicatedCommitter
from groupcoord.coordinator.cluster.schema import group_shard_resource
from groupcoord.coordinator.cluster.shard_store import create_tables
from groupcoord.coordinator.groups import offset_messages as om
from groupcoord.coordinator.groups.config import GroupConfig
from groupcoord.coordinator.runtime.runner import ShardRunner, ShardState
from groupcoord.storage import LogConfig
from tests.bench.bench_data_plane import create_topics
from tests.bench.bench_workers import SHARDS, TOPIC, closed_loop, wait_listening
from tests.bench.peers import REPO_ROOT, run_groupcoord
from tests.postgres_server import postgres_server
from tests.support import free_ports
from tests.unit.waits import Replies

# The fill phase below runs on the loop that renews the lease: long enough that a busy
# loop never loses it (a lost lease would fail the fill, not measure the takeover).
LEASE_MS = 30_000


def takeover_with(checkout: str | None, dsn: str, records: int, root: Path) -> dict[str, float]:
    """`takeover` with `checkout`'s code (a child process importing groupcoord from there;
    None: ours, in this process)."""
    if checkout is None:
        return asyncio.run(takeover(dsn, records, root))
    shim = root / "baseline-path"
    shim.mkdir(parents=True, exist_ok=True)
    link = shim / "groupcoord"
    if not link.exists():
        link.symlink_to(Path(checkout, "groupcoord").resolve())
    call = f"takeover({dsn!r}, {records}, pathlib.Path({str(root)!r}))"
    code = (
        f"import sys; sys.path.insert(0, {str(shim)!r}); import asyncio, json, pathlib;"
        " from tests.bench.bench_cluster import takeover;"
        f" print(json.dumps(asyncio.run({call})))"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], cwd=REPO_ROOT, check=True, capture_output=True, text=True
    ).stdout
    result: dict[str, float] = json.loads(out.strip().splitlines()[-1])
    return result


def postgres_cpu_seconds() -> float:
    """utime + stime of the machine's PostgreSQL processes (the bench's own only, here)."""
    total = 0.0
    ticks = os.sysconf("SC_CLK_TCK")
    for pid in os.listdir("/proc"):
        if not pid.isdigit():
            continue
        try:
            cmdline = Path(f"/proc/{pid}/cmdline").read_bytes()
            if b"postgres" not in cmdline:
                continue
            fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        total += (int(fields[11]) + int(fields[12])) / ticks
    return total


def database_of(dsn: str, name: str) -> str:
    """`dsn` with database `name`, created if needed: the baseline's code and ours keep
    their rows apart (their stored forms may differ, e.g. the snapshot's)."""

    async def create() -> None:
        conn = await asyncpg.connect(dsn)
        try:
            if not await conn.fetchval("SELECT 1 FROM pg_database WHERE datname = $1", name):
                await conn.execute(f'CREATE DATABASE "{name}"')
        finally:
            await conn.close()

    asyncio.run(create())
    return dsn.rsplit("/", 1)[0] + "/" + name


async def wait_for_leases(dsn: str, count: int, timeout_s: float = 120) -> None:
    """Until node 1 holds `count` live shard leases."""
    conn = await asyncpg.connect(dsn)
    try:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            held = await conn.fetchval(
                "SELECT count(*) FROM leases WHERE owner_node = 1 AND expires_at > now()"
            )
            if held >= count:
                return
            await asyncio.sleep(0.2)
        raise RuntimeError(f"node 1 holds {held} of {count} leases after {timeout_s} s")
    finally:
        await conn.close()


def run_commits(mode: str, args: argparse.Namespace, root: Path, dsn: str) -> dict[str, float]:
    port = free_ports(1)
    extra = ["--set", f"offsets_partitions={SHARDS}"]
    if mode != "local":
        extra += ["--cluster", database_of(dsn, f"bench_{mode}"), "--node-id", "1"]
    data = root / f"{mode}-{time.monotonic_ns()}"
    repo = Path(args.baseline) if mode == "base" else REPO_ROOT
    with run_groupcoord(port, data, extra, repo_root=repo) as peer:
        wait_listening(port)
        create_topics(str(peer), [(TOPIC, args.inflight)], exist_ok=True)
        if mode != "local":  # the node takes its leases, then loads their shards
            asyncio.run(wait_for_leases(database_of(dsn, f"bench_{mode}"), SHARDS))
        time.sleep(2)
        pg0 = postgres_cpu_seconds()
        result = asyncio.run(closed_loop([port], peer.pid, args))
        result["postgres_cpu_s"] = postgres_cpu_seconds() - pg0 if mode != "local" else 0.0
        return result


def commit(runner: ShardRunner, group: str, partitions: int, offset: int, replies: Any) -> None:
    request = om.OffsetCommitRequest(
        group_id=group,
        version=9,
        topics=[
            om.OffsetCommitTopic(
                "t", [om.OffsetCommitPartition(p, offset) for p in range(partitions)]
            )
        ],
    )
    runner.run(lambda now_ms: runner.shard.offsets.commit_offsets(request, replies.append, now_ms))


async def takeover(dsn: str, records: int, root: Path) -> dict[str, float]:
    pool = await open_pool(dsn)
    async with pool.acquire() as conn:
        await create_tables(conn)
    lease = group_shard_resource(0)
    nodes = []
    for node_id in (1, 2):
        pg = PgThread(dsn, pool_size=2)
        committer = ReplicatedCommitter(pg, node_id)
        runner = ShardRunner(0, root / f"shard-{node_id}", GroupConfig(), LogConfig(), committer)
        runner.state = ShardState.NOT_OWNED
        leases = LeaseManager(
            pool, NodeInfo(node_id, "h", node_id), lambda: [lease], LEASE_MS, 1000
        )
        nodes.append((pg, committer, runner, leases))
    (pg_a, committer_a, runner_a, leases_a), (pg_b, committer_b, runner_b, leases_b) = nodes
    try:
        await leases_a.start()
        epoch = leases_a.held[lease]
        runner_a.restore = lambda: committer_a.restore(
            "shard-0", lease, epoch, runner_a.directory, runner_a.log_config
        )
        await runner_a.load()
        partitions = 100
        per_group = 100  # records per group: groups * partitions records
        groups = max(records // (partitions * per_group), 1)
        offset = 0
        for _ in range(per_group):
            replies = Replies()
            for g in range(groups):
                commit(runner_a, f"g{g}", partitions, offset, replies)
            await replies.wait(groups)
            offset += 1
        assert runner_a.log is not None
        await committer_a.snapshot(runner_a.directory, runner_a.log)
        for _ in range(100):  # the tail: 100 rounds after the snapshot
            replies = Replies()
            commit(runner_a, "tail", partitions, offset, replies)
            await replies.wait(1)
            offset += 1
        written = groups * partitions * per_group + 100 * partitions
        await leases_a.stop(release=True)
        await runner_a.disown()
        await leases_b.start()
        epoch_b = leases_b.held[lease]
        timings: dict[str, float] = {}

        async def restore_b() -> None:
            started = time.perf_counter()
            cpu_started = time.process_time()
            await committer_b.restore(
                "shard-0", lease, epoch_b, runner_b.directory, runner_b.log_config
            )
            timings["restore_s"] = time.perf_counter() - started
            timings["restore_cpu_s"] = time.process_time() - cpu_started

        runner_b.restore = restore_b
        started = time.perf_counter()
        cpu0 = time.process_time()
        await runner_b.load()
        total_s = time.perf_counter() - started
        cpu_s = time.process_time() - cpu0
        loaded = runner_b.loaded_records
        return {
            "records_written": float(written),
            "records_loaded": float(loaded),
            "takeover_s": total_s,
            "restore_s": timings["restore_s"],
            "replay_s": total_s - timings["restore_s"],
            "records_per_s": loaded / total_s,
            # This process's CPU (every thread): what the loaded machine's wall time hides.
            "cpu_s": cpu_s,
            "restore_cpu_s": timings["restore_cpu_s"],
            "records_per_cpu_s": loaded / cpu_s,
        }
    finally:
        await leases_b.stop()
        for pg, committer, runner, _ in nodes:
            await runner.close()
            await committer.close()
            pg.close()
        await pool.close()


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--duration", type=float, default=10.0)
    ap.add_argument("--warmup", type=float, default=2.0)
    ap.add_argument("--conns", type=int, default=40)
    ap.add_argument("--inflight", type=int, default=8)
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--records", type=int, default=1_000_000)
    ap.add_argument("--baseline", help="another checkout (e.g. /work/main) run side by side")
    args = ap.parse_args(argv)
    modes = ["local", "cluster"] + (["base"] if args.baseline else [])
    results: dict[str, list[dict[str, float]]] = {mode: [] for mode in modes}
    loads: dict[str, dict[str, float]] = {}
    with tempfile.TemporaryDirectory(prefix="bench-cluster-") as tmp:
        root = Path(tmp)
        with postgres_server(root / "pg") as pg:
            for _ in range(args.rounds):
                for mode in modes:
                    results[mode].append(run_commits(mode, args, root, pg.dsn))
            if args.baseline:
                loads["base"] = takeover_with(
                    args.baseline,
                    database_of(pg.dsn, "takeover_base"),
                    args.records,
                    root / "takeover-base",
                )
            loads["cluster"] = takeover_with(
                None, database_of(pg.dsn, "takeover_cluster"), args.records, root / "takeover"
            )
    names = list(results["local"][0])
    print(f"{'mode':>8} {'run':>3} " + " ".join(f"{n:>26}" for n in names))
    for mode, runs in results.items():
        for k, r in enumerate(runs):
            print(f"{mode:>8} {k + 1:>3} " + " ".join(f"{r[n]:>26,.2f}" for n in names))
    med = {
        m: {n: statistics.median(r[n] for r in runs) for n in names} for m, runs in results.items()
    }
    rate = med["cluster"]["commits_per_s"] / med["local"]["commits_per_s"]
    print(f"\nmedians: cluster node / local mode: durable commits/s x{rate:.2f} (target 0.5)")
    if args.baseline:
        base = med["base"]["commits_per_s"] / med["local"]["commits_per_s"]
        print(
            f"         baseline cluster node / local mode: x{base:.2f};"
            f" ours / baseline x{rate / base:.2f}"
        )
    for name, load in loads.items():
        print(
            f"takeover ({name}): "
            + ", ".join(f"{k} {v:,.2f}" for k, v in load.items())
            + " (target 1,000,000 records/s)"
        )
    if args.baseline:
        ours, base_load = loads["cluster"], loads["base"]
        print(
            f"takeover records/s: ours / baseline x"
            f"{ours['records_per_s'] / base_load['records_per_s']:.2f}"
            f" (restore x{base_load['restore_s'] / ours['restore_s']:.2f} faster);"
            f" records per CPU second x"
            f"{ours['records_per_cpu_s'] / base_load['records_per_cpu_s']:.2f}"
        )
    bad = sum(r["mismatches"] + r["errors"] for runs in results.values() for r in runs)
    if bad or any(x["records_loaded"] < x["records_written"] for x in loads.values()):
        print(
            f"errors, commits not fetched back, or records not loaded: {bad:.0f}", file=sys.stderr
        )
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
