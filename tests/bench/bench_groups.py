"""Group-coordinator benchmark: our server vs Tansu, one after the other in one run.

    python tests/bench/bench_groups.py [--quick] [--json PATH] [--servers tansu,ours]
                                       [--members 10000] [--ours-arg ARG ...]
                                       [--commits-only --commit-rate R[,R...]]
                                       [--sections heartbeats,commits,formation,static]

Everything is driven by a raw-protocol asyncio client (tests/bench/groupload.py):
requests encoded with tests/rawclient.encode_request, pre-encoded where the rate
matters, responses matched by correlation id and, on the hot paths, decoded by
hand. Each server is measured alone (the two never compete for the CPUs), in two
fresh processes:

Process A (ours: --set group_initial_rebalance_delay_ms=100, to form groups fast)

1. Forming N members (--members, default 1,000; 10,000 for the target run) in
   groups of 50: every member does JoinGroup v9 (with the MEMBER_ID_REQUIRED round
   trip) and SyncGroup v5 (the leader sends a one-partition-per-member assignment),
   session timeout 60 s (--session-ms). A member's JoinGroup is held until the
   group's rebalance completes, and Tansu handles one request at a time per
   connection, so each joining member has its own connection: up to
   --form-conns (default 5,000) connections, that many / 50 groups forming at
   once. Members already formed are kept alive with a heartbeat every
   session/4 while the others form. Forming wall time and failures are reported.
2. RSS per classic member: RSS with the forming connections open and handshaken
   (ApiVersions) but no member yet, then RSS after all members formed with the
   same connections still open: (after - before) / members.
3. Heartbeat throughput and latency: --hb-conns (default 32) connections carry
   all members' Heartbeat v4 requests (pre-encoded; only the error code of each
   response is decoded), closed loop, --hb-inflight (default 64) outstanding per
   connection, for D seconds after a 1 s warm-up: heartbeats/s,
   p50/p99/p99.9 latency (ms; at saturation the latency is mostly queueing of
   hb-conns x hb-inflight outstanding requests), responses with a non-zero error
   code, server CPU and the generator's own CPU (if the generator is near one
   full core it, not the server, is the limit).
4. Idle RSS: the server's RSS 2 s after the heartbeat load stopped (members still
   in their groups).

Process B (ours: --set group_initial_rebalance_delay_ms=3000, the default, set
explicitly)

5. Durable offset commits: 100 connections (--commit-conns), each a closed loop
   of OffsetCommit v9 simple-consumer commits (generation -1, no member id), one
   partition per request, 8 in flight per connection (--commit-inflight), each in
   flight on its own key (group bench-commit-<conn>, partition <slot> of a
   topic created up front), for D seconds (default 10, --quick 3) after a warm-up:
   commits/s, latency percentiles, errors. Afterwards OffsetFetch v8 of every key
   must return the last acknowledged offset (mismatches reported; with requests
   still unanswered after the drain, an offset not below it). Tansu keeps
   offsets in memory only; ours fsyncs before it answers. Then the same paced:
   open loop at --commit-rate (default 50,000/s; a comma list runs each rate in
   turn, and the highest one served with p99 < 10 ms is printed) over the same
   connections and keys, so p50/p99 are the server's latency at that rate, not a
   queue the closed loop keeps full (the issue's target: 50,000/s with p99 below
   10 ms). The connections' sends are staggered evenly over each one's period
   (since 2026-11-24; before, every connection sent in the same millisecond tick,
   so the server saw bursts of 100 requests and p50 was the time to drain one).
6. Group formation time for 20 and 100 dynamic members (one connection each,
   JoinGroup v9 + member-id round trip + SyncGroup): from the first JoinGroup sent
   to the last SyncGroup answer. Session timeout --formation-session-ms
   (default 45 s, the Java/librdkafka default; --quick 10 s), rebalance timeout
   300 s (max.poll.interval.ms default). Tansu holds a new group's first join
   for half the session timeout; ours waits group.initial.rebalance.delay.ms
   (3 s) after the last join.
7. Static rolling restart: 20 static members (group.instance.id) form a group
   (session --static-session-ms, default 10 s), each then heartbeating every 1 s
   on its own connection and rejoining (JoinGroup with its member id, then
   SyncGroup) whenever a heartbeat answers REBALANCE_IN_PROGRESS /
   ILLEGAL_GENERATION / UNKNOWN_MEMBER_ID, like a real client. Then each member in
   turn is "restarted": its connection is closed without LeaveGroup, a new one
   is opened and it rejoins with JoinGroup(member_id="", same instance id) and
   SyncGroup. Per-member time from that JoinGroup to the SyncGroup answer, the
   total, whether the generation changed (it must not on ours) and the heartbeat
   errors the other members saw; a heartbeat with a replaced member id must be
   fenced (FENCED_INSTANCE_ID). Capped at --static-cap-s (default 240 s,
   --quick 20 s): members not restarted by then are reported.

Prints one table (ours, tansu, ratio = ours / tansu) and, as the last line of
stdout, the figures as JSON (also written to --json PATH if given).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import sys
import tempfile
import time
import traceback
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import groupload as gl  # noqa: E402
from bench_data_plane import (  # noqa: E402
    client_cpu_seconds,
    create_topics,
    group_cpu_seconds,
    group_rss_bytes,
    percentile,
)
from peers import (  # noqa: E402
    OURS_MANY_CONNECTIONS_ARGS,
    TANSU_VERSION,
    ensure_tansu,
    free_port,
    print_table,
    run_groupcoord,
    run_tansu,
)

MiB = 1 << 20
COMMIT_TOPIC = "bench-commit"
OFFSET_MARKER = 0x0123456789ABCDEF


def log(msg: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


def pct_ms(values, q: float) -> float:
    return percentile(values, q) * 1000


def latency_summary(lat) -> dict:
    s = sorted(lat)
    return {
        "p50_ms": pct_ms(s, 0.50),
        "p99_ms": pct_ms(s, 0.99),
        "p999_ms": pct_ms(s, 0.999),
        "max_ms": s[-1] * 1000 if s else float("nan"),
        "samples": len(s),
    }


# --- 1. durable offset commits ---------------------------------------------------------------


async def bench_commits(peer, args, rate: float | None = None) -> dict:
    """Closed loop (`commit_inflight` per connection, each answer sends the next), or
    with `rate`, open loop: commits sent at that total rate, the connections' sends
    staggered (groupload.paced_count) and checked every millisecond, so latency is the
    server's, not a queue the generator keeps full."""
    conns = await gl.open_many(peer, args.commit_conns)
    try:
        stats = gl.LoadStats()
        drivers = [
            gl.CommitDriver(
                c,
                f"bench-commit-{i:03d}",
                COMMIT_TOPIC,
                args.commit_inflight,
                stats,
                OFFSET_MARKER,
                args.commit_partitions,
            )
            for i, c in enumerate(conns)
        ]
        srv0 = group_cpu_seconds(peer.pid)
        t0 = time.perf_counter()
        stats.t_start = t0 + args.warmup
        stats.t_end = stats.t_start + args.duration
        if rate is None:
            for d in drivers:
                d.start()
            await asyncio.sleep(args.warmup)
            srv1, cli1 = group_cpu_seconds(peer.pid), client_cpu_seconds()
            await asyncio.sleep(args.duration)
        else:
            stats.running = False  # answers do not send more: the ticker does
            share = rate / len(drivers)
            due = [0] * len(drivers)
            srv1 = cli1 = None
            while (now := time.perf_counter()) < stats.t_end:
                if srv1 is None and now >= stats.t_start:
                    srv1, cli1 = group_cpu_seconds(peer.pid), client_cpu_seconds()
                elapsed = now - t0
                for k, d in enumerate(drivers):
                    want = gl.paced_count(elapsed, share, k, len(drivers)) - due[k]
                    if want >= 1:
                        d.send(want, now)
                        due[k] += want
                await asyncio.sleep(0.001)
        srv2, cli2 = group_cpu_seconds(peer.pid), client_cpu_seconds()
        stats.running = False
        t_drain = time.perf_counter()
        while any(d.outstanding for d in drivers) and time.perf_counter() - t_drain < 30:
            await asyncio.sleep(0.01)
        drain_s = time.perf_counter() - t_drain
        outstanding = sum(d.outstanding for d in drivers)
        for c in conns:  # back to the request/response path for OffsetFetch
            c.on_raw = None

        # Verify: OffsetFetch returns the last acknowledged offset of every key. With
        # requests still unanswered after the drain (an overloaded paced run) a key may
        # hold a later offset, sent but not yet acknowledged: only an offset below the
        # last acknowledged one (an acknowledged commit lost) is a mismatch then.
        mismatches, examples, fetch_errors = 0, [], 0
        for d in drivers:
            resp = await d.conn.call(
                gl.OFFSET_FETCH,
                8,
                gl.offset_fetch_body(
                    d.group, {COMMIT_TOPIC: list(range(len(d.acked) * d.partitions))}
                ),
            )
            g = resp.groups[0]
            if g.error_code != 0:
                fetch_errors += 1
                continue
            got = {p.partition_index: p.committed_offset for t in g.topics for p in t.partitions}
            for p in range(len(d.acked) * d.partitions):
                want = d.acked[p // d.partitions]
                fetched = got.get(p)
                if fetched != want and (not outstanding or fetched is None or fetched < want):
                    mismatches += 1
                    if len(examples) < 5:
                        examples.append(f"{d.group} p{p}: acked {want}, fetched {got.get(p)}")
        return {
            "target_per_s": rate,
            "connections": args.commit_conns,
            "inflight_per_conn": None if rate else args.commit_inflight,
            "keys": args.commit_conns * args.commit_inflight,
            "duration_s": args.duration,
            "partitions_per_commit": args.commit_partitions,
            "commits": stats.done,
            "commits_per_s": stats.done / args.duration,
            # Overloaded (paced above capacity), answers to requests sent before the window
            # still count here: what the server gets through, whatever the queue.
            "answered_per_s": stats.answered / args.duration,
            "offsets_per_s": stats.done * args.commit_partitions / args.duration,
            **latency_summary(stats.latencies),
            "errors": sum(stats.errors.values()),
            "error_codes": stats.errors,
            "unmatched_responses": stats.unmatched,
            "unanswered_after_drain": outstanding,
            "drain_s": drain_s,
            "server_cpu_s": srv2 - srv1,
            "server_cores": (srv2 - srv1) / args.duration,
            "server_cpu_warmup_s": srv1 - srv0,
            "client_cpu_s": cli2 - cli1,
            "client_cores": (cli2 - cli1) / args.duration,
            "verify_keys": sum(len(d.acked) for d in drivers),
            "verify_mismatches": mismatches,
            "verify_fetch_errors": fetch_errors,
            "verify_examples": examples,
        }
    finally:
        for c in conns:
            c.close()


# --- 2-5. forming many members, RSS, heartbeats ------------------------------------------------


class Member:
    __slots__ = ("group", "member_id", "generation", "last_hb")

    def __init__(self, group: str, member_id: str, generation: int):
        self.group, self.member_id, self.generation = group, member_id, generation
        self.last_hb = time.monotonic()


async def keepalive(hb_conns, members: list[Member], period: float, stop: asyncio.Event, errs):
    """Heartbeat every formed member once per ``period`` until ``stop`` (during forming)."""
    k = 0
    while not stop.is_set():
        now = time.monotonic()
        due = [m for m in list(members) if now - m.last_hb >= period]
        for start in range(0, len(due), 2000):
            chunk = due[start : start + 2000]
            calls = []
            for m in chunk:
                c = hb_conns[k % len(hb_conns)]
                k += 1
                calls.append(
                    c.call(gl.HEARTBEAT, 4, gl.heartbeat_body(m.group, m.generation, m.member_id))
                )
            res = await asyncio.gather(*calls, return_exceptions=True)
            t = time.monotonic()
            for m, r in zip(chunk, res, strict=True):
                m.last_hb = t
                code = -1 if isinstance(r, BaseException) else int(r.error_code)
                if code:
                    errs[code] = errs.get(code, 0) + 1
        try:
            await asyncio.wait_for(stop.wait(), 1.0)
        except TimeoutError:
            pass


async def form_members(peer, args, hb_conns) -> tuple[list[Member], dict]:
    n, size = args.members, args.group_size
    groups = [(f"bench-hb-{g:05d}", min(size, n - g * size)) for g in range((n + size - 1) // size)]
    nconn = max(size, min(args.form_conns, n) // size * size)
    log(f"  opening {nconn} forming connections ...")
    conns = await gl.open_many(peer, nconn, batch=args.open_batch)
    res: dict = {"form_connections": nconn, "groups": len(groups), "group_size": size}
    try:
        # Handshake every forming connection, so the RSS baseline holds them fully set up.
        await asyncio.gather(*(c.call(gl.API_VERSIONS, 3, gl.api_versions_body()) for c in conns))
        await asyncio.sleep(args.settle)
        rss_before = group_rss_bytes(peer.pid)
        chunks: asyncio.Queue = asyncio.Queue()
        for i in range(0, nconn, size):
            chunks.put_nowait(conns[i : i + size])
        members: list[Member] = []
        failures: list[str] = []
        ka_errs: dict[int, int] = {}
        stop = asyncio.Event()
        ka = asyncio.create_task(
            keepalive(hb_conns, members, args.session_ms / 4000, stop, ka_errs)
        )
        timeout = args.session_ms / 2000 + 90

        async def form_group(name: str, k: int) -> None:
            chunk = await chunks.get()
            try:
                rs = await asyncio.gather(
                    *(
                        gl.join_and_sync(
                            c,
                            name,
                            session_timeout_ms=args.session_ms,
                            rebalance_timeout_ms=args.session_ms,
                            timeout=timeout,
                        )
                        for c in chunk[:k]
                    ),
                    return_exceptions=True,
                )
            finally:
                chunks.put_nowait(chunk)
            gens = {r["generation"] for r in rs if isinstance(r, dict)}
            for r in rs:
                if isinstance(r, BaseException):
                    failures.append(f"{name}: {type(r).__name__}: {r}")
                else:
                    members.append(Member(name, r["member_id"], r["generation"]))
            if len(gens) > 1:
                failures.append(f"{name}: members ended in different generations {sorted(gens)}")

        srv0 = group_cpu_seconds(peer.pid)
        t0 = time.perf_counter()
        tasks = [asyncio.create_task(form_group(g, k)) for g, k in groups]
        last_log = t0
        while not all(t.done() for t in tasks):
            await asyncio.sleep(0.2)
            if time.perf_counter() - last_log > 10:
                last_log = time.perf_counter()
                log(f"  formed {len(members)}/{n} members in {last_log - t0:.0f} s")
        form_s = time.perf_counter() - t0
        srv_form = group_cpu_seconds(peer.pid) - srv0
        stop.set()
        await ka
        await asyncio.sleep(args.settle)
        rss_after = group_rss_bytes(peer.pid)
        res.update(
            {
                "members_wanted": n,
                "members_formed": len(members),
                "form_seconds": form_s,
                "members_per_s": len(members) / form_s if form_s else None,
                "server_cpu_s": srv_form,
                "failures": len(failures),
                "failure_examples": failures[:5],
                "keepalive_errors": ka_errs,
                "rss_before_mib": rss_before / MiB,
                "rss_after_mib": rss_after / MiB,
                "rss_per_member_bytes": (rss_after - rss_before) / len(members)
                if members
                else None,
            }
        )
        return members, res
    finally:
        for c in conns:
            c.close()


def heartbeat_templates(hb_conns, members: list[Member]) -> list[list[gl.Template]]:
    """Each member's pre-encoded Heartbeat v4, dealt round-robin over the connections."""
    per_conn: list[list[gl.Template]] = [[] for _ in hb_conns]
    for i, m in enumerate(members):
        per_conn[i % len(hb_conns)].append(
            gl.Template(gl.HEARTBEAT, 4, gl.heartbeat_body(m.group, m.generation, m.member_id))
        )
    return per_conn


async def bench_heartbeats(peer, args, hb_conns, members: list[Member]) -> dict:
    per_conn = heartbeat_templates(hb_conns, members)
    stats = gl.LoadStats()
    drivers = [
        gl.HeartbeatDriver(c, tpls, args.hb_inflight, stats)
        for c, tpls in zip(hb_conns, per_conn, strict=True)
        if tpls
    ]
    t0 = time.perf_counter()
    stats.t_start = t0 + args.warmup
    stats.t_end = stats.t_start + args.duration
    for d in drivers:
        d.start()
    await asyncio.sleep(args.warmup)
    srv1, cli1 = group_cpu_seconds(peer.pid), client_cpu_seconds()
    await asyncio.sleep(args.duration)
    srv2, cli2 = group_cpu_seconds(peer.pid), client_cpu_seconds()
    stats.running = False
    t_drain = time.perf_counter()
    while any(d.sent for d in drivers) and time.perf_counter() - t_drain < 30:
        await asyncio.sleep(0.01)
    drain_s = time.perf_counter() - t_drain
    for c in hb_conns:
        c.on_raw = None
    return {
        "connections": len(drivers),
        "inflight_per_conn": args.hb_inflight,
        "members": len(members),
        "duration_s": args.duration,
        "heartbeats": stats.done,
        "heartbeats_per_s": stats.done / args.duration,
        **latency_summary(stats.latencies),
        "errors": sum(stats.errors.values()),
        "error_codes": stats.errors,
        "unmatched_responses": stats.unmatched,
        "unanswered_after_drain": sum(len(d.sent) for d in drivers),
        "drain_s": drain_s,
        "server_cpu_s": srv2 - srv1,
        "server_cores": (srv2 - srv1) / args.duration,
        "server_cpu_us_per_hb": (srv2 - srv1) / stats.done * 1e6 if stats.done else None,
        "client_cpu_s": cli2 - cli1,
        "client_cores": (cli2 - cli1) / args.duration,
    }


async def bench_heartbeats_paced(peer, args, hb_conns, members: list[Member], rate: float) -> dict:
    """Open loop: heartbeats sent at a fixed total rate (the connections' sends staggered,
    checked every millisecond), so latency is the server's, not a queue the generator
    keeps full."""
    per_conn = heartbeat_templates(hb_conns, members)
    stats = gl.LoadStats()
    stats.running = False  # responses do not trigger more sends: the ticker does
    drivers = [
        gl.HeartbeatDriver(c, t, 0, stats) for c, t in zip(hb_conns, per_conn, strict=True) if t
    ]
    share = rate / len(drivers)
    t0 = time.perf_counter()
    stats.t_start = t0 + args.warmup
    stats.t_end = stats.t_start + args.duration
    due = [0] * len(drivers)
    srv1 = None
    while True:
        now = time.perf_counter()
        if now >= stats.t_end:
            break
        if srv1 is None and now >= stats.t_start:
            srv1 = group_cpu_seconds(peer.pid)
        elapsed = now - t0
        for k, d in enumerate(drivers):
            n = gl.paced_count(elapsed, share, k, len(drivers)) - due[k]
            if n >= 1:
                d.send(n, now)
                due[k] += n
        await asyncio.sleep(0.001)
    srv2 = group_cpu_seconds(peer.pid)
    t_drain = time.perf_counter()
    while any(d.sent for d in drivers) and time.perf_counter() - t_drain < 30:
        await asyncio.sleep(0.01)
    for c in hb_conns:
        c.on_raw = None
    return {
        "target_per_s": rate,
        "heartbeats_per_s": stats.done / args.duration,
        **latency_summary(stats.latencies),
        "errors": sum(stats.errors.values()),
        "server_cores": (srv2 - (srv1 or srv2)) / args.duration,
    }


async def leave_all(hb_conns, members: list[Member]) -> dict:
    by_group: dict[str, list[str]] = {}
    for m in members:
        by_group.setdefault(m.group, []).append(m.member_id)
    calls = [
        hb_conns[i % len(hb_conns)].call(
            gl.LEAVE_GROUP, 5, gl.leave_body(g, [(mid, None) for mid in mids])
        )
        for i, (g, mids) in enumerate(by_group.items())
    ]
    res = await asyncio.gather(*calls, return_exceptions=True)
    errs = sum(1 for r in res if isinstance(r, BaseException) or r.error_code != 0)
    return {"groups": len(calls), "errors": errs}


async def process_a(peer, args, res: dict, phase) -> None:
    hb_conns = await gl.open_many(peer, args.hb_conns)
    try:
        formed = await phase("form", lambda: form_members(peer, args, hb_conns), pair=True)
        if formed is None:
            return
        members = formed
        if not members:
            res["errors"]["heartbeat"] = "no members formed"
            return
        await phase("heartbeat", lambda: bench_heartbeats(peer, args, hb_conns, members))
        if args.hb_rate:
            await phase(
                "heartbeat_paced",
                lambda: bench_heartbeats_paced(peer, args, hb_conns, members, args.hb_rate),
            )
        for c in hb_conns:  # back to request/response, also after a failed phase
            c.on_raw = None
        await asyncio.sleep(args.settle)
        res["rss_idle_after_heartbeats_mib"] = group_rss_bytes(peer.pid) / MiB
        await phase("leave", lambda: leave_all(hb_conns, members))
    finally:
        for c in hb_conns:
            c.close()


# --- 6. formation time -------------------------------------------------------------------------


async def bench_formation(peer, args, size: int) -> dict:
    conns = await gl.open_many(peer, size)
    group = f"bench-formation-{size}"
    try:
        t0 = time.perf_counter()
        done_at: list[float] = []

        async def one(c):
            r = await gl.join_and_sync(
                c,
                group,
                session_timeout_ms=args.formation_session_ms,
                rebalance_timeout_ms=300_000,
                timeout=args.formation_session_ms / 1000 + 120,
            )
            done_at.append(time.perf_counter() - t0)
            return r

        rs = await asyncio.gather(*(one(c) for c in conns), return_exceptions=True)
        total = time.perf_counter() - t0
        ok = [r for r in rs if isinstance(r, dict)]
        fails = [f"{type(r).__name__}: {r}" for r in rs if isinstance(r, BaseException)]
        gens = sorted({r["generation"] for r in ok})
        leaders = [r for r in ok if r["leader"]]
        # Tidy up: everyone leaves, so nothing expires later in this process.
        if ok:
            await conns[0].call(
                gl.LEAVE_GROUP, 5, gl.leave_body(group, [(r["member_id"], None) for r in ok])
            )
        return {
            "members": size,
            "seconds": total,
            "first_sync_s": min(done_at) if done_at else None,
            "synced": len(ok),
            "failures": len(fails),
            "failure_examples": fails[:3],
            "generations": gens,
            "leader_saw_members": leaders[0]["members_seen"] if leaders else None,
            "session_timeout_ms": args.formation_session_ms,
        }
    finally:
        for c in conns:
            c.close()


# --- 7. static rolling restart -----------------------------------------------------------------


async def bench_static_restart(peer, args) -> dict:
    n, group = args.static_members, "bench-static"
    session = args.static_session_ms
    conns = await gl.open_many(peer, n)
    inst = [f"bench-static-{k:02d}" for k in range(n)]
    state: list[dict] = [{} for _ in range(n)]
    hb_errors: dict[int, int] = {}
    agent_rejoins = {"count": 0, "failures": 0, "seconds": 0.0}
    generations_seen: set[int] = set()
    timeout = session / 1000 + 60

    async def agent(k: int) -> None:
        """Heartbeat every second; rejoin as a real client would."""
        while True:
            await asyncio.sleep(1.0)
            s = state[k]
            try:
                h = await conns[k].call(
                    gl.HEARTBEAT,
                    4,
                    gl.heartbeat_body(group, s["generation"], s["member_id"], inst[k]),
                    timeout=timeout,
                )
            except (TimeoutError, ConnectionError):
                continue
            code = int(h.error_code)
            if not code:
                continue
            hb_errors[code] = hb_errors.get(code, 0) + 1
            if code in (gl.REBALANCE_IN_PROGRESS, gl.ILLEGAL_GENERATION, gl.UNKNOWN_MEMBER_ID):
                t = time.perf_counter()
                try:
                    r = await gl.join_and_sync(
                        conns[k],
                        group,
                        instance_id=inst[k],
                        member_id="" if code == gl.UNKNOWN_MEMBER_ID else s["member_id"],
                        session_timeout_ms=session,
                        rebalance_timeout_ms=session,
                        timeout=timeout,
                    )
                    state[k] = r
                    generations_seen.add(r["generation"])
                    agent_rejoins["count"] += 1
                except Exception:  # noqa: BLE001 - counted; the next heartbeat tells
                    agent_rejoins["failures"] += 1
                agent_rejoins["seconds"] += time.perf_counter() - t
            elif code == gl.FENCED_INSTANCE_ID:
                return

    agents: list[asyncio.Task | None] = [None] * n
    try:
        t0 = time.perf_counter()
        rs = await asyncio.gather(
            *(
                gl.join_and_sync(
                    conns[k],
                    group,
                    instance_id=inst[k],
                    session_timeout_ms=session,
                    rebalance_timeout_ms=session,
                    timeout=timeout,
                )
                for k in range(n)
            )
        )
        form_s = time.perf_counter() - t0
        for k, r in enumerate(rs):
            state[k] = r
        gen0 = rs[0]["generation"]
        generations_seen.update(r["generation"] for r in rs)
        for k in range(n):
            agents[k] = asyncio.create_task(agent(k))
        await asyncio.sleep(1.5)  # a heartbeat round in the stable group

        per_member: list[float] = []
        rejoin_gens: list[int] = []
        rejoin_codes: list[str] = []
        same_member_id = 0
        old_id_codes: dict[int, int] = {}
        t_start = time.perf_counter()
        for k in range(n):
            if time.perf_counter() - t_start > args.static_cap_s:
                break
            agents[k].cancel()  # type: ignore[union-attr]
            conns[k].close()  # no LeaveGroup: a crash or a pod restart
            conns[k] = await gl.Conn.open(peer)
            t = time.perf_counter()
            try:
                r = await gl.join_and_sync(
                    conns[k],
                    group,
                    instance_id=inst[k],
                    member_id="",
                    session_timeout_ms=session,
                    rebalance_timeout_ms=session,
                    timeout=timeout,
                )
            except Exception as e:  # noqa: BLE001
                rejoin_codes.append(f"{inst[k]}: {type(e).__name__}: {e}")
                per_member.append(time.perf_counter() - t)
                continue
            per_member.append(time.perf_counter() - t)
            rejoin_gens.append(r["generation"])
            generations_seen.add(r["generation"])
            old_id = state[k].get("member_id")
            if r["member_id"] == old_id:
                same_member_id += 1
            else:
                # The replaced member id must now be fenced (FENCED_INSTANCE_ID, 82).
                h = await conns[k].call(
                    gl.HEARTBEAT, 4, gl.heartbeat_body(group, r["generation"], old_id, inst[k])
                )
                code = int(h.error_code)
                old_id_codes[code] = old_id_codes.get(code, 0) + 1
            state[k] = r
            agents[k] = asyncio.create_task(agent(k))
        total = time.perf_counter() - t_start
        await asyncio.sleep(1.5)
        final_gens = sorted({s["generation"] for s in state if s})
        return {
            "members": n,
            "session_timeout_ms": session,
            "form_seconds": form_s,
            "generation_before": gen0,
            "restarted": len(per_member),
            "restart_failures": len(rejoin_codes),
            "restart_failure_examples": rejoin_codes[:3],
            "per_member_p50_s": percentile(sorted(per_member), 0.5),
            "per_member_max_s": max(per_member) if per_member else None,
            "per_member_s": per_member,
            "per_member_sum_s": sum(per_member),
            "total_s": total,
            "rejoin_generations": rejoin_gens,
            "generation_changed": any(g != gen0 for g in rejoin_gens) or final_gens != [gen0],
            "generations_seen": sorted(generations_seen),
            "final_generations": final_gens,
            "rejoin_kept_old_member_id": same_member_id,
            "old_member_id_heartbeat_codes": old_id_codes,
            "others_heartbeat_errors": hb_errors,
            "others_rejoins": agent_rejoins["count"],
            "others_rejoin_failures": agent_rejoins["failures"],
            "cap_s": args.static_cap_s,
        }
    finally:
        for a in agents:
            if a is not None:
                a.cancel()
        for c in conns:
            c.close()


async def process_b(peer, args, res: dict, phase) -> None:
    # Commits here, not in process A: RSS per member is read there as the growth of a fresh
    # process (an overloaded paced commit run leaves the heap hundreds of MiB larger), and
    # commits are measured in a fresh process too, as before.
    if "commits" in args.sections:
        if args.process_warmup:
            # Unmeasured: a fresh JVM serves commits interpreted, slowly enough that a few
            # seconds of load do not get its JIT to compile them (Kafka: 120 commits/s).
            warm = argparse.Namespace(**{**vars(args), "duration": args.process_warmup})
            await phase("commits_warmup", lambda: bench_commits(peer, warm))
        await phase("commits", lambda: bench_commits(peer, args))
        for rate in args.commit_rates:
            run = await phase(paced_key(rate), lambda rate=rate: bench_commits(peer, args, rate))
            if args.paced_stop_overloaded and run and run["commits_per_s"] < 0.9 * rate:
                res["paced_skipped_after_overload"] = rate  # higher rates: overloaded too
                break
    if "formation" in args.sections:
        for size in args.formation_sizes:
            await phase(f"formation_{size}", lambda size=size: bench_formation(peer, args, size))
    if "static" in args.sections:
        await phase("static_restart", lambda: bench_static_restart(peer, args))


#: The phases, by process: A forms many members and loads them with heartbeats (RSS per
#: member and idle RSS come with it); B runs commits, formation and the static restart.
SECTIONS = ("heartbeats", "commits", "formation", "static")
PROCESS_B_SECTIONS = frozenset({"commits", "formation", "static"})


# --- driver --------------------------------------------------------------------------------


def run_server(name: str, runner, work: Path, args) -> dict:
    """Every selected phase on one server: `runner(port, dir, delay_ms)` starts it (a context
    manager yielding a peers.Peer) for process A (delay args.form_delay_ms) and process B
    (args.formation_delay_ms), each a fresh process. Returns the figures by phase key, and
    the errors of failed phases in ``errors`` (the other phases still run)."""
    res: dict = {"errors": {}}

    async def phase(key: str, fn, pair: bool = False):
        log(f"{name}: {key} ...")
        try:
            out = await fn()
        except Exception as e:  # report and go on with the other phases/server
            res["errors"][key] = f"{type(e).__name__}: {e}"
            log(f"{name}: {key} FAILED: {res['errors'][key]}")
            traceback.print_exc(file=sys.stderr)
            return None
        if pair:
            value, res[key] = out
        else:
            value = res[key] = out
        shown = {k: v for k, v in res[key].items() if k != "per_member_s"}
        log(f"{name}: {key} done: {json.dumps(shown, default=str)}")
        return value

    def process(label: str, delay_ms: int, body) -> None:
        try:
            with runner(free_port(), work / f"{name}-{label}", delay_ms) as peer:
                res[f"pid_{label}"] = peer.pid
                res[f"rss_start_{label}_mib"] = group_rss_bytes(peer.pid) / MiB
                if label == "b" and "commits" in args.sections:
                    create_topics(
                        peer, [(COMMIT_TOPIC, args.commit_inflight * args.commit_partitions)]
                    )
                asyncio.run(body(peer, args, res, phase))
                res[f"server_alive_{label}"] = peer.pid and os.path.exists(f"/proc/{peer.pid}")
        except Exception as e:
            res["errors"][f"process_{label}"] = f"{type(e).__name__}: {e}"
            log(f"{name}: process {label} FAILED: {e}")
            traceback.print_exc(file=sys.stderr)

    if "heartbeats" in args.sections:
        process("a", args.form_delay_ms, process_a)
    if PROCESS_B_SECTIONS & args.sections:
        process("b", args.formation_delay_ms, process_b)
    return res


def _get(res: dict, *path):
    for k in path:
        if not isinstance(res, dict) or k not in res:
            return None
        res = res[k]
    return res


def paced_key(rate: float) -> str:
    """The figures' key of the paced commit run at `rate` per second."""
    return f"commits_paced_{rate:.0f}"


def paced_rate_within(res: dict, rates: list[float], p99_ms: float = 10.0) -> float | None:
    """The highest paced commit rate a server kept up with (every commit of the window
    answered, no errors, OffsetFetch matching) at a p99 below `p99_ms`; None if none."""
    served = [
        rate
        for rate in rates
        if (run := res.get(paced_key(rate)))
        and run["commits_per_s"] >= 0.99 * rate
        and run["p99_ms"] < p99_ms
        and not run["errors"]
        and not run["verify_mismatches"]
    ]
    return max(served, default=None)


# The durable-commit target: this many commits per second across the commit
# connections, with p99 latency below COMMIT_TARGET_P99_MS.
COMMIT_TARGET_PER_S = 50_000
COMMIT_TARGET_P99_MS = 10.0


def commit_target_met(run: dict | None) -> bool | None:
    """Whether a closed-loop commit run met the target: throughput and p99 in the same run,
    every commit answered without error and OffsetFetch matching; None without a run."""
    if not run:
        return None
    return bool(
        run["commits_per_s"] >= COMMIT_TARGET_PER_S
        and run["p99_ms"] < COMMIT_TARGET_P99_MS
        and not run["errors"]
        and not run["verify_mismatches"]
    )


def build_rows(args) -> list[tuple]:
    rows = [
        (
            "commits: OffsetCommit v9, 1 partition",
            "commit/s",
            ("commits", "commits_per_s"),
            "higher",
        ),
        ("  p50", "ms", ("commits", "p50_ms"), "lower"),
        ("  p99", "ms", ("commits", "p99_ms"), "lower"),
        ("  p99.9", "ms", ("commits", "p999_ms"), "lower"),
        ("  errors", "", ("commits", "errors"), None),
        ("  OffsetFetch != last acked offset", "keys", ("commits", "verify_mismatches"), None),
        ("  server CPU", "cores", ("commits", "server_cores"), None),
        ("  generator CPU", "cores", ("commits", "client_cores"), None),
    ]
    for rate in args.commit_rates:
        key = paced_key(rate)
        rows += [
            (f"commits paced at {rate:,.0f}/s", "commit/s", (key, "commits_per_s"), None),
            ("  answered in the window", "commit/s", (key, "answered_per_s"), "higher"),
            ("  p50", "ms", (key, "p50_ms"), "lower"),
            ("  p99", "ms", (key, "p99_ms"), "lower"),
            ("  p99.9", "ms", (key, "p999_ms"), "lower"),
            ("  errors", "", (key, "errors"), None),
            ("  OffsetFetch != last acked", "keys", (key, "verify_mismatches"), None),
            ("  server CPU", "cores", (key, "server_cores"), None),
        ]
    rows += [
        (
            f"form {args.members:,} members (groups of {args.group_size})",
            "s",
            ("form", "form_seconds"),
            "lower",
        ),
        ("  members formed", "", ("form", "members_formed"), None),
        ("  failures", "", ("form", "failures"), None),
        ("  server CPU while forming", "s", ("form", "server_cpu_s"), "lower"),
        ("  RSS before (conns open)", "MiB", ("form", "rss_before_mib"), None),
        ("  RSS after", "MiB", ("form", "rss_after_mib"), None),
        ("  RSS per classic member", "bytes", ("form", "rss_per_member_bytes"), "lower"),
        ("heartbeats: Heartbeat v4", "hb/s", ("heartbeat", "heartbeats_per_s"), "higher"),
        ("  p50", "ms", ("heartbeat", "p50_ms"), "lower"),
        ("  p99", "ms", ("heartbeat", "p99_ms"), "lower"),
        ("  p99.9", "ms", ("heartbeat", "p999_ms"), "lower"),
        ("  errors (non-zero error code)", "", ("heartbeat", "errors"), None),
        ("  server CPU", "cores", ("heartbeat", "server_cores"), None),
        ("  server CPU per heartbeat", "us", ("heartbeat", "server_cpu_us_per_hb"), "lower"),
        ("  generator CPU", "cores", ("heartbeat", "client_cores"), None),
        ("heartbeats paced at --hb-rate", "hb/s", ("heartbeat_paced", "heartbeats_per_s"), None),
        ("  p50", "ms", ("heartbeat_paced", "p50_ms"), "lower"),
        ("  p99", "ms", ("heartbeat_paced", "p99_ms"), "lower"),
        ("  p99.9", "ms", ("heartbeat_paced", "p999_ms"), "lower"),
        ("  errors", "", ("heartbeat_paced", "errors"), None),
        ("  server CPU", "cores", ("heartbeat_paced", "server_cores"), None),
        ("RSS at start (process A, idle)", "MiB", ("rss_start_a_mib",), "lower"),
        ("RSS idle after heartbeats", "MiB", ("rss_idle_after_heartbeats_mib",), "lower"),
    ]
    for size in args.formation_sizes:
        rows += [
            (
                f"formation {size} members (ours delay {args.formation_delay_ms} ms)",
                "s",
                (f"formation_{size}", "seconds"),
                "lower",
            ),
            ("  first Join -> first Sync answer", "s", (f"formation_{size}", "first_sync_s"), None),
            ("  members synced", "", (f"formation_{size}", "synced"), None),
        ]
    rows += [
        (
            f"static restart {args.static_members} members: total",
            "s",
            ("static_restart", "total_s"),
            "lower",
        ),
        ("  per member p50 (Join -> Sync)", "s", ("static_restart", "per_member_p50_s"), "lower"),
        ("  per member max", "s", ("static_restart", "per_member_max_s"), "lower"),
        ("  members restarted within cap", "", ("static_restart", "restarted"), None),
        ("  generation changed", "", ("static_restart", "generation_changed"), None),
        ("  others' rejoins (rebalances seen)", "", ("static_restart", "others_rejoins"), None),
    ]
    return rows


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    """The options, with --quick's and the derived defaults filled in (bench_vs_kafka builds
    its bench_groups options here too)."""
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--quick", action="store_true", help="3 s load windows, shorter timeouts")
    ap.add_argument("--members", type=int, default=1000, help="members for the heartbeat phase")
    ap.add_argument("--group-size", type=int, default=50)
    ap.add_argument("--form-conns", type=int, default=5000, help="connections used for forming")
    ap.add_argument(
        "--session-ms", type=int, help="session timeout of the heartbeat members (60000)"
    )
    ap.add_argument("--hb-conns", type=int, default=32)
    ap.add_argument("--hb-rate", type=float, default=20_000, help="paced heartbeat run (0: skip)")
    ap.add_argument("--hb-inflight", type=int, default=64)
    ap.add_argument("--commit-conns", type=int, default=100)
    ap.add_argument("--commit-inflight", type=int, default=8)
    ap.add_argument(
        "--commit-rate",
        default="50000",
        help="paced commit runs: a rate per second, or a comma list of them, one run each "
        "(0: none)",
    )
    ap.add_argument(
        "--commit-partitions",
        type=int,
        default=1,
        help="partitions per OffsetCommit request (a consumer commits all it owns at once)",
    )
    ap.add_argument(
        "--commits-only",
        action="store_true",
        help="only the commit phases (closed loop, then paced at --commit-rate)",
    )
    ap.add_argument(
        "--sections",
        default=",".join(SECTIONS),
        help=f"comma list of the phases to run, of {', '.join(SECTIONS)} (default: all)",
    )
    ap.add_argument("--duration", type=float, help="load window seconds (10; --quick 3)")
    ap.add_argument(
        "--warmup", type=float, help="load before each window, not measured (1; --quick 0.5)"
    )
    ap.add_argument(
        "--process-warmup",
        type=float,
        default=0.0,
        help="seconds of unmeasured closed-loop commits at the start of process B (0)",
    )
    ap.add_argument(
        "--paced-stop-overloaded",
        action="store_true",
        help="skip the higher paced commit rates once one is served below 90 %% of its rate",
    )
    ap.add_argument(
        "--open-batch",
        type=int,
        default=200,
        help="forming connections opened at once (Kafka's listen backlog is 50)",
    )
    ap.add_argument("--formation-sizes", default="20,100")
    ap.add_argument("--formation-session-ms", type=int, help="(45000; --quick 10000)")
    ap.add_argument("--static-members", type=int, default=20)
    ap.add_argument("--static-session-ms", type=int, default=10_000)
    ap.add_argument("--static-cap-s", type=float, help="(240; --quick 20)")
    ap.add_argument(
        "--form-delay-ms",
        type=int,
        default=100,
        help="ours: group_initial_rebalance_delay_ms for process A (forming many groups)",
    )
    ap.add_argument(
        "--formation-delay-ms",
        type=int,
        default=3000,
        help="ours: group_initial_rebalance_delay_ms for process B (formation, static)",
    )
    ap.add_argument("--servers", default="tansu,ours", help="comma list of tansu, ours")
    ap.add_argument("--json", type=Path, help="also write the JSON figures here")
    ap.add_argument("--work-dir", type=Path, help="parent of the temporary data dirs")
    ap.add_argument("--keep", action="store_true", help="keep the data dirs and logs")
    ap.add_argument(
        "--ours-arg",
        action="append",
        default=[],
        help="extra argument for `python -m groupcoord.coordinator serve` (repeatable)",
    )
    args = ap.parse_args(argv)
    args.duration = args.duration or (3.0 if args.quick else 10.0)
    args.session_ms = args.session_ms or (20_000 if args.quick else 60_000)
    args.formation_session_ms = args.formation_session_ms or (10_000 if args.quick else 45_000)
    args.static_cap_s = args.static_cap_s or (20.0 if args.quick else 240.0)
    args.formation_sizes = [int(s) for s in args.formation_sizes.split(",") if s.strip()]
    args.commit_rates = [float(r) for r in args.commit_rate.split(",") if r.strip() and float(r)]
    if args.paced_stop_overloaded:
        args.commit_rates.sort()
    args.warmup = args.warmup or (0.5 if args.quick else 1.0)
    args.settle = 1.0 if args.quick else 2.0
    args.sections = {s.strip() for s in args.sections.split(",") if s.strip()}
    if args.commits_only:
        args.sections = {"commits"}
    for section in args.sections - set(SECTIONS):
        ap.error(f"unknown section {section!r}")
    args.server_names = [s.strip() for s in args.servers.split(",") if s.strip()]
    for s in args.server_names:
        if s not in ("tansu", "ours"):
            ap.error(f"unknown server {s!r}")
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    servers = args.server_names

    if "tansu" in servers:
        ensure_tansu()
    t_start = time.perf_counter()

    def ours(port, d, delay_ms):
        extra = [
            "--set",
            f"group_initial_rebalance_delay_ms={delay_ms}",
            *OURS_MANY_CONNECTIONS_ARGS,
            *args.ours_arg,
        ]
        return run_groupcoord(port, d, extra)

    runners = {"tansu": lambda port, d, delay_ms: run_tansu(port, d), "ours": ours}
    results: dict[str, dict] = {}
    work = Path(tempfile.mkdtemp(prefix="bench-groups-", dir=args.work_dir))
    try:
        for name in servers:
            results[name] = run_server(name, runners[name], work, args)
    finally:
        if args.keep:
            log(f"data dirs and logs kept in {work}")
        else:
            import shutil

            shutil.rmtree(work, ignore_errors=True)

    rows, ratios = [], {}
    for metric, unit, path, better in build_rows(args):
        o = _get(results.get("ours", {}), *path)
        t = _get(results.get("tansu", {}), *path)
        row = {"metric": metric, "unit": unit, "ours": o, "tansu": t}
        if better:
            row["better"] = better
        if isinstance(o, bool) or isinstance(t, bool):
            row["ratio"] = "-"
        elif isinstance(o, int | float) and isinstance(t, int | float) and t:
            ratios[".".join(path)] = o / t
        rows.append(row)

    title = (
        f"bench_groups: {args.members:,} members in groups of {args.group_size}, "
        f"{args.duration:g} s load windows; ours with group_initial_rebalance_delay_ms="
        f"{args.form_delay_ms} (forming/heartbeats) and {args.formation_delay_ms} "
        f"(commits/formation/static); tansu {TANSU_VERSION} (memory-only); {os.cpu_count()} CPUs"
    )
    print()
    print_table(rows, title=title)
    print(
        f"  sessions: heartbeat members {args.session_ms} ms, formation "
        f"{args.formation_session_ms} ms (Tansu holds a new group's first join for half of "
        f"it), static {args.static_session_ms} ms; heartbeat load {args.hb_conns} conns x "
        f"{args.hb_inflight} in flight; commits {args.commit_conns} conns x "
        f"{args.commit_inflight} in flight"
    )
    for name, res in results.items():
        for key in ("commits", "heartbeat"):
            codes = _get(res, key, "error_codes")
            if codes:
                print(f"  {name} {key}: error codes {codes}")
        for key in ["form", "static_restart", *(f"formation_{s}" for s in args.formation_sizes)]:
            for ex_key in ("failure_examples", "restart_failure_examples"):
                for ex in _get(res, key, ex_key) or []:
                    print(f"  {name} {key}: {ex}")
        for ex in _get(res, "commits", "verify_examples") or []:
            print(f"  {name} commits verify: {ex}")
        met = commit_target_met(res.get("commits"))
        if met is not None:
            res["commit_target_met"] = met
            run = res["commits"]
            print(
                f"  {name}: closed loop {run['commits_per_s']:,.0f} commits/s, p99 "
                f"{run['p99_ms']:.1f} ms: target ({COMMIT_TARGET_PER_S:,}/s with p99 < "
                f"{COMMIT_TARGET_P99_MS:g} ms) {'met' if met else 'not met'}"
            )
        if args.commit_rates:
            best = paced_rate_within(res, args.commit_rates)
            res["paced_rate_p99_below_10ms"] = best
            shown = "none of the rates" if best is None else f"{best:,.0f}/s"
            print(f"  {name}: highest paced commit rate served with p99 < 10 ms: {shown}")
        sr = res.get("static_restart")
        if sr:
            gens = sorted(set(sr["rejoin_generations"]))
            print(
                f"  {name} static restart: generation {sr['generation_before']} -> rejoins "
                f"answered generations {gens}, final {sr['final_generations']}; rejoin kept "
                f"the old member id {sr['rejoin_kept_old_member_id']}/{sr['restarted']} "
                f"(heartbeat codes for a replaced id: {sr['old_member_id_heartbeat_codes']}); "
                f"others' heartbeat errors {sr['others_heartbeat_errors']}"
            )
        for key, err in res.get("errors", {}).items():
            print(f"  {name} {key}: {err}")

    doc = {
        "benchmark": "bench_groups",
        "time": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        "config": {k: (str(v) if isinstance(v, Path) else v) for k, v in vars(args).items()},
        "host": {
            "cpus": os.cpu_count(),
            "python": platform.python_version(),
            "platform": platform.platform(),
        },
        "tansu_version": TANSU_VERSION,
        "servers": results,
        "ratios_ours_over_tansu": ratios,
        "wall_seconds": time.perf_counter() - t_start,
    }
    text = json.dumps(doc, default=str, allow_nan=True)
    if args.json:
        args.json.write_text(json.dumps(doc, default=str, indent=2) + "\n")
    print(text)
    return 0 if all(not r.get("errors") for r in results.values()) else 1


if __name__ == "__main__":
    sys.exit(main())
