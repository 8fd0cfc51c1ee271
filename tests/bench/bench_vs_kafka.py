"""Our server against Apache Kafka 4.x, side by side in one run, one markdown table.

    python -m tests.bench.bench_vs_kafka [--quick] [--peers ours,kafka,kafka-fsync[,tansu]]
        [--sections commits,heartbeats,formation,static,kip848,data,rss] [--json PATH]
        [--members 10000] [--commit-rate 10000,20000,35000] [--messages 1000000]
        [--groups-arg ARG ...] [--kip848-arg ARG ...] [--ours-arg ARG ...] [--kafka-set K=V ...]

Peers (each measured alone, one after the other, so they never share the CPUs while measured):

- ours: `python -m groupcoord.coordinator serve`, settings at their defaults (every acknowledged
  write fsynced first), but group_initial_rebalance_delay_ms as below.
- kafka: Apache Kafka 4.4 (tests/jvm/kafka_broker.py: single-node KRaft, broker and controller
  in one JVM, replication factors 1), as configured by default: no fsync per write (the log is
  flushed by the OS; log.flush.interval.messages and .ms unset), JVM options of
  bin/kafka-server-start.sh (1 GiB heap, G1).
- kafka-fsync: the same with log.flush.interval.messages=1, i.e. flush.messages=1 on every topic
  and on __consumer_offsets: an fsync per append before it is acknowledged, our durability.
- tansu (only if listed): Tansu 0.6.0, memory-only (peers.py).

The group initial rebalance delay is the same on every peer in each process (like with like):
100 ms where 10,000 members form (Kafka's group.initial.rebalance.delay.ms, ours'
group_initial_rebalance_delay_ms), 3000 ms (both defaults) for formation timing and the static
restart (--formation-delay-ms). Tansu has no such setting: it holds a new group's first join for
half the session timeout.

Sections, and the existing load generator each one uses:

- commits, formation, static (bench_groups process B, a fresh process): after --process-warmup
  (20 s) of unmeasured commits (a fresh JVM is interpreted until its JIT compiles the path),
  durable OffsetCommit v9, 100 connections x --commit-inflight (4) in flight, closed loop; then
  paced at each --commit-rate (staggered open loop; rate served and p50/p99; the sweep stops at
  the first rate served below 90 %); formation of 20 and 100 members
  (JoinGroup + SyncGroup, first join to last sync); static rolling restart of 20 members.
- heartbeats (bench_groups process A, a fresh process): --members (10,000) classic members
  formed in groups of 50, then Heartbeat v4, 32 connections x 64 in flight, closed loop.
- rss, kip848, data (process C, a fresh process with every setting at its default): RSS 2 s
  after start (for Kafka: the JVM's resident set); bench_kip848's 50 librdkafka consumers
  (group.protocol=consumer) to a stable assignment, then a 51st joining; bench_data_plane's
  produce (1 KiB values, acks=1, one producer) and fetch of --messages (1,000,000) messages.

Every load window follows --warmup (5 s) of the same load, unmeasured. Kafka serves one
request at a time per connection (it mutes a connection until its answer is sent), so requests
pipelined on one connection queue there; ours and Tansu read ahead.

Prints one markdown table: a row per figure, a column per peer, and the ratios ours/kafka,
ours/kafka-fsync (and ours/tansu); then each peer's configuration, and as the last line of stdout
the figures as JSON (also written to --json PATH).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import math
import os
import platform
import shutil
import sys
import tempfile
import time
import traceback
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

import bench_data_plane as dp  # noqa: E402
import bench_groups as bg  # noqa: E402
import bench_kip848 as k848  # noqa: E402
from peers import (  # noqa: E402
    KAFKA_DEFAULT_INITIAL_REBALANCE_DELAY_MS,
    KAFKA_PEERS,
    OURS_MANY_CONNECTIONS_ARGS,
    TANSU_VERSION,
    _fmt,
    ensure_tansu,
    free_port,
    run_groupcoord,
    run_kafka,
    run_tansu,
)

MiB = 1 << 20
WARMUP_TOPIC = "bench-produce-warmup"
PEERS = ("ours", "kafka", "kafka-fsync", "tansu")
DEFAULT_PEERS = "ours,kafka,kafka-fsync"
SECTIONS = ("commits", "heartbeats", "formation", "static", "kip848", "data", "rss")
PROCESS_C_SECTIONS = frozenset({"kip848", "data", "rss"})
LABELS = {
    "ours": "ours (fsync per ack)",
    "kafka": "kafka (default: no fsync)",
    "kafka-fsync": "kafka flush.messages=1",
    "tansu": "tansu (memory only)",
}
log = bg.log


# --- the peers -------------------------------------------------------------------------------


def make_runner(name: str, args: argparse.Namespace) -> Callable[..., Any]:
    """`runner(port, dir, delay_ms=None)`: a context manager starting peer `name` with that
    group initial rebalance delay (None: the peer's default), as bench_groups.run_server
    calls it."""

    def run(port: int, data_dir: Path, delay_ms: int | None = None) -> Any:
        if name == "ours":
            delay = (
                []
                if delay_ms is None
                else ["--set", f"group_initial_rebalance_delay_ms={delay_ms}"]
            )
            extra = [*delay, *OURS_MANY_CONNECTIONS_ARGS, *args.ours_arg]
            return run_groupcoord(port, data_dir, extra)
        if name == "tansu":
            return run_tansu(port, data_dir)
        overrides = dict(KAFKA_PEERS[name])
        if delay_ms is not None and delay_ms != KAFKA_DEFAULT_INITIAL_REBALANCE_DELAY_MS:
            overrides["group.initial.rebalance.delay.ms"] = str(delay_ms)
        overrides.update(args.kafka_overrides)
        return run_kafka(port, data_dir, overrides, name=name)

    return run


def peer_config(name: str, args: argparse.Namespace) -> str:
    """What each peer was configured with, for the legend under the table."""
    delays = (
        f"{args.form_delay_ms} ms (heartbeat process), "
        f"{args.formation_delay_ms} ms (commits/formation/static)"
    )
    if name == "ours":
        extra = f"; extra args {args.ours_arg}" if args.ours_arg else ""
        return (
            "groupcoord, defaults (every acknowledged write fsynced: group commit with syncfs); "
            f"group_initial_rebalance_delay_ms {delays}, default in process C; "
            f"connections_max_per_ip 10,000 (the load comes from one address){extra}"
        )
    if name == "tansu":
        return f"Tansu {TANSU_VERSION}, memory only (nothing written to disk); no delay setting"
    flush = (
        "log.flush.interval.messages=1 (flush.messages=1 on every topic: fsync per append)"
        if KAFKA_PEERS[name]
        else "defaults: no fsync per write (page cache, flushed by the OS)"
    )
    extra = f"; also {args.kafka_overrides}" if args.kafka_overrides else ""
    return (
        f"Apache Kafka 4.4 KRaft single node, {flush}; group.initial.rebalance.delay.ms "
        f"{delays}, default 3000 in process C; JVM: kafka-server-start.sh's (-Xmx1G -Xms1G, G1)"
        f"{extra}"
    )


def settle_disk() -> float:
    """Write back every dirty page now (the previous peer's data), so it does not land in the
    next peer's fsyncs (ours uses syncfs: the whole filesystem's dirty data)."""
    t0 = time.perf_counter()
    os.sync()
    return time.perf_counter() - t0


# --- process C: idle RSS, KIP-848 join, produce and fetch ------------------------------------


def process_c(name: str, runner: Callable[..., Any], work: Path, args: argparse.Namespace) -> dict:
    res: dict[str, Any] = {"errors": {}}

    def phase(key: str, fn: Callable[[], Any]) -> None:
        log(f"{name}: {key} ...")
        try:
            res[key] = fn()
            log(f"{name}: {key} done: {json.dumps(res[key], default=str)[:600]}")
        except Exception as e:  # report and go on with the other phases
            res["errors"][key] = f"{type(e).__name__}: {e}"
            log(f"{name}: {key} FAILED: {res['errors'][key]}")
            traceback.print_exc(file=sys.stderr)

    try:
        t0 = time.perf_counter()
        with runner(free_port(), work / f"{name}-c") as peer:
            res["start_s"] = time.perf_counter() - t0
            if "rss" in args.sections:
                time.sleep(args.settle)
                res["rss_idle_mib"] = dp.group_rss_bytes(peer.pid) / MiB
            if "kip848" in args.sections:
                phase("kip848", lambda: kip848_join(peer, args))
            if "data" in args.sections:
                phase("data", lambda: produce_fetch(peer, args))
    except Exception as e:
        res["errors"]["process_c"] = f"{type(e).__name__}: {e}"
        log(f"{name}: process C FAILED: {e}")
        traceback.print_exc(file=sys.stderr)
    return res


def kip848_join(peer: Any, args: argparse.Namespace) -> dict:
    keys = asyncio.run(k848.api_versions(peer))
    if k848.CONSUMER_GROUP_HEARTBEAT not in keys:
        return {"not_served": "ApiVersions does not list ConsumerGroupHeartbeat (68)"}
    kargs = args.kip848_args
    dp.create_topics(peer, [(k848.FORM_TOPIC, kargs.partitions)])
    return k848.run_protocol(peer, "consumer", kargs)


def produce_fetch(peer: Any, args: argparse.Namespace) -> dict:
    """bench_data_plane's produce and fetch, after the same on a tenth of the messages to
    another topic, unmeasured (a fresh JVM runs interpreted until its JIT compiles the
    paths)."""
    dp.create_topics(peer, [(dp.PRODUCE_TOPIC, 1), (WARMUP_TOPIC, 1)])
    value = os.urandom(dp.VALUE_BYTES)
    warm_n = max(args.messages // 10, 1000)
    dp.bench_produce(peer, warm_n, value, topic=WARMUP_TOPIC)
    dp.bench_fetch(peer, warm_n, timeout=600.0, topic=WARMUP_TOPIC)
    produce = dp.bench_produce(peer, args.messages, value)
    fetch = dp.bench_fetch(peer, args.messages, timeout=600.0)
    return {"produce": produce, "fetch": fetch, "rss_after_mib": dp.group_rss_bytes(peer.pid) / MiB}


# --- the table -------------------------------------------------------------------------------


def _paced_best(g: dict, args: argparse.Namespace) -> Any:
    if not any(bg.paced_key(r) in g for r in args.commit_rates):
        return None
    best = bg.paced_rate_within(g, args.commit_rates)
    return best if best is not None else "none"


def build_rows(args: argparse.Namespace) -> list[tuple[str, str, str, str | None, Callable]]:
    """(section, figure, unit, better, value of a peer's results) per table row."""

    def g(*path: str) -> Callable[[dict], Any]:
        return lambda res: bg._get(res.get("groups", {}), *path)

    def c(*path: str) -> Callable[[dict], Any]:
        return lambda res: bg._get(res.get("c", {}), *path)

    def paced(key: str, field: str) -> Callable[[dict], Any]:
        def get(res: dict) -> Any:
            groups = res.get("groups", {})
            if key not in groups and groups.get("paced_skipped_after_overload"):
                return "skipped"  # a lower rate was already overloaded
            return bg._get(groups, key, field)

        return get

    ga = args.groups_args
    rows: list[tuple[str, str, str, str | None, Callable]] = [
        (
            "commits",
            f"durable commits, closed loop, {ga.commit_conns} conns x {ga.commit_inflight}",
            "commit/s",
            "higher",
            g("commits", "commits_per_s"),
        ),
        ("commits", "  p50", "ms", "lower", g("commits", "p50_ms")),
        ("commits", "  p99", "ms", "lower", g("commits", "p99_ms")),
        ("commits", "  errors / OffsetFetch mismatches", "", None, _errors("commits")),
        ("commits", "  server CPU", "cores", None, g("commits", "server_cores")),
        (
            "commits",
            f"  before it: {args.process_warmup:g} s unmeasured warm-up, closed loop",
            "commit/s",
            None,
            g("commits_warmup", "commits_per_s"),
        ),
    ]
    for rate in args.commit_rates:
        key = bg.paced_key(rate)
        rows += [
            (
                "commits",
                f"commits paced at {rate:,.0f}/s: served",
                "commit/s",
                "higher",
                paced(key, "commits_per_s"),
            ),
            (
                "commits",
                "  answered in the window (a backlog's too)",
                "commit/s",
                None,
                paced(key, "answered_per_s"),
            ),
            ("commits", "  p50", "ms", "lower", paced(key, "p50_ms")),
            ("commits", "  p99", "ms", "lower", paced(key, "p99_ms")),
        ]
    if args.commit_rates:
        rows.append(
            (
                "commits",
                "highest paced rate served with p99 < 10 ms",
                "commit/s",
                "higher",
                lambda res: _paced_best(res.get("groups", {}), args),
            )
        )
    rows += [
        (
            "heartbeats",
            f"form {ga.members:,} classic members, groups of {ga.group_size}",
            "s",
            "lower",
            g("form", "form_seconds"),
        ),
        (
            "heartbeats",
            f"heartbeats, {ga.members:,} members, closed loop {ga.hb_conns} x {ga.hb_inflight}",
            "hb/s",
            "higher",
            g("heartbeat", "heartbeats_per_s"),
        ),
        ("heartbeats", "  p50", "ms", "lower", g("heartbeat", "p50_ms")),
        ("heartbeats", "  p99", "ms", "lower", g("heartbeat", "p99_ms")),
        ("heartbeats", "  errors (non-zero error code)", "", None, g("heartbeat", "errors")),
        ("heartbeats", "  server CPU", "cores", None, g("heartbeat", "server_cores")),
        (
            "heartbeats",
            "  server CPU per heartbeat",
            "us",
            "lower",
            g("heartbeat", "server_cpu_us_per_hb"),
        ),
    ]
    for size in ga.formation_sizes:
        rows.append(
            (
                "formation",
                f"{size} members form a group (initial delay {ga.formation_delay_ms} ms)",
                "s",
                "lower",
                g(f"formation_{size}", "seconds"),
            )
        )
    rows += [
        (
            "static",
            f"static rolling restart of {ga.static_members} members: total",
            "s",
            "lower",
            g("static_restart", "total_s"),
        ),
        (
            "static",
            "  per member p50 (JoinGroup -> SyncGroup)",
            "s",
            "lower",
            g("static_restart", "per_member_p50_s"),
        ),
        ("static", "  per member max", "s", "lower", g("static_restart", "per_member_max_s")),
        ("static", "  generation changed / others' rejoins", "", None, _static_changes),
    ]
    ka = args.kip848_args
    rows += [
        (
            "kip848",
            f"KIP-848: {ka.consumers} consumers -> stable",
            "s",
            "lower",
            _kip848("formation", "stable_s"),
        ),
        (
            "kip848",
            f"KIP-848: consumer {ka.consumers + 1} joins the stable group -> stable",
            "s",
            "lower",
            _kip848("join", "stable_s"),
        ),
        (
            "kip848",
            "  existing members whose assignment changed",
            "",
            "lower",
            _kip848("join", "existing_changed"),
        ),
        (
            "kip848",
            "  existing members that gave up partitions",
            "",
            None,
            _kip848("join", "existing_gave_up"),
        ),
        (
            "data",
            f"produce {args.messages:,} x 1 KiB, acks=1, one producer",
            "MiB/s",
            "higher",
            c("data", "produce", "mib_per_s"),
        ),
        ("data", "  server CPU", "s", "lower", c("data", "produce", "server_cpu_s")),
        ("data", "fetch them, one consumer", "MiB/s", "higher", c("data", "fetch", "mib_per_s")),
        ("data", "  server CPU", "s", "lower", c("data", "fetch", "server_cpu_s")),
        ("rss", "idle RSS, 2 s after start", "MiB", "lower", c("rss_idle_mib")),
        ("rss", "start-up, until it serves (process C)", "s", "lower", c("start_s")),
    ]
    return [r for r in rows if r[0] in args.sections]


def _errors(key: str) -> Callable[[dict], Any]:
    def get(res: dict) -> Any:
        run = bg._get(res.get("groups", {}), key)
        return None if run is None else f"{run['errors']} / {run['verify_mismatches']}"

    return get


def _static_changes(res: dict) -> Any:
    sr = bg._get(res.get("groups", {}), "static_restart")
    return None if sr is None else f"{sr['generation_changed']} / {sr['others_rejoins']}"


def _kip848(*path: str) -> Callable[[dict], Any]:
    def get(res: dict) -> Any:
        k = bg._get(res.get("c", {}), "kip848")
        if k is None:
            return None
        if "not_served" in k:
            return "n/a"
        part = k.get(path[0]) or {}
        if path[1] == "stable_s" and part and not part.get("stable"):
            return "not stable"
        return bg._get(k, *path)

    return get


def _ratio(ours: Any, other: Any) -> str:
    ok = isinstance(ours, int | float) and isinstance(other, int | float)
    if not ok or isinstance(ours, bool) or isinstance(other, bool) or not other:
        return "-"
    if math.isnan(ours) or math.isnan(other):  # a paced run with no commit served
        return "-"
    return f"{ours / other:.2f}x"


def markdown_table(
    rows: list[tuple], results: dict[str, dict], peers: list[str]
) -> tuple[str, dict]:
    """The table (figure, unit, better, a column per peer, ours/<peer> per other peer) and
    the ratios by figure."""
    others = [p for p in peers if p != "ours"]
    header = ["figure", "unit", "better", *(LABELS[p] for p in peers)]
    if "ours" in peers:
        header += [f"ours/{p}" for p in others]
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    ratios: dict[str, dict[str, float]] = {}
    for _section, figure, unit, better, get in rows:
        values = {p: get(results.get(p, {})) for p in peers}
        cells = [figure.strip() if not figure.startswith("  ") else "- " + figure.strip()]
        cells += [unit, better or ""]
        cells += [_fmt(values[p]) for p in peers]
        if "ours" in peers:
            for p in others:
                r = _ratio(values["ours"], values[p])
                cells.append(r)
                if r != "-":
                    ratios.setdefault(figure.strip(), {})[f"ours/{p}"] = values["ours"] / values[p]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines), ratios


# --- driver ----------------------------------------------------------------------------------


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--quick", action="store_true", help="a smoke run: small loads, 2 s windows")
    ap.add_argument("--peers", default=DEFAULT_PEERS, help=f"comma list of {', '.join(PEERS)}")
    ap.add_argument(
        "--sections", default=",".join(SECTIONS), help=f"comma list of {', '.join(SECTIONS)}"
    )
    ap.add_argument("--members", type=int, help="heartbeat members (10,000; --quick 1,000)")
    ap.add_argument("--duration", type=float, help="load window seconds (10; --quick 2)")
    ap.add_argument(
        "--warmup", type=float, help="unmeasured load before each window (5; --quick 1)"
    )
    ap.add_argument(
        "--process-warmup",
        type=float,
        help="unmeasured closed-loop commits first in the commits process (20; --quick 3)",
    )
    ap.add_argument("--commit-inflight", type=int, default=4, help="per connection (100 conns)")
    ap.add_argument(
        "--commit-rate", help="paced commit rates, comma list (10000,20000,35000; --quick 10000)"
    )
    ap.add_argument("--formation-sizes", default="20,100")
    ap.add_argument(
        "--formation-delay-ms",
        type=int,
        default=KAFKA_DEFAULT_INITIAL_REBALANCE_DELAY_MS,
        help="group initial rebalance delay of every peer for formation and static (3000)",
    )
    ap.add_argument("--form-delay-ms", type=int, default=100, help="the same, forming many members")
    ap.add_argument("--static-members", type=int, default=20)
    ap.add_argument("--consumers", type=int, default=50, help="KIP-848 consumers before the join")
    ap.add_argument(
        "--settle-s", type=float, help="KIP-848: how long stable must last (6; --quick 3)"
    )
    ap.add_argument("--messages", type=int, help="produce/fetch 1 KiB messages (1M; --quick 100k)")
    ap.add_argument(
        "--groups-arg", action="append", default=[], help="extra bench_groups option (repeatable)"
    )
    ap.add_argument(
        "--kip848-arg", action="append", default=[], help="extra bench_kip848 option (repeatable)"
    )
    ap.add_argument("--ours-arg", action="append", default=[], help="extra `serve` argument")
    ap.add_argument(
        "--kafka-set", action="append", default=[], metavar="NAME=VALUE", help="Kafka broker config"
    )
    ap.add_argument("--json", type=Path, help="also write the JSON figures here")
    ap.add_argument("--work-dir", type=Path, help="parent of the temporary data dirs")
    ap.add_argument("--keep", action="store_true", help="keep the data dirs and logs")
    ap.add_argument(
        "--table-from", type=Path, help="print the table of an earlier run's --json, run nothing"
    )
    args = ap.parse_args(argv)

    args.peers = [p.strip() for p in args.peers.split(",") if p.strip()]
    for p in args.peers:
        if p not in PEERS:
            ap.error(f"unknown peer {p!r}, not one of {PEERS}")
    args.sections = {s.strip() for s in args.sections.split(",") if s.strip()}
    for s in args.sections - set(SECTIONS):
        ap.error(f"unknown section {s!r}, not one of {SECTIONS}")
    args.members = args.members or (1000 if args.quick else 10_000)
    args.duration = args.duration or (2.0 if args.quick else 10.0)
    args.warmup = args.warmup or (1.0 if args.quick else 5.0)
    if args.process_warmup is None:
        args.process_warmup = 3.0 if args.quick else 20.0
    args.commit_rate = args.commit_rate or ("10000" if args.quick else "10000,20000,35000")
    args.messages = args.messages or (100_000 if args.quick else 1_000_000)
    args.settle_s = args.settle_s or (3.0 if args.quick else 6.0)
    args.settle = 1.0 if args.quick else 2.0
    args.kafka_overrides = dict(item.split("=", 1) for item in args.kafka_set)

    quick = ["--quick"] if args.quick else []
    args.groups_args = bg.parse_args(
        [
            *quick,
            f"--members={args.members}",
            f"--duration={args.duration}",
            f"--warmup={args.warmup}",
            f"--process-warmup={args.process_warmup}",
            "--paced-stop-overloaded",
            "--open-batch=50",
            f"--commit-inflight={args.commit_inflight}",
            f"--commit-rate={args.commit_rate}",
            "--hb-rate=0",
            f"--formation-sizes={args.formation_sizes}",
            f"--formation-delay-ms={args.formation_delay_ms}",
            f"--form-delay-ms={args.form_delay_ms}",
            f"--static-members={args.static_members}",
            f"--sections={','.join(sorted(args.sections & set(bg.SECTIONS))) or 'commits'}",
            *args.groups_arg,
        ]
    )
    args.groups_args.sections &= args.sections
    args.commit_rates = args.groups_args.commit_rates
    args.kip848_args = k848.parse_args(
        [*quick, f"--consumers={args.consumers}", f"--settle-s={args.settle_s}", *args.kip848_arg]
    )
    return args


def run_peer(name: str, work: Path, args: argparse.Namespace) -> dict:
    runner = make_runner(name, args)
    out: dict[str, Any] = {"config": peer_config(name, args)}
    t0 = time.perf_counter()
    out["sync_before_s"] = settle_disk()
    if args.groups_args.sections:
        out["groups"] = bg.run_server(name, runner, work, args.groups_args)
        settle_disk()
    if args.sections & PROCESS_C_SECTIONS:
        out["c"] = process_c(name, runner, work, args)
    out["wall_s"] = time.perf_counter() - t0
    if not args.keep:  # its files' page cache and dirty pages go with them
        for d in work.glob(f"{name}-*"):
            if d.is_dir():
                shutil.rmtree(d, ignore_errors=True)
    return out


def peer_errors(res: dict) -> dict[str, str]:
    errors = {f"groups.{k}": v for k, v in (bg._get(res, "groups", "errors") or {}).items()}
    errors.update({f"c.{k}": v for k, v in (bg._get(res, "c", "errors") or {}).items()})
    return errors


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    if args.table_from:
        doc = json.loads(args.table_from.read_text())
        args = parse_args(doc["config"].get("argv", []))
        print_report(args, doc["peers"], doc["wall_seconds"])
        return 0
    if "tansu" in args.peers:
        ensure_tansu()
    t_start = time.perf_counter()
    work = Path(tempfile.mkdtemp(prefix="bench-vs-kafka-", dir=args.work_dir))
    results: dict[str, dict] = {}
    try:
        for name in args.peers:
            log(f"=== {name}: {peer_config(name, args)}")
            results[name] = run_peer(name, work, args)
            log(f"=== {name}: done in {results[name]['wall_s']:.0f} s")
    finally:
        if args.keep:
            log(f"data dirs and logs kept in {work}")
        else:
            shutil.rmtree(work, ignore_errors=True)
    wall = time.perf_counter() - t_start
    ratios = print_report(args, results, wall)
    doc = {
        "benchmark": "bench_vs_kafka",
        "time": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        "config": {
            "argv": sys.argv[1:] if argv is None else argv,
            "peers": args.peers,
            "sections": sorted(args.sections),
            "members": args.members,
            "duration_s": args.duration,
            "commit_rates": args.commit_rates,
            "messages": args.messages,
            "quick": args.quick,
        },
        "host": {
            "cpus": os.cpu_count(),
            "python": platform.python_version(),
            "platform": platform.platform(),
        },
        "peers": results,
        "ratios": ratios,
        "wall_seconds": wall,
    }
    if args.json:
        args.json.write_text(json.dumps(doc, default=str, indent=2) + "\n")
    print(json.dumps(doc, default=str, allow_nan=True))
    return 0 if all(not peer_errors(r) for r in results.values()) else 1


def print_report(args: argparse.Namespace, results: dict[str, dict], wall: float) -> dict:
    """Print the table and the legend; return the ratios by figure."""
    table, ratios = markdown_table(build_rows(args), results, args.peers)
    ga = args.groups_args
    print()
    print(
        f"bench_vs_kafka: {os.cpu_count()} CPUs, {args.duration:g} s load windows, peers one at "
        f"a time; wall time {wall:.0f} s"
    )
    print()
    print(table)
    print()
    for name in args.peers:
        print(f"- {LABELS[name]}: {results[name]['config']}")
    print(
        f"- sessions: heartbeat members {ga.session_ms} ms, formation {ga.formation_session_ms} "
        f"ms, static {ga.static_session_ms} ms; KIP-848: {args.consumers} librdkafka consumers, "
        f"{args.kip848_args.partitions} partitions, stable = unchanged for {args.settle_s:g} s"
    )
    for name in args.peers:
        for key, err in peer_errors(results[name]).items():
            print(f"- {name} {key}: {err}")
        sr = bg._get(results[name], "groups", "static_restart")
        for ex in (sr or {}).get("restart_failure_examples", []):
            print(f"- {name} static restart: {ex}")
    return ratios


if __name__ == "__main__":
    sys.exit(main())
