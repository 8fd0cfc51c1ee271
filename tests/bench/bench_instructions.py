"""Instructions per request of the server, counted by callgrind: a figure that does not move
with the machine's load, so two trees can be compared on a busy 2-core machine (wall-clock
benchmarks swing 10-20 % between minutes here; an instruction count repeats to well under
1 %).

The server runs under `valgrind --tool=callgrind` (every thread counted: the event loop and
the flusher); the client runs outside it. For each phase the counters are zeroed
(`callgrind_control -z`), the phase's requests are sent closed loop and answered, and the
counters dumped (`callgrind_control -d`): instructions per request = the dump's total / the
requests of the phase. Phases:

- commit: durable OffsetCommit v9 of one partition (the fast-path shape), 10 connections x
  4 in flight;
- heartbeat: classic Heartbeat v4 of 50 joined members (answered at once, nothing written);
- cgh: steady ConsumerGroupHeartbeat v1 of 50 KIP-848 members (the steady fast path);
- produce: Produce v9 acks=-1 of one 10-record batch (a durable append).

    python tests/bench/bench_instructions.py [--root TREE ...] [--requests 3000]

`--root` runs a checkout's server (e.g. a worktree of an older commit) with this script's
client; given several times, each tree is measured in turn and compared with the first, so
a refactor can be measured before and after. The timers the server runs
on its own (metrics, compaction passes) fall into the windows too: a few thousand
instructions per window, noise well below 0.1 % per request at 3,000 requests.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import re
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

import bench_kip848 as k8  # noqa: E402
import groupload as gl  # noqa: E402
from bench_data_plane import create_topics  # noqa: E402
from peers import free_port  # noqa: E402

from groupcoord.protocol.api import build  # noqa: E402
from tests.support import client_batch  # noqa: E402

REPO_ROOT = Path(__file__).resolve().parents[2]
TOPIC = "bench-instructions"
PRODUCE = 0


def server_module(root: Path) -> str:
    """The server's module in `root`: trees before the groupcoord namespace ran it as
    `coordinator`."""
    return "groupcoord.coordinator" if (root / "groupcoord").is_dir() else "coordinator"


def start_server(root: Path, work: Path) -> tuple[subprocess.Popen[bytes], str, str, Path]:
    port, metrics_port = free_port(), free_port()
    out = work / "callgrind.out"
    cmd = [
        "valgrind",
        "--tool=callgrind",
        f"--callgrind-out-file={out}",
        "--dump-instr=no",
        sys.executable,
        "-m",
        server_module(root),
        "serve",
        "--listen",
        f"127.0.0.1:{port}",
        "--data-dir",
        str(work / "data"),
        "--metrics-listen",
        f"127.0.0.1:{metrics_port}",
    ]
    env = {**os.environ, "PYTHONPATH": str(root)}
    log = open(work / "server.log", "ab")
    proc = subprocess.Popen(cmd, cwd=root, env=env, stdout=log, stderr=log)
    health = f"http://127.0.0.1:{metrics_port}/health"
    deadline = time.monotonic() + 600
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"server exited: see {work / 'server.log'}")
        try:
            if urllib.request.urlopen(health, timeout=2).status == 200:
                return proc, f"127.0.0.1:{port}", health, out
        except OSError:
            pass
        time.sleep(0.5)
    raise TimeoutError("server under valgrind did not start in 600 s")


def callgrind_control(flag: str, pid: int) -> None:
    subprocess.run(["callgrind_control", flag, str(pid)], check=True, capture_output=True)


def dumped_total(out: Path, before: set[Path]) -> int:
    """The `summary:` (the profile's total events) of the dump files written since
    `before`."""
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        new = [p for p in out.parent.glob(out.name + "*") if p not in before]
        totals = []
        for path in new:
            text = path.read_text(errors="replace")
            m = re.search(r"^summary:\s+(\d+)", text, re.M)
            if m:
                totals.append(int(m.group(1)))
        if new and len(totals) == len(new):
            return sum(totals)
        time.sleep(0.2)
    raise TimeoutError("no callgrind dump")


async def closed_loop(conns: list[gl.Conn], inflight: int, total: int, make: Any) -> None:
    """`total` requests, `inflight` per connection at a time; `make(i)` -> (key, version,
    body); every answer must carry error 0 (checked by the caller's `make` contract)."""
    sent = 0

    async def lane(conn: gl.Conn) -> None:
        nonlocal sent
        while sent < total:
            i = sent
            sent += 1
            api_key, version, body, check = make(i)
            check(await conn.call(api_key, version, body))

    await asyncio.gather(*(lane(c) for c in conns for _ in range(inflight)))


def no_error(response: Any) -> None:
    codes = [getattr(response, "error_code", 0)]
    for t in getattr(response, "topics", ()) or ():
        codes += [p.error_code for p in getattr(t, "partitions", ())]
    for t in getattr(response, "responses", ()) or ():
        codes += [p.error_code for p in getattr(t, "partition_responses", ())]
    assert all(int(c) == 0 for c in codes), response


def produce_body(i: int) -> Any:
    m = gl._mod(PRODUCE, 9)
    batch = client_batch([(b"k%d" % j, b"v" * 100, 1_700_000_000_000) for j in range(10)])
    return build(
        m.ProduceRequest,
        transactional_id=None,
        acks=-1,
        timeout=gl.ms(30_000),
        topic_data=(
            build(
                m.TopicProduceData,
                name=TOPIC,
                partition_data=(build(m.PartitionProduceData, index=i % 4, records=batch),),
            ),
        ),
    )


async def run_phases(bootstrap: str, pid: int, out: Path, requests: int) -> dict[str, float]:
    results: dict[str, float] = {}
    conns = [await gl.Conn.open(bootstrap) for _ in range(10)]

    async def measure(name: str, count: int, inflight: int, make: Any, lanes: Any) -> None:
        await closed_loop(lanes, inflight, min(200, count), make)  # warm up
        before = set(out.parent.glob(out.name + "*"))
        callgrind_control("-z", pid)
        await closed_loop(lanes, inflight, count, make)
        callgrind_control("-d", pid)
        results[name] = dumped_total(out, before) / count

    # commit: a simple group's durable commits, one partition each.
    commit = [
        gl.commit_body("bench-instr-commits", TOPIC, j % 4, 1 + j) for j in range(requests + 200)
    ]
    await measure("commit", requests, 4, lambda i: (8, 9, commit[i], no_error), conns)

    # heartbeat: 50 classic members of one group, joined together (inside the initial
    # rebalance delay: one generation) and synced.
    joined = await asyncio.gather(
        *(gl.join_and_sync(conns[n % len(conns)], "bench-instr-classic") for n in range(50))
    )
    assert len({m["generation"] for m in joined}) == 1, joined
    beats = [
        gl.heartbeat_body("bench-instr-classic", m["generation"], m["member_id"]) for m in joined
    ]
    await measure("heartbeat", requests, 1, lambda i: (12, 4, beats[i % 50], no_error), conns)

    # cgh: 50 KIP-848 members driven to steady, then steady heartbeats.
    cmembers = [k8.CMember("bench-instr-consumer") for _ in range(50)]
    errs: dict[int, int] = {}
    for _round in range(30):
        steady = await k8.heartbeat_all(conns, cmembers, 5000, errs)
        if steady == len(cmembers):
            break
    else:
        raise RuntimeError(f"KIP-848 members not steady: {errs}")
    steady_bodies = [k8.cgh_body(m.group, m.member_id, m.epoch) for m in cmembers]
    await measure("cgh", requests, 1, lambda i: (68, 1, steady_bodies[i % 50], no_error), conns)

    await measure("produce", requests, 1, lambda i: (PRODUCE, 9, produce_body(i), no_error), conns)
    for c in conns:
        c.close()
    return results


def measure_tree(root: Path, requests: int) -> dict[str, float]:
    with tempfile.TemporaryDirectory(prefix="bench-instr-") as tmp:
        work = Path(tmp)
        proc, bootstrap, _, out = start_server(root, work)
        try:
            create_topics(bootstrap, [(TOPIC, 4), (k8.HB_TOPIC, 50)], timeout=300)
            return asyncio.run(run_phases(bootstrap, proc.pid, out, requests))
        finally:
            proc.terminate()
            try:
                proc.wait(120)
            except subprocess.TimeoutExpired:
                proc.kill()


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument(
        "--root",
        type=Path,
        action="append",
        help="checkout whose server runs (repeatable: each is measured in turn, and the "
        "others compared with the first); default this one",
    )
    ap.add_argument("--requests", type=int, default=3000, help="requests per phase")
    args = ap.parse_args()
    roots = [r.resolve() for r in args.root or [REPO_ROOT]]
    figures = [measure_tree(root, args.requests) for root in roots]
    print(f"server instructions per request (callgrind), {args.requests} requests per phase")
    ratios = [f"ratio {i + 1}/1" for i in range(1, len(roots))]
    header = ["phase"] + [str(r) for r in roots] + ratios
    print("\t".join(header))
    for phase in figures[0]:
        row = [phase] + [f"{f[phase]:,.0f}" for f in figures]
        row += [f"{f[phase] / figures[0][phase]:.4f}" for f in figures[1:]]
        print("\t".join(row))
    return 0


if __name__ == "__main__":
    sys.exit(main())
