"""The web page's API at many groups (issue 20, item 6; target: answers in under 50 ms at
1,000 groups): GET /api/groups (every group with state, protocol, members and total lag)
and GET /api/groups/<group> (one group with lag per partition) on a real server.

    python tests/bench/bench_web_api.py [--groups 1000] [--partitions 4] [--requests 50]
                                        [--members 20]

Starts the server (tests/support.py), produces to a topic of --partitions partitions,
commits an offset on each partition for --groups groups (AdminClient), makes --members of
them live (confluent-kafka consumers, classic protocol), then times --requests answers of
each endpoint, one at a time from this process (the time until the whole body is read,
HTTP and JSON included). Prints p50, p95 and max in ms, the server process's CPU time per
answer (user + system from /proc, a figure other processes' load hardly changes, unlike
the wall-clock ones) and the answer's size. Never asserts: figures only.
"""

from __future__ import annotations

import argparse
import http.client
import os
import statistics
import tempfile
import time
from pathlib import Path

from confluent_kafka import Consumer, ConsumerGroupTopicPartitions, Producer, TopicPartition
from confluent_kafka.admin import AdminClient

from tests.integration.test_clients import create_topic
from tests.support import serving

TOPIC = "bench-web"


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--groups", type=int, default=1000)
    parser.add_argument("--partitions", type=int, default=4)
    parser.add_argument("--requests", type=int, default=50)
    parser.add_argument("--members", type=int, default=20)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp, serving(Path(tmp) / "data") as server:
        create_topic(server.bootstrap, TOPIC, args.partitions)
        producer = Producer({"bootstrap.servers": server.bootstrap, "linger.ms": 5})
        for i in range(100 * args.partitions):
            producer.produce(TOPIC, b"r%d" % i, partition=i % args.partitions)
        producer.flush(30)
        admin = AdminClient({"bootstrap.servers": server.bootstrap})
        futures = []
        for g in range(args.groups):
            offsets = [TopicPartition(TOPIC, p, g % 100) for p in range(args.partitions)]
            futures += admin.alter_consumer_group_offsets(
                [ConsumerGroupTopicPartitions(f"bench-group-{g:05d}", offsets)]
            ).values()
        for future in futures:
            future.result(60)
        consumers = []
        for m in range(args.members):
            consumer = Consumer(
                {
                    "bootstrap.servers": server.bootstrap,
                    "group.id": f"bench-live-{m:03d}",
                    "session.timeout.ms": 30000,
                }
            )
            consumer.subscribe([TOPIC])
            consumers.append(consumer)
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and not all(c.assignment() for c in consumers):
            for consumer in consumers:
                consumer.poll(0.05)
        try:
            for path in (
                "/api/groups",
                "/api/groups/bench-group-00500",
                "/api/groups/bench-live-000",
            ):
                assert server.proc is not None
                _time(server.metrics_port, path, args.requests, server.proc.pid)
        finally:
            for consumer in consumers:
                consumer.close()


def _cpu_s(pid: int) -> float:
    """User + system CPU seconds of process `pid` so far."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _time(port: int, path: str, requests: int, pid: int) -> None:
    took_ms = []
    size = 0
    cpu_before = _cpu_s(pid)
    for _ in range(requests):
        connection = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
        started = time.perf_counter()
        connection.request("GET", path)
        response = connection.getresponse()
        body = response.read()
        took_ms.append((time.perf_counter() - started) * 1000)
        connection.close()
        assert response.status == 200, (path, response.status)
        size = len(body)
    cpu_ms = (_cpu_s(pid) - cpu_before) * 1000 / requests
    took_ms.sort()
    p95 = took_ms[min(len(took_ms) - 1, int(len(took_ms) * 0.95))]
    print(
        f"GET {path}: p50 {statistics.median(took_ms):.1f} ms, p95 {p95:.1f} ms,"
        f" max {took_ms[-1]:.1f} ms over {requests} answers; server CPU {cpu_ms:.1f} ms an"
        f" answer ({size} bytes)"
    )


if __name__ == "__main__":
    main()
