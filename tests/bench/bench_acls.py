"""ACL checks: heartbeat and commit throughput with no authorizer vs 10,000 ACLs, side by side
in one run (issue 21's target: with ACLs at least 90 % of without).

    python tests/bench/bench_acls.py [--quick] [--rounds N] [--acls 10000]

Two groupcoord servers run at once: "none" (no authorizer) and "acls"
(authorizer_enabled, allow_everyone_if_no_acl_found so this client may create ACLs, and
--acls ACLs: literal and prefixed, TOPIC and GROUP, ALLOW and DENY, for 100 other
principals, plus the ALLOW READ ACLs the load needs: GROUP prefix `bench-` and the commit
topic for User:ANONYMOUS, so every check is decided by ACLs). Each round measures, on each
server in turn, the order alternating (so both share whatever else loads the machine):

1. **Heartbeats/s**: --members classic members (groups of one, formed up front), their
   Heartbeat v4 pre-encoded and pipelined over 8 connections, 32 in flight each, closed
   loop for D s (tests/bench/groupload.py's HeartbeatDriver).
2. **Durable commits/s**: 16 connections, each OffsetCommit v9 of its own group,
   8 keys in flight, closed loop for D s (groupload's CommitDriver).

Then, in this process, the StandardAuthorizer's decision rate with the same ACLs: a
repeated check (the decision cache) and an uncached one (every check decided afresh).

Prints the figures per round and the median ratio acls / none. The checks cost what the
handlers ask of the authorizer (acl-enforce's per-API checks; without them this measures
only the setting). The machine is shared: read the ratios, and even they are noisy.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

import groupload as gl  # noqa: E402
from confluent_kafka.admin import (  # noqa: E402
    AclBinding,
    AclOperation,
    AclPermissionType,
    AdminClient,
    NewTopic,
    ResourcePatternType,
    ResourceType,
)

from groupcoord.coordinator.security import acl_binding as ab  # noqa: E402
from groupcoord.coordinator.security.acl_model import (  # noqa: E402
    AclOperation as Op,
)
from groupcoord.coordinator.security.acl_model import (  # noqa: E402
    AclPermissionType as Perm,
)
from groupcoord.coordinator.security.acl_model import (  # noqa: E402
    PatternType,
)
from groupcoord.coordinator.security.acl_model import (  # noqa: E402
    ResourceType as RType,
)
from groupcoord.coordinator.security.standard_authorizer import StandardAuthorizer  # noqa: E402
from tests.support import ServerProcess, serving  # noqa: E402

COMMIT_TOPIC = "bench-acl-commit"
MARKER = 0x0123456789ABCDEF
HB_CONNS, HB_INFLIGHT = 8, 32
COMMIT_CONNS, COMMIT_INFLIGHT = 16, 8


def other_acls(count: int) -> list[tuple[int, str, int, str, int, int]]:
    """`count` ACLs naming other resources and principals: (type, name, pattern,
    principal, operation, permission) in Kafka's codes."""
    out = []
    for i in range(count):
        principal = f"User:u{i % 100}"
        kind = i % 10
        if kind < 5:
            out.append((2, f"other-topic-{i}", 3, principal, 3, 3))
        elif kind < 7:
            out.append((3, f"other-group-{i}", 3, principal, 3, 3))
        elif kind < 9:
            out.append((2 + i % 2, f"team-{i}-", 4, principal, 2, 3))
        else:
            out.append((2, f"secret-{i}", 3, "User:*", 3, 2))
    return out


def needed_acls() -> list[tuple[int, str, int, str, int, int]]:
    return [
        (3, "bench-", 4, "User:ANONYMOUS", 3, 3),  # READ on every bench group
        (2, COMMIT_TOPIC, 3, "User:ANONYMOUS", 3, 3),  # READ on the commit topic
    ]


def create_acls(bootstrap: str, acls: list[tuple[int, str, int, str, int, int]]) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    for start in range(0, len(acls), 2000):  # Kafka: at most 10,000 per request
        bindings = [
            AclBinding(
                ResourceType(t),
                n,
                ResourcePatternType(p),
                pr,
                "*",
                AclOperation(o),
                AclPermissionType(pe),
            )
            for t, n, p, pr, o, pe in acls[start : start + 2000]
        ]
        for future in admin.create_acls(bindings).values():
            future.result(timeout=120)


def prepare(proc: ServerProcess, acls: int | None) -> None:
    admin = AdminClient({"bootstrap.servers": proc.bootstrap})
    for future in admin.create_topics([NewTopic(COMMIT_TOPIC, 8, 1)]).values():
        future.result(timeout=60)
    if acls is not None:
        create_acls(proc.bootstrap, other_acls(acls) + needed_acls())


async def form(bootstrap: str, members: int) -> tuple[list[gl.Conn], list[list[gl.Template]]]:
    """`members` groups of one member each; their heartbeats dealt over HB_CONNS."""
    conns = await gl.open_many(bootstrap, 50)
    formed: list[dict[str, Any]] = []
    names = [f"bench-hb-{i:05d}" for i in range(members)]
    for start in range(0, members, 50):
        chunk = names[start : start + 50]
        formed += await asyncio.gather(
            *(gl.join_and_sync(c, g) for c, g in zip(conns, chunk, strict=False))
        )
    for c in conns:
        c.close()
    hb_conns = await gl.open_many(bootstrap, HB_CONNS)
    per_conn: list[list[gl.Template]] = [[] for _ in hb_conns]
    for i, (g, m) in enumerate(zip(names, formed, strict=True)):
        body = gl.heartbeat_body(g, m["generation"], m["member_id"])
        per_conn[i % HB_CONNS].append(gl.Template(gl.HEARTBEAT, 4, body))
    return hb_conns, per_conn


async def heartbeats(
    hb: tuple[list[gl.Conn], list[list[gl.Template]]], seconds: float
) -> tuple[float, int]:
    conns, per_conn = hb
    stats = gl.LoadStats()
    drivers = [
        gl.HeartbeatDriver(c, t, HB_INFLIGHT, stats) for c, t in zip(conns, per_conn, strict=True)
    ]
    stats.t_start = time.perf_counter() + 0.5
    stats.t_end = stats.t_start + seconds
    for d in drivers:
        d.start()
    await asyncio.sleep(0.5 + seconds)
    stats.running = False
    deadline = time.perf_counter() + 30
    while any(d.sent for d in drivers) and time.perf_counter() < deadline:
        await asyncio.sleep(0.01)
    return stats.done / seconds, sum(stats.errors.values())


async def commits(bootstrap: str, seconds: float) -> tuple[float, int]:
    conns = await gl.open_many(bootstrap, COMMIT_CONNS)
    try:
        stats = gl.LoadStats()
        drivers = [
            gl.CommitDriver(
                c, f"bench-commit-{i:03d}", COMMIT_TOPIC, COMMIT_INFLIGHT, stats, MARKER
            )
            for i, c in enumerate(conns)
        ]
        stats.t_start = time.perf_counter() + 0.5
        stats.t_end = stats.t_start + seconds
        for d in drivers:
            d.start()
        await asyncio.sleep(0.5 + seconds)
        stats.running = False
        deadline = time.perf_counter() + 30
        while any(d.outstanding for d in drivers) and time.perf_counter() < deadline:
            await asyncio.sleep(0.01)
        return stats.done / seconds, sum(stats.errors.values())
    finally:
        for c in conns:
            c.close()


def decision_rates(count: int, checks: int) -> dict[str, float]:
    """authorize() calls/s with `count` ACLs: a repeated check and an uncached one."""
    rates = {}
    for label, cache in (("cached", 100_000), ("uncached", 0)):
        a = StandardAuthorizer(cache_entries=cache)
        for t, n, p, pr, o, pe in other_acls(count) + needed_acls():
            a.add(ab.AclBinding(RType(t), n, PatternType(p), pr, "*", Op(o), Perm(pe)))
        started = time.perf_counter()
        for _ in range(checks):
            a.authorize("User:ANONYMOUS", "127.0.0.1", Op.READ, RType.GROUP, "bench-hb-00001")
        rates[label] = checks / (time.perf_counter() - started)
    return rates


async def run(args: argparse.Namespace) -> int:
    seconds = 2.0 if args.quick else args.seconds
    with tempfile.TemporaryDirectory(prefix="bench-acls-") as work:
        settings: dict[str, Any] = {"group_initial_rebalance_delay_ms": 0}
        with (
            serving(Path(work) / "none", **settings) as none,
            serving(
                Path(work) / "acls",
                authorizer_enabled="true",
                allow_everyone_if_no_acl_found="true",
                **settings,
            ) as acls,
        ):
            prepare(none, None)
            t0 = time.perf_counter()
            prepare(acls, args.acls)
            print(f"created {args.acls + 2} ACLs in {time.perf_counter() - t0:.1f} s", flush=True)
            hb = {
                "none": await form(none.bootstrap, args.members),
                "acls": await form(acls.bootstrap, args.members),
            }
            servers = {"none": none, "acls": acls}
            figures: dict[str, dict[str, list[float]]] = {
                k: {"hb": [], "commit": []} for k in servers
            }
            for r in range(args.rounds):
                # Alternate which goes first: whatever else loads the machine drifts.
                order = list(servers.items())
                for name, proc in order if r % 2 == 0 else order[::-1]:
                    rate, errors = await heartbeats(hb[name], seconds)
                    figures[name]["hb"].append(rate)
                    crate, cerrors = await commits(proc.bootstrap, seconds)
                    figures[name]["commit"].append(crate)
                    print(
                        f"round {r + 1} {name:>4}: heartbeats/s {rate:9.0f} (errors {errors})"
                        f"   commits/s {crate:8.0f} (errors {cerrors})",
                        flush=True,
                    )
            for kind, label, target in (("hb", "heartbeats/s", 0.9), ("commit", "commits/s", 0.9)):
                base = statistics.median(figures["none"][kind])
                with_acls = statistics.median(figures["acls"][kind])
                ratio = with_acls / base if base else float("nan")
                print(
                    f"{label:>13}: none {base:9.0f}   {args.acls} ACLs {with_acls:9.0f}   "
                    f"ratio {ratio:.2f} (target >= {target:.2f})"
                )
    rates = decision_rates(args.acls, 20_000 if args.quick else 200_000)
    print(
        f"authorize() with {args.acls} ACLs: cached {rates['cached']:,.0f}/s, "
        f"uncached {rates['uncached']:,.0f}/s"
    )
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="2 s per measurement, 1 round")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--seconds", type=float, default=5.0)
    parser.add_argument("--members", type=int, default=500)
    parser.add_argument("--acls", type=int, default=10_000)
    args = parser.parse_args(argv)
    if args.quick:
        args.rounds = 1
        args.members = min(args.members, 200)
    return asyncio.run(run(args))


if __name__ == "__main__":
    raise SystemExit(main())
