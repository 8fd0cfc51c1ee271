"""The analytics job: a Structured Streaming query over `__consumer_offsets`, through Spark's
Kafka connector, that maintains three Parquet tables under a directory the user names:

- `offset_commits`: every OffsetCommit record (group, topic, partition, offset, commit
  time, leader epoch, metadata, and the record's place in the log); a tombstone (an offset
  deleted or expired) is a row with `deleted` true and no offset.
- `group_events`: the rebalance timeline (group, generation or epoch, event: member joined,
  left, expired, fenced, assignment changed, rebalance completed, group emptied, deleted),
  derived by the server's own code (group_timeline.py).
- `lag`: per group, topic and partition, at each micro-batch: committed offset, end offset,
  lag in records and in seconds (lag_probe.py).

    from groupcoord.pipeline.analytics import start_analytics
    start_analytics(spark, "broker:9092", "/data/groupcoord-analytics", once=True)
    (or: groupcoord-pipeline analytics --bootstrap-server broker:9092 --output DIR --once)

Theory of operation. The query reads the log with the connector (startingOffsets earliest,
so a first run reads all the history the log still holds; a long range of one log partition
split over several tasks, MAX_RECORDS_PER_TASK) and hands each micro-batch to
`AnalyticsBatches` (foreachBatch). Its tasks decode the batch with mapInArrow
(coordinator_log.py: the server's codec, a batch at a time) and write the offset_commits
rows themselves with pyarrow, returning only what the group timeline replays
(commit_files.py); the driver derives group_events and lag from those. Each table is
partitioned by the micro-batch id (`batch_id=N/`), and a batch writes only its own
directories, replacing whatever an earlier attempt of the same batch left. Spark re-runs a
batch after a failure with the same offsets (its offset log), so the rows are the same: the
output is exactly once, and a restart from the checkpoint writes no duplicate row.

The timeline and the live offsets are driver state across batches. Each batch also writes
what it fed the timeline (`_timeline_input/batch_id=N/`, hidden from readers by its leading
underscore, as Spark's and Arrow's readers hide `_` files): a driver that starts (a
restart) or finds itself behind replays the input of every earlier batch first, without
emitting, then the batch. That input is the log less the commits a later commit of the same
key in the batch supersedes (group_timeline.py), so it grows with the group records, not the
commits.

Lag rows are measured when the batch runs (ListOffsets and one Fetch per lagging partition,
now): in continuous mode that is the lag over time; a first run over a long history measures
today's end offsets against the latest commits, and writes nothing for older times.
"""

from __future__ import annotations

import json
import logging
import os
import shutil
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from .commit_files import (
    ARROW_SETTINGS,
    TIMELINE_DDL,
    clear_staging,
    decode_to_files,
    promote,
    staging_dir,
)
from .coordinator_log import DECODED_SCHEMA, STREAM_DDL, decode_batches
from .group_timeline import EVENT_COLUMNS, GroupTimeline
from .lag_probe import LAG_COLUMNS, lag_rows

log = logging.getLogger("groupcoord.pipeline.analytics")

OFFSETS_TOPIC = "__consumer_offsets"
TABLES = ("offset_commits", "group_events", "lag")
TIMELINE_INPUT = "_timeline_input"
CHECKPOINT = "_checkpoint"
DEPRECATED_OFFSET_FETCHING = "spark.sql.streaming.kafka.useDeprecatedOffsetFetching"

EVENT_SCHEMA = pa.schema(
    [
        ("time_ms", pa.int64()),
        ("group", pa.string()),
        ("generation_or_epoch", pa.int32()),
        ("event", pa.string()),
        ("member_id", pa.string()),
        ("cause", pa.string()),
        ("details", pa.string()),
        ("log_partition", pa.int32()),
        ("log_offset", pa.int64()),
    ]
)
LAG_SCHEMA = pa.schema(
    [
        ("time_ms", pa.int64()),
        ("group", pa.string()),
        ("topic", pa.string()),
        ("partition", pa.int32()),
        ("committed_offset", pa.int64()),
        ("end_offset", pa.int64()),
        ("lag_records", pa.int64()),
        ("lag_seconds", pa.float64()),
        ("commit_timestamp_ms", pa.int64()),
    ]
)
assert tuple(EVENT_SCHEMA.names) == EVENT_COLUMNS and tuple(LAG_SCHEMA.names) == LAG_COLUMNS

# Connector options the job sets unless the caller's say otherwise (Spark's
# KafkaOffsetRangeCalculator): a long range of one log partition (a busy group's shard holds
# nearly all of a log) is read by several tasks at once, so a run over a long history uses
# every core rather than one. `minPartitions` is Spark's default parallelism.
MAX_RECORDS_PER_TASK = 250_000
# The executors' consumers poll and fetch in large pieces (SOURCE_OPTIONS). After every poll
# Spark's consumer asks for the partition's earliest and latest offsets (seekToBeginning and
# seekToEnd, then a seek back: two ListOffsets round trips,
# InternalKafkaConsumer.getAvailableOffsetRange). With the consumer's default of 500 records
# a poll that is two ListOffsets per 500 records of commits, paid by the broker and the
# consumer (bench_connector_bound: 4.2-4.8 CPU seconds of Spark and 0.7 of the server per
# million records read, against 1.7-1.8 and 0.1-0.2 with 20,000-record polls of 4 MiB
# Fetches; Apache Kafka as the source pays the same). A poll returns at most what the
# Fetches so far hold, so the Fetch grows with it: 50,000 records of commits (some 85 bytes
# each) are about 4 MiB, which also keeps what a task's consumer prefetches past its range
# small.
SOURCE_OPTIONS = {
    "kafka.max.partition.fetch.bytes": str(4 << 20),
    "kafka.fetch.max.bytes": str(64 << 20),
    "kafka.max.poll.records": "50000",
}


def decoded_stream(spark: Any, bootstrap: str, options: dict[str, str] | None = None) -> Any:
    """The streaming DataFrame of decoded `__consumer_offsets` records
    (coordinator_log.STREAM_DDL); `options`: more of the connector's (kafka.* included)."""
    return source_stream(spark, bootstrap, options).mapInArrow(decode_batches, STREAM_DDL)


def source_stream(spark: Any, bootstrap: str, options: dict[str, str] | None = None) -> Any:
    """The streaming DataFrame of `__consumer_offsets` records as the decoder takes them
    (coordinator_log.SOURCE_COLUMNS); `options`: more of the connector's (kafka.* included),
    over the job's own (MAX_RECORDS_PER_TASK, SOURCE_OPTIONS).

    Spark's connector leaves internal topics out of what it reads (its admin-based offset
    reader drops every topic Metadata marks internal, as Kafka marks this one), so the job
    assigns the topic's partitions by number and switches the session to the connector's
    consumer-based offset reader (spark.sql.streaming.kafka.useDeprecatedOffsetFetching),
    which reads assigned partitions as they are."""
    settings = {
        "maxRecordsPerPartition": str(MAX_RECORDS_PER_TASK),
        "minPartitions": str(spark.sparkContext.defaultParallelism),
        **SOURCE_OPTIONS,
        **(options or {}),
    }
    reader = offsets_reader(spark, bootstrap, offsets_partitions(bootstrap), settings)
    return source_columns(reader.load())


def offsets_reader(spark: Any, bootstrap: str, partitions: int, options: dict[str, str]) -> Any:
    """The connector's stream reader of `partitions` partitions of `__consumer_offsets` from
    the earliest offset, with exactly `options` besides (source_stream's docstring: why it
    assigns partitions and switches the session to the consumer-based offset reader)."""
    spark.conf.set(DEPRECATED_OFFSET_FETCHING, "true")
    reader = (
        spark.readStream.format("kafka")
        .option("kafka.bootstrap.servers", bootstrap)
        .option("assign", json.dumps({OFFSETS_TOPIC: list(range(partitions))}))
        .option("startingOffsets", "earliest")
        # Compaction and offset expiry remove records: not data loss for the analytics.
        .option("failOnDataLoss", "false")
    )
    for name, value in options.items():
        reader = reader.option(name, value)
    return reader


def source_columns(source: Any) -> Any:
    """The Kafka source's DataFrame (streaming or not) as the decoder takes it."""
    return source.selectExpr(
        "partition", "offset", "unix_millis(timestamp) AS timestamp_ms", "key", "value"
    )


def decoded(source: Any) -> Any:
    """The Kafka source's DataFrame (streaming or not) decoded: STREAM_DDL's columns."""
    return source_columns(source).mapInArrow(decode_batches, STREAM_DDL)


def offsets_partitions(bootstrap: str, timeout_s: float = 30.0) -> int:
    """How many partitions `__consumer_offsets` has (Metadata)."""
    from confluent_kafka.admin import AdminClient

    topics = AdminClient({"bootstrap.servers": bootstrap}).list_topics(OFFSETS_TOPIC, timeout_s)
    found = topics.topics.get(OFFSETS_TOPIC)
    if found is None or found.error is not None or not found.partitions:
        raise RuntimeError(
            f"{OFFSETS_TOPIC} is not there yet at {bootstrap} (it exists once a group has "
            f"used the server): {found.error if found is not None else 'not listed'}"
        )
    return len(found.partitions)


class AnalyticsBatches:
    """foreachBatch's function (module docstring): writes batch N's rows of each table."""

    def __init__(
        self, bootstrap: str, output: Path, clock_ms: Callable[[], int] | None = None
    ) -> None:
        self.bootstrap = bootstrap
        # Absolute: the tasks that write offset_commits run in other processes.
        self.output = Path(output).absolute()
        self.clock_ms = clock_ms or (lambda: int(time.time() * 1000))
        self._timeline: GroupTimeline | None = None
        # Seconds spent per step, over every batch (logged at INFO after each batch).
        self.timings: dict[str, float] = {}
        self._next_batch = -1  # the batch the in-memory timeline expects next
        # Spark settings of the decode step (a benchmark compares others).
        self.arrow_settings = dict(ARROW_SETTINGS)

    def __call__(self, batch: Any, batch_id: int) -> None:
        """`batch`: the micro-batch of source_stream's rows."""
        batch_id = int(batch_id)
        step = _Steps(self.timings)
        try:
            rows = self.decode_and_write_commits(batch, batch_id)
            step("offset_commits")
            rows = rows.sort_by([("partition", "ascending"), ("offset", "ascending")])
            step("timeline_input")
            timeline = self._timeline_before(batch_id)
            step("timeline_rebuild")
            timeline.events = []
            timeline.replay(rows.to_pylist())
            self._next_batch = batch_id + 1
            _write_table(self.output / TIMELINE_INPUT, batch_id, rows)
            events = pa.Table.from_pylist(timeline.events, schema=EVENT_SCHEMA)
            _write_table(self.output / "group_events", batch_id, events)
            step("group_events")
            lag = lag_rows(self.bootstrap, timeline.latest, self.clock_ms())
            _write_table(self.output / "lag", batch_id, pa.Table.from_pylist(lag, LAG_SCHEMA))
            step("lag")
            log.info("batch %d written: %s", batch_id, self.timings)
        except BaseException:
            self._timeline = None  # rebuilt from the tables at the next attempt
            raise

    def decode_and_write_commits(self, batch: Any, batch_id: int) -> pa.Table:
        """Decode the batch in Spark's tasks, which write its offset_commits rows
        (commit_files.py); the rows the timeline replays (DECODED_SCHEMA), collected."""
        table_dir = self.output / "offset_commits"
        clear_staging(table_dir)
        staging = staging_dir(table_dir, batch_id)
        for name, value in self.arrow_settings.items():
            batch.sparkSession.conf.set(name, value)
        rows = batch.mapInArrow(decode_to_files(staging), TIMELINE_DDL).toArrow()
        promote(staging, table_dir, batch_id)
        return rows.cast(DECODED_SCHEMA)

    def _timeline_before(self, batch_id: int) -> GroupTimeline:
        """The timeline as after batch `batch_id - 1`: the one in memory when it is, else one
        rebuilt from the timeline input of every earlier batch."""
        if self._timeline is not None and self._next_batch == batch_id:
            return self._timeline
        timeline = GroupTimeline()
        earlier = _read_table(self.output / TIMELINE_INPUT, DECODED_SCHEMA, before=batch_id)
        timeline.replay(earlier.to_pylist(), collect=False)
        self._timeline = timeline
        return timeline


class _Steps:
    """Adds the seconds since the previous call to `timings[name]`."""

    def __init__(self, timings: dict[str, float]) -> None:
        self.timings = timings
        self.last = time.perf_counter()

    def __call__(self, name: str) -> None:
        now = time.perf_counter()
        self.timings[name] = round(self.timings.get(name, 0.0) + now - self.last, 3)
        self.last = now


def _write_table(table_dir: Path, batch_id: int, rows: pa.Table) -> None:
    """Batch `batch_id`'s rows of a table, replacing an earlier attempt's: written aside,
    then renamed into place."""
    table_dir.mkdir(parents=True, exist_ok=True)
    target = table_dir / f"batch_id={batch_id}"
    aside = table_dir / f".tmp-{batch_id}-{uuid.uuid4().hex}"
    aside.mkdir()
    pq.write_table(rows, aside / "part-0.parquet")
    if target.exists():
        shutil.rmtree(target)
    os.replace(aside, target)


def _read_table(table_dir: Path, schema: pa.Schema, before: int) -> pa.Table:
    """The rows of batches below `before`, in batch order."""
    parts = []
    if table_dir.is_dir():
        ids = sorted(
            int(d.name.removeprefix("batch_id="))
            for d in table_dir.iterdir()
            if d.name.startswith("batch_id=")
        )
        for batch_id in ids:
            if batch_id < before:
                for file in sorted((table_dir / f"batch_id={batch_id}").glob("*.parquet")):
                    parts.append(pq.read_table(file, schema=schema))
    return pa.concat_tables(parts) if parts else schema.empty_table()


def start_analytics(
    spark: Any,
    bootstrap: str,
    output: str | Path,
    once: bool = False,
    interval: str = "10 seconds",
    checkpoint: str | Path | None = None,
    options: dict[str, str] | None = None,
    query_name: str = "groupcoord-analytics",
    batches: AnalyticsBatches | None = None,
) -> Any:
    """Start the job: with `once` it processes what the log holds now (availableNow) and
    stops; otherwise a micro-batch every `interval`. Returns the StreamingQuery.
    `batches`: the foreachBatch function (default: a new AnalyticsBatches on `output`)."""
    output = Path(output)
    output.mkdir(parents=True, exist_ok=True)
    batches = batches or AnalyticsBatches(bootstrap, output)
    writer = (
        source_stream(spark, bootstrap, options)
        .writeStream.queryName(query_name)
        .foreachBatch(batches)
        .option("checkpointLocation", str(checkpoint or output / CHECKPOINT))
    )
    writer = writer.trigger(availableNow=True) if once else writer.trigger(processingTime=interval)
    return writer.start()
