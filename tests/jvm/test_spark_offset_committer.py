"""The pipeline's offset committer (issue 19 item 2a) with real Spark and Spark's Kafka
connector against groupcoord: a streaming query over 3 partitions with maxOffsetsPerTrigger;
after each micro-batch the query's group holds the batch's end offsets (fetched back from the
server right after the commit, before the next one), with the query id and batch id as the
metadata; the group is listed and described; the server is SIGKILLed and restarted in the
middle of the query, and the commits resume while the query reads every record exactly
once."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient
from prometheus_client.parser import text_string_to_metric_families

from groupcoord.pipeline.offset_committer import KafkaOffsetCommitter, PendingCommit
from tests.integration.test_clients import create_topic
from tests.jvm.spark_session import require_spark, spark_session_or_fail
from tests.support import ServerProcess, serving

pytestmark = [pytest.mark.jvm, pytest.mark.timeout(600)]

TOPIC = "spark-lag"
PARTITIONS = 3
QUERY = "lagq"
GROUP = f"spark-{QUERY}"
PER_TRIGGER = 30
TIMEOUT_S = 180.0


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    require_spark()
    with serving(tmp_path_factory.mktemp("groupcoord") / "data") as proc:
        yield proc


@pytest.fixture(scope="module")
def spark(server: ServerProcess, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    with spark_session_or_fail(tmp_path_factory.mktemp("spark")) as session:
        yield session


def produce(bootstrap: str, per_partition: int, start: int) -> None:
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5})
    for partition in range(PARTITIONS):
        for i in range(start, start + per_partition):
            producer.produce(TOPIC, f"v-{partition}-{i}".encode(), partition=partition)
    assert producer.flush(30) == 0


def committed(bootstrap: str, group: str) -> dict[tuple[str, int], tuple[int, str]]:
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": group})
    try:
        found = consumer.committed([TopicPartition(TOPIC, p) for p in range(PARTITIONS)], 30)
    finally:
        consumer.close()
    return {(tp.topic, tp.partition): (tp.offset, tp.metadata or "") for tp in found}


def wait_for(condition: Any, what: str, timeout_s: float = TIMEOUT_S) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if condition():
            return
        time.sleep(0.5)
    raise AssertionError(f"timed out waiting for {what}")


def test_listener_commits_each_batch_and_survives_a_server_kill(
    server: ServerProcess, spark: Any, tmp_path: Path
) -> None:
    bootstrap = server.bootstrap
    create_topic(bootstrap, TOPIC, PARTITIONS)
    produce(bootstrap, 40, 0)
    # What the group held right after each commit (fetched on the committer's thread,
    # before it commits the next batch): batch id -> (offsets committed, offsets fetched).
    seen: list[tuple[int, dict[tuple[str, int], int], dict[tuple[str, int], tuple[int, str]]]] = []
    lock = threading.Lock()

    def check(commit: PendingCommit) -> None:
        fetched = committed(bootstrap, commit.group)
        with lock:
            seen.append((commit.batch_id, dict(commit.offsets), fetched))

    listener = KafkaOffsetCommitter(bootstrap, on_commit=check, retry_backoff_s=0.5)
    spark.streams.addListener(listener)
    rows = (
        spark.readStream.format("kafka")
        .option("kafka.bootstrap.servers", bootstrap)
        .option("subscribe", TOPIC)
        .option("startingOffsets", "earliest")
        .option("maxOffsetsPerTrigger", PER_TRIGGER)
        # The broker is down for a moment in the middle: Spark's offset lookups retry.
        .option("fetchOffset.numRetries", 30)
        .option("fetchOffset.retryIntervalMs", 1000)
        .load()
        .selectExpr("partition", "offset", "CAST(value AS STRING) AS value")
    )
    query = (
        rows.writeStream.format("memory")
        .queryName(QUERY)
        .option("checkpointLocation", str(tmp_path / "checkpoint"))
        .trigger(processingTime="500 milliseconds")
        .start()
    )
    try:
        wait_for(lambda: _count(spark) == 120, "the first 120 rows")
        wait_for(
            lambda: (
                {k: v[0] for k, v in committed(bootstrap, GROUP).items()}
                == {(TOPIC, p): 40 for p in range(PARTITIONS)}
            ),
            "the group to reach the end offsets",
        )
        progress = {p["batchId"]: p for p in (json.loads(x.json) for x in query.recentProgress)}
        with lock:
            before_kill = list(seen)
        assert len(before_kill) >= 120 // PER_TRIGGER, before_kill
        for batch_id, offsets, fetched in before_kill:
            assert {k: v[0] for k, v in fetched.items()} == offsets, (batch_id, fetched)
            metadata = json.loads(next(iter(fetched.values()))[1].rstrip("\x00"))
            assert metadata["batch_id"] == batch_id
            assert metadata["query_id"] == str(query.id)
            if batch_id in progress:  # the batch's own end offsets, as Spark reported them
                end = progress[batch_id]["sources"][0]["endOffset"][TOPIC]
                assert offsets == {(TOPIC, int(p)): o for p, o in end.items()}, batch_id
        # The server's lag metric for the query's group falls to 0 once it has caught up
        # (behind at first: the first batch commits 30 of the 120 records).
        wait_for(lambda: lag_records(server) == {p: 0.0 for p in range(PARTITIONS)}, "lag 0")
        admin = AdminClient({"bootstrap.servers": bootstrap})
        listed = admin.list_consumer_groups().result(30)
        assert GROUP in {g.group_id for g in listed.valid}
        described = admin.describe_consumer_groups([GROUP])[GROUP].result(30)
        assert described.group_id == GROUP and not described.members

        server.restart()  # SIGKILL, then the same port and data directory
        produce(bootstrap, 30, 40)
        wait_for(lambda: _count(spark) == 210, "all 210 rows after the restart")
        wait_for(
            lambda: (
                {k: v[0] for k, v in committed(bootstrap, GROUP).items()}
                == {(TOPIC, p): 70 for p in range(PARTITIONS)}
            ),
            "the commits to resume after the restart",
        )
        assert query.isActive and query.exception() is None
        got = spark.sql(f"SELECT partition, offset, value FROM {QUERY}").collect()
        assert sorted((r.partition, r.offset, r.value) for r in got) == [
            (p, i, f"v-{p}-{i}") for p in range(PARTITIONS) for i in range(70)
        ]
        with lock:
            after = [batch for batch, _, _ in seen[len(before_kill) :]]
        assert after, "no commit after the restart"
    finally:
        query.stop()
        spark.streams.removeListener(listener)
        listener.close()


def lag_records(server: ServerProcess) -> dict[int, float]:
    """groupcoord_group_lag_records of the query's group on TOPIC, per partition."""
    return {
        int(sample.labels["partition"]): sample.value
        for family in text_string_to_metric_families(server.metrics_text())
        for sample in family.samples
        if sample.name == "groupcoord_group_lag_records"
        and sample.labels.get("group") == GROUP
        and sample.labels.get("topic") == TOPIC
    }


def _count(spark: Any) -> int:
    try:
        return int(spark.sql(f"SELECT count(*) AS n FROM {QUERY}").collect()[0].n)
    except Exception:  # the memory table exists once the first batch ran
        return 0
