"""What lag reads of the data plane (topics/lag_reads.py), on a real partition log: the
high watermark, and the timestamp of the batch holding the first unconsumed record."""

from __future__ import annotations

import contextlib
import random
from collections.abc import Iterator
from pathlib import Path

import pytest

from groupcoord.coordinator.config import load_config
from groupcoord.coordinator.topics.lag_reads import PartitionEnds
from groupcoord.coordinator.topics.registry import TopicRegistry
from groupcoord.protocol.batches import set_max_timestamp, split_batches
from groupcoord.storage.segment import Segment
from tests.support import batch_times_dropped, make_batch


@pytest.fixture
def topics(tmp_path: Path) -> Iterator[TopicRegistry]:
    config = load_config(overrides={"data_dir": str(tmp_path), "metrics_listen": ""}, environ={})
    registry = TopicRegistry(config)
    registry.load()
    yield registry
    registry.close()


def _append(topics: TopicRegistry, batch: bytes) -> None:
    partition = topics.partition("t", 0)
    assert partition is not None
    buf = bytearray(batch)
    partition.log.append(buf, split_batches(buf))
    partition.log.flush()


def test_high_watermark_and_first_unconsumed_timestamp(topics: TopicRegistry) -> None:
    topics.create("t", 1, {})
    _append(topics, make_batch(3, start_ts_ms=1_000))  # offsets 0-2
    _append(topics, make_batch(2, start_ts_ms=2_000))  # offsets 3-4
    ends = PartitionEnds(topics)
    assert ends.high_watermark("t", 0) == 5
    assert ends.high_watermark("t", 1) is None
    assert ends.high_watermark("nope", 0) is None
    assert ends.timestamp_ms("t", 0, 0) == 1_000
    assert ends.timestamp_ms("t", 0, 3) == 2_000  # exact: the offset starts its batch
    assert ends.timestamp_ms("t", 0, 4) == 2_000  # its batch's first record's (2_001 exact)
    assert ends.timestamp_ms("t", 0, 5) is None  # nothing unconsumed
    assert ends.timestamp_ms("nope", 0, 0) is None


def test_timestamps_are_cached_for_two_scrapes(topics: TopicRegistry) -> None:
    topics.create("t", 1, {})
    _append(topics, make_batch(1, start_ts_ms=1_000))
    ends = PartitionEnds(topics)
    ends.begin_scrape()
    assert ends.timestamp_ms("t", 0, 0) == 1_000
    reads = 0
    real_read = ends._read_all

    def counting(log: object, offsets: list[int]) -> list[int | None]:
        nonlocal reads
        reads += len(offsets)
        return real_read(log, offsets)  # type: ignore[arg-type]

    ends._read_all = counting  # type: ignore[method-assign]
    ends.begin_scrape()
    assert ends.timestamp_ms("t", 0, 0) == 1_000  # from the scrape before
    ends.begin_scrape()
    assert ends.timestamp_ms("t", 0, 0) == 1_000  # kept while read each scrape
    assert reads == 0
    ends.begin_scrape()
    ends.begin_scrape()
    assert ends.timestamp_ms("t", 0, 0) == 1_000  # not read for a scrape: forgotten
    assert reads == 1


def _append_many(topics: TopicRegistry, partition: int, count: int, log_append: bool) -> None:
    """`count` batches of 1-3 records; every third one a LogAppendTime batch if asked."""
    found = topics.partition("t", partition)
    assert found is not None
    for i in range(count):
        buf = bytearray(make_batch(1 + i % 3, start_ts_ms=10_000 + 10 * i))
        headers = split_batches(buf)
        if log_append and i % 3 == 0:
            headers = [set_max_timestamp(buf, 0, headers[0], True, 50_000 + i)]
        found.log.append(buf, headers)
    found.log.flush()


@pytest.mark.parametrize("noted", [True, False])
def test_one_walk_answers_what_one_read_each_does(topics: TopicRegistry, noted: bool) -> None:
    """Many segments (small ones), LogAppendTime batches, multi-record batches, records
    below the log start, offsets in any order and repeated, at and past the end; the
    last two segments' batches noted as appended (storage/batch_times.py) or not."""
    topics.create("t", 1, {"segment.bytes": "4096"})
    _append_many(topics, 0, 400, log_append=True)
    found = topics.partition("t", 0)
    assert found is not None and found.log is not None
    assert found.log.segment_count > 5
    found.log.advance_log_start_offset(37)
    end = found.high_watermark
    offsets = [*range(0, end + 3), 5, 500, 0, end - 1, 123, 123]
    random.Random(7).shuffle(offsets)
    one_each = PartitionEnds(topics)
    expected = []
    for offset in offsets:
        one_each.begin_scrape()  # no cache: a read each
        expected.append(one_each._read(found.log, max(offset, 37)) if offset < end else None)
    with contextlib.ExitStack() as stack:
        if not noted:
            stack.enter_context(batch_times_dropped([found.log]))
        assert PartitionEnds(topics).timestamps_ms("t", 0, offsets) == expected
    assert sum(t is not None and t >= 50_000 for t in expected) > 50  # LogAppendTime read


def test_a_partitions_offsets_cost_one_walk_of_its_headers(topics: TopicRegistry) -> None:
    """A first scrape of 100 groups on one partition reads its headers once (a few 8 KiB
    reads), not a lookup and a read per group (issue 20's cold scrape)."""
    topics.create("t", 1, {})
    _append_many(topics, 0, 300, log_append=False)
    found = topics.partition("t", 0)
    assert found is not None and found.log is not None
    size_bytes = found.log.size_bytes
    reads = 0
    real_pread = Segment.pread

    def counting(segment: Segment, position: int, size: int) -> bytes:
        nonlocal reads
        reads += 1
        return real_pread(segment, position, size)

    Segment.pread = counting  # type: ignore[method-assign]
    try:
        offsets = random.Random(3).sample(range(found.high_watermark), 100)
        with batch_times_dropped([found.log]):  # not noted: walked
            read = PartitionEnds(topics).timestamps_ms("t", 0, offsets)
        assert reads <= size_bytes // (8 * 1024) + 2
        reads = 0
        assert PartitionEnds(topics).timestamps_ms("t", 0, offsets) == read
        assert reads == 0  # noted as appended: nothing read
    finally:
        Segment.pread = real_pread  # type: ignore[method-assign]
    assert None not in read


@pytest.mark.parametrize("noted", [True, False])
@pytest.mark.parametrize("spacing", [1, 7, 150])
def test_a_walk_through_one_large_segment_answers_what_one_read_each_does(
    topics: TopicRegistry, spacing: int, noted: bool
) -> None:
    """One segment of ~40 index entries, offsets asked every `spacing` offsets: the walk
    jumps through the index where an entry lies ahead of it, and reads on in larger
    reads where it does not; the answers are a lookup's each."""
    topics.create("t", 1, {})
    _append_many(topics, 0, 1500, log_append=True)
    found = topics.partition("t", 0)
    assert found is not None and found.log is not None
    assert found.log.segment_count == 1
    offsets = list(range(3, found.high_watermark, spacing))
    one_each = PartitionEnds(topics)
    expected = []
    for offset in offsets:
        one_each.begin_scrape()
        expected.append(one_each._read(found.log, offset))
    assert None not in expected
    with contextlib.ExitStack() as stack:
        if not noted:
            stack.enter_context(batch_times_dropped([found.log]))
        assert PartitionEnds(topics).timestamps_ms("t", 0, offsets) == expected


def test_a_walk_meeting_a_damaged_header_answers_what_one_read_each_does(
    topics: TopicRegistry,
) -> None:
    """A batch in the middle of a segment whose magic byte is damaged (written behind the
    log's back): the walk gives up and the offsets are looked up one by one, as a read
    does, so the offsets whose lookup passes the damage have no timestamp."""
    topics.create("t", 1, {})
    _append_many(topics, 0, 400, log_append=False)
    found = topics.partition("t", 0)
    assert found is not None and found.log is not None
    segment = found.log.segments_snapshot()[3]
    positions = [position for position, _ in segment.iter_headers()]
    with open(segment.path(), "r+b") as file:
        file.seek(positions[250] + 16)  # the magic byte
        file.write(b"\x07")
    offsets = list(range(0, found.high_watermark, 3))
    with batch_times_dropped([found.log]):  # the batches as appended are not read
        got = PartitionEnds(topics).timestamps_ms("t", 0, offsets)
    one_each = PartitionEnds(topics)
    expected = [one_each._read(found.log, offset) for offset in offsets]
    assert got == expected
    assert None in got
    assert got[0] is not None
