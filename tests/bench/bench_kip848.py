"""KIP-848 consumer rebalance protocol benchmark: ConsumerGroupHeartbeat against the classic
protocol, both on our server, in one run.

    python tests/bench/bench_kip848.py [--quick] [--members 10000] [--consumers 50]
                                       [--phases 1,2,3] [--hb-rounds 2] [--json PATH]

Tansu 0.6.0 does not serve ConsumerGroupHeartbeat (API 68): the script starts it once
(peers.run_tansu), reads its ApiVersions and prints "n/a" in its column when API 68 is not
listed. Everything else is measured on our server only.

Process A (ours, default settings: group_initial_rebalance_delay_ms=3000 set explicitly;
consumer protocol: heartbeat interval 5000 ms, assignment interval 1000 ms, reconciling
heartbeat interval 250 ms), one topic of --partitions (100) partitions, for each protocol
in turn (KIP-848 `group.protocol=consumer` with the server's default assignor, then classic
`partition.assignment.strategy=cooperative-sticky`; other settings librdkafka's defaults):

1. Formation: --consumers (50) confluent-kafka consumers, created up front, each polled by its
   own thread (poll(0.02), then assignment() compared with the last one, callbacks
   recorded); all threads are told to subscribe at once (each does so at its next loop
   turn: confluent-kafka blocks a subscribe() from another thread while poll() loops), and
   the clock starts at the first subscribe(). Stable = every
   partition in exactly one consumer's assignment() AND describe_consumer_groups says
   Stable with all members (ConsumerGroupDescribe for the consumer protocol,
   DescribeGroups for classic) - and it stays so, with no assignment change, for --settle-s
   (6 s: longer than the 5 s heartbeat interval). Reported: seconds from the first
   subscribe until stable was first observed (50 ms polling) and until the last
   assignment change any consumer saw.
2. One more member: the (N+1)th consumer subscribes to the stable group; seconds until
   stable again with N+1 members, how many of the N existing members saw their
   assignment() change (or got a non-empty assign/revoke callback), how many had to give
   up partitions (lost a partition in the end), the least that must (balanced result),
   and how many got any rebalance callback at all (even empty). KIP-848 target: stable
   within one heartbeat interval + 0.5 s (5.5 s), and only members giving up partitions see
   a change.

Process B (ours, --set group_initial_rebalance_delay_ms=100 to form the classic groups
fast, as bench_groups' process A):

3. Heartbeat throughput: --members (10,000; --quick 1,000) classic members formed in groups
   of 50 exactly as bench_groups does (JoinGroup v9 + SyncGroup v5), and as many
   consumer-protocol members in groups of 50 (ConsumerGroupHeartbeat v1 with client member
   ids, one 50-partition topic), the latter driven to a steady state by heartbeat rounds
   that report owned partitions until every member is told the steady 5000 ms interval
   (ConsumerGroupDescribe then checked: Stable). Then, --hb-rounds (2) times: closed-loop
   steady-state ConsumerGroupHeartbeat v1 (group, member id, member epoch = current, every
   other field null: what a Java/librdkafka member sends when nothing changed; pre-encoded,
   --hb-conns 32 connections x --hb-inflight 64 in flight, only error code, interval and
   "assignment is null" of each response decoded), then classic Heartbeat v4 with the same
   load (bench_groups.bench_heartbeats): heartbeats/s, p50/p99 latency, server and
   generator CPU over --duration (10 s; --quick 3 s) after a warm-up.

Prints one table and, as the last line of stdout, the figures as JSON.
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import datetime
import json
import logging
import os
import platform
import struct
import sys
import tempfile
import threading
import time
import traceback
import uuid
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

import bench_groups as bg  # noqa: E402
import groupload as gl  # noqa: E402
from bench_data_plane import create_topics, group_rss_bytes  # noqa: E402
from peers import (  # noqa: E402
    OURS_MANY_CONNECTIONS_ARGS,
    TANSU_VERSION,
    ensure_tansu,
    free_port,
    print_table,
    run_groupcoord,
    run_tansu,
)

from groupcoord.protocol.api import build  # noqa: E402

CONSUMER_GROUP_HEARTBEAT, CONSUMER_GROUP_DESCRIBE = 68, 69
FORM_TOPIC = "bench-kip848"
HB_TOPIC = "bench-kip848-hb"
MiB = 1 << 20
#: poll() timeout of each consumer's thread; also how late a requested subscribe can start.
POLL_S = 0.02

FENCED_MEMBER_EPOCH = 110
_I32 = struct.Struct(">i")
_I16 = struct.Struct(">h")

log = bg.log


def ms(value: int) -> datetime.timedelta:
    return datetime.timedelta(milliseconds=value)


# --- Tansu: does it serve API 68? ------------------------------------------------------------


async def api_versions(bootstrap: str) -> dict[int, tuple[int, int]]:
    conn = await gl.Conn.open(bootstrap)
    try:
        resp = await conn.call(gl.API_VERSIONS, 3, gl.api_versions_body())
    finally:
        conn.close()
    return {int(k.api_key): (int(k.min_version), int(k.max_version)) for k in resp.api_keys}


def probe_tansu(work: Path) -> dict:
    with run_tansu(free_port(), work / "tansu") as peer:
        keys = asyncio.run(api_versions(peer))
    return {
        "version": TANSU_VERSION,
        "lists_consumer_group_heartbeat_68": CONSUMER_GROUP_HEARTBEAT in keys,
        "lists_consumer_group_describe_69": CONSUMER_GROUP_DESCRIBE in keys,
        "api_68": keys.get(CONSUMER_GROUP_HEARTBEAT),
        "api_69": keys.get(CONSUMER_GROUP_DESCRIBE),
    }


# --- 1 + 2. librdkafka consumers ---------------------------------------------------------------


class _Sink(logging.Handler):
    """librdkafka log lines at WARNING and above (confluent-kafka's `logger`)."""

    def __init__(self, out: list) -> None:
        super().__init__(logging.WARNING)
        self.out = out

    def emit(self, record: logging.LogRecord) -> None:
        self.out.append((time.perf_counter(), record.getMessage()))


class Polled:
    """One confluent-kafka consumer and the thread that polls it.

    The thread calls poll(POLL_S) (rebalance callbacks run there), then compares
    assignment() with the last value and records every change with its time. The consumer
    is closed by its own thread when told to stop (closes run in parallel)."""

    def __init__(self, index: int, conf: dict, warnings: list) -> None:
        self.index = index
        self.events: list[tuple[float, str, tuple[int, ...]]] = []  # (t, kind, partitions)
        self.errors: list[tuple[float, str]] = []
        self.changes: list[tuple[float, frozenset[int]]] = []
        self.assignment: frozenset[int] = frozenset()
        self.subscribed_at: float | None = None
        self.pending_topic: str | None = None
        self.stop = threading.Event()
        self.closed_in: float | None = None
        from confluent_kafka import Consumer

        logger = logging.getLogger(f"bench_kip848.rdkafka.{index}")
        logger.propagate = False
        logger.setLevel(logging.WARNING)
        logger.addHandler(_Sink(warnings))
        self.consumer = Consumer(
            {
                **conf,
                "client.id": f"bench-kip848-{index:02d}",
                "error_cb": lambda e: self.errors.append((time.perf_counter(), str(e))),
                "logger": logger,
            }
        )
        self.thread = threading.Thread(target=self._run, name=f"poll-{index}", daemon=True)
        self.thread.start()

    def subscribe(self, topic: str) -> None:
        """Ask the polling thread to subscribe (confluent-kafka 2.16: a subscribe() from
        another thread while this one loops on poll() blocks for good)."""
        self.pending_topic = topic

    def _subscribe(self, topic: str) -> None:
        self.subscribed_at = time.perf_counter()
        self.consumer.subscribe(
            [topic],
            on_assign=lambda c, ps: self._event("assign", ps),
            on_revoke=lambda c, ps: self._event("revoke", ps),
            on_lost=lambda c, ps: self._event("lost", ps),
        )

    def _event(self, kind: str, partitions: list) -> None:
        self.events.append(
            (time.perf_counter(), kind, tuple(sorted(p.partition for p in partitions)))
        )

    def _run(self) -> None:
        c = self.consumer
        while not self.stop.is_set():
            try:
                if self.pending_topic is not None:
                    topic, self.pending_topic = self.pending_topic, None
                    self._subscribe(topic)
                msg = c.poll(POLL_S)
                if msg is not None and msg.error():
                    self.errors.append((time.perf_counter(), str(msg.error())))
                now_assigned = frozenset(p.partition for p in c.assignment())
            except Exception as e:  # noqa: BLE001 - recorded, the monitor reports it
                self.errors.append((time.perf_counter(), f"{type(e).__name__}: {e}"))
                time.sleep(0.05)
                continue
            if now_assigned != self.assignment:
                self.assignment = now_assigned
                self.changes.append((time.perf_counter(), now_assigned))
        t = time.perf_counter()
        try:
            c.close()
        except Exception as e:  # noqa: BLE001
            self.errors.append((time.perf_counter(), f"close: {type(e).__name__}: {e}"))
        self.closed_in = time.perf_counter() - t


def describe_group(admin, group: str) -> tuple[str, int, str]:
    """(state name, member count, group type) from describe_consumer_groups."""
    try:
        d = admin.describe_consumer_groups([group], request_timeout=10)[group].result(timeout=15)
    except Exception as e:  # noqa: BLE001 - reported as a state
        return f"error: {e}", -1, "?"
    state = getattr(d.state, "name", str(d.state))
    gtype = getattr(getattr(d, "type", None), "name", "?")
    return state, len(d.members), gtype


def subscribed(members: list[Polled], timeout: float = 30.0) -> tuple[float, float]:
    """Wait until every member's thread has called subscribe(); (first, last - first)."""
    deadline = time.perf_counter() + timeout
    while any(m.subscribed_at is None for m in members):
        if time.perf_counter() > deadline:
            raise TimeoutError("consumers did not subscribe")
        time.sleep(0.005)
    at = [m.subscribed_at for m in members if m.subscribed_at is not None]
    return min(at), max(at) - min(at)


def partitions_ok(members: list[Polled], partitions: int) -> bool:
    seen: set[int] = set()
    total = 0
    for m in members:
        total += len(m.assignment)
        seen |= m.assignment
    return total == partitions and len(seen) == partitions


def last_change(members: list[Polled]) -> float:
    return max((m.changes[-1][0] for m in members if m.changes), default=float("-inf"))


def wait_stable(members: list[Polled], admin, group: str, partitions: int, t0: float, args) -> dict:
    """Poll until the group is stable (see the module doc) and stays so for args.settle_s."""
    want = len(members)
    first_ok: float | None = None
    restarts = 0
    states: dict[str, int] = {}
    last_state = None
    while True:
        now = time.perf_counter()
        if now - t0 > args.stable_timeout_s:
            return {
                "stable": False,
                "timed_out_after_s": now - t0,
                "partitions_ok": partitions_ok(members, partitions),
                "last_describe": last_state,
                "describe_states_seen": states,
                "sizes": sorted(len(m.assignment) for m in members),
            }
        ok = partitions_ok(members, partitions)
        if ok:
            state, n, gtype = describe_group(admin, group)
            last_state = (state, n, gtype)
            states[state] = states.get(state, 0) + 1
            ok = state == "STABLE" and n == want
        if not ok:
            if first_ok is not None:
                restarts += 1
            first_ok = None
        else:
            changed = last_change(members)
            if first_ok is None:
                first_ok = now
            elif changed > first_ok:  # a change while it looked stable: start again
                restarts += 1
                first_ok = now
            elif now - first_ok >= args.settle_s:
                sizes = sorted(len(m.assignment) for m in members)
                return {
                    "stable": True,
                    "stable_s": first_ok - t0,
                    "last_assignment_change_s": changed - t0,
                    "stable_then_changed": restarts,
                    "describe": last_state,
                    "describe_states_seen": states,
                    "min_partitions": sizes[0],
                    "max_partitions": sizes[-1],
                }
        time.sleep(0.05)


def least_donors(sizes: list[int], partitions: int) -> int:
    """Fewest existing members that must give up partitions so that one more member joins
    a balanced assignment (every member floor or ceil of partitions / members)."""
    n = len(sizes) + 1
    lo, hi = partitions // n, -(-partitions // n)
    forced = [s - hi for s in sizes if s > hi]
    moved = sum(forced)
    donors = len(forced)
    if moved < lo:  # the newcomer still needs partitions: from members at hi, above lo
        spare = sorted((s - lo for s in sizes if s <= hi and s > lo), reverse=True)
        for give in spare:
            if moved >= lo:
                break
            donors += 1
            moved += give
    return donors


def run_protocol(peer, protocol: str, args) -> dict:
    """Formation (1) and one more member (2) for one protocol, on a fresh group."""
    from confluent_kafka.admin import AdminClient

    group = f"bench-kip848-{protocol}-{os.getpid()}"
    conf: dict[str, Any] = {
        "bootstrap.servers": str(peer),
        "group.id": group,
        "auto.offset.reset": "earliest",
    }
    if protocol == "consumer":
        conf["group.protocol"] = "consumer"
    else:
        conf["partition.assignment.strategy"] = "cooperative-sticky"
    warnings: list = []
    admin = AdminClient({"bootstrap.servers": str(peer), "log_level": 0})
    n = args.consumers
    res: dict[str, Any] = {"group": group, "consumers": n, "partitions": args.partitions}
    log(f"  {protocol}: creating {n + 1} consumers ...")
    t_create = time.perf_counter()
    members = [Polled(i, conf, warnings) for i in range(n + 1)]
    newcomer, members = members[-1], members[:-1]
    res["create_s"] = time.perf_counter() - t_create
    try:
        time.sleep(1.0)  # let them connect (bootstrap metadata) before the clock starts
        # 1. formation
        for m in members:
            m.subscribe(FORM_TOPIC)
        t0, res["subscribe_spread_s"] = subscribed(members)
        log(f"  {protocol}: {n} subscribed, waiting for a stable assignment ...")
        form = wait_stable(members, admin, group, args.partitions, t0, args)
        form["revocations"] = sum(
            1 for m in members for e in m.events if e[1] in ("revoke", "lost") and e[2]
        )
        revokes = [e for m in members for e in m.events if e[1] in ("revoke", "lost") and e[2]]
        form["revoked_partitions"] = sum(len(e[2]) for e in revokes)
        form["first_revoke_s"] = min(e[0] for e in revokes) - t0 if revokes else None
        form["most_partitions_held"] = max(
            (len(a) for m in members for _, a in m.changes), default=0
        )
        form["callbacks"] = sum(len(m.events) for m in members)
        res["formation"] = form
        log(f"  {protocol}: formation {json.dumps(form, default=str)}")
        if not form["stable"]:
            return res

        # 2. one more member
        before = [m.assignment for m in members]
        events_before = [len(m.events) for m in members]
        newcomer.subscribe(FORM_TOPIC)
        t1, _ = subscribed([newcomer])
        everyone = [*members, newcomer]
        join = wait_stable(everyone, admin, group, args.partitions, t1, args)
        changed, donors, lost_parts, any_cb, nonempty_cb = [], [], 0, 0, 0
        for i, m in enumerate(members):
            evs = m.events[events_before[i] :]
            if evs:
                any_cb += 1
            ne = [e for e in evs if e[2]]
            if ne:
                nonempty_cb += 1
            saw = any(t >= t1 for t, _ in m.changes) or m.assignment != before[i] or bool(ne)
            if saw:
                changed.append(i)
            gone = before[i] - m.assignment
            if gone:
                donors.append(i)
                lost_parts += len(gone)
        first_own = next((t for t, a in newcomer.changes if a), None)
        join.update(
            {
                "existing_changed": len(changed),
                "existing_gave_up": len(donors),
                "changed_without_giving_up": sorted(set(changed) - set(donors)),
                "least_must_give_up": least_donors([len(a) for a in before], args.partitions),
                "partitions_moved": lost_parts,
                "newcomer_partitions": len(newcomer.assignment),
                "newcomer_first_partitions_s": (first_own - t1) if first_own else None,
                "existing_any_callback": any_cb,
                "existing_nonempty_callback": nonempty_cb,
            }
        )
        res["join"] = join
        log(f"  {protocol}: one more member {json.dumps(join, default=str)}")
        return res
    finally:
        everyone = [*members, newcomer]
        for m in everyone:
            m.stop.set()
        for m in everyone:
            m.thread.join(timeout=60)
        res["close_max_s"] = max((m.closed_in or 0.0) for m in everyone)
        errs = [(m.index, t, e) for m in everyone for t, e in m.errors]
        res["client_errors"] = len(errs)
        res["client_error_examples"] = [f"consumer {i}: {e}" for i, _, e in errs[:5]]
        res["client_warnings"] = len(warnings)
        res["client_warning_examples"] = [w for _, w in warnings[:8]]


def process_a(work: Path, args) -> dict:
    out: dict[str, Any] = {}
    extra = ["--set", "group_initial_rebalance_delay_ms=3000", *args.ours_arg]
    with run_groupcoord(free_port(), work / "ours-a", extra) as peer:
        out["pid"] = peer.pid
        create_topics(peer, [(FORM_TOPIC, args.partitions)])
        for protocol in ("consumer", "classic"):
            log(f"ours: {protocol} protocol, {args.consumers} consumers ...")
            try:
                out[protocol] = run_protocol(peer, protocol, args)
            except Exception as e:  # noqa: BLE001
                out.setdefault("errors", {})[protocol] = f"{type(e).__name__}: {e}"
                traceback.print_exc(file=sys.stderr)
            time.sleep(1.0)
        out["server_log_warnings"] = server_log_warnings(peer.log_path)
    return out


def server_log_warnings(path: Path) -> list[str]:
    lines = []
    try:
        for line in path.read_text(errors="replace").splitlines():
            if '"level": "warning"' in line or '"level": "error"' in line or "Traceback" in line:
                lines.append(line[:300])
    except OSError:
        pass
    return lines[:20]


# --- 3. heartbeat throughput -------------------------------------------------------------------


def _cgh_mod() -> Any:
    return gl._mod(CONSUMER_GROUP_HEARTBEAT, 1)


def new_member_id() -> str:
    """A Kafka-style member id (base64url UUID, 22 characters), client-generated (v1)."""
    return base64.urlsafe_b64encode(uuid.uuid4().bytes).rstrip(b"=").decode()


def cgh_body(
    group: str,
    member_id: str,
    epoch: int,
    owned: tuple | None = None,
    join_topics: tuple[str, ...] | None = None,
) -> Any:
    m = _cgh_mod()
    fields: dict[str, Any] = {"group_id": group, "member_id": member_id, "member_epoch": epoch}
    if join_topics is not None:
        fields.update(
            rebalance_timeout=ms(300_000), subscribed_topic_names=join_topics, topic_partitions=()
        )
    elif owned is not None:
        fields["topic_partitions"] = owned
    return build(m.ConsumerGroupHeartbeatRequest, **fields)


class CMember:
    __slots__ = ("group", "member_id", "epoch", "owned", "steady")

    def __init__(self, group: str) -> None:
        self.group = group
        self.member_id = new_member_id()
        self.epoch = 0
        self.owned: tuple = ()
        self.steady = False


def apply_response(mem: CMember, resp: Any, steady_ms: int, errs: dict) -> bool:
    """Update a member from its heartbeat answer; True if it is steady (not reconciling)."""
    code = int(resp.error_code)
    if code:
        errs[code] = errs.get(code, 0) + 1
        mem.epoch, mem.owned, mem.steady = 0, (), False  # fenced/unknown: rejoin next round
        return False
    mem.epoch = int(resp.member_epoch)
    changed = resp.assignment is not None
    if changed:
        tp = _cgh_mod().TopicPartitions
        mem.owned = tuple(
            tp(topic_id=t.topic_id, partitions=tuple(sorted(t.partitions)))
            for t in resp.assignment.topic_partitions
        )
    interval = int(resp.heartbeat_interval.total_seconds() * 1000)
    mem.steady = interval == steady_ms and not changed
    return mem.steady


async def heartbeat_all(conns, members: list[CMember], steady_ms: int, errs: dict) -> int:
    """One heartbeat per member (join if epoch 0); returns how many answered steady."""
    steady = 0
    k = 0
    for start in range(0, len(members), 2000):
        chunk = members[start : start + 2000]
        calls = []
        for mem in chunk:
            c = conns[k % len(conns)]
            k += 1
            body = (
                cgh_body(mem.group, mem.member_id, 0, join_topics=(HB_TOPIC,))
                if mem.epoch == 0
                else cgh_body(mem.group, mem.member_id, mem.epoch, owned=mem.owned)
            )
            calls.append(c.call(CONSUMER_GROUP_HEARTBEAT, 1, body))
        res = await asyncio.gather(*calls, return_exceptions=True)
        for mem, r in zip(chunk, res, strict=True):
            if isinstance(r, BaseException):
                errs[-1] = errs.get(-1, 0) + 1
                continue
            steady += apply_response(mem, r, steady_ms, errs)
    return steady


async def describe_consumer_groups_raw(conn, groups: list[str]) -> dict[str, int]:
    m = gl._mod(CONSUMER_GROUP_DESCRIBE, 0)
    states: dict[str, int] = {}
    for start in range(0, len(groups), 50):
        body = build(
            m.ConsumerGroupDescribeRequest,
            group_ids=tuple(groups[start : start + 50]),
            include_authorized_operations=False,
        )
        resp = await conn.call(CONSUMER_GROUP_DESCRIBE, 0, body)
        for g in resp.groups:
            key = g.group_state if not g.error_code else f"error {int(g.error_code)}"
            states[key] = states.get(key, 0) + 1
    return states


async def form_consumer_members(peer, conns, args) -> tuple[list[CMember], dict]:
    n, size = args.members, args.group_size
    members = [CMember(f"bench-cg-{i // size:05d}") for i in range(n)]
    steady_ms = args.steady_interval_ms
    errs: dict[int, int] = {}
    rss0 = group_rss_bytes(peer.pid)
    t0 = time.perf_counter()
    await heartbeat_all(conns, members, steady_ms, errs)  # every member joins
    t_joined = time.perf_counter() - t0
    rounds, steady = 0, 0
    while time.perf_counter() - t0 < args.form_timeout_s:
        await asyncio.sleep(0.3)
        rounds += 1
        steady = await heartbeat_all(conns, members, steady_ms, errs)
        if steady == n:
            break
    form_s = time.perf_counter() - t0
    groups = sorted({m.group for m in members})
    states = await describe_consumer_groups_raw(conns[0], groups)
    await asyncio.sleep(args.settle)
    rss1 = group_rss_bytes(peer.pid)
    return members, {
        "members": n,
        "groups": len(groups),
        "join_all_s": t_joined,
        "steady_s": form_s,
        "rounds": rounds,
        "steady_members": steady,
        "errors": errs,
        "describe_states": states,
        "rss_per_member_bytes": (rss1 - rss0) / n,
    }


class ConsumerHeartbeatDriver(gl.HeartbeatDriver):
    """HeartbeatDriver (error code at the same offset) that also checks the end of each
    ConsumerGroupHeartbeat v1 answer: ... MemberEpoch i32, HeartbeatIntervalMs i32,
    Assignment (nullable struct: 0xff when null), tagged fields (0)."""

    def __init__(self, *a: Any, steady_ms: int, anomalies: dict) -> None:
        super().__init__(*a)
        self.steady_ms = steady_ms
        self.anomalies = anomalies

    def on_raw(self, buf: bytearray, got: list[tuple[int, int]]) -> None:
        unpack = _I32.unpack_from
        for _cid, at in got:
            end = at + unpack(buf, at - 4)[0]
            if buf[end - 2] != 0xFF:
                self.anomalies["assignment"] = self.anomalies.get("assignment", 0) + 1
            elif unpack(buf, end - 6)[0] != self.steady_ms:
                self.anomalies["interval"] = self.anomalies.get("interval", 0) + 1
        super().on_raw(buf, got)


async def bench_consumer_heartbeats(peer, args, hb_conns, members: list[CMember]) -> dict:
    per_conn: list[list[gl.Template]] = [[] for _ in hb_conns]
    for i, mem in enumerate(members):
        per_conn[i % len(hb_conns)].append(
            gl.Template(CONSUMER_GROUP_HEARTBEAT, 1, cgh_body(mem.group, mem.member_id, mem.epoch))
        )
    stats = gl.LoadStats()
    anomalies: dict[str, int] = {}
    drivers = [
        ConsumerHeartbeatDriver(
            c, tpls, args.hb_inflight, stats, steady_ms=args.steady_interval_ms, anomalies=anomalies
        )
        for c, tpls in zip(hb_conns, per_conn, strict=True)
        if tpls
    ]
    res = await run_load(peer, args, hb_conns, drivers, stats)
    res["not_steady_answers"] = anomalies
    return res


async def run_load(peer, args, conns, drivers, stats) -> dict:
    """The closed-loop window of bench_groups.bench_heartbeats, for any driver."""
    from bench_data_plane import client_cpu_seconds, group_cpu_seconds

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
    for c in conns:
        c.on_raw = None
    return {
        "connections": len(drivers),
        "inflight_per_conn": args.hb_inflight,
        "duration_s": args.duration,
        "heartbeats": stats.done,
        "heartbeats_per_s": stats.done / args.duration,
        **bg.latency_summary(stats.latencies),
        "errors": sum(stats.errors.values()),
        "error_codes": stats.errors,
        "unmatched_responses": stats.unmatched,
        "unanswered_after_drain": sum(len(d.sent) for d in drivers),
        "server_cores": (srv2 - srv1) / args.duration,
        "server_cpu_us_per_hb": (srv2 - srv1) / stats.done * 1e6 if stats.done else None,
        "client_cores": (cli2 - cli1) / args.duration,
    }


async def process_b_body(peer, args, out: dict) -> None:
    hb_conns = await gl.open_many(peer, args.hb_conns)
    try:
        log(f"ours: forming {args.members:,} classic members ...")
        classic, form = await bg.form_members(peer, args, hb_conns)
        out["classic_form"] = form
        log(f"ours: classic forming done: {json.dumps(form, default=str)}")
        log(f"ours: forming {args.members:,} consumer-protocol members ...")
        stop = asyncio.Event()
        ka_errs: dict[int, int] = {}
        ka = asyncio.create_task(
            bg.keepalive(hb_conns, classic, args.session_ms / 4000, stop, ka_errs)
        )
        try:
            consumers, cform = await form_consumer_members(peer, hb_conns, args)
        finally:
            stop.set()
            await ka
        cform["classic_keepalive_errors"] = ka_errs
        out["consumer_form"] = cform
        log(f"ours: consumer forming done: {json.dumps(cform, default=str)}")
        if cform["steady_members"] != args.members:
            out.setdefault("errors", {})["consumer_form"] = (
                f"only {cform['steady_members']}/{args.members} members steady"
            )
        out["rounds"] = []
        for r in range(args.hb_rounds):
            log(f"ours: round {r + 1}: ConsumerGroupHeartbeat load ...")
            c = await bench_consumer_heartbeats(peer, args, hb_conns, consumers)
            log(f"ours: round {r + 1}: consumer {json.dumps(c, default=str)}")
            log(f"ours: round {r + 1}: classic Heartbeat load ...")
            k = await bg.bench_heartbeats(peer, args, hb_conns, classic)
            log(f"ours: round {r + 1}: classic {json.dumps(k, default=str)}")
            out["rounds"].append({"consumer": c, "classic": k})
        # Still steady afterwards? (one decoded heartbeat per member)
        errs: dict[int, int] = {}
        steady = await heartbeat_all(hb_conns, consumers, args.steady_interval_ms, errs)
        out["steady_after"] = {"steady": steady, "errors": errs}
    finally:
        for c in hb_conns:
            c.close()


def process_b(work: Path, args) -> dict:
    out: dict[str, Any] = {}
    extra = [
        "--set",
        f"group_initial_rebalance_delay_ms={args.form_delay_ms}",
        *OURS_MANY_CONNECTIONS_ARGS,
        *args.ours_arg,
    ]
    with run_groupcoord(free_port(), work / "ours-b", extra) as peer:
        out["pid"] = peer.pid
        create_topics(peer, [(HB_TOPIC, args.group_size)])
        asyncio.run(process_b_body(peer, args, out))
        out["server_log_warnings"] = server_log_warnings(peer.log_path)
    return out


# --- report ----------------------------------------------------------------------------------


def _g(d: Any, *path: str) -> Any:
    for k in path:
        if not isinstance(d, dict) or k not in d:
            return None
        d = d[k]
    return d


def build_rows(res: dict, args, tansu_cell: str | None) -> list[dict]:
    rows: list[dict] = []
    na = tansu_cell

    def row(metric, unit, ours, target=None, ok=None, vs=None):
        r = {"metric": metric, "unit": unit, "ours": ours, "tansu": na, "ratio": "-"}
        r["target"] = target
        r["met"] = ok
        r["vs classic"] = vs
        rows.append(r)

    a = res.get("a", {})
    n = args.consumers
    hb_target_s = args.steady_interval_ms / 1000 + 0.5
    for proto, label in (("consumer", "KIP-848"), ("classic", "classic coop-sticky")):
        f = _g(a, proto, "formation") or {}
        row(
            f"1. {n} consumers -> stable: {label}",
            "s",
            f.get("stable_s") if f.get("stable") else "not stable",
        )
        row("   last assignment change", "s", f.get("last_assignment_change_s"))
        row("   revocations (non-empty revoke/lost)", "", f.get("revocations"))
    c1 = _g(a, "consumer", "formation", "stable_s")
    k1 = _g(a, "classic", "formation", "stable_s")
    if isinstance(c1, float) and isinstance(k1, float) and k1:
        rows[0]["vs classic"] = f"{c1 / k1:.2f}x"
    first_join_row = len(rows)
    for proto, label in (("consumer", "KIP-848"), ("classic", "classic coop-sticky")):
        j = _g(a, proto, "join") or {}
        stable_s = j.get("stable_s") if j.get("stable") else ("not stable" if j else None)
        kip = proto == "consumer"
        row(
            f"2. member {n + 1} joins -> stable: {label}",
            "s",
            stable_s,
            target=f"<= {hb_target_s:g}" if kip else None,
            ok=(stable_s <= hb_target_s) if kip and isinstance(stable_s, float) else None,
        )
        row("   newcomer's first partitions", "s", j.get("newcomer_first_partitions_s"))
        gave, least = j.get("existing_gave_up"), j.get("least_must_give_up")
        changed = j.get("existing_changed")
        row(
            f"   existing members whose assignment changed (of {n})",
            "",
            changed,
            target="= gave up" if kip else None,
            ok=(changed == gave) if kip and changed is not None else None,
        )
        row(
            "   existing members that gave up partitions",
            "",
            gave,
            target=f">= {least}" if least is not None else None,
        )
        row("   existing members with any rebalance callback", "", j.get("existing_any_callback"))
    c2 = _g(a, "consumer", "join", "stable_s")
    k2 = _g(a, "classic", "join", "stable_s")
    if isinstance(c2, float) and isinstance(k2, float) and k2:
        rows[first_join_row]["vs classic"] = f"{c2 / k2:.2f}x"
    b = res.get("b", {})
    row(
        f"3. consumer members formed steady ({args.members:,} in groups of {args.group_size})",
        "s",
        _g(b, "consumer_form", "steady_s"),
    )
    row(
        "   RSS per consumer-protocol member",
        "bytes",
        _g(b, "consumer_form", "rss_per_member_bytes"),
    )
    row("   RSS per classic member", "bytes", _g(b, "classic_form", "rss_per_member_bytes"))
    for i, rnd in enumerate(b.get("rounds", []), 1):
        c, k = rnd["consumer"], rnd["classic"]
        ratio = (
            f"{c['heartbeats_per_s'] / k['heartbeats_per_s']:.2f}x"
            if k.get("heartbeats_per_s")
            else None
        )
        row(
            f"3. round {i}: ConsumerGroupHeartbeat v1",
            "hb/s",
            c["heartbeats_per_s"],
            target=">= classic",
            ok=c["heartbeats_per_s"] >= k["heartbeats_per_s"],
            vs=ratio,
        )
        row("   p50", "ms", c["p50_ms"])
        row("   p99", "ms", c["p99_ms"])
        row(
            "   errors / not-steady answers",
            "",
            f"{c['errors']} / {sum(c['not_steady_answers'].values())}",
        )
        row("   server CPU per heartbeat", "us", c["server_cpu_us_per_hb"])
        row(
            "   server / generator CPU",
            "cores",
            f"{c['server_cores']:.2f} / {c['client_cores']:.2f}",
        )
        row(f"3. round {i}: classic Heartbeat v4", "hb/s", k["heartbeats_per_s"])
        row("   p50", "ms", k["p50_ms"])
        row("   p99", "ms", k["p99_ms"])
        row("   errors", "", k["errors"])
        row("   server CPU per heartbeat", "us", k["server_cpu_us_per_hb"])
        row(
            "   server / generator CPU",
            "cores",
            f"{k['server_cores']:.2f} / {k['client_cores']:.2f}",
        )
    return rows


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    """The options, with --quick's and the derived defaults filled in (bench_vs_kafka builds
    its options for run_protocol here too)."""
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--quick", action="store_true", help="1,000 members, 3 s windows, 3 s settle")
    ap.add_argument("--phases", default="1,2,3", help="1 and 2 run together (process A)")
    ap.add_argument("--consumers", type=int, default=50, help="librdkafka consumers (1, 2)")
    ap.add_argument("--partitions", type=int, default=100, help="partitions of the topic (1, 2)")
    ap.add_argument("--settle-s", type=float, help="how long stable must last (6; --quick 3)")
    ap.add_argument("--stable-timeout-s", type=float, default=120.0)
    ap.add_argument("--members", type=int, help="members per protocol for 3 (10000; --quick 1000)")
    ap.add_argument("--group-size", type=int, default=50)
    ap.add_argument("--hb-rounds", type=int, default=2, help="consumer+classic load windows")
    ap.add_argument("--hb-conns", type=int, default=32)
    ap.add_argument("--hb-inflight", type=int, default=64)
    ap.add_argument("--duration", type=float, help="load window seconds (10; --quick 3)")
    ap.add_argument("--form-conns", type=int, default=5000, help="classic forming connections")
    ap.add_argument("--form-delay-ms", type=int, default=100, help="ours, process B")
    ap.add_argument("--form-timeout-s", type=float, default=120.0)
    ap.add_argument("--steady-interval-ms", type=int, default=5000, help="server's setting")
    ap.add_argument("--no-tansu", action="store_true", help="skip the Tansu ApiVersions probe")
    ap.add_argument("--json", type=Path, help="also write the JSON figures here")
    ap.add_argument("--work-dir", type=Path, help="parent of the temporary data dirs")
    ap.add_argument("--keep", action="store_true", help="keep the data dirs and logs")
    ap.add_argument("--ours-arg", action="append", default=[], help="extra `serve` argument")
    args = ap.parse_args(argv)
    args.members = args.members or (1000 if args.quick else 10_000)
    args.duration = args.duration or (3.0 if args.quick else 10.0)
    args.settle_s = args.settle_s or (3.0 if args.quick else 6.0)
    args.warmup = 0.5 if args.quick else 1.0
    args.settle = 1.0 if args.quick else 2.0
    args.session_ms = 60_000  # classic members of phase 3 (bench_groups' default)
    args.open_batch = 200  # bench_groups' default: forming connections opened at once
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    phases = {p.strip() for p in args.phases.split(",") if p.strip()}

    t_start = time.perf_counter()
    work = Path(tempfile.mkdtemp(prefix="bench-kip848-", dir=args.work_dir))
    res: dict[str, Any] = {"errors": {}}
    try:
        if not args.no_tansu:
            ensure_tansu()
            log("tansu: ApiVersions ...")
            try:
                res["tansu"] = probe_tansu(work)
                log(f"tansu: {res['tansu']}")
            except Exception as e:  # noqa: BLE001
                res["errors"]["tansu"] = f"{type(e).__name__}: {e}"
        if phases & {"1", "2"}:
            try:
                res["a"] = process_a(work, args)
            except Exception as e:  # noqa: BLE001
                res["errors"]["process_a"] = f"{type(e).__name__}: {e}"
                traceback.print_exc(file=sys.stderr)
        if "3" in phases:
            try:
                res["b"] = process_b(work, args)
            except Exception as e:  # noqa: BLE001
                res["errors"]["process_b"] = f"{type(e).__name__}: {e}"
                traceback.print_exc(file=sys.stderr)
    finally:
        if args.keep:
            log(f"data dirs and logs kept in {work}")
        else:
            import shutil

            shutil.rmtree(work, ignore_errors=True)
    wall = time.perf_counter() - t_start

    tansu = res.get("tansu")
    if tansu is None:
        tansu_cell = None
    elif tansu["lists_consumer_group_heartbeat_68"]:
        tansu_cell = "not run"
    else:
        tansu_cell = "n/a"
    rows = build_rows(res, args, tansu_cell)
    title = (
        f"bench_kip848: ours only; KIP-848 vs classic on the same server; {os.cpu_count()} CPUs; "
        f"(1,2) {args.consumers} librdkafka consumers, {args.partitions} partitions, "
        f"settle {args.settle_s:g} s; (3) {args.members:,} members per protocol, "
        f"{args.hb_conns} conns x {args.hb_inflight} in flight, {args.duration:g} s windows"
    )
    print()
    print_table(rows, title=title)
    if tansu is not None:
        listed = tansu["lists_consumer_group_heartbeat_68"]
        print(
            f"  tansu {TANSU_VERSION}: ApiVersions "
            + ("lists" if listed else "does not list")
            + f" ConsumerGroupHeartbeat (68){'' if listed else ' -> n/a'}"
            + f"; ConsumerGroupDescribe (69): {tansu['api_69'] or 'not listed'}"
        )
    for proto in ("consumer", "classic"):
        p = _g(res, "a", proto) or {}
        for key in ("formation", "join"):
            d = p.get(key) or {}
            if d.get("stable_then_changed"):
                print(
                    f"  {proto} {key}: looked stable, then changed "
                    f"{d['stable_then_changed']} time(s)"
                )
            if d.get("changed_without_giving_up"):
                print(
                    f"  {proto} {key}: members that changed without giving up partitions: "
                    f"{d['changed_without_giving_up']}"
                )
            if d and not d.get("stable"):
                print(f"  {proto} {key}: NOT stable: {json.dumps(d, default=str)}")
        if p.get("client_errors") or p.get("client_warnings"):
            print(
                f"  {proto}: librdkafka errors {p.get('client_errors')}, warnings "
                f"{p.get('client_warnings')}"
            )
            for ex in p.get("client_error_examples", []) + p.get("client_warning_examples", []):
                print(f"    {ex}")
    for key in ("a", "b"):
        for w in _g(res, key, "server_log_warnings") or []:
            print(f"  server {key} log: {w}")
    cf = _g(res, "b", "consumer_form")
    if cf:
        print(
            f"  (3) consumer members: joined in {cf['join_all_s']:.1f} s, steady after "
            f"{cf['rounds']} heartbeat rounds; describe {cf['describe_states']}; errors "
            f"{cf['errors']}; steady after the load: {_g(res, 'b', 'steady_after')}"
        )
    for key, err in res["errors"].items():
        print(f"  error {key}: {err}")
    for key in ("a", "b"):
        for k2, err in (_g(res, key, "errors") or {}).items():
            print(f"  error {key}.{k2}: {err}")
    print(f"  wall time {wall:.0f} s")

    doc = {
        "benchmark": "bench_kip848",
        "time": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        "config": {k: (str(v) if isinstance(v, Path) else v) for k, v in vars(args).items()},
        "host": {
            "cpus": os.cpu_count(),
            "python": platform.python_version(),
            "platform": platform.platform(),
        },
        "results": res,
        "wall_seconds": wall,
    }
    text = json.dumps(doc, default=str, allow_nan=True)
    if args.json:
        args.json.write_text(json.dumps(doc, default=str, indent=2) + "\n")
    print(text)
    ok = not res["errors"] and not _g(res, "a", "errors") and not _g(res, "b", "errors")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
