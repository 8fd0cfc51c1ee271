"""Compacted data topics (cleanup.policy=compact), without sockets: the configs are checked
as Kafka checks them and steer retention and segment rolling; the topic log cleaner
(coordinator/topics/compaction.py) cleans a partition only when Kafka's rules make it due,
keeps idempotent producers' state across a restart, and leaves no files behind when
cancelled; a produce to a compacted topic refuses records without a key (INVALID_RECORD,
Kafka's messages and record_errors)."""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import AsyncIterator, Iterator, Sequence
from pathlib import Path
from typing import Any

import pytest
from aiokafka.record.default_records import DefaultRecordBatch

import groupcoord.coordinator.topics.compaction as compaction_module
from groupcoord.coordinator.config import Config, load_config
from groupcoord.coordinator.server.app import Server
from groupcoord.coordinator.topics.cleanup_policy import CleanupPolicy
from groupcoord.coordinator.topics.compaction import TopicCompactor
from groupcoord.coordinator.topics.configs import InvalidConfig, validate_topic_configs
from groupcoord.coordinator.topics.producers import ProducerStates
from groupcoord.coordinator.topics.registry import Partition, TopicError, TopicRegistry
from groupcoord.protocol.batches import BatchHeader, parse_header, split_batches
from groupcoord.protocol.errors import ErrorCode
from groupcoord.storage import prepare_compaction
from tests.support import client_batch
from tests.unit.server_support import produce, started_server
from tests.unit.waits import Executor, thread_event

LONG_MAX = 2**63 - 1
DAY_MS = 86_400_000

Rec = tuple[bytes | None, bytes | None]


def batch(
    records: Sequence[Rec],
    *,
    timestamp: int | None = None,
    pid: int = -1,
    seq: int = -1,
    compression: int = 0,
) -> bytes:
    """One record batch as a client builds it (aiokafka's codec)."""
    ts = time.time_ns() // 1_000_000 if timestamp is None else timestamp
    return client_batch(
        [(key, value, ts) for key, value in records],
        producer_id=pid,
        epoch=0 if pid >= 0 else -1,
        seq=seq,
        compression=compression,
    )


def append(partition: Partition, data: bytes) -> int:
    buf = bytearray(data)
    headers = split_batches(buf)
    base = partition.log.append(buf, headers)
    partition.producers.record(headers[0], base)
    return base


def stored(partition: Partition) -> list[tuple[int, bytes | None, bytes | None]]:
    """(offset, key, value) of every record a consumer reads from the log start."""
    log = partition.log
    data = log.read(log.log_start_offset, 10**8)
    out = []
    pos = 0
    while pos < len(data):
        header = parse_header(data, pos)
        out.extend(
            (r.offset, r.key, r.value)
            for r in DefaultRecordBatch(data[pos : pos + header.size_bytes])
        )
        pos += header.size_bytes
    return out


def headers(partition: Partition) -> list[BatchHeader]:
    return list(partition.log.batch_headers())


@pytest.fixture
def config(tmp_path: Path) -> Config:
    return load_config(overrides={"data_dir": str(tmp_path), "metrics_listen": ""}, environ={})


@pytest.fixture
def registry(config: Config) -> Iterator[TopicRegistry]:
    reg = TopicRegistry(config)
    reg.load()
    yield reg
    reg.close()


# configs ------------------------------------------------------------------------------------


def test_cleanup_policy_takes_compact_and_delete_as_kafkas_list() -> None:
    for value in ("delete", "compact", "compact,delete", "delete, compact", " compact ", ""):
        assert validate_topic_configs({"cleanup.policy": value}) == {"cleanup.policy": value}
    for value, message in (
        ("shred", "String must be one of: compact, delete"),
        ("compact,shred", "String must be one of: compact, delete"),
        ("compact,compact", "values must not be duplicated"),
        ("compact,", "values must not be empty"),
    ):
        with pytest.raises(InvalidConfig, match=message) as raised:
            validate_topic_configs({"cleanup.policy": value})
        assert "cleanup.policy" in str(raised.value)


def test_compaction_configs_are_checked_as_kafka_checks_them(
    registry: TopicRegistry,
) -> None:
    for value in ("0", "0.5", "1", "1.0", ".25", "1e-1", " 0.75 "):
        validate_topic_configs({"min.cleanable.dirty.ratio": value})
    for value, message in (
        ("1.5", "no more than 1"),
        ("-0.1", "at least 0"),
        ("half", "DOUBLE"),
        ("NaN", "DOUBLE"),
        ("", "DOUBLE"),
    ):
        with pytest.raises(InvalidConfig, match=message):
            validate_topic_configs({"min.cleanable.dirty.ratio": value})
    with pytest.raises(InvalidConfig, match="at least 1"):
        validate_topic_configs({"max.compaction.lag.ms": "0"})
    for name in ("delete.retention.ms", "min.compaction.lag.ms"):
        with pytest.raises(InvalidConfig, match="at least 0"):
            validate_topic_configs({name: "-1"})
    # Kafka's LogConfig.validateValues: the lags against each other, defaults included.
    with pytest.raises(TopicError) as raised:
        registry.create("lags", 1, {"min.compaction.lag.ms": "10", "max.compaction.lag.ms": "5"})
    assert raised.value.code == ErrorCode.INVALID_CONFIG
    assert raised.value.message == (
        "conflict topic config setting min.compaction.lag.ms (10) > max.compaction.lag.ms (5)"
    )
    assert registry.get("lags") is None
    topic = registry.create("lags", 1, {"min.compaction.lag.ms": "10"})
    assert CleanupPolicy.of(topic, registry.config) == CleanupPolicy(
        compact=False,
        delete=True,
        delete_retention_ms=DAY_MS,
        min_lag_ms=10,
        max_lag_ms=LONG_MAX,
        min_dirty_ratio=0.5,
    )


def test_cleanup_policy_steers_retention_and_segment_rolling(
    registry: TopicRegistry, config: Config
) -> None:
    retention = {"retention.ms": "60000", "retention.bytes": "4096", "segment.ms": "100000"}
    deleting = registry.create("deleting", 1, retention)
    compacted = registry.create("compacted", 1, {**retention, "cleanup.policy": "compact"})
    both = registry.create("both", 1, {**retention, "cleanup.policy": "compact,delete"})
    neither = registry.create("neither", 1, {**retention, "cleanup.policy": ""})
    for topic, kept in ((deleting, True), (compacted, False), (both, True), (neither, False)):
        log_config = topic.partitions[0].log.config
        assert (log_config.retention_ms, log_config.retention_bytes) == (
            (60000, 4096) if kept else (-1, -1)
        ), topic.name
        assert log_config.segment_ms == 100000
    # max.compaction.lag.ms rolls a compacted topic's active segment in time (Kafka's
    # maxSegmentMs); it means nothing to a topic that is not compacted.
    registry.alter_configs(
        compacted, {**retention, "cleanup.policy": "compact", "max.compaction.lag.ms": "5000"}
    )
    assert compacted.partitions[0].log.config.segment_ms == 5000
    registry.alter_configs(deleting, {**retention, "max.compaction.lag.ms": "5000"})
    assert deleting.partitions[0].log.config.segment_ms == 100000
    # Altering cleanup.policy takes effect on the live log, and survives a restart.
    registry.alter_configs(deleting, {**retention, "cleanup.policy": "compact"})
    assert deleting.partitions[0].log.config.retention_ms == -1
    registry.close()
    reopened = TopicRegistry(config)
    reopened.load()
    try:
        assert reopened.get("deleting").partitions[0].log.config.retention_ms == -1  # type: ignore[union-attr]
    finally:
        reopened.close()


# the cleaner --------------------------------------------------------------------------------


def fill(partition: Partition, rounds: int, keys: int = 3, tombstone: bytes | None = None) -> None:
    """`rounds` values for each of k1..k<keys>, one batch per record, then the tombstone;
    fsynced."""
    for r in range(rounds):
        for k in range(1, keys + 1):
            append(partition, batch([(b"k%d" % k, b"v%d.%d" % (k, r))]))
    if tombstone is not None:
        append(partition, batch([(tombstone, None)]))
    partition.log.flush()


async def test_compacted_topics_are_cleaned_when_due_and_others_left_alone(
    registry: TopicRegistry, config: Config
) -> None:
    small = {"segment.bytes": "100"}  # one batch per segment
    compacted = registry.create("compacted", 1, {**small, "cleanup.policy": "compact"}).partitions[
        0
    ]
    deleting = registry.create("deleting", 1, small).partitions[0]
    for partition in (compacted, deleting):
        fill(partition, 3, tombstone=b"k2")
        append(partition, batch([(b"tail", b"t")]))  # the active segment
        partition.log.flush()
    before = stored(deleting)
    compactor = TopicCompactor(registry, config)

    assert await compactor.clean_once() == 7  # k1..k3 twice each, then k2's last value
    assert stored(compacted) == [
        (6, b"k1", b"v1.2"),
        (8, b"k3", b"v3.2"),
        (9, b"k2", None),  # kept for delete.retention.ms after this pass
        (10, b"tail", b"t"),
    ]
    assert stored(deleting) == before
    # Offsets never change: a read in a gap answers the next batch; the log start stays.
    assert compacted.log.log_start_offset == 0
    assert parse_header(compacted.log.read(2, 1)).base_offset == 6

    # Nothing dirty: the next pass does not clean (min.cleanable.dirty.ratio).
    assert await compactor.clean_once() == 0
    # Altering cleanup.policy takes effect at the next pass.
    topic = registry.get("deleting")
    assert topic is not None
    registry.alter_configs(topic, {**small, "cleanup.policy": "delete,compact"})
    assert await compactor.clean_once() == 7
    assert stored(deleting) == stored(compacted)


async def test_the_dirty_ratio_and_min_lag_decide_what_is_cleaned(
    registry: TopicRegistry, config: Config
) -> None:
    now = [time.time_ns() // 1_000_000]
    compactor = TopicCompactor(registry, config, clock_ms=lambda: now[0])
    configs = {"segment.bytes": "100", "cleanup.policy": "compact"}
    partition = registry.create("t", 1, configs).partitions[0]
    topic = partition.topic
    fill(partition, 2, keys=6)  # offsets 0-11, one batch per segment
    append(partition, batch([(b"tail", b"t")]))  # 12
    partition.log.flush()
    assert await compactor.clean_once() == 6
    # Three dirty segments (12-14) next to six clean ones: a ratio of 1/3 is not enough ...
    append(partition, batch([(b"k1", b"new")]))  # 13
    append(partition, batch([(b"k2", b"new")]))  # 14
    append(partition, batch([(b"tail", b"t2")]))  # 15: the active segment
    partition.log.flush()
    assert await compactor.clean_once() == 0
    # ... for the default min.cleanable.dirty.ratio (0.5); it is for a lower one.
    configs["min.cleanable.dirty.ratio"] = "0.2"
    registry.alter_configs(topic, configs)
    assert await compactor.clean_once() == 3  # k1, k2 and the first tail
    assert [offset for offset, _, _ in stored(partition)] == [8, 9, 10, 11, 13, 14, 15]

    # min.compaction.lag.ms: records younger than it stay; later, they are cleaned.
    configs["min.compaction.lag.ms"] = "60000"
    registry.alter_configs(topic, configs)
    for value in (b"a", b"b", b"c"):
        append(partition, batch([(b"k1", value)], timestamp=now[0]))  # 16-18
    append(partition, batch([(b"tail", b"t3")], timestamp=now[0]))  # 19
    partition.log.flush()
    assert await compactor.clean_once() == 0
    assert len(stored(partition)) == 11
    now[0] += 120_000
    assert await compactor.clean_once() == 4
    assert [offset for offset, _, _ in stored(partition)] == [8, 9, 10, 11, 14, 18, 19]


async def test_idempotent_producers_keep_their_sequence_across_compaction_and_restart(
    registry: TopicRegistry, config: Config
) -> None:
    small = {"segment.bytes": "100", "cleanup.policy": "compact"}
    partition = registry.create("t", 1, small).partitions[0]
    append(partition, batch([(b"k1", b"a0")], pid=7, seq=0))  # 0
    append(partition, batch([(b"k2", b"a1")], pid=7, seq=1))  # 1: producer 7's latest
    append(partition, batch([(b"k1", b"b0")], pid=8, seq=0))  # 2
    append(partition, batch([(b"k2", b"b1")], pid=8, seq=1))  # 3
    append(partition, batch([(b"tail", b"t")]))
    partition.log.flush()
    assert await TopicCompactor(registry, config).clean_once() == 2
    assert [offset for offset, _, _ in stored(partition)] == [2, 3, 4]
    registry.close()

    reopened = TopicRegistry(config)
    reopened.load()
    try:
        restarted = reopened.partition("t", 0)
        assert restarted is not None
        # The state rebuilt from batch headers: producer 7 goes on at sequence 2 ...
        producers = restarted.producers
        assert producers.producers[7].last_sequence == 1
        (next_batch,) = split_batches(batch([(b"k3", b"a2")], pid=7, seq=2))
        assert producers.check(next_batch) is None
        # ... and its retried last batch is still a duplicate, at its original offset.
        (retry,) = split_batches(batch([(b"k2", b"a1")], pid=7, seq=1))
        duplicate = producers.check(retry)
        assert duplicate is not None and duplicate.base_offset == 1
        assert ProducerStates.rebuild(restarted.log).producers[8].last_sequence == 1
    finally:
        reopened.close()


async def test_a_pass_cancelled_mid_prepare_leaves_no_files(
    registry: TopicRegistry, config: Config, monkeypatch: pytest.MonkeyPatch
) -> None:
    partition = registry.create(
        "t", 1, {"segment.bytes": "100", "cleanup.policy": "compact"}
    ).partitions[0]
    fill(partition, 3)
    append(partition, batch([(b"tail", b"t")]))
    partition.log.flush()
    entered, release = threading.Event(), threading.Event()

    def slow_prepare(*args: Any, **kwargs: Any) -> Any:
        entered.set()
        release.wait(5)
        return prepare_compaction(*args, **kwargs)

    monkeypatch.setattr(compaction_module, "prepare_compaction", slow_prepare)
    worker = Executor()
    compactor = TopicCompactor(registry, config)
    task = asyncio.ensure_future(compactor.clean_once())
    await thread_event(entered)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    release.set()
    directory = partition.log.directory
    await worker.done()  # the worker made its plan, and the loop took it
    # The plan the worker made was discarded: no files, and the log can be cleaned again.
    assert not any(p.name.endswith(".cleaned") for p in directory.iterdir())
    monkeypatch.undo()
    assert await compactor.clean_once() == 6


# produce ------------------------------------------------------------------------------------


@pytest.fixture
async def server(tmp_path: Path) -> AsyncIterator[Server]:
    async for srv in started_server(tmp_path / "data"):
        srv.topics.create("compacted", 1, {"cleanup.policy": "compact"})
        srv.topics.create("plain", 1, {})
        yield srv


@pytest.mark.parametrize("compression", [0, 1])
async def test_a_compacted_topic_refuses_records_without_a_key(
    server: Server, compression: int
) -> None:
    keyless = batch(
        [(b"k", b"v"), (None, b"no key"), (None, b"none either")], compression=compression
    )
    answer = await produce(server, "compacted", keyless)
    assert answer.error_code == ErrorCode.INVALID_RECORD == 87
    assert answer.base_offset == -1
    record_error = (
        "Compacted topic cannot accept message without key in topic partition compacted-0"
    )
    assert [(e.batch_index, e.batch_index_error_message) for e in answer.record_errors] == [
        (1, record_error),
        (2, record_error),
    ]
    assert answer.error_message == (
        "One or more records have been rejected due to 2 record errors in total, and only "
        f"showing the first three errors at most: [RecordError(batchIndex=1, message='"
        f"{record_error}'), RecordError(batchIndex=2, message='{record_error}')]"
    )
    topic = server.topics.get("compacted")
    assert topic is not None and topic.partitions[0].log.next_offset == 0
    # Keyed records are taken; a topic that is not compacted takes keyless ones.
    assert (await produce(server, "compacted", batch([(b"k", b"v")]))).error_code == 0
    assert (await produce(server, "plain", keyless)).error_code == 0
