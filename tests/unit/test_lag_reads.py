"""What lag reads of the data plane (topics/lag_reads.py), on a real partition log: the
high watermark, and the timestamp of the batch holding the first unconsumed record."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from groupcoord.coordinator.config import load_config
from groupcoord.coordinator.topics.lag_reads import PartitionEnds
from groupcoord.coordinator.topics.registry import TopicRegistry
from groupcoord.protocol.batches import split_batches
from tests.support import make_batch


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
    real_read = ends._read

    def counting(log: object, offset: int) -> int | None:
        nonlocal reads
        reads += 1
        return real_read(log, offset)  # type: ignore[arg-type]

    ends._read = counting  # type: ignore[method-assign]
    ends.begin_scrape()
    assert ends.timestamp_ms("t", 0, 0) == 1_000  # from the scrape before
    ends.begin_scrape()
    assert ends.timestamp_ms("t", 0, 0) == 1_000  # kept while read each scrape
    assert reads == 0
    ends.begin_scrape()
    ends.begin_scrape()
    assert ends.timestamp_ms("t", 0, 0) == 1_000  # not read for a scrape: forgotten
    assert reads == 1
