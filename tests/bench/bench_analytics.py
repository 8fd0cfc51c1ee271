"""The analytics job's decode rate (issue 19's target: 300,000 coordinator records/s, a log
of 10 million offset commits processed in under 40 s with availableNow), part by part.

Printed:

1. The decoder alone (pipeline/coordinator_log.py's decode_batch, the function Spark's
   mapInArrow runs), on Arrow batches of --arrow-batch OffsetCommit records as clients
   write them (v3 and v4 values, a few hundred distinct keys), in this process: records per
   second of CPU (one core).
2. A groupcoord server whose __consumer_offsets holds --commits OffsetCommit records
   (committed through confluent-kafka, --per-request partitions per OffsetCommit), then in
   one local[2] SparkSession (its start-up, paid once, excluded), each part of the job alone
   as a batch read of the log (`--parts`): the connector's read (rows to Spark's noop
   sink), read + mapInArrow decode (rows back to Spark), read + decode in the tasks that
   write offset_commits (what the job runs, commit_files.py); and
   the whole job (availableNow, all three tables), with its steps. Each with its wall time,
   the CPU seconds of Spark's processes and of the server, and records per wall second and
   per CPU second, then CPU seconds per million records split by process: Spark's JVM, its
   Python workers, this driver, the server. On this shared 2-core machine the wall figure
   follows the other load, the CPU figure much less.
3. With `--compare N`: N rounds of the whole job with session 17's settings (the Kafka
   consumer's fetch defaults, 10,000-row Arrow batches) and with the job's own, alternately,
   each on the same log into a new directory (every commit in its table once, checked).

    python -m tests.bench.bench_analytics [--commits 1000000] [--decode 1000000]
        [--max-offsets-per-trigger N] [--fetch-bytes N] [--conf spark.x=y ...]
        [--no-parts] [--compare N]

The machine is shared: compare figures of one run, not across runs.
"""

from __future__ import annotations

import argparse
import json
import os
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.dataset as ds
from confluent_kafka import Consumer, TopicPartition

from groupcoord.pipeline.analytics import (
    DEPRECATED_OFFSET_FETCHING,
    MAX_RECORDS_PER_TASK,
    OFFSETS_TOPIC,
    AnalyticsBatches,
    decoded,
    source_columns,
    start_analytics,
)
from groupcoord.pipeline.coordinator_log import decode_batch
from groupcoord.protocol.records import OffsetCommitKey, OffsetCommitValue, encode_key, encode_value
from tests.integration.test_clients import create_topic
from tests.jvm.spark_session import spark_session
from tests.support import serving

TOPIC = "bench-analytics"
TARGET_PER_S = 300_000
PROJECTED = 10_000_000
CLK_TCK = os.sysconf("SC_CLK_TCK")


def decode_rate(records: int, batch_rows: int = 10_000) -> float:
    """Records per CPU second of decode_batch over `records` OffsetCommit records in Arrow
    batches of `batch_rows`."""
    keys = [
        encode_key(OffsetCommitKey(f"group-{i % 40}", TOPIC, i % 64)) for i in range(batch_rows)
    ]
    values = [
        encode_value(
            OffsetCommitValue(offset=i, leader_epoch=5, commit_timestamp=1_700_000_000_000 + i),
            3 + i % 2,
        )
        for i in range(batch_rows)
    ]
    batch = pa.RecordBatch.from_arrays(
        [
            pa.array([0] * batch_rows, pa.int32()),
            pa.array(range(batch_rows), pa.int64()),
            pa.array([0] * batch_rows, pa.int64()),
            pa.array(keys, pa.binary()),
            pa.array(values, pa.binary()),
        ],
        names=["partition", "offset", "timestamp_ms", "key", "value"],
    )
    memo: dict[bytes, tuple[str, str, int]] = {}
    rounds = max(records // batch_rows, 1)
    start = time.process_time()
    for _ in range(rounds):
        decode_batch(batch, memo)
    return rounds * batch_rows / (time.process_time() - start)


def fill_log(bootstrap: str, commits: int, per_request: int) -> None:
    create_topic(bootstrap, TOPIC, per_request)
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "bench-analytics-group"})
    try:
        for round_ in range(commits // per_request):
            consumer.commit(
                offsets=[TopicPartition(TOPIC, p, round_ + 1) for p in range(per_request)],
                asynchronous=False,
            )
    finally:
        consumer.close()


def tree_cpu_seconds(root: int) -> float:
    """utime + stime of `root` and every descendant, the reaped ones' included."""
    return sum(tree_cpu_by_kind(root).values())


def tree_cpu_by_kind(root: int) -> dict[str, float]:
    """tree_cpu_seconds split by the kind of process: "java" (Spark's JVM, or a broker's),
    "python" (Spark's Python workers and any other Python descendant), "root" (`root`
    itself) and "other"."""
    parents: dict[int, int] = {}
    cpu: dict[int, float] = {}
    kinds: dict[int, str] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as f:
                comm, fields = f.read().split(" (", 1)[1].rsplit(")", 1)
        except (OSError, IndexError, ValueError):
            continue
        stat = fields.split()
        parents[int(entry)] = int(stat[1])
        cpu[int(entry)] = sum(int(x) for x in stat[11:15]) / CLK_TCK
        kinds[int(entry)] = "java" if comm == "java" else "python" if "python" in comm else "other"
    totals = {"java": 0.0, "python": 0.0, "root": 0.0, "other": 0.0}
    for pid, seconds in cpu.items():
        ancestor = pid
        while ancestor > 1 and ancestor != root:
            ancestor = parents.get(ancestor, 0)
        if ancestor == root:
            totals["root" if pid == root else kinds[pid]] += seconds
    return totals


class Meter:
    """Wall and CPU seconds of a part: Spark's (this process's tree less the server's) and
    the server's."""

    def __init__(self, server_pid: int, records: int) -> None:
        self.server_pid = server_pid
        self.records = records

    def __call__(self, label: str, part: Callable[[], Any]) -> Any:
        me = os.getpid()
        server0, all0 = tree_cpu_seconds(self.server_pid), tree_cpu_by_kind(me)
        start = time.perf_counter()
        result = part()
        wall = time.perf_counter() - start
        server = tree_cpu_seconds(self.server_pid) - server0
        kinds = {kind: s - all0[kind] for kind, s in tree_cpu_by_kind(me).items()}
        spark = sum(kinds.values()) - server
        # The server is a Python descendant of this process: its CPU is not Spark's.
        kinds["python"] -= server
        millions = self.records / 1e6
        print(
            f"{label}: {wall:.1f} s wall = {self.records / wall:,.0f} records/s; CPU: Spark "
            f"{spark:.1f} s ({self.records / max(spark, 1e-9):,.0f} records per CPU s), "
            f"server {server:.1f} s; CPU-s per million: JVM {kinds['java'] / millions:.2f}, "
            f"Python workers {kinds['python'] / millions:.2f}, driver "
            f"{kinds['root'] / millions:.2f}, server {server / millions:.2f}",
            flush=True,
        )
        return result


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--commits", type=int, default=1_000_000)
    parser.add_argument("--per-request", type=int, default=500)
    parser.add_argument("--decode", type=int, default=1_000_000)
    parser.add_argument("--arrow-batch", type=int, default=10_000)
    parser.add_argument("--offsets-partitions", type=int, default=2)
    parser.add_argument("--max-offsets-per-trigger", type=int, default=0, help="0: the job's")
    parser.add_argument("--fetch-bytes", type=int, default=0, help="0: the job's")
    parser.add_argument("--conf", action="append", default=[], help="spark.x=y, repeatable")
    parser.add_argument("--no-parts", action="store_true", help="the whole job only")
    parser.add_argument(
        "--compare",
        type=int,
        default=0,
        help="rounds of the whole job with session 17's settings and the job's, alternately",
    )
    parser.add_argument(
        "--jvm-flags",
        default="-XX:+UseParallelGC",
        help="the driver JVM's (default: the JVM's own JIT, as a deployed job runs; the "
        "tests' session uses C1 only, which starts faster and runs slower)",
    )
    parser.add_argument("--driver-memory", default="2g")
    args = parser.parse_args()

    rate = decode_rate(args.decode, args.arrow_batch)
    print(f"decoder alone: {rate:,.0f} records per CPU second (target {TARGET_PER_S:,})")

    options: dict[str, str] = {}
    if args.max_offsets_per_trigger:
        options["maxOffsetsPerTrigger"] = str(args.max_offsets_per_trigger)
    if args.fetch_bytes:
        options["kafka.max.partition.fetch.bytes"] = str(args.fetch_bytes)
    with tempfile.TemporaryDirectory() as tmp_dir:
        tmp = Path(tmp_dir)
        # Segments large enough that compaction leaves the whole history to be read.
        settings = {
            "offsets_partitions": args.offsets_partitions,
            "offsets_segment_bytes": 2**31 - 1,
        }
        with serving(tmp / "data", **settings) as server:
            start = time.perf_counter()
            fill_log(server.bootstrap, args.commits, args.per_request)
            print(f"log filled: {args.commits:,} commits in {time.perf_counter() - start:.1f} s")
            assert server.proc is not None
            meter = Meter(server.proc.pid, args.commits)
            with spark_session(tmp / "spark", args.jvm_flags, args.driver_memory) as spark:
                for setting in args.conf:
                    spark.conf.set(*setting.split("=", 1))
                if not args.no_parts:
                    parts(spark, server.bootstrap, tmp, meter, args.offsets_partitions, options)
                for round_ in range(args.compare):
                    for label, (before_options, arrow) in (
                        ("session 17's settings", SESSION_17),
                        ("the job's settings", ({}, None)),
                    ):
                        out = tmp / f"compare-{round_}-{len(label)}"
                        run_job(spark, server.bootstrap, out, meter, label, before_options, arrow)
                        count = ds.dataset(out / "offset_commits", partitioning="hive")
                        assert count.count_rows() == args.commits
                start = time.perf_counter()
                batches = run_job(spark, server.bootstrap, tmp / "out", meter, "", options, None)
                took = time.perf_counter() - start
                rows = ds.dataset(tmp / "out" / "offset_commits", partitioning="hive").count_rows()
    assert rows == args.commits, rows
    job_rate = rows / took
    print(
        f"job: {rows:,} offset commits in {took:.1f} s = {job_rate:,.0f} records/s; "
        f"projected {PROJECTED:,} records: {PROJECTED / job_rate:.0f} s (target 40 s)"
    )
    print(f"job's steps (s, over every micro-batch): {batches.timings}")


# What the job ran with before session 18 (`--compare`): Kafka's consumer defaults for its
# fetches, Spark's 10,000-row Arrow batches.
SESSION_17: tuple[dict[str, str], dict[str, str]] = (
    {
        "kafka.max.partition.fetch.bytes": str(1 << 20),
        "kafka.fetch.max.bytes": str(50 << 20),
        "kafka.max.poll.records": "500",
    },
    {
        "spark.sql.execution.arrow.maxBytesPerBatch": str(2**31 - 1),
        "spark.sql.execution.arrow.maxRecordsPerBatch": "10000",
    },
)


def run_job(
    spark: Any,
    bootstrap: str,
    out: Path,
    meter: Meter,
    label: str,
    options: dict[str, str],
    arrow_settings: dict[str, str] | None,
) -> AnalyticsBatches:
    """The whole job (availableNow, all three tables) into `out`, metered."""
    batches = AnalyticsBatches(bootstrap, out)
    if arrow_settings is not None:
        batches.arrow_settings = arrow_settings

    def job() -> None:
        query = start_analytics(spark, bootstrap, out, once=True, batches=batches, options=options)
        query.awaitTermination()
        assert query.exception() is None, query.exception()

    meter(f"whole job, availableNow{', ' + label if label else ''}", job)
    return batches


def parts(
    spark: Any, bootstrap: str, tmp: Path, meter: Meter, partitions: int, options: dict[str, str]
) -> None:
    """Each part of the job alone, as a batch read of the whole log."""
    spark.conf.set(DEPRECATED_OFFSET_FETCHING, "true")

    def source() -> Any:
        reader = (
            spark.read.format("kafka")
            .option("kafka.bootstrap.servers", bootstrap)
            .option("assign", json.dumps({OFFSETS_TOPIC: list(range(partitions))}))
            .option("startingOffsets", "earliest")
            .option("endingOffsets", "latest")
        )
        split = {  # the job's own (analytics.source_stream)
            "maxRecordsPerPartition": str(MAX_RECORDS_PER_TASK),
            "minPartitions": str(spark.sparkContext.defaultParallelism),
        }
        for name, value in {**split, **options}.items():
            if name != "maxOffsetsPerTrigger":
                reader = reader.option(name, value)
        return reader.load()

    def noop(frame: Any) -> None:
        frame.write.format("noop").mode("overwrite").save()

    noop(source())  # warm-up: JIT, connections, the Python workers
    meter("connector read", lambda: noop(source()))
    meter("read + mapInArrow decode", lambda: noop(decoded(source())))
    meter(
        "read + decode in tasks writing offset_commits",
        lambda: AnalyticsBatches(bootstrap, tmp / "parts").decode_and_write_commits(
            source_columns(source()), 0
        ),
    )


if __name__ == "__main__":
    main()
