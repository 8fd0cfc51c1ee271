"""The shard loader (ShardRunner._replay_log: runs of offset commits deduplicated by key,
values packed straight from their bytes) builds exactly the state that replaying the log a
record at a time builds: the straightforward loader it replaced, kept here as the
reference. Compared: offsets (values and dict order), groups (every field, dict order),
persisted GroupMetadata views, the records count, and errors."""

from __future__ import annotations

import asyncio
import dataclasses
import random
import tempfile
import types
import uuid
from pathlib import Path
from typing import Any

import pytest
from aiokafka.record.default_records import DefaultRecordBatch, DefaultRecordBatchBuilder
from aiokafka.record.util import calc_crc32c
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from groupcoord.coordinator.groups.config import GroupConfig
from groupcoord.coordinator.runtime import runner as runner_module
from groupcoord.coordinator.runtime.runner import ShardRunner
from groupcoord.protocol.batches import parse_header
from groupcoord.protocol.records import (
    ConsumerGroupMetadataKey,
    ConsumerGroupMetadataValue,
    GroupMetadataKey,
    GroupMetadataValue,
    MemberMetadata,
    OffsetCommitKey,
    OffsetCommitValue,
    RecordError,
    UnknownRecordType,
    decode_record,
    encode_key,
    encode_value,
    offset_commit_key_fields,
    offset_commit_value_fields,
)
from groupcoord.storage import GroupCommitter, LogConfig, PartitionLog, compact

NOW_MS = 1_000_000
GROUPS = ["g0", "g1", "g2", "grüppe"]
TOPICS = ["t0", "t1"]
TOPIC_ID = uuid.UUID("6ba7b810-9dad-11d1-80b4-00c04fd430c8")
ZERO_UUID = uuid.UUID(int=0)

Rec = tuple[bytes | None, bytes | None]


# -- the reference: the record-at-a-time loader the fast one replaced ---------------------------


async def reference_replay_log(self: ShardRunner, now_ms: int) -> int:
    """ShardRunner.load's replay loop before the fast loader (aiokafka record objects,
    decode_record and GroupShard.replay per record). tests/bench/bench_restart.py patches it
    in as ShardRunner._replay_log to measure the peer."""
    assert self.log is not None
    replay = self.shard.replay
    count = 0
    offset = self.log.log_start_offset
    end = self.log.next_offset
    while offset < end:
        chunk = self.log.read(offset, runner_module.LOAD_CHUNK_BYTES)
        if not chunk:
            break
        pos = 0
        while pos < len(chunk):
            header = parse_header(chunk, pos)
            size = header.size_bytes
            if pos + size > len(chunk):
                break
            if not header.is_control:
                for record in DefaultRecordBatch(chunk[pos : pos + size]):
                    if record.offset < offset:
                        continue
                    try:
                        key, value = decode_record(record.key, record.value)
                    except UnknownRecordType as e:
                        runner_module.log.warning(
                            "skipping unknown record type",
                            shard=self.shard_id,
                            offset=record.offset,
                            error=str(e),
                        )
                        continue
                    replay(key, value, now_ms)
                    count += 1
            offset = header.last_offset + 1
            pos += size
        await asyncio.sleep(0)
    return count


# -- records and logs ---------------------------------------------------------------------------


def commit_key(group: str, topic: str, partition: int, legacy: bool = False) -> bytes:
    key = encode_key(OffsetCommitKey(group, topic, partition))
    return b"\x00\x00" + key[2:] if legacy else key


def commit_value(
    offset: int,
    version: int = 4,
    leader_epoch: int = -1,
    metadata: str = "",
    commit_ms: int = 1_000,
    expire_ms: int = -1,
    topic_id: uuid.UUID | None = None,
) -> bytes:
    value = OffsetCommitValue(
        offset=offset,
        leader_epoch=leader_epoch,
        metadata=metadata,
        commit_timestamp=commit_ms,
        expire_timestamp=expire_ms,
        topic_id=topic_id,
    )
    return encode_value(value, version)


def group_record(group: str, members: int = 0, generation: int = 1) -> Rec:
    value = GroupMetadataValue(
        protocol_type="consumer" if members else "",
        generation=generation,
        protocol="range" if members else None,
        leader="m0" if members else None,
        current_state_timestamp=500 + generation,
        members=tuple(
            MemberMetadata(
                member_id=f"m{i}",
                group_instance_id=None if i % 2 else f"i{i}",
                client_id="c",
                client_host="/127.0.0.1",
                rebalance_timeout=60_000,
                session_timeout=45_000,
                subscription=b"",
                assignment=b"\x00",
            )
            for i in range(members)
        ),
    )
    return encode_key(GroupMetadataKey(group)), encode_value(value)


def group_tombstone(group: str) -> Rec:
    return encode_key(GroupMetadataKey(group)), None


def unknown_record(n: int = 0) -> Rec:
    return b"\x00\x63" + bytes([n]), b"\x00\x00whatever"


def consumer_group_record(group: str, epoch: int) -> Rec:
    return (
        encode_key(ConsumerGroupMetadataKey(group)),
        encode_value(ConsumerGroupMetadataValue(epoch)),
    )


@dataclasses.dataclass
class Batch:
    records: list[Rec]
    compression: int = 0  # aiokafka codes: 1 gzip
    control: bool = False


def build_batch(batch: Batch, timestamp: int = 1_000) -> bytearray:
    builder = DefaultRecordBatchBuilder(
        magic=2,
        compression_type=batch.compression,
        is_transactional=1 if batch.control else 0,
        producer_id=7 if batch.control else -1,
        producer_epoch=0 if batch.control else -1,
        base_sequence=-1,
        batch_size=1 << 30,
    )
    for delta, (key, value) in enumerate(batch.records):
        builder.append(delta, timestamp=timestamp, key=key, value=value, headers=[])
    data = bytearray(builder.build())
    if batch.control:
        data[22] |= 0x20  # the control bit of the attributes (int16 @21)
        data[17:21] = int(calc_crc32c(bytes(data[21:]))).to_bytes(4, "big")
    return data


def write_log(
    path: Path,
    batches: list[Batch],
    segment_bytes: int = 1 << 20,
    compaction: bool = False,
    log_start: int | None = None,
) -> None:
    log_ = PartitionLog.open(path, LogConfig(segment_bytes_max=segment_bytes))
    try:
        for batch in batches:
            if batch.records:
                data = build_batch(batch)
                log_.append(data, [parse_header(data)])
        log_.flush()
        if compaction:
            compact(log_, NOW_MS, tombstone_retention_ms=10**12)
            log_.flush()
        if log_start is not None:
            log_.advance_log_start_offset(min(log_start, log_.next_offset))
            log_.flush()
    finally:
        log_.close()


# -- loading and comparing --------------------------------------------------------------------


async def load(path: Path, reference: bool) -> ShardRunner:
    committer = GroupCommitter()
    runner = ShardRunner(
        0,
        path,
        GroupConfig(),
        LogConfig(segment_bytes_max=1 << 20),
        committer,
        clock_ms=lambda: NOW_MS,
    )
    if reference:
        runner._replay_log = types.MethodType(reference_replay_log, runner)  # type: ignore[method-assign]
    try:
        await runner.load()
    finally:
        await runner.close()
        await committer.close()
    return runner


def state(runner: ShardRunner) -> dict[str, Any]:
    shard = runner.shard
    groups = [
        (group_id, dataclasses.asdict(group), list(group.members))
        for group_id, group in shard.groups.items()
    ]
    every_group = GROUPS + [g for g in shard.groups if g not in GROUPS]
    return {
        "offsets": list(shard.offsets.snapshot().items()),  # values and order
        "offset_count": shard.offsets.offset_count(),
        "groups": groups,
        "simple_groups": [g for g, group in shard.groups.items() if group.protocol_type is None],
        "persisted": [(g, shard.classic.persisted_view(g)) for g in every_group],
        "records": runner.loaded_records,
    }


def load_both(path: Path) -> tuple[dict[str, Any], dict[str, Any]]:
    async def both() -> tuple[dict[str, Any], dict[str, Any]]:
        fast = state(await load(path, reference=False))
        reference = state(await load(path, reference=True))
        return fast, reference

    return asyncio.run(both())


def assert_same_state(path: Path) -> dict[str, Any]:
    fast, reference = load_both(path)
    assert fast == reference
    return fast


# -- examples ----------------------------------------------------------------------------------


def test_repeated_commits_keep_the_last_value_and_first_order(tmp_path: Path) -> None:
    batches = [
        Batch(
            [
                (commit_key("g1", "t0", 1), commit_value(1)),
                (commit_key("g0", "t1", 0), commit_value(2, topic_id=TOPIC_ID)),
                (commit_key("g1", "t0", 0), commit_value(3, metadata="hé")),
                (commit_key("g1", "t0", 1), commit_value(4, version=1, expire_ms=9)),
            ]
        ),
        Batch([(commit_key("g0", "t1", 0), commit_value(5, version=3, leader_epoch=2))]),
        Batch([(commit_key("g2", "t0", 2, legacy=True), commit_value(6, version=0))]),
    ]
    write_log(tmp_path / "s", batches)
    got = assert_same_state(tmp_path / "s")
    assert [(k, v.offset) for k, v in got["offsets"]] == [
        (("g1", "t0", 1), 4),
        (("g1", "t0", 0), 3),
        (("g0", "t1", 0), 5),
        (("g2", "t0", 2), 6),
    ]
    assert got["simple_groups"] == ["g1", "g0", "g2"]
    assert got["records"] == 6


def test_tombstones_and_group_records_keep_their_order(tmp_path: Path) -> None:
    batches = [
        Batch([(commit_key("g0", "t0", 0), commit_value(1)), group_record("g1", members=2)]),
        Batch(
            [
                (commit_key("g1", "t0", 0), commit_value(2)),
                group_tombstone("g1"),  # removes the group, not its offsets
                (commit_key("g0", "t0", 0), None),
                (commit_key("g0", "t0", 0), commit_value(3)),  # re-inserted at the end
                (commit_key("g1", "t1", 0), commit_value(4)),  # a simple g1 again
                group_record("g2"),
                (commit_key("g2", "t0", 1), commit_value(5)),
                (commit_key("g3", "t0", 1), None),  # nothing to delete
            ]
        ),
    ]
    write_log(tmp_path / "s", batches)
    got = assert_same_state(tmp_path / "s")
    assert [k for k, _ in got["offsets"]] == [
        ("g1", "t0", 0),
        ("g1", "t1", 0),
        ("g0", "t0", 0),
        ("g2", "t0", 1),
    ]
    assert got["simple_groups"] == ["g0", "g1", "g2"]


def test_legacy_and_current_keys_of_one_offset_are_one_key(tmp_path: Path) -> None:
    batches = [
        Batch([(commit_key("g0", "t0", 0), commit_value(1))]),
        Batch(
            [
                (commit_key("g0", "t0", 0, legacy=True), commit_value(2)),
                (commit_key("g1", "t0", 0), commit_value(3)),
                (commit_key("g0", "t0", 0), commit_value(4)),
            ]
        ),
    ]
    write_log(tmp_path / "s", batches)
    got = assert_same_state(tmp_path / "s")
    assert [(k, v.offset) for k, v in got["offsets"]] == [
        (("g0", "t0", 0), 4),
        (("g1", "t0", 0), 3),
    ]


def test_group_records_across_a_run_of_commits(tmp_path: Path) -> None:
    # g0 and g1 exist (GroupMetadata) without offsets; their first commits then insert
    # their offsets in commit order, whatever g1's removal does in between.
    batches = [
        Batch([group_record("g0", 1), group_record("g1", 1), group_record("g2", 1)]),
        Batch([(commit_key("g0", "t0", 0), commit_value(1))]),
        Batch([(commit_key("g1", "t0", 0), commit_value(2))]),
        Batch([group_tombstone("g1"), group_record("g2", 2)]),
        Batch([(commit_key("g2", "t0", 0), commit_value(3))]),
        # Steady state: every group with a pending commit exists and has offsets.
        Batch([(commit_key("g0", "t0", 1), commit_value(4)), group_record("g3")]),
        Batch([(commit_key("g2", "t1", 0), commit_value(5)), group_tombstone("g2")]),
        Batch([(commit_key("g0", "t0", 1), None), (commit_key("g2", "t1", 1), commit_value(6))]),
        Batch([(commit_key("g0", "t0", 0), commit_value(7)), (commit_key("g0", "t0", 2), None)]),
    ]
    write_log(tmp_path / "s", batches)
    got = assert_same_state(tmp_path / "s")
    assert [k for k, _ in got["offsets"]] == [
        ("g0", "t0", 0),
        ("g1", "t0", 0),
        ("g2", "t0", 0),
        ("g2", "t1", 0),
        ("g2", "t1", 1),
    ]
    assert [g for g, _, _ in got["groups"]] == ["g0", "g3", "g2"]


class _Warnings:
    def __init__(self) -> None:
        self.seen: list[dict[str, Any]] = []

    def warning(self, event: str, **fields: Any) -> None:
        self.seen.append({"event": event, **fields})


def test_unknown_and_consumer_group_records(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    batches = [
        Batch([(commit_key("g0", "t0", 0), commit_value(1)), unknown_record(1)]),
        Batch([consumer_group_record("g0", 3), (commit_key("g0", "t0", 0), commit_value(2))]),
        Batch([unknown_record(2), (unknown_record(3)[0], None), group_record("g1")]),
        Batch([(commit_key("g1", "t0", 0), commit_value(3)), unknown_record(4)]),
    ]
    write_log(tmp_path / "s", batches, log_start=3)
    warnings = _Warnings()
    monkeypatch.setattr(runner_module, "log", warnings)
    fast, reference = load_both(tmp_path / "s")
    assert fast == reference
    assert fast["records"] == 3  # below the log start or of unknown types: not counted
    # Each loader warned about the same records, with their offsets.
    half = len(warnings.seen) // 2
    assert warnings.seen[:half] == warnings.seen[half:]
    assert [w["offset"] for w in warnings.seen[:half]] == [4, 5, 8]


def test_a_null_key_fails_the_load_like_before(tmp_path: Path) -> None:
    write_log(tmp_path / "s", [Batch([(commit_key("g0", "t0", 0), commit_value(1))])])
    write_log(tmp_path / "s", [Batch([(None, commit_value(2))])])
    for reference in (False, True):
        with pytest.raises(TypeError):
            asyncio.run(load(tmp_path / "s", reference))


def test_control_and_compressed_batches(tmp_path: Path) -> None:
    batches = [
        Batch([(commit_key("g0", "t0", 0), commit_value(1))]),
        Batch([(commit_key("g0", "t0", 0), commit_value(99))], control=True),
        Batch([(commit_key("g0", "t0", i % 3), commit_value(i)) for i in range(50)], compression=1),
        Batch([(commit_key("g0", "t0", 1), None), group_record("g0", 1)], compression=1),
    ]
    write_log(tmp_path / "s", batches)
    got = assert_same_state(tmp_path / "s")
    assert dict((k, v.offset) for k, v in got["offsets"]) == {
        ("g0", "t0", 0): 48,
        ("g0", "t0", 2): 47,
    }


def test_log_start_inside_a_batch_skips_the_records_below(tmp_path: Path) -> None:
    batches = [
        Batch([(commit_key("g0", "t0", p), commit_value(p)) for p in range(10)]),
        Batch([(commit_key("g1", "t0", p), commit_value(p)) for p in range(10)]),
    ]
    write_log(tmp_path / "s", batches, segment_bytes=400, log_start=4)
    got = assert_same_state(tmp_path / "s")
    assert got["records"] == 16
    assert sorted(k for k, _ in got["offsets"])[0] == ("g0", "t0", 4)


def test_many_records_over_small_chunks(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    rng = random.Random(5)
    batches = []
    for _ in range(300):
        records: list[Rec] = []
        for _ in range(rng.randint(1, 60)):
            group = f"g{rng.randrange(40)}"
            key = commit_key(group, rng.choice(TOPICS), rng.randrange(4))
            roll = rng.random()
            if roll < 0.02:
                records.append((key, None))
            elif roll < 0.03:
                records.append(group_record(group, rng.randrange(3), rng.randrange(5)))
            elif roll < 0.035:
                records.append(group_tombstone(group))
            else:
                records.append(
                    (key, commit_value(rng.randrange(10**6), commit_ms=rng.randrange(9)))
                )
        batches.append(Batch(records))
    write_log(tmp_path / "s", batches, segment_bytes=16_384)
    monkeypatch.setattr(runner_module, "LOAD_CHUNK_BYTES", 3_000)
    small = assert_same_state(tmp_path / "s")
    monkeypatch.setattr(runner_module, "LOAD_CHUNK_BYTES", 5 << 20)
    assert assert_same_state(tmp_path / "s") == small
    assert small["offset_count"] > 100


def test_compacted_log_with_gaps(tmp_path: Path) -> None:
    batches = [
        Batch([(commit_key(f"g{i % 5}", "t0", i % 7), commit_value(i)) for i in range(j, j + 20)])
        for j in range(0, 400, 20)
    ]
    batches.insert(5, Batch([group_record("g1", 2), (commit_key("g2", "t0", 3), None)]))
    batches.append(Batch([group_tombstone("g3")]))
    write_log(tmp_path / "s", batches, segment_bytes=2_048, compaction=True)
    assert_same_state(tmp_path / "s")


def test_a_malformed_surviving_value_fails_the_load_like_before(tmp_path: Path) -> None:
    batches = [
        Batch([(commit_key("g0", "t0", 0), commit_value(1))]),
        Batch([(commit_key("g0", "t0", 0), b"\x00\x04\x00")]),  # truncated v4
    ]
    write_log(tmp_path / "s", batches)
    for reference in (False, True):
        with pytest.raises(RecordError):
            asyncio.run(load(tmp_path / "s", reference))


def test_a_malformed_key_fails_the_load_like_before(tmp_path: Path) -> None:
    write_log(tmp_path / "s", [Batch([(b"\x00\x01\x00\x05ab", commit_value(1))])])
    for reference in (False, True):
        with pytest.raises(RecordError):
            asyncio.run(load(tmp_path / "s", reference))


# -- the codec helpers against the decoders ---------------------------------------------------


@given(
    st.integers(-(2**63), 2**63 - 1),
    st.sampled_from([0, 1, 2, 3, 4]),
    st.integers(-(2**31), 2**31 - 1),
    st.text(max_size=5),
    st.integers(-(2**63), 2**63 - 1),
    st.integers(-(2**63), 2**63 - 1),
    st.sampled_from([None, ZERO_UUID, TOPIC_ID]),
)
def test_value_fields_match_the_decoder(
    offset: int,
    version: int,
    epoch: int,
    metadata: str,
    commit_ms: int,
    expire_ms: int,
    topic_id: uuid.UUID | None,
) -> None:
    data = commit_value(offset, version, epoch, metadata, commit_ms, expire_ms, topic_id)
    _, value = decode_record(commit_key("g", "t", 0), data)
    assert isinstance(value, OffsetCommitValue)
    assert offset_commit_value_fields(data) == (
        value.offset,
        value.leader_epoch,
        value.metadata,
        value.commit_timestamp,
        value.expire_timestamp,
        None if value.topic_id is None else value.topic_id.bytes,
    )


def _fields_or_error(decode: Any, data: bytes) -> Any:
    try:
        return decode(data)
    except RecordError as e:
        return type(e)


def _decoded_fields(data: bytes) -> Any:
    _, value = decode_record(commit_key("g", "t", 0), data)
    assert isinstance(value, OffsetCommitValue)
    topic_id = None if value.topic_id is None else value.topic_id.bytes
    return (
        value.offset,
        value.leader_epoch,
        value.metadata,
        value.commit_timestamp,
        value.expire_timestamp,
        topic_id,
    )


@given(
    st.sampled_from(
        [
            commit_value(5),
            commit_value(5, topic_id=TOPIC_ID),
            commit_value(5, metadata="meta"),
            commit_value(5, metadata="meta", topic_id=TOPIC_ID),
            commit_value(5, metadata="x" * 200),
        ]
    ),
    st.lists(st.tuples(st.integers(0, 300), st.integers(0, 255)), max_size=3),
    st.integers(0, 60),
)
def test_value_fields_of_damaged_values_match_the_decoder(
    data: bytes, edits: list[tuple[int, int]], cut: int
) -> None:
    damaged = bytearray(data)
    for index, byte in edits:
        if index < len(damaged):
            damaged[index] = byte
    damaged = damaged[: len(damaged) - cut] if cut < len(damaged) else damaged
    raw = bytes(damaged)
    assert _fields_or_error(offset_commit_value_fields, raw) == _fields_or_error(
        _decoded_fields, raw
    )


def test_value_fields_edge_shapes() -> None:
    null_metadata = b"\x00\x04" + bytes(12) + b"\x00" + bytes(8) + b"\x00"
    bad_utf8 = b"\x00\x04" + bytes(12) + b"\x02\xff" + bytes(8) + b"\x00"
    other_tag = b"\x00\x04" + bytes(12) + b"\x02a" + bytes(8) + b"\x01\x05\x01z"
    zero_id = commit_value(1, metadata="m") + b""
    for raw in (null_metadata, bad_utf8, other_tag, zero_id, commit_value(1, topic_id=ZERO_UUID)):
        assert _fields_or_error(offset_commit_value_fields, raw) == _fields_or_error(
            _decoded_fields, raw
        )
    assert offset_commit_value_fields(other_tag)[2] == "a"  # unknown tags are skipped


def test_key_fields_match_the_decoder() -> None:
    for legacy in (False, True):
        data = commit_key("grüppe", "topic", 7, legacy)
        assert offset_commit_key_fields(data) == ("grüppe", "topic", 7)
    for bad in (b"\x00\x02\x00\x01g", b"\x00\x01\x00\x05ab", b"\x00", b"\x00\x01\x00\x01g\x00"):
        with pytest.raises(RecordError):
            offset_commit_key_fields(bad)


# -- the property ------------------------------------------------------------------------------


def _commit_value_strategy() -> st.SearchStrategy[bytes]:
    return st.builds(
        commit_value,
        offset=st.integers(0, 2**40),
        version=st.sampled_from([4, 4, 4, 3, 1, 0]),
        leader_epoch=st.integers(-1, 3),
        metadata=st.sampled_from(["", "", "m", "ü"]),
        commit_ms=st.integers(0, 2_000_000),
        expire_ms=st.sampled_from([-1, 5, 2_000_000]),
        topic_id=st.sampled_from([None, None, ZERO_UUID, TOPIC_ID]),
    )


_keys = st.builds(
    commit_key,
    st.sampled_from(GROUPS),
    st.sampled_from(TOPICS),
    st.integers(0, 2),
    st.sampled_from([False, False, True]),
)

records_strategy = st.lists(
    st.one_of(
        st.tuples(_keys, _commit_value_strategy()),
        st.tuples(_keys, _commit_value_strategy()),
        st.tuples(_keys, _commit_value_strategy()),
        st.tuples(_keys, st.none()),
        st.builds(group_record, st.sampled_from(GROUPS), st.integers(0, 2), st.integers(0, 3)),
        st.builds(group_tombstone, st.sampled_from(GROUPS)),
        st.builds(unknown_record, st.integers(0, 3)),
        st.builds(consumer_group_record, st.sampled_from(GROUPS), st.integers(0, 3)),
    ),
    max_size=80,
)


@settings(
    max_examples=200,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
@given(
    settled=st.sampled_from(["no", "groups", "groups and offsets"]),
    records=records_strategy,
    cuts=st.lists(st.integers(1, 12), min_size=1, max_size=20),
    compressed=st.sets(st.integers(0, 20), max_size=3),
    controls=st.sets(st.integers(0, 20), max_size=2),
    compaction=st.booleans(),
    log_start=st.none() | st.integers(0, 60),
    chunk_bytes=st.sampled_from([1, 700, 5 << 20]),
)
def test_fast_load_equals_record_at_a_time_replay(
    settled: str,
    records: list[Rec],
    cuts: list[int],
    compressed: set[int],
    controls: set[int],
    compaction: bool,
    log_start: int | None,
    chunk_bytes: int,
) -> None:
    batches: list[Batch] = []
    if settled != "no":  # groups exist (and have offsets: the loader's steady state)
        batches.append(Batch([group_record(g, i % 2) for i, g in enumerate(GROUPS)]))
    if settled == "groups and offsets":
        batches.append(Batch([(commit_key(g, "t0", 0), commit_value(1)) for g in GROUPS]))
    pos = 0
    i = 0
    while pos < len(records):
        size = cuts[i % len(cuts)]
        batches.append(Batch(records[pos : pos + size], compression=1 if i in compressed else 0))
        if i in controls:
            batches.append(Batch([(commit_key("g0", "t0", 0), commit_value(7))], control=True))
        pos += size
        i += 1
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "s"
        write_log(path, batches, segment_bytes=1_024, compaction=compaction, log_start=log_start)
        saved = runner_module.LOAD_CHUNK_BYTES
        runner_module.LOAD_CHUNK_BYTES = chunk_bytes
        try:
            fast, reference = load_both(path)
        finally:
            runner_module.LOAD_CHUNK_BYTES = saved
    assert fast == reference


def test_a_damaged_batch_in_an_older_segment_is_skipped_and_the_rest_loaded(
    tmp_path: Path,
) -> None:
    """Segments below the recovery point are not scanned when the log opens, so damage
    there reaches the loader: a batch failing its CRC is skipped (counted, logged as "log
    damaged"), and the shard is what the log without that batch would give."""
    batches = [
        Batch([(commit_key(g, "t0", p), commit_value(10 * i + p)) for p in range(3)])
        for i in range(40)
        for g in GROUPS[:2]
    ]
    write_log(tmp_path / "damaged", batches, segment_bytes=2048)
    write_log(tmp_path / "without", batches[:5] + batches[6:], segment_bytes=2048)
    segment = sorted((tmp_path / "damaged").glob("*.log"))[0]
    assert len(sorted((tmp_path / "damaged").glob("*.log"))) > 2  # not the active one
    data = bytearray(segment.read_bytes())
    pos = 0
    for _ in range(5):  # to the sixth batch
        pos += int.from_bytes(data[pos + 8 : pos + 12], "big") + 12
    data[pos + 70] ^= 0xFF  # inside its records, covered by the CRC
    segment.write_bytes(bytes(data))

    async def both() -> tuple[ShardRunner, ShardRunner]:
        return await load(tmp_path / "damaged", False), await load(tmp_path / "without", False)

    damaged, without = asyncio.run(both())
    assert damaged.damaged_batches == 1 and without.damaged_batches == 0
    assert state(damaged)["offsets"] == state(without)["offsets"]
    assert state(damaged)["records"] == state(without)["records"]
