"""What the pipeline's offset committer (pipeline/offset_committer.py) adds to a Spark
micro-batch (issue 19's target: under 20 ms, median), measured side by side in one run.

One groupcoord server and one SparkSession; one topic of 3 partitions. The same streaming
query (availableNow, maxOffsetsPerTrigger) runs over the same records twice, alternately
without and with the listener attached, each from its own checkpoint. Printed per run: the
median triggerExecution time of its micro-batches (Spark's own figure for the batch), and for
the listener the median time spent in onQueryProgress (the listener thread's share: the
commit itself runs on the committer's worker thread) and how many commits reached the group.

    python -m tests.bench.bench_spark_listener [--batches 40] [--rounds 2]
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

from confluent_kafka import Producer

from groupcoord.pipeline.offset_committer import KafkaOffsetCommitter, PendingCommit
from tests.integration.test_clients import create_topic
from tests.jvm.spark_session import spark_session
from tests.support import serving

TOPIC = "bench-listener"
PARTITIONS = 3
PER_TRIGGER = 300


def run_query(spark: Any, bootstrap: str, checkpoint: Path, name: str) -> list[float]:
    """Triggers of one availableNow run: each micro-batch's triggerExecution in ms."""
    query = (
        spark.readStream.format("kafka")
        .option("kafka.bootstrap.servers", bootstrap)
        .option("subscribe", TOPIC)
        .option("startingOffsets", "earliest")
        .option("maxOffsetsPerTrigger", PER_TRIGGER)
        .load()
        .selectExpr("CAST(value AS STRING) AS value")
        .writeStream.format("noop")
        .queryName(name)
        .option("checkpointLocation", str(checkpoint))
        .trigger(availableNow=True)
        .start()
    )
    query.awaitTermination()
    progress = [json.loads(p.json) for p in query.recentProgress]
    return [
        float(p["durationMs"]["triggerExecution"]) for p in progress if p.get("numInputRows", 0)
    ]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--batches", type=int, default=40, help="micro-batches per run")
    parser.add_argument("--rounds", type=int, default=2, help="runs of each variant")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        with serving(work / "data") as server, spark_session(work / "spark") as spark:
            bootstrap = server.bootstrap
            create_topic(bootstrap, TOPIC, PARTITIONS)
            producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5})
            for i in range(args.batches * PER_TRIGGER):
                producer.produce(TOPIC, b"x" * 100, partition=i % PARTITIONS)
            producer.flush(60)
            commits: list[PendingCommit] = []
            without: list[float] = []
            with_listener: list[float] = []
            progress_s: list[float] = []
            for round_ in range(args.rounds):
                without += run_query(spark, bootstrap, work / f"plain-{round_}", f"plain{round_}")
                listener = KafkaOffsetCommitter(bootstrap, on_commit=commits.append)
                spark.streams.addListener(listener)
                try:
                    with_listener += run_query(
                        spark, bootstrap, work / f"listened-{round_}", f"listened{round_}"
                    )
                    deadline = time.monotonic() + 30
                    while listener.pending() and time.monotonic() < deadline:
                        time.sleep(0.1)
                finally:
                    spark.streams.removeListener(listener)
                    listener.close()
                progress_s += listener.progress_seconds
    plain_ms = statistics.median(without)
    listened_ms = statistics.median(with_listener)
    print(f"micro-batches: {len(without)} without the listener, {len(with_listener)} with it")
    print(f"median triggerExecution without listener: {plain_ms:.1f} ms")
    print(f"median triggerExecution with listener:    {listened_ms:.1f} ms")
    print(f"difference (with - without): {listened_ms - plain_ms:+.1f} ms")
    print(f"ratio with/without: {listened_ms / plain_ms:.3f}")
    print(f"median time in onQueryProgress: {statistics.median(progress_s) * 1000:.3f} ms")
    print(f"commits that reached the group: {len(commits)}")


if __name__ == "__main__":
    main()
