"""The analytics job's decode rate (issue 19's target: 300,000 coordinator records/s, a log
of 10 million offset commits processed in under 40 s with availableNow).

Two figures, printed:

1. The decoder alone (pipeline/coordinator_log.py's decode_batch, the function Spark's
   mapInArrow runs), on Arrow batches of 10,000 OffsetCommit records as clients write them
   (v3 and v4 values, a few hundred distinct keys), in this process: records/s per core.
2. The whole job end to end: a groupcoord server whose __consumer_offsets holds --commits
   OffsetCommit records (committed through confluent-kafka, --per-request partitions per
   OffsetCommit), read once by the job (availableNow) through Spark and its Kafka connector
   in a local[2] SparkSession, all three tables written; the wall time, the rate and the
   projection to 10 million records at that rate (Spark's start-up, paid once, excluded:
   the session is up before the clock starts; the query's own planning is included).

    python -m tests.bench.bench_analytics [--commits 200000] [--decode 500000]

The machine is shared: compare figures of one run, not across runs.
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path

import pyarrow as pa
import pyarrow.dataset as ds
from confluent_kafka import Consumer, TopicPartition

from groupcoord.pipeline.analytics import AnalyticsBatches, start_analytics
from groupcoord.pipeline.coordinator_log import decode_batch
from groupcoord.protocol.records import OffsetCommitKey, OffsetCommitValue, encode_key, encode_value
from tests.integration.test_clients import create_topic
from tests.jvm.spark_session import spark_session
from tests.support import serving

TOPIC = "bench-analytics"
TARGET_PER_S = 300_000
PROJECTED = 10_000_000


def decode_rate(records: int, batch_rows: int = 10_000) -> float:
    """Records/s of decode_batch over `records` OffsetCommit records in Arrow batches."""
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
    start = time.perf_counter()
    for _ in range(rounds):
        decode_batch(batch, memo)
    return rounds * batch_rows / (time.perf_counter() - start)


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


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--commits", type=int, default=200_000)
    parser.add_argument("--per-request", type=int, default=500)
    parser.add_argument("--decode", type=int, default=500_000)
    args = parser.parse_args()

    rate = decode_rate(args.decode)
    print(f"decoder alone: {rate:,.0f} records/s on one core (target {TARGET_PER_S:,})")

    with tempfile.TemporaryDirectory() as tmp_dir:
        tmp = Path(tmp_dir)
        with serving(tmp / "data", offsets_partitions=2) as server:
            start = time.perf_counter()
            fill_log(server.bootstrap, args.commits, args.per_request)
            print(f"log filled: {args.commits:,} commits in {time.perf_counter() - start:.1f} s")
            with spark_session(tmp / "spark") as spark:
                start = time.perf_counter()
                batches = AnalyticsBatches(server.bootstrap, tmp / "out")
                query = start_analytics(
                    spark, server.bootstrap, tmp / "out", once=True, batches=batches
                )
                query.awaitTermination()
                took = time.perf_counter() - start
                assert query.exception() is None, query.exception()
                steps = batches.timings
                rows = ds.dataset(tmp / "out" / "offset_commits", partitioning="hive").count_rows()
    job_rate = rows / took
    print(
        f"job, availableNow: {rows:,} offset commits in {took:.1f} s = {job_rate:,.0f} "
        f"records/s; projected {PROJECTED:,} records: {PROJECTED / job_rate:.0f} s (target 40 s)"
    )
    print(f"job's steps (s): {steps}")


if __name__ == "__main__":
    main()
