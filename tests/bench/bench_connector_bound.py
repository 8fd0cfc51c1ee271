"""What bounds the analytics job from outside the project: Spark's Kafka connector alone
(issue 19's target: 10 million coordinator records in under 40 s with availableNow).

The same OffsetCommit history (--commits records, --per-request partitions per
OffsetCommit, committed through confluent-kafka) is written to groupcoord's
`__consumer_offsets` and to Apache Kafka 4.4's (tests/jvm/kafka_broker.py; its log
cleaner kept off the history by a large offsets segment). Then, in one local[2]
SparkSession, a bare Structured Streaming query over each (availableNow, the analytics
job's source options, Spark's `noop` sink: no Python, only the connector's read and
Spark's rows), with the Kafka consumer's defaults and with the job's fetch options
(SOURCE_OPTIONS), alternately, --rounds times each after a warm-up; per read its wall time
and the CPU seconds of Spark's processes and of the broker, as CPU seconds per million
records. `--variant name:opt=value,...` adds reads with more connector options (e.g.
`nocrc:kafka.check.crcs=false`). Also printed: how each broker's log batches the records
(records per batch, compression), read by Fetch.

    python -m tests.bench.bench_connector_bound [--commits 1000000] [--rounds 2]
        [--variant NAME:OPT=V,...] [--jfr DIR] [--jvm-flags "..."] [--peers groupcoord,kafka]

--jfr DIR records the Spark JVM with Java Flight Recorder (profile settings) into
DIR/spark.jfr; summarise it with `jfr print --events jdk.ExecutionSample`.
The machine is shared: compare figures of one run, not across runs.
"""

from __future__ import annotations

import argparse
import os
import statistics
import tempfile
import time
from contextlib import ExitStack
from pathlib import Path
from typing import Any

from groupcoord.pipeline.analytics import (
    OFFSETS_TOPIC,
    SOURCE_OPTIONS,
    offsets_reader,
    source_columns,
)
from tests.bench.bench_analytics import fill_log, tree_cpu_seconds
from tests.bench.peers import free_port, run_groupcoord, run_kafka
from tests.jvm.spark_session import spark_session

# Kafka's offsets topic as groupcoord's in the bench: 2 partitions, and segments large
# enough that the cleaner never compacts the history being read.
KAFKA_OVERRIDES = {
    "offsets.topic.num.partitions": "2",
    "offsets.topic.segment.bytes": str(1 << 30),
    "group.initial.rebalance.delay.ms": "0",
}
OFFSETS_PARTITIONS = 2
# The analytics job's split of a partition over tasks (pipeline/analytics.py source_stream);
# its fetch options (SOURCE_OPTIONS) are a variant, against the consumer's defaults.
JOB_OPTIONS = {"maxRecordsPerPartition": "250000", "minPartitions": "2"}


def batch_shapes(bootstrap: str, partitions: int, sample_batches: int = 200) -> str:
    """Records per batch and compression of the log's first batches, per partition (Fetch
    through the raw client)."""
    out = []
    for partition in range(partitions):
        records, batches, codecs = _fetch_shapes(bootstrap, partition, sample_batches)
        if batches:
            out.append(
                f"p{partition}: {batches} batches, {records / batches:.1f} records/batch, "
                f"compression {sorted(codecs)}"
            )
    return "; ".join(out) or "empty"


def _fetch_shapes(bootstrap: str, partition: int, wanted: int) -> tuple[int, int, set[int]]:
    """(records, batches, compression codecs) of up to `wanted` batches from offset 0: a
    plain Fetch v4 over a socket, its batches' headers read."""
    import socket
    import struct

    host, port = bootstrap.rsplit(":", 1)
    topic = OFFSETS_TOPIC.encode()
    body = struct.pack(">iiiib", -1, 500, 1, 4 << 20, 0)  # replica, wait, min, max, isolation
    body += struct.pack(">i", 1) + struct.pack(">h", len(topic)) + topic
    body += struct.pack(">i", 1) + struct.pack(">iqi", partition, 0, 4 << 20)
    header = struct.pack(">hhi", 1, 4, 7) + struct.pack(">h", 5) + b"bench"
    frame = header + body
    with socket.create_connection((host, int(port)), timeout=30) as sock:
        sock.sendall(struct.pack(">i", len(frame)) + frame)
        size = struct.unpack(">i", _read(sock, 4))[0]
        data = _read(sock, size)
    at = 4 + 4 + 4  # correlation id, throttle, topics count
    (name_len,) = struct.unpack_from(">h", data, at)
    at += 2 + name_len + 4  # name, partitions count
    at += 4 + 2 + 8 + 8  # partition, error, high watermark, last stable offset
    (aborted,) = struct.unpack_from(">i", data, at)
    at += 4 + max(aborted, 0) * 16
    (records_size,) = struct.unpack_from(">i", data, at)
    at += 4
    end = at + records_size
    records = batches = 0
    codecs: set[int] = set()
    while at + 61 <= end and batches < wanted:
        (length,) = struct.unpack_from(">i", data, at + 8)
        if at + 12 + length > end:
            break
        (attributes,) = struct.unpack_from(">h", data, at + 21)
        (count,) = struct.unpack_from(">i", data, at + 57)
        records += count
        batches += 1
        codecs.add(attributes & 7)
        at += 12 + length
    return records, batches, codecs


def _read(sock: Any, size: int) -> bytes:
    chunks = []
    while size:
        chunk = sock.recv(min(size, 1 << 20))
        if not chunk:
            raise ConnectionError("closed")
        chunks.append(chunk)
        size -= len(chunk)
    return b"".join(chunks)


def bare_read(spark: Any, bootstrap: str, work: Path, options: dict[str, str]) -> int:
    """One availableNow query over the log into Spark's noop sink; the records it read."""
    reader = offsets_reader(spark, bootstrap, OFFSETS_PARTITIONS, {**JOB_OPTIONS, **options})
    source = source_columns(reader.load())
    checkpoint = work / f"ckpt-{time.monotonic_ns()}"
    query = (
        source.writeStream.format("noop")
        .trigger(availableNow=True)
        .option("checkpointLocation", str(checkpoint))
        .start()
    )
    query.awaitTermination()
    assert query.exception() is None, query.exception()
    return sum(int(p["numInputRows"]) for p in query.recentProgress)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--commits", type=int, default=1_000_000)
    parser.add_argument("--per-request", type=int, default=500)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--peers", default="groupcoord,kafka")
    parser.add_argument("--variant", action="append", default=[], help="NAME:OPT=V,OPT=V")
    parser.add_argument("--jvm-flags", default="-XX:+UseParallelGC")
    parser.add_argument("--driver-memory", default="2g")
    parser.add_argument("--jfr", type=Path, default=None)
    parser.add_argument("--groupcoord-root", type=Path, default=None, help="another checkout")
    args = parser.parse_args()
    variants: dict[str, dict[str, str]] = {
        "consumer defaults": {},
        "the job's fetch options": SOURCE_OPTIONS,
    }
    for spec in args.variant:
        name, _, opts = spec.partition(":")
        variants[name] = dict(item.split("=", 1) for item in opts.split(",") if item)
    jvm_flags = args.jvm_flags
    if args.jfr:
        args.jfr.mkdir(parents=True, exist_ok=True)
        jvm_flags += f" -XX:StartFlightRecording=filename={args.jfr / 'spark.jfr'},settings=profile"
    wanted = args.peers.split(",")
    with tempfile.TemporaryDirectory() as tmp_dir, ExitStack() as stack:
        tmp = Path(tmp_dir)
        peers: dict[str, Any] = {}
        if "groupcoord" in wanted:
            extra = ["--set", f"offsets_partitions={OFFSETS_PARTITIONS}"]
            extra += ["--set", f"offsets_segment_bytes={1 << 30}"]  # as Kafka's: no compaction
            kwargs = {"repo_root": args.groupcoord_root} if args.groupcoord_root else {}
            peers["groupcoord"] = stack.enter_context(
                run_groupcoord(free_port(), tmp / "groupcoord", extra, **kwargs)
            )
        if "kafka" in wanted:
            peers["kafka"] = stack.enter_context(
                run_kafka(free_port(), tmp / "kafka", KAFKA_OVERRIDES)
            )
        for name, peer in peers.items():
            started = time.perf_counter()
            fill_log(str(peer), args.commits, args.per_request)
            print(
                f"{name}: {args.commits:,} commits in {time.perf_counter() - started:.1f} s; "
                f"its log: {batch_shapes(str(peer), OFFSETS_PARTITIONS)}",
                flush=True,
            )
        spark = stack.enter_context(spark_session(tmp / "spark", jvm_flags, args.driver_memory))
        for peer in peers.values():
            bare_read(spark, str(peer), tmp, {})  # warm-up: JIT, connections
        per_million: dict[tuple[str, str], list[float]] = {}
        me = os.getpid()
        for round_ in range(args.rounds):
            for variant, options in variants.items():
                for name, peer in peers.items():
                    brokers0 = {n: tree_cpu_seconds(p.pid) for n, p in peers.items()}
                    all0 = tree_cpu_seconds(me)
                    started = time.perf_counter()
                    rows = bare_read(spark, str(peer), tmp, options)
                    wall = time.perf_counter() - started
                    brokers = {n: tree_cpu_seconds(p.pid) - brokers0[n] for n, p in peers.items()}
                    spark_cpu = tree_cpu_seconds(me) - all0 - sum(brokers.values())
                    millions = rows / 1e6
                    per_million.setdefault((variant, name), []).append(spark_cpu / millions)
                    print(
                        f"round {round_} [{variant}] {name}: {rows:,} records in {wall:.1f} s "
                        f"= {rows / wall:,.0f}/s; CPU per million: Spark "
                        f"{spark_cpu / millions:.2f} s, broker {brokers[name] / millions:.2f} s",
                        flush=True,
                    )
    for (variant, name), values in per_million.items():
        print(f"median [{variant}] {name}: Spark {statistics.median(values):.2f} CPU-s/million")


if __name__ == "__main__":
    main()
