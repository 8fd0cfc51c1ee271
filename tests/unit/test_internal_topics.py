"""The read-only partition view over a shard log (coordinator/topics/internal_topics.py):
the producer state a read_committed reader needs, built from the durable batch headers in
bounded steps; what is not scanned yet, and what is not durable, holds the last stable
offset; a replaced log (a shard reload) starts the scan over."""

from __future__ import annotations

from pathlib import Path

import pytest
from aiokafka.record.default_records import DefaultRecordBatchBuilder

from groupcoord.coordinator.topics import internal_topics
from groupcoord.coordinator.topics.internal_topics import InternalTopics
from groupcoord.protocol.batches import parse_header
from groupcoord.protocol.control_batches import marker_batch
from groupcoord.storage import LogConfig, PartitionLog

PID = 7


class Shards:
    """One shard whose log a test replaces, as a reload does."""

    shard_count = 1

    def __init__(self, log: PartitionLog | None) -> None:
        self.log = log

    def shard_log(self, index: int) -> PartitionLog | None:
        return self.log


def append(log: PartitionLog, data: bytearray | bytes) -> int:
    data = bytearray(data)
    return log.append(data, [parse_header(data)])


def record(log: PartitionLog, transactional: bool = False) -> int:
    builder = DefaultRecordBatchBuilder(
        2,
        0,
        int(transactional),
        PID if transactional else -1,
        0 if transactional else -1,
        0 if transactional else -1,
        1 << 20,
    )
    builder.append(0, 1000, b"k", b"v", [])
    return append(log, builder.build())


@pytest.fixture
def log(tmp_path: Path) -> PartitionLog:
    return PartitionLog.open(tmp_path / "__consumer_offsets-0", LogConfig())


def test_a_transaction_holds_the_last_stable_offset_until_its_marker_is_durable(
    log: PartitionLog,
) -> None:
    shards = Shards(log)
    topic = InternalTopics().add("__consumer_offsets", "cluster", {}, shards)
    partition = topic.partitions[0]
    assert not topic.exists()
    record(log)
    first = record(log, transactional=True)
    log.flush()
    assert topic.exists()
    assert partition.high_watermark == 2
    assert partition.last_stable_offset == first  # the open transaction
    marker = append(log, marker_batch(PID, 0, 0, False, 2000)[0])
    assert partition.last_stable_offset == first  # the marker is not durable yet
    log.flush()
    assert partition.last_stable_offset == marker + 1
    assert partition.producers.aborted_between(0, marker + 1) == [(PID, first)]
    # A reload replaces the log: the view scans the new one from its start.
    shards.log = PartitionLog.open(log.directory.parent / "other-0", LogConfig())
    assert partition.last_stable_offset == 0
    assert partition.producers.aborted_between(0, 10) == []
    shards.log = None  # closed (or not open yet): no log, no offsets
    assert partition.log is None and partition.high_watermark == -1


def test_a_long_log_is_scanned_in_steps_holding_back_what_is_not_scanned(
    log: PartitionLog, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(internal_topics, "SCAN_BATCHES_MAX", 3)
    for _ in range(7):
        record(log)
    log.flush()
    partition = InternalTopics().add("__consumer_offsets", "c", {}, Shards(log)).partitions[0]
    assert [partition.last_stable_offset for _ in range(4)] == [3, 6, 7, 7]
