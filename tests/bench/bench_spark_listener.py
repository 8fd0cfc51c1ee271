"""What the pipeline's offset committer (pipeline/offset_committer.py) adds to a Spark
micro-batch (issue 19's target: under 20 ms, median), measured side by side in one run.

One groupcoord server and one SparkSession; one topic of 3 partitions. The same streaming
query (availableNow, maxOffsetsPerTrigger) runs over the same records, alternately without
the listener, with it as registered before session 16 (PySpark's own wrapper, which builds
the event's Python objects through about a hundred py4j calls per batch) and with it as it
registers now (its progress JSON only), each run from its own checkpoint. Printed per
variant: the median triggerExecution time of its micro-batches (Spark's own figure for the
batch) and its median per round, and for the listener the median time spent in the
committer's own code per batch (the commit itself runs on its worker thread) and how many
commits reached the group.

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
from pyspark.sql.streaming import StreamingQueryListener

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


class PySparkWrapped(KafkaOffsetCommitter):
    """The committer behind PySpark's own JVM-facing wrapper (the pre-session-16 path)."""

    @property
    def _jlistener(self) -> Any:
        return StreamingQueryListener._jlistener.fget(self)  # type: ignore[attr-defined]


VARIANTS: dict[str, type[KafkaOffsetCommitter] | None] = {
    "no listener": None,
    "listener, PySpark's wrapper": PySparkWrapped,
    "listener, JSON only": KafkaOffsetCommitter,
}


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
            triggers: dict[str, list[list[float]]] = {name: [] for name in VARIANTS}
            commits: dict[str, list[PendingCommit]] = {name: [] for name in VARIANTS}
            own_s: dict[str, list[float]] = {name: [] for name in VARIANTS}
            for round_ in range(args.rounds):
                for v, (name, kind) in enumerate(VARIANTS.items()):
                    run = f"v{v}r{round_}"
                    if kind is None:
                        triggers[name].append(run_query(spark, bootstrap, work / run, run))
                        continue
                    listener = kind(bootstrap, on_commit=commits[name].append)
                    spark.streams.addListener(listener)
                    try:
                        triggers[name].append(run_query(spark, bootstrap, work / run, run))
                        deadline = time.monotonic() + 30
                        while listener.pending() and time.monotonic() < deadline:
                            time.sleep(0.1)
                    finally:
                        spark.streams.removeListener(listener)
                        listener.close()
                    own_s[name] += listener.progress_seconds
    plain_ms = statistics.median(t for r in triggers["no listener"] for t in r)
    for name, rounds in triggers.items():
        median_ms = statistics.median(t for r in rounds for t in r)
        per_round = ", ".join(f"{statistics.median(r):.0f}" for r in rounds)
        line = (
            f"{name}: {sum(map(len, rounds))} micro-batches, median triggerExecution "
            f"{median_ms:.1f} ms ({median_ms - plain_ms:+.1f} ms, x{median_ms / plain_ms:.3f}); "
            f"per round {per_round} ms"
        )
        if own_s[name]:
            line += (
                f"; committer's own code {statistics.median(own_s[name]) * 1000:.3f} ms per "
                f"batch; commits that reached the group: {len(commits[name])}"
            )
        print(line)


if __name__ == "__main__":
    main()
