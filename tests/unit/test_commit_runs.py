"""Commits read in bulk, a run of same-shaped records at a time (protocol/commit_runs.py):
the pairs are aiokafka's, or None; and a shard loaded with them (a takeover's log: long
runs of commits among tombstones, group metadata, KIP-848 records, transactional offset
commits and their markers) ends in exactly the state of the loader without them and of
the record-at-a-time replay."""

from __future__ import annotations

import asyncio
import operator
import types
from pathlib import Path
from typing import Any

import pytest
from aiokafka.record.default_records import DefaultRecordBatch, DefaultRecordBatchBuilder
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from groupcoord.coordinator.groups.config import GroupConfig
from groupcoord.coordinator.runtime import runner as runner_module
from groupcoord.coordinator.runtime.runner import ShardRunner
from groupcoord.protocol.batches import HEADER_SIZE, parse_header
from groupcoord.protocol.commit_runs import commit_runs
from groupcoord.protocol.control_batches import marker_batch
from groupcoord.protocol.records import offset_commit_key_fields
from groupcoord.storage import GroupCommitter, LogConfig, PartitionLog
from tests.unit.test_fast_load import (
    NOW_MS,
    TOPIC_ID,
    Rec,
    commit_key,
    commit_value,
    consumer_group_record,
    group_record,
    group_tombstone,
    reference_replay_log,
    state,
)

_KEY_VALUE = operator.attrgetter("key", "value")
COMMIT = b"\x00\x01"


def batch_bytes(
    records: list[Rec], producer_id: int = -1, headers: int | None = None, base: int = 0
) -> bytes:
    """An uncompressed batch of `records` (transactional when `producer_id` is given;
    record `headers` gets a header)."""
    builder = DefaultRecordBatchBuilder(
        magic=2,
        compression_type=0,
        is_transactional=0 if producer_id < 0 else 1,
        producer_id=producer_id,
        producer_epoch=-1 if producer_id < 0 else 0,
        base_sequence=-1 if producer_id < 0 else 0,
        batch_size=1 << 30,
    )
    for delta, (key, value) in enumerate(records):
        extra = [("h", b"x")] if delta == headers else []
        builder.append(delta, timestamp=1_000, key=key, value=value, headers=extra)
    data = bytearray(builder.build())
    data[0:8] = base.to_bytes(8, "big")
    return bytes(data)


def runs_of(data: bytes) -> list[tuple[bytes, bytes]] | None:
    header = parse_header(data)
    runs = commit_runs(data, HEADER_SIZE, len(data), header.records_count)
    if runs is None:
        return None
    pairs = [pair for run in runs for pair in run.pairs.iter_unpack(run.records)]
    fields = [f for run in runs for f in run.fields.iter_unpack(run.records)]
    # Each key's fields as the one-key decoder reads them.
    assert [(g.decode(), t.decode(), p) for g, t, p in fields] == [
        offset_commit_key_fields(key) for key, _ in pairs
    ]
    return pairs


def aiokafka_pairs(data: bytes) -> list[tuple[Any, Any]]:
    return list(map(_KEY_VALUE, DefaultRecordBatch(data)))


def commits(group: str, partitions: range, offset: int, topic: str = "t0") -> list[Rec]:
    return [(commit_key(group, topic, p), commit_value(offset + p)) for p in partitions]


# -- the pairs ----------------------------------------------------------------------------------


def test_long_runs_give_aiokafkas_pairs_across_delta_widths() -> None:
    # 9,000 records: offset deltas of 1, 2 and 3 bytes; runs of keys of 3 lengths.
    records = commits("g1", range(3_000), 5) + commits("group-2", range(3_000), 7)
    records += commits("g3", range(3_000), 9, topic="topic-three")
    data = batch_bytes(records)
    assert runs_of(data) == aiokafka_pairs(data)


def test_many_groups_of_one_key_length_are_one_run() -> None:
    records = [pair for g in range(10, 60) for pair in commits(f"g{g}", range(40), g)]
    data = batch_bytes(records)
    assert runs_of(data) == aiokafka_pairs(data)


@pytest.mark.parametrize(
    "odd",
    [
        (commit_key("g1", "t0", 3), None),  # a tombstone
        group_record("g1", 1),
        group_tombstone("g1"),
        consumer_group_record("g1", 2),
        (commit_key("g1", "t0", 3, legacy=True), commit_value(1)),  # type 0 key
        (None, commit_value(1)),
        (b"", commit_value(1)),
    ],
)
def test_anything_but_a_commit_gives_the_batch_up(odd: Rec) -> None:
    for at in (0, 50, 99):
        records = commits("g1", range(100), 0)
        records[at] = odd
        assert runs_of(batch_bytes(records)) is None


def test_a_record_with_headers_gives_the_batch_up() -> None:
    assert runs_of(batch_bytes(commits("g1", range(100), 0), headers=70)) is None


def test_short_runs_give_the_batch_up() -> None:
    # Keys alternating between two lengths: runs of one record, cheaper decoded one by one.
    records = [pair for i in range(50) for pair in commits("g" * (1 + i % 2), range(1), i)]
    assert runs_of(batch_bytes(records)) is None
    # ... but a batch of one or two runs, however short, is read.
    data = batch_bytes(commits("g1", range(3), 0) + commits("gg1", range(2), 0))
    assert runs_of(data) == aiokafka_pairs(data)


def test_a_damaged_batch_gives_the_batch_up() -> None:
    data = bytearray(batch_bytes(commits("g1", range(100), 0)))
    header = parse_header(data)
    # The records count says one more than there is; the last record cut short.
    assert commit_runs(bytes(data), HEADER_SIZE, len(data), header.records_count + 1) is None
    assert commit_runs(bytes(data), HEADER_SIZE, len(data) - 1, header.records_count) is None
    data[HEADER_SIZE + 3] = 0x7F  # the first record's offset delta
    assert runs_of(bytes(data)) is None


_groups = st.sampled_from(["g", "g1", "g2", "grp-3", "grüppe"])
_request = st.tuples(
    _groups,
    st.sampled_from(["t0", "topic-1"]),
    st.integers(1, 120),
    st.sampled_from([None, "", "meta"]),
)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(requests=st.lists(_request, min_size=1, max_size=12), odd=st.none() | st.integers(0, 400))
def test_pairs_are_aiokafkas_or_none(
    requests: list[tuple[str, str, int, str | None]], odd: int | None
) -> None:
    records: list[Rec] = []
    for group, topic, partitions, metadata in requests:
        for p in range(partitions):
            value = (
                None if metadata is None and p == 7 else commit_value(p, metadata=metadata or "")
            )
            records.append((commit_key(group, topic, p), value))
    if odd is not None and odd < len(records):
        records[odd] = group_record("g1", 1)
    data = batch_bytes(records)
    got = runs_of(data)
    assert got is None or got == aiokafka_pairs(data)
    eligible = all(value is not None and key[:2] == COMMIT for key, value in records)
    if not eligible:
        assert got is None


# -- the load ----------------------------------------------------------------------------------


def takeover_log() -> list[bytes]:
    """A busy shard's log: rounds of long runs of commits, and between them every other
    kind of record the group shards write."""
    out: list[bytes] = []

    def plain(records: list[Rec]) -> None:
        out.append(batch_bytes(records))

    plain([group_record(g, 2) for g in ("g10", "g11")] + [consumer_group_record("c1", 1)])
    for round_ in range(4):
        plain([pair for g in range(10, 30) for pair in commits(f"g{g}", range(50), round_)])
        plain(commits("c1", range(80), round_) + commits("c1", range(40), round_, "topic-1"))
        # A transactional commit, then its marker (COMMIT in even rounds, ABORT in odd).
        out.append(batch_bytes(commits("g12", range(60), 100 + round_), producer_id=9))
        out.append(bytes(marker_batch(9, 0, 0, round_ % 2 == 0, 1_000)[0]))
        plain(commits("g13", range(40), round_) + [(commit_key("g13", "t0", 3), None)])
        plain([group_tombstone("g11"), group_record("g14", 1), consumer_group_record("c1", 2)])
        plain([pair for g in range(10, 30) for pair in commits(f"g{g}", range(50, 90), round_)])
        plain([(commit_key("g10", "t0", round_), None)] + commits("g10", range(30), 7))
    plain(
        commits("g15", range(200), 3)
        + [(commit_key("g15", "t0", 1), commit_value(1, topic_id=TOPIC_ID))]
    )
    return out


def write(path: Path, batches: list[bytes]) -> None:
    log_ = PartitionLog.open(path, LogConfig(segment_bytes_max=1 << 20))
    try:
        for data in batches:
            buffer = bytearray(data)
            log_.append(buffer, [parse_header(buffer)])
        log_.flush()
    finally:
        log_.close()


def full_state(runner: ShardRunner) -> dict[str, Any]:
    """`state` and what it leaves out: consumer groups and pending transactional offsets."""
    shard = runner.shard
    pending = shard.offsets.pending
    return {
        **state(runner),
        "consumer_groups": [(g, group.group_epoch) for g, group in shard.consumer_groups.items()],
        "pending": {
            name: getattr(pending, name)
            for name in ("by_producer", "open", "epochs", "last_markers")
        },
    }


async def load(path: Path, mode: str, taken: list[int]) -> dict[str, Any]:
    committer = GroupCommitter()
    runner = ShardRunner(0, path, GroupConfig(), LogConfig(), committer, clock_ms=lambda: NOW_MS)
    bulk = runner_module.commit_runs

    def counted(*args: Any) -> Any:
        runs = bulk(*args)
        taken.append(runs is not None)
        return runs

    runner_module.commit_runs = counted if mode == "bulk" else (lambda *args: None)
    if mode == "reference":
        runner._replay_log = types.MethodType(reference_replay_log, runner)  # type: ignore[method-assign]
    try:
        await runner.load()
    finally:
        runner_module.commit_runs = bulk
        await runner.close()
        await committer.close()
    return full_state(runner)


def test_a_takeover_log_loads_to_the_state_of_the_loader_without_bulk_runs(tmp_path: Path) -> None:
    write(tmp_path / "s", takeover_log())
    taken: list[int] = []
    bulk = asyncio.run(load(tmp_path / "s", "bulk", taken))
    plain = asyncio.run(load(tmp_path / "s", "plain", []))
    assert bulk == plain
    assert sum(taken) >= 12  # the long runs were read in bulk
    assert bulk["consumer_groups"] and bulk["offset_count"] > 2_000


def test_without_transactions_it_is_the_record_at_a_time_state(tmp_path: Path) -> None:
    batches = [data for data in takeover_log() if not parse_header(data).is_transactional]
    write(tmp_path / "s", batches)
    taken: list[int] = []
    bulk = asyncio.run(load(tmp_path / "s", "bulk", taken))
    reference = asyncio.run(load(tmp_path / "s", "reference", []))
    assert bulk == reference
    assert sum(taken) >= 12


def test_the_offset_delta_columns_are_the_varints() -> None:
    from groupcoord.protocol.commit_runs import _WIDTH_ENDS, _delta_column
    from groupcoord.protocol.varint import uvarint_bytes

    for width in (1, 2, 3):
        columns = [_delta_column(width, index) for index in range(width)]
        for delta in range(_WIDTH_ENDS[width - 1], _WIDTH_ENDS[width]):
            encoded = uvarint_bytes(delta << 1)
            assert len(encoded) == width
            assert bytes(column[delta] for column in columns) == encoded
