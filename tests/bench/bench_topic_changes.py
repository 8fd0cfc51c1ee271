"""Topic changes beside other traffic: does creating or deleting a big topic stall the server?

    python tests/bench/bench_topic_changes.py [--partitions 3000] [--servers tansu,ours]
                                              [--json PATH]

For each server, in a fresh process: a probe connection sends ApiVersions (answered on the
same event loop as every group and offset request), one at a time with 1 ms between them,
while a confluent-kafka AdminClient creates a topic of --partitions partitions and then
deletes it. Prints per change its wall time (the AdminClient call) and the probe's worst
and p99 latency while it ran: a server that changes the topic in one piece makes every
other request wait that long (ours did: 0.83 s for 3,000 partitions created, 0.45 s
deleted). Tansu is memory-only here, so its changes write nothing. Never asserts a time.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import tempfile
import time
from pathlib import Path

if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from tests.bench import groupload as gl
from tests.bench import peers

API_VERSIONS = 18


async def _measure(bootstrap: str, partitions: int) -> dict:
    from confluent_kafka.admin import AdminClient, NewTopic

    conn = await gl.Conn.open(bootstrap)
    latencies_s: list[float] = []
    stop = asyncio.Event()

    async def probe() -> None:
        while not stop.is_set():
            started = time.perf_counter()
            await conn.call(API_VERSIONS, 3, gl.api_versions_body())
            latencies_s.append(time.perf_counter() - started)
            await asyncio.sleep(0.001)

    admin = AdminClient({"bootstrap.servers": bootstrap, "log_level": 0})

    def create() -> None:
        topic = NewTopic("bench-big", num_partitions=partitions, replication_factor=1)
        for future in admin.create_topics([topic], request_timeout=300).values():
            future.result()

    def delete() -> None:
        for future in admin.delete_topics(["bench-big"], request_timeout=300).values():
            future.result()

    prober = asyncio.create_task(probe())
    loop = asyncio.get_running_loop()
    figures: dict = {"partitions": partitions}
    try:
        await asyncio.sleep(0.5)
        for name, change in (("create", create), ("delete", delete)):
            latencies_s.clear()
            started = time.perf_counter()
            await loop.run_in_executor(None, change)
            took_s = time.perf_counter() - started
            await asyncio.sleep(0.2)  # the probe's answers to requests sent meanwhile
            ordered = sorted(latencies_s)
            figures[name] = {
                "seconds": took_s,
                "probe_max_ms": ordered[-1] * 1000,
                "probe_p99_ms": ordered[int(len(ordered) * 0.99)] * 1000,
                "probes": len(ordered),
            }
    finally:
        stop.set()
        await prober
        conn.close()
    return figures


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--partitions", type=int, default=3000)
    parser.add_argument("--servers", default="tansu,ours")
    parser.add_argument("--json", type=Path)
    args = parser.parse_args(argv)
    results: dict[str, dict] = {}
    for name in args.servers.split(","):
        with tempfile.TemporaryDirectory() as work:
            run = peers.run_tansu if name == "tansu" else peers.run_groupcoord
            with run(peers.free_port(), Path(work) / "data") as peer:
                results[name] = asyncio.run(_measure(str(peer), args.partitions))
    rows = []
    for change in ("create", "delete"):
        for key, unit, label in (
            ("seconds", "s", f"{change} a {args.partitions:,}-partition topic"),
            ("probe_max_ms", "ms", "  probe worst latency meanwhile"),
            ("probe_p99_ms", "ms", "  probe p99 meanwhile"),
        ):
            row = {"metric": label, "unit": unit}
            for name, figures in results.items():
                row[name] = figures[change][key]
            rows.append(row)
    peers.print_table(rows, title=f"bench_topic_changes: {args.partitions:,} partitions")
    line = json.dumps({"benchmark": "bench_topic_changes", "servers": results})
    print(line)
    if args.json:
        args.json.write_text(line)
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
