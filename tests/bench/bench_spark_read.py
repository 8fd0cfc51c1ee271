"""A Spark batch read through the real connector (spark-sql-kafka-0-10), from groupcoord
and from Apache Kafka side by side in one run (issue 19's target: groupcoord at least 80%
of Kafka's rate for 1 million 1 KiB records).

Both peers get the same topic (3 partitions) and the same records, produced once each by
confluent-kafka; then `spark.read.format("kafka")` over the whole topic, summing the
values' lengths so every record is fetched and decoded, alternately from each peer
(--rounds each, after one warm-up read of each). Printed: records/s and MB/s per read,
the median per peer, and groupcoord's median over Kafka's. One SparkSession (local[2]):
both peers are read by the same executors and the same machine, so only the ratio means
much on a busy machine.

    python -m tests.bench.bench_spark_read [--records 1000000] [--value-bytes 1024] [--rounds 3]
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

from confluent_kafka import Producer

from tests.bench.peers import free_port, run_groupcoord, run_kafka
from tests.integration.test_clients import create_topic
from tests.jvm.spark_session import spark_session

TOPIC = "spark-read"
PARTITIONS = 3


def produce(bootstrap: str, records: int, value_bytes: int) -> None:
    producer = Producer(
        {
            "bootstrap.servers": bootstrap,
            "linger.ms": 20,
            "batch.size": 1_000_000,
            "queue.buffering.max.kbytes": 512_000,
            "acks": "all",
        }
    )
    value = b"v" * value_bytes
    for i in range(records):
        while True:
            try:
                producer.produce(TOPIC, value, partition=i % PARTITIONS)
                break
            except BufferError:
                producer.poll(0.05)
        if i % 10_000 == 0:
            producer.poll(0)
    assert producer.flush(300) == 0


def read_once(spark: Any, bootstrap: str) -> tuple[int, int, float]:
    """(records, value bytes, seconds) of one batch read of the whole topic."""
    started = time.perf_counter()
    row = (
        spark.read.format("kafka")
        .option("kafka.bootstrap.servers", bootstrap)
        .option("subscribe", TOPIC)
        .option("startingOffsets", "earliest")
        .option("endingOffsets", "latest")
        .load()
        .selectExpr("count(*) AS records", "sum(length(value)) AS bytes")
        .collect()[0]
    )
    return int(row["records"]), int(row["bytes"]), time.perf_counter() - started


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--records", type=int, default=1_000_000)
    parser.add_argument("--value-bytes", type=int, default=1024)
    parser.add_argument("--rounds", type=int, default=3, help="timed reads of each peer")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        with (
            run_groupcoord(free_port(), work / "groupcoord") as ours,
            run_kafka(free_port(), work / "kafka") as kafka,
            spark_session(work / "spark") as spark,
        ):
            peers = {"groupcoord": str(ours), "kafka": str(kafka)}
            for name, bootstrap in peers.items():
                create_topic(bootstrap, TOPIC, PARTITIONS)
                started = time.perf_counter()
                produce(bootstrap, args.records, args.value_bytes)
                print(
                    f"{name}: produced {args.records} records in "
                    f"{time.perf_counter() - started:.1f} s"
                )
            for bootstrap in peers.values():
                read_once(spark, bootstrap)  # warm-up: JIT, connections, page cache
            rates: dict[str, list[float]] = {name: [] for name in peers}
            for round_ in range(args.rounds):
                for name, bootstrap in peers.items():
                    records, value_bytes, seconds = read_once(spark, bootstrap)
                    assert records == args.records, (name, records)
                    rates[name].append(records / seconds)
                    print(
                        f"round {round_} {name}: {records / seconds:,.0f} records/s, "
                        f"{value_bytes / seconds / 1e6:.1f} MB/s ({seconds:.2f} s)"
                    )
    medians = {name: statistics.median(r) for name, r in rates.items()}
    for name, rate in medians.items():
        print(f"median {name}: {rate:,.0f} records/s")
    print(f"groupcoord / kafka: {medians['groupcoord'] / medians['kafka']:.2f}")


if __name__ == "__main__":
    main()
