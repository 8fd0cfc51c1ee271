"""PySpark with Spark's own Kafka connector (spark-sql-kafka-0-10_2.13, kafka-clients 3.9)
against groupcoord, and against Apache Kafka 4.x in the same test with the same rows expected.

One SparkSession (tests/jvm/spark_session.py) and both brokers serve the whole module. Records
are produced with explicit timestamps, so what Spark reads (partition, offset, key, value,
timestamp, headers) is known exactly and is the same on both brokers:

- a batch read with headers of records with null keys and values and repeated headers;
- readStream from per-partition timestamps with maxOffsetsPerTrigger and availableNow, run
  again from its checkpoint after more records: every row once, none missed;
- partitions whose last batch holds 5,000 records (one uncompressed, one zstd), read to
  their ends whole, and in ranges with fetch limits far below the batch's size (ranges
  starting inside it);
- df.write through the connector's producer (idempotent: its batches carry sequences) and
  read back;
- a streaming query from one topic to another (writeStream format kafka, availableNow);
- read_committed batch and stream reads of committed and aborted transactions.
"""

from __future__ import annotations

import datetime
import functools
import json
import time
import tomllib
import uuid
from collections import Counter
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewTopic

from groupcoord.protocol.batches import BatchHeader, split_batches
from tests.jvm.differential import on_both
from tests.jvm.kafka_broker import KafkaBroker
from tests.jvm.spark_session import (
    connector_spark_version,
    require_spark,
    spark_session_or_fail,
)
from tests.rawclient import RawClient
from tests.support import ROOT, client_batch, serving
from tests.wire_session import entity, request

# Each test runs its scenario twice (one SparkSession, two brokers on two shared cores); the
# first also starts Kafka, groupcoord and Spark.
pytestmark = [pytest.mark.jvm, pytest.mark.timeout(600)]

STREAM_TIMEOUT_S = 120.0
KAFKA_TIMEOUT_S = 30.0
# Errors a broker answers for a topic it has just created and not yet led.
UNKNOWN_TOPIC_OR_PARTITION, NOT_LEADER_OR_FOLLOWER = 3, 6

Headers = tuple[tuple[str, bytes | None], ...]
# What Spark reads of a record: partition, offset, key, value, timestamp (ms), headers.
Row = tuple[int, int, bytes | None, bytes | None, int, Headers]
# What a test produces: partition, key, value, timestamp (ms), headers.
Sent = tuple[int, bytes | None, bytes | None, int, Headers]
COLUMNS = ("partition", "offset", "key", "value", "timestamp", "timestampType", "headers")


@pytest.fixture(scope="module")
def spark_ready() -> None:
    """What PySpark needs, checked before any broker starts (fails saying what is missing)."""
    require_spark()


@pytest.fixture(scope="module")
def brokers(
    spark_ready: None, reference_kafka: KafkaBroker, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[dict[str, str]]:
    """groupcoord (its defaults) and the reference Kafka: name -> bootstrap address."""
    with serving(tmp_path_factory.mktemp("groupcoord") / "data") as server:
        yield {"groupcoord": server.bootstrap, "kafka": reference_kafka.bootstrap}


@pytest.fixture(scope="module")
def spark(brokers: dict[str, str], tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    """The module's SparkSession (after the brokers, so stopped before them)."""
    with spark_session_or_fail(tmp_path_factory.mktemp("spark")) as session:
        yield session


def spark_scenario(scenario: Callable[[str, str], None]) -> Callable[[str, str], None]:
    """A Spark or client error on one broker fails that broker's run (on_both then still
    runs the other, and names both outcomes)."""

    @functools.wraps(scenario)
    def run(target: str, bootstrap: str) -> None:
        try:
            scenario(target, bootstrap)
        except AssertionError:
            raise
        except Exception as exc:
            raise AssertionError(f"{target}: {type(exc).__name__}: {str(exc)[:3000]}") from exc

    return run


# -- producing and reading ---------------------------------------------------------------------


def _name(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


def _base_ms() -> int:
    """Record timestamps start ten minutes ago: inside any retention, never in the future."""
    return (time.time_ns() // 1_000_000 // 1000) * 1000 - 600_000


def create_topic(bootstrap: str, topic: str, partitions: int) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    for future in admin.create_topics([NewTopic(topic, partitions, 1)]).values():
        future.result(KAFKA_TIMEOUT_S)


def produce(bootstrap: str, topic: str, sent: Sequence[Sent]) -> None:
    """With librdkafka's idempotent producer: batches of many records, in order."""
    producer = Producer(
        {"bootstrap.servers": bootstrap, "enable.idempotence": True, "linger.ms": 20}
    )
    errors = []

    def delivered(err: Any, _msg: Any) -> None:
        if err is not None:
            errors.append(err)

    for partition, key, value, ts, headers in sent:
        producer.produce(
            topic,
            key=key,
            value=value,
            partition=partition,
            timestamp=ts,
            headers=list(headers),
            on_delivery=delivered,
        )
    assert producer.flush(KAFKA_TIMEOUT_S) == 0, f"{topic}: records left unsent"
    assert not errors, f"{topic}: produce failed: {errors[:3]}"


def expected_rows(sent: Sequence[Sent], first: dict[int, int] | None = None) -> list[Row]:
    """The rows of `sent` at the offsets a fresh log gives them (from `first`, else 0)."""
    next_offset = Counter(first or {})
    rows = []
    for partition, key, value, ts, headers in sent:
        rows.append((partition, next_offset[partition], key, value, ts, headers))
        next_offset[partition] += 1
    return sorted(rows, key=_place)


def rows(df: Any) -> list[Row]:
    """The rows of a DataFrame with the connector's columns, sorted by partition and offset."""
    out = []
    for r in df.selectExpr(*COLUMNS[:4], "unix_millis(timestamp) AS ts", *COLUMNS[5:]).collect():
        assert r.timestampType == 0, f"timestamp type {r.timestampType}, not CreateTime"
        headers = tuple((h.key, _bytes(h.value)) for h in r.headers or ())
        out.append((r.partition, r.offset, _bytes(r.key), _bytes(r.value), r.ts, headers))
    return sorted(out, key=_place)


def _bytes(value: Any) -> bytes | None:
    return None if value is None else bytes(value)


def read(
    spark: Any, bootstrap: str, topic: str, options: dict[str, object] | None = None
) -> list[Row]:
    """A batch read of the whole topic (earliest to latest) with its headers."""
    return rows(_reader(spark.read, bootstrap, topic, options or {}).load())


def _reader(reader: Any, bootstrap: str, topic: str, options: dict[str, object]) -> Any:
    reader = (
        reader.format("kafka")
        .option("kafka.bootstrap.servers", bootstrap)
        .option("subscribe", topic)
        .option("includeHeaders", "true")
    )
    for name, value in options.items():
        reader = reader.option(name, str(value))
    return reader


def run_available_now(writer: Any, label: str) -> list[Any]:
    """Starts a streaming query with trigger(availableNow=True), waits for it to end by
    itself, and returns its progress reports (one per micro-batch)."""
    query = writer.trigger(availableNow=True).start()
    try:
        ended = query.awaitTermination(STREAM_TIMEOUT_S)
    finally:
        if query.isActive:
            query.stop()
    assert ended, f"{label}: the availableNow query did not end in {STREAM_TIMEOUT_S:.0f} s"
    assert query.exception() is None, f"{label}: {query.exception()}"
    return [p for p in query.recentProgress if p.numInputRows > 0]


def fetch_batches(bootstrap: str, topic: str, partition: int) -> list[BatchHeader]:
    """Every record batch of a partition as the log holds it (Fetch v12, by topic name)."""
    found: list[BatchHeader] = []
    offset, end = 0, 1
    with RawClient(bootstrap) as client:
        while offset < end:
            part = entity(
                1,
                12,
                "FetchPartition",
                partition=partition,
                current_leader_epoch=-1,
                fetch_offset=offset,
                last_fetched_epoch=-1,
                log_start_offset=-1,
                partition_max_bytes=8 << 20,
            )
            resp = client.request(
                1,
                12,
                request(
                    1,
                    12,
                    replica_id=-1,
                    max_wait=datetime.timedelta(0),
                    min_bytes=0,
                    max_bytes=8 << 20,
                    isolation_level=0,
                    session_id=0,
                    session_epoch=-1,
                    topics=(entity(1, 12, "FetchTopic", topic=topic, partitions=(part,)),),
                    forgotten_topics_data=(),
                    rack_id="",
                ),
            )
            answer = resp.responses[0].partitions[0]
            assert answer.error_code == 0, f"fetch {topic}/{partition}@{offset}: {answer}"
            batches = split_batches(answer.records or b"")
            end = answer.high_watermark
            if not batches:
                break
            found += batches
            offset = batches[-1].last_offset + 1
    return found


def produce_batch(bootstrap: str, topic: str, partition: int, batch: bytes) -> None:
    """One record batch, exactly as built (Produce v9, acks=all); retried while the broker
    does not yet lead the new partition."""
    produce_data = entity(0, 9, "PartitionProduceData", index=partition, records=batch)
    body = request(
        0,
        9,
        transactional_id=None,
        acks=-1,
        timeout=datetime.timedelta(seconds=KAFKA_TIMEOUT_S),
        topic_data=(entity(0, 9, "TopicProduceData", name=topic, partition_data=(produce_data,)),),
    )
    deadline = time.monotonic() + KAFKA_TIMEOUT_S
    with RawClient(bootstrap) as client:
        while True:
            answer = client.request(0, 9, body).responses[0].partition_responses[0]
            retry = answer.error_code in (UNKNOWN_TOPIC_OR_PARTITION, NOT_LEADER_OR_FOLLOWER)
            if not retry or time.monotonic() > deadline:
                break
            time.sleep(0.2)
    assert answer.error_code == 0, f"produce to {topic}/{partition}: {answer}"


# -- 1. a batch read with headers --------------------------------------------------------------


def _headers(i: int) -> Headers:
    """No headers, one, a repeated key with an empty value, a null value."""
    return (
        (),
        (("h1", b"a%d" % i),),
        (("h1", b"x"), ("h1", b"y"), ("h2", b"")),
        (("h-null", None),),
    )[i % 4]


def test_batch_read_with_headers(brokers: dict[str, str], spark: Any) -> None:
    base = _base_ms()
    sent: list[Sent] = [
        (
            i % 3,
            None if i % 10 == 3 else b"k%d" % i,
            None if i % 10 == 7 else b"v%d" % i * (1 + i % 5),
            base + i,
            _headers(i),
        )
        for i in range(60)
    ]

    @spark_scenario
    def scenario(target: str, bootstrap: str) -> None:
        topic = _name("headers")
        create_topic(bootstrap, topic, 3)
        produce(bootstrap, topic, sent)
        got, want = read(spark, bootstrap, topic), expected_rows(sent)
        assert got == want, f"{target}: {_diff_rows(got, want)}"

    on_both(brokers, scenario)


def _place(row: tuple[Any, ...]) -> tuple[int, int]:
    """Partition and offset: rows sort by them (a key may be None where another is bytes)."""
    return row[0], row[1]


def _diff_rows(got: Sequence[tuple[Any, ...]], want: Sequence[tuple[Any, ...]]) -> str:
    extra = sorted(Counter(got) - Counter(want), key=_place)
    missing = sorted(Counter(want) - Counter(got), key=_place)
    return f"{len(got)} rows, {len(want)} expected; extra {extra[:3]}; missing {missing[:3]}"


# -- 2. readStream from timestamps, maxOffsetsPerTrigger, availableNow, restarted -------------

PER_TRIGGER = 40


def _timed(partition: int, j: int, base: int, phase: bytes) -> Sent:
    return (partition, b"k%d-%d" % (partition, j), b"v%d" % j, base + 10 * j, (("phase", phase),))


def test_stream_from_timestamp_restarted_from_checkpoint(
    brokers: dict[str, str], spark: Any, tmp_path: Path
) -> None:
    """Records 10 ms apart; each partition starts at its own timestamp (inside a batch, on a
    record's timestamp exactly, before everything). Run, produce more, run again."""
    base = _base_ms()
    first: list[Sent] = [_timed(p, j, base, b"A") for j in range(40) for p in range(3)]
    later: list[Sent] = [_timed(p, j, base, b"B") for j in range(40, 50) for p in range(3)]
    # p0 from the first timestamp >= base + 105 (j = 11), p1 from base + 200 (j = 20), p2 all.
    starts = {0: base + 105, 1: base + 200, 2: base - 60_000}
    skipped = {0: 11, 1: 20, 2: 0}
    all_rows = expected_rows(first + later)
    want_first = [r for r in expected_rows(first) if r[1] >= skipped[r[0]]]
    want = [r for r in all_rows if r[1] >= skipped[r[0]]]

    @spark_scenario
    def scenario(target: str, bootstrap: str) -> None:
        topic = _name("from-ts")
        create_topic(bootstrap, topic, 3)
        out, checkpoint = tmp_path / target / "out", tmp_path / target / "checkpoint"

        def run(label: str) -> list[Any]:
            options = {
                "startingOffsetsByTimestamp": json.dumps({topic: starts}),
                "maxOffsetsPerTrigger": PER_TRIGGER,
            }
            stream = _reader(spark.readStream, bootstrap, topic, options).load()
            writer = (
                stream.select(*COLUMNS)
                .writeStream.format("parquet")
                .option("path", str(out))
                .option("checkpointLocation", str(checkpoint))
            )
            progress = run_available_now(writer, f"{target} {label}")
            sizes = [p.numInputRows for p in progress]
            assert max(sizes) <= PER_TRIGGER, f"{target} {label}: micro-batches of {sizes}"
            return sizes

        produce(bootstrap, topic, first)
        sizes = run("first run")
        got = rows(spark.read.parquet(str(out)))
        assert got == want_first, f"{target} first run: {_diff_rows(got, want_first)}"
        assert len(sizes) >= 3, f"{target}: {sizes}: maxOffsetsPerTrigger not applied"

        produce(bootstrap, topic, later)
        sizes = run("restart")
        assert sum(sizes) == len(later), f"{target} restart read {sizes}, not the new records"
        got = rows(spark.read.parquet(str(out)))
        assert got == want, f"{target} after the restart: {_diff_rows(got, want)}"

    on_both(brokers, scenario)


# -- 3. a last batch of many records, read to its end -----------------------------------------

BIG_BATCH = 5000
# Partition 0's batches are uncompressed, partition 1's zstd-compressed (record batch codec 4).
CODECS = {0: 0, 1: 4}


def test_last_batch_of_many_records_read_to_its_end(brokers: dict[str, str], spark: Any) -> None:
    """On each partition three small batches, then one of 5,000 records ending it. Read
    whole, then in six ranges (minPartitions) with fetch limits of 1 KiB: the broker still
    returns the whole batch (KIP-74) and most ranges' consumers start inside it."""
    base = _base_ms()
    sizes = (1, 2, 3, BIG_BATCH)
    batches: list[tuple[int, list[tuple[bytes | None, bytes | None, int]]]] = []
    sent: list[Sent] = []
    for partition in CODECS:
        first = len(sent)
        for size in sizes:
            at = len(sent) - first
            records = [(b"k%d" % (at + i), b"v%d" % i, base + at + i) for i in range(size)]
            batches.append((partition, records))
            sent += [(partition, key, value, ts, (("h", b"x"),)) for key, value, ts in records]
    want = expected_rows(sent)
    small_fetches = {
        "minPartitions": 6,
        "kafka.max.partition.fetch.bytes": 1024,
        "kafka.fetch.max.bytes": 1024,
    }

    @spark_scenario
    def scenario(target: str, bootstrap: str) -> None:
        topic = _name("big-batch")
        create_topic(bootstrap, topic, len(CODECS))
        for partition, records in batches:
            batch = client_batch(records, compression=CODECS[partition], headers=(("h", b"x"),))
            produce_batch(bootstrap, topic, partition, batch)
        for partition, codec in CODECS.items():
            held = [
                (b.records_count, b.compression) for b in fetch_batches(bootstrap, topic, partition)
            ]
            assert held == [(n, codec) for n in sizes], f"{target}: {partition} holds {held}"
        got = read(spark, bootstrap, topic)
        assert got == want, f"{target} whole: {_diff_rows(got, want)}"
        got = read(spark, bootstrap, topic, small_fetches)
        assert got == want, f"{target} in ranges, 1 KiB fetches: {_diff_rows(got, want)}"

    on_both(brokers, scenario)


# -- 4. df.write through the connector's (idempotent) producer --------------------------------


def test_dataframe_write_then_read_back(brokers: dict[str, str], spark: Any) -> None:
    from pyspark.sql.types import (
        ArrayType,
        BinaryType,
        IntegerType,
        StringType,
        StructField,
        StructType,
    )

    header = StructType([StructField("key", StringType()), StructField("value", BinaryType())])
    schema = StructType(
        [
            StructField("partition", IntegerType()),
            StructField("key", BinaryType()),
            StructField("value", BinaryType()),
            StructField("headers", ArrayType(header)),
        ]
    )
    data = [
        (i % 3, None if i % 9 == 4 else b"wk%d" % i, b"wv%d" % i, list(_headers(i)))
        for i in range(90)
    ]
    # Offsets in write order per partition: one task (coalesce(1)), one producer, in order.
    want = [
        (p, o, k, v, h)
        for p, o, k, v, _, h in expected_rows([(p, k, v, 0, tuple(h)) for p, k, v, h in data])
    ]

    @spark_scenario
    def scenario(target: str, bootstrap: str) -> None:
        topic = _name("df-write")
        create_topic(bootstrap, topic, 3)
        before_ms = time.time_ns() // 1_000_000
        (
            spark.createDataFrame(data, schema)
            .coalesce(1)
            .write.format("kafka")
            .option("kafka.bootstrap.servers", bootstrap)
            .option("topic", topic)
            .save()
        )
        after_ms = time.time_ns() // 1_000_000
        got = read(spark, bootstrap, topic)
        stamps = [r[4] for r in got]
        assert all(before_ms - 1000 <= ts <= after_ms + 1000 for ts in stamps), (
            f"{target}: CreateTime outside the write: {min(stamps)}..{max(stamps)}"
        )
        got_rows = [(p, o, k, v, h) for p, o, k, v, _, h in got]
        assert got_rows == want, f"{target}: {_diff_rows(got_rows, want)}"
        for partition in range(3):
            check_idempotent(target, fetch_batches(bootstrap, topic, partition))

    on_both(brokers, scenario)


def check_idempotent(target: str, batches: list[BatchHeader]) -> None:
    """The batches of one idempotent producer: its id and epoch, sequences from 0 on."""
    assert batches, f"{target}: no batches"
    producers = {(b.producer_id, b.producer_epoch) for b in batches}
    assert len(producers) == 1 and min(producers)[0] >= 0, f"{target}: producers {producers}"
    sequences = [(b.base_sequence, b.last_sequence) for b in batches]
    expected_next = 0
    for first, last in sequences:
        assert first == expected_next, f"{target}: sequences {sequences}"
        expected_next = last + 1


# -- 5. a streaming query from one topic to another -------------------------------------------


def test_stream_to_topic(brokers: dict[str, str], spark: Any, tmp_path: Path) -> None:
    base = _base_ms()
    sent: list[Sent] = [
        (i % 3, b"sk%d" % i, b"value-%d" % i, base + i, _headers(i)) for i in range(45)
    ]
    # Same partition, key and headers, the value upper-cased; one micro-batch's records of a
    # partition are written by one task in order, and micro-batches run in order.
    want = [
        (p, o, k, None if v is None else v.upper(), h) for p, o, k, v, _, h in expected_rows(sent)
    ]

    @spark_scenario
    def scenario(target: str, bootstrap: str) -> None:
        source, sink = _name("stream-src"), _name("stream-dst")
        create_topic(bootstrap, source, 3)
        create_topic(bootstrap, sink, 3)
        produce(bootstrap, source, sent)
        options = {"startingOffsets": "earliest", "maxOffsetsPerTrigger": 20}
        writer = (
            _reader(spark.readStream, bootstrap, source, options)
            .load()
            .selectExpr("partition", "key", "upper(CAST(value AS STRING)) AS value", "headers")
            .writeStream.format("kafka")
            .option("kafka.bootstrap.servers", bootstrap)
            .option("topic", sink)
            .option("checkpointLocation", str(tmp_path / target / "checkpoint"))
        )
        progress = run_available_now(writer, f"{target} stream to {sink}")
        assert len(progress) >= 3, f"{target}: micro-batches {[p.numInputRows for p in progress]}"
        got = [(p, o, k, v, h) for p, o, k, v, _, h in read(spark, bootstrap, sink)]
        assert got == want, f"{target}: {_diff_rows(got, want)}"

    on_both(brokers, scenario)


def produce_transactions(bootstrap: str, topic: str, transactions: Sequence[bool]) -> None:
    """One transactional producer: transaction t writes values b"t<t>-<i>" for i in 0..5
    over the topic's 2 partitions (i % 2), committed or (False) aborted. Each transaction's
    records are flushed before it ends, so an aborted one is in the log too."""
    producer = Producer(
        {"bootstrap.servers": bootstrap, "transactional.id": _name("spark-txn"), "linger.ms": 5}
    )
    producer.init_transactions(KAFKA_TIMEOUT_S)
    for t, commit in enumerate(transactions):
        producer.begin_transaction()
        for i in range(6):
            producer.produce(topic, value=b"t%d-%d" % (t, i), partition=i % 2)
        assert producer.flush(KAFKA_TIMEOUT_S) == 0, f"{topic}: records left unsent"
        if commit:
            producer.commit_transaction(KAFKA_TIMEOUT_S)
        else:
            producer.abort_transaction(KAFKA_TIMEOUT_S)


def test_read_committed_batch_and_stream(
    brokers: dict[str, str], spark: Any, tmp_path: Path
) -> None:
    """Issue 18: a read_committed batch read and stream read return only committed rows
    (aborted transactions and markers skipped, offsets as the log has them); read_uncommitted
    returns the aborted rows too."""
    transactions = [True, False, True, False, True]
    committed = {
        (i % 2, b"t%d-%d" % (t, i)) for t, ok in enumerate(transactions) if ok for i in range(6)
    }
    committed_only = {"kafka.isolation.level": "read_committed"}

    def partition_values(got: Sequence[Row]) -> set[tuple[int, bytes | None]]:
        return {(partition, value) for partition, _, _, value, _, _ in got}

    @spark_scenario
    def scenario(target: str, bootstrap: str) -> None:
        topic = _name("txn")
        create_topic(bootstrap, topic, 2)
        produce_transactions(bootstrap, topic, transactions)
        got = read(spark, bootstrap, topic, committed_only)
        assert partition_values(got) == committed and len(got) == len(committed), target
        everything = read(spark, bootstrap, topic)
        assert len(everything) == 6 * len(transactions), f"{target}: {len(everything)} rows"
        # The stream: the same committed rows, each once, in micro-batches of at most 5.
        name = f"txn_{target}_{uuid.uuid4().hex[:6]}"
        options = {"startingOffsets": "earliest", "maxOffsetsPerTrigger": 5, **committed_only}
        writer = (
            _reader(spark.readStream, bootstrap, topic, options)
            .load()
            .writeStream.format("memory")
            .queryName(name)
            .option("checkpointLocation", str(tmp_path / target / "checkpoint"))
        )
        run_available_now(writer, f"{target} read_committed stream of {topic}")
        streamed = rows(spark.sql(f"SELECT * FROM {name}"))
        assert streamed == got, f"{target}: {_diff_rows(streamed, got)}"

    on_both(brokers, scenario)


def test_pyspark_pin_matches_the_connector() -> None:
    """pyproject's spark extra pins the pyspark whose Spark the connector of pom.xml is
    for, and is the only pin: the test extra takes it from there."""
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    extras = project["optional-dependencies"]
    pins = {
        extra: [dep for dep in deps if dep.startswith("pyspark")] for extra, deps in extras.items()
    }
    assert {extra: deps for extra, deps in pins.items() if deps} == {
        "spark": [f"pyspark=={connector_spark_version()}"]
    }, pins
    assert "groupcoord[spark]" in extras["test"]
