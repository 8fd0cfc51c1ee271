"""The segments' tables of their newest batches' timestamps (storage/batch_times.py), on
real partition logs: what lag reads answer from them equals what a header read gives (after
a trim, a truncation, a restart), the reads they save, and the bound on their memory."""

from __future__ import annotations

import random
from collections.abc import Iterator
from pathlib import Path

import pytest

from groupcoord.coordinator.config import load_config
from groupcoord.coordinator.topics.lag_reads import PartitionEnds
from groupcoord.coordinator.topics.registry import TopicRegistry
from groupcoord.protocol.batches import set_max_timestamp, split_batches
from groupcoord.storage import PartitionLog, segment
from tests.support import counting_segment_reads, make_batch


def _registry(data_dir: Path) -> TopicRegistry:
    config = load_config(overrides={"data_dir": str(data_dir), "metrics_listen": ""}, environ={})
    registry = TopicRegistry(config)
    registry.load()
    return registry


@pytest.fixture
def topics(tmp_path: Path) -> Iterator[TopicRegistry]:
    registry = _registry(tmp_path)
    yield registry
    registry.close()


def _log(topics: TopicRegistry) -> PartitionLog:
    found = topics.partition("t", 0)
    assert found is not None and found.log is not None
    return found.log


def _append_many(log: PartitionLog, count: int, first_ts_ms: int = 10_000) -> None:
    """`count` batches of 1-3 records, every third one a LogAppendTime batch."""
    for i in range(count):
        buf = bytearray(make_batch(1 + i % 3, start_ts_ms=first_ts_ms + 10 * i))
        headers = split_batches(buf)
        if i % 3 == 0:
            headers = [set_max_timestamp(buf, 0, headers[0], True, first_ts_ms + 40_000 + i)]
        log.append(buf, headers)
    log.flush()


def _read_each(topics: TopicRegistry, offsets: list[int]) -> list[int | None]:
    """What a header read gives for each offset (no table, no walk)."""
    log = _log(topics)
    return [PartitionEnds._read(log, offset) for offset in offsets]


def _tables(log: PartitionLog) -> list[int]:
    """Entries in each segment's table, oldest segment first."""
    _, _, closed, active, _ = log.segments_snapshot()
    return [len(s.batch_times.last_rel) for s in (*closed, active)]


def test_a_full_table_keeps_its_newest_half_and_the_older_batches_are_walked(
    topics: TopicRegistry, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(segment, "MAX_ENTRIES", 64)
    topics.create("t", 1, {})
    log = _log(topics)
    _append_many(log, 300)
    assert 32 <= _tables(log)[-1] <= 64
    times = log.segments_snapshot()[3].batch_times
    first_noted = log.segments_snapshot()[3].base_offset + times.floor_rel + 1
    offsets = list(range(log.next_offset))
    expected = _read_each(topics, offsets)
    assert None not in expected
    reads = counting_segment_reads(monkeypatch)
    assert PartitionEnds(topics).timestamps_ms("t", 0, offsets) == expected
    assert reads[0] > 0  # the offsets below the table were walked
    reads[0] = 0
    newest = offsets[first_noted:]
    assert PartitionEnds(topics).timestamps_ms("t", 0, newest) == expected[first_noted:]
    assert reads[0] == 0


def test_only_the_last_two_segments_keep_a_table_and_a_restart_notes_the_active_one(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    topics = _registry(tmp_path)
    topics.create("t", 1, {"segment.bytes": "4096"})
    _append_many(_log(topics), 400)
    tables = _tables(_log(topics))
    assert len(tables) > 5
    assert tables[:-2] == [0] * (len(tables) - 2)
    assert all(tables[-2:])
    offsets = list(range(_log(topics).next_offset + 2))
    expected = PartitionEnds(topics).timestamps_ms("t", 0, offsets)
    topics.close()
    topics = _registry(tmp_path)
    try:
        log = _log(topics)
        active = log.segments_snapshot()[3]
        # Recovery read every batch of the active segment: all noted, from its start.
        assert active.batch_times.floor_rel == -1
        assert len(active.batch_times.last_rel) > 0
        assert _tables(log)[:-2] == [0] * (len(_tables(log)) - 2)
        reads = counting_segment_reads(monkeypatch)
        in_active = [o for o in offsets if active.base_offset <= o < log.next_offset]
        assert PartitionEnds(topics).timestamps_ms("t", 0, in_active) == [
            expected[o] for o in in_active
        ]
        assert reads[0] == 0
        assert PartitionEnds(topics).timestamps_ms("t", 0, offsets) == expected
        assert expected == [*_read_each(topics, offsets[:-2]), None, None]
    finally:
        topics.close()


def test_a_truncated_log_answers_the_batches_appended_after_the_cut(
    topics: TopicRegistry,
) -> None:
    topics.create("t", 1, {})
    log = _log(topics)
    _append_many(log, 300)
    log.truncate_to(211)
    _append_many(log, 50, first_ts_ms=900_000)
    offsets = list(range(log.next_offset))
    random.Random(5).shuffle(offsets)
    expected = _read_each(topics, offsets)
    assert None not in expected
    assert PartitionEnds(topics).timestamps_ms("t", 0, offsets) == expected
    assert max(t for t in expected if t is not None) >= 900_000
