"""serve --cluster on PostgreSQL: produce MB/s of one cluster node (its partitions stored in
PostgreSQL, each group-commit round one fenced transaction) against a local-mode server
(segment files, fsync per round) in the same run (issue 22's target: at least 30%).

    python -m tests.bench.bench_cluster_produce [--messages 200000] [--partitions 4]
                                                [--rounds 2]

Each run: a fresh server (the cluster node alone on a throwaway PostgreSQL with fsync on,
so it leads every partition), a topic of `--partitions` partitions, then bench_data_plane's
throughput producer (one confluent-kafka Producer, acks=1, 1 KiB values, linger.ms=5, no
compression) sending `--messages`, timed from the first produce() to flush() done. The
runs alternate local / cluster. The server's CPU excludes PostgreSQL's, reported beside it.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

from confluent_kafka.admin import AdminClient

from tests.bench.bench_cluster import postgres_cpu_seconds
from tests.bench.bench_data_plane import VALUE_BYTES, bench_produce, create_topics
from tests.bench.bench_workers import wait_listening
from tests.bench.peers import run_groupcoord
from tests.postgres_server import postgres_server
from tests.support import free_ports

TOPIC = "produce-bench"


def wait_led(bootstrap: str, partitions: int, timeout_s: float = 120) -> None:
    """Until Metadata names a leader for every partition (cluster: leases taken, loaded)."""
    admin = AdminClient({"bootstrap.servers": bootstrap})
    deadline = time.monotonic() + timeout_s
    while True:
        topic = admin.list_topics(TOPIC, timeout=10).topics[TOPIC]
        if len(topic.partitions) == partitions and all(
            p.leader >= 0 and p.error is None for p in topic.partitions.values()
        ):
            return
        if time.monotonic() > deadline:
            raise TimeoutError("partitions without a leader")
        time.sleep(0.2)


def run(mode: str, args: argparse.Namespace, root: Path, dsn: str) -> dict[str, float]:
    port = free_ports(1)
    extra = ["--cluster", dsn, "--node-id", "1"] if mode == "cluster" else []
    data = root / f"{mode}-{time.monotonic_ns()}"
    value = b"v" * VALUE_BYTES
    with run_groupcoord(port, data, extra) as peer:
        wait_listening(port)
        create_topics(str(peer), [(TOPIC, args.partitions)], exist_ok=True)
        wait_led(str(peer), args.partitions)
        pg0 = postgres_cpu_seconds()
        result = bench_produce(peer, args.messages, value, topic=TOPIC)
        result["postgres_cpu_s"] = postgres_cpu_seconds() - pg0 if mode == "cluster" else 0.0
        return result


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--messages", type=int, default=200_000)
    ap.add_argument("--partitions", type=int, default=4)
    ap.add_argument("--rounds", type=int, default=2)
    args = ap.parse_args(argv)
    results: dict[str, list[dict[str, float]]] = {"local": [], "cluster": []}
    with tempfile.TemporaryDirectory(prefix="bench-cluster-produce-") as tmp:
        root = Path(tmp)
        with postgres_server(root / "pg") as pg:
            for _ in range(args.rounds):
                for mode in ("local", "cluster"):
                    results[mode].append(run(mode, args, root, pg.dsn))
    names = ["mib_per_s", "msgs_per_s", "seconds", "server_cpu_s", "postgres_cpu_s"]
    print(f"{'mode':>8} {'run':>3} " + " ".join(f"{n:>16}" for n in names))
    for mode, runs in results.items():
        for k, r in enumerate(runs):
            print(f"{mode:>8} {k + 1:>3} " + " ".join(f"{r[n]:>16,.2f}" for n in names))
    med = {m: statistics.median(r["mib_per_s"] for r in runs) for m, runs in results.items()}
    print(
        f"\nmedians: local {med['local']:,.1f} MiB/s, cluster node {med['cluster']:,.1f} MiB/s:"
        f" x{med['cluster'] / med['local']:.2f} (target 0.3)"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
