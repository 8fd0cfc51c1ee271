"""The structure of a first lag scrape (issue 20's target: the first scrape after a start
within the loop-time budget too; tests/bench/bench_lag.py prints the figures), on a real
partition log, without timing anything: how many segment reads it makes (none for the
batches the log noted as it appended or recovered them: storage/batch_times.py; one walk
of each partition's headers for the others, not one lookup per group-partition; none for
timestamps cached by the scrape before), and how many objects the collector tracks that it
leaves behind (kept
from one scrape to the next: label texts, Burrow's windows). Keyed by a tuple per
group-partition, those were ~5 tracked objects each, enough that a first scrape of 10,000
group-partitions set off a collector pass of ~5 ms inside one of its steps."""

from __future__ import annotations

import asyncio
import gc
import random
from collections.abc import Iterator
from pathlib import Path

import pytest

from groupcoord.coordinator.config import load_config
from groupcoord.coordinator.observability.lag_metrics import LagMetrics
from groupcoord.coordinator.topics.lag_reads import PartitionEnds
from groupcoord.coordinator.topics.registry import TopicRegistry
from groupcoord.protocol.batches import split_batches
from tests.support import batch_times_dropped, counting_segment_reads, make_batch

GROUPS = 30
PARTITIONS = 20
BATCHES = 200
ROWS = GROUPS * PARTITIONS
NOW_MS = 10_000_000
Committed = list[tuple[str, str, int, int, int]]


def _registry(data_dir: Path) -> TopicRegistry:
    config = load_config(overrides={"data_dir": str(data_dir), "metrics_listen": ""}, environ={})
    registry = TopicRegistry(config)
    registry.load()
    return registry


@pytest.fixture(scope="module")
def topics(tmp_path_factory: pytest.TempPathFactory) -> Iterator[TopicRegistry]:
    """One log for the module's tests (they only read it)."""
    registry = _registry(tmp_path_factory.mktemp("lag_cold"))
    topic = registry.create("t", PARTITIONS, {})
    for partition in topic.partitions:
        for i in range(BATCHES):
            buf = bytearray(make_batch(1, start_ts_ms=NOW_MS - 60_000 + i))
            partition.log.append(buf, split_batches(buf))
        partition.log.flush()
    yield registry
    registry.close()


def _lag(topics: TopicRegistry, commit_ms: list[int]) -> LagMetrics:
    """Every group committed on every partition at a random offset behind the end (each
    first unconsumed record's header is read), at commit_ms[0] (changed by the test)."""
    rng = random.Random(7)
    offsets = {(g, p): rng.randrange(BATCHES) for g in range(GROUPS) for p in range(PARTITIONS)}

    def sources() -> Iterator[tuple[Committed, dict[str, int]]]:
        for shard in range(3):
            committed = [
                (f"g{g}", "t", p, offsets[g, p], commit_ms[0])
                for g in range(shard, GROUPS, 3)
                for p in range(PARTITIONS)
            ]
            yield committed, {f"g{g}": 1 for g in range(shard, GROUPS, 3)}

    return LagMetrics(sources, PartitionEnds(topics), series_max=10_000, clock_ms=lambda: NOW_MS)


def test_first_scrape_reads_no_header_of_batches_the_log_noted(
    topics: TopicRegistry, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Every batch was appended in this process: their timestamps are in memory."""
    lag = _lag(topics, [NOW_MS - 5_000])
    reads = counting_segment_reads(monkeypatch)
    text = asyncio.run(lag.scrape()).decode()
    assert text.count("groupcoord_group_lag_seconds{") == ROWS  # every age was read
    assert reads[0] == 0  # on main: one walk of each partition's headers
    assert asyncio.run(lag.scrape()).decode() == text
    assert reads[0] == 0


def test_first_scrape_after_a_restart_reads_no_header_of_the_recovered_segments(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Recovery reads the active segment's headers anyway (log_recovery.py): it notes
    their timestamps, and the first scrape after the start reads none again."""
    registry = _registry(tmp_path)
    for partition in registry.create("t", PARTITIONS, {}).partitions:
        for i in range(BATCHES):
            buf = bytearray(make_batch(1, start_ts_ms=NOW_MS - 60_000 + i))
            partition.log.append(buf, split_batches(buf))
        partition.log.flush()
    expected = asyncio.run(_lag(registry, [NOW_MS - 5_000]).scrape())
    registry.close()
    registry = _registry(tmp_path)
    try:
        reads = counting_segment_reads(monkeypatch)
        assert asyncio.run(_lag(registry, [NOW_MS - 5_000]).scrape()) == expected
        assert reads[0] == 0  # on main: one walk of each partition's headers
    finally:
        registry.close()


def test_first_scrape_without_noted_batches_walks_each_partition_once_and_the_next_reads_nothing(
    topics: TopicRegistry, monkeypatch: pytest.MonkeyPatch
) -> None:
    expected = asyncio.run(_lag(topics, [NOW_MS - 5_000]).scrape()).decode()
    logs = [partition.log for partition in topics.get("t").partitions]  # type: ignore[union-attr]
    with batch_times_dropped(logs):
        lag = _lag(topics, [NOW_MS - 5_000])
        reads = counting_segment_reads(monkeypatch)
        text = asyncio.run(lag.scrape()).decode()
        assert text == expected
        # One forward walk a partition (8 KiB reads over its ~16 KiB of headers), where
        # one lookup per group-partition would make ROWS reads or more.
        sizes = [p.log.size_bytes for p in topics.get("t").partitions]  # type: ignore[union-attr]
        assert 0 < reads[0] <= sum(size // 8192 + 2 for size in sizes)
        assert reads[0] < ROWS // 10
        reads[0] = 0
        assert asyncio.run(lag.scrape()).decode() == text
        assert reads[0] == 0  # the timestamps of unchanged offsets are cached


def test_state_kept_between_scrapes_is_about_one_tracked_object_per_group_partition(
    topics: TopicRegistry,
) -> None:
    commit_ms = [NOW_MS - 5_000]
    lag = _lag(topics, commit_ms)
    gc.collect()
    gc.disable()
    try:
        before = gc.get_count()[0]
        asyncio.run(lag.scrape())
        first = gc.get_count()[0] - before
        # A second commit each: Burrow's windows are made now.
        commit_ms[0] += 2_000
        text = asyncio.run(lag.scrape()).decode()
    finally:
        gc.enable()
    # New tracked objects (allocations less deallocations counted by the collector: what
    # its next pass walks): a first commit per group-partition, a few per group and topic,
    # and what a scrape's own freeing leaves uncounted. Keyed by triples, with a window
    # per first commit, it was ~7 a group-partition.
    assert first <= 3 * ROWS, first
    # Two commits, the last longer ago than the window spans: STOPPED, from the windows.
    assert f'groupcoord_group_partitions_status{{group="g0",status="STOPPED"}} {PARTITIONS}' in text
