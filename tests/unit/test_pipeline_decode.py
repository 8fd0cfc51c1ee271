"""The analytics job's decoding and timeline, without Spark (issue 19 item 2b): the Arrow
batch decoder (pipeline/coordinator_log.py) gives each record's columns, and the driver's
timeline (pipeline/group_timeline.py) derives a classic group's events from decoded rows
and keeps the live offsets, a commit tombstone removing one. The decoder reads OffsetCommit
values by their layout over a whole batch (pipeline/commit_columns.py) and gives exactly
the codec's fields and errors, record by record."""

from __future__ import annotations

import uuid
from typing import Any

import pyarrow as pa
import pytest

from groupcoord.pipeline import coordinator_log
from groupcoord.pipeline.coordinator_log import DECODED_SCHEMA, decode_batch
from groupcoord.pipeline.group_timeline import Committed, GroupTimeline
from groupcoord.protocol.records import (
    ConsumerGroupMetadataKey,
    ConsumerGroupMetadataValue,
    GroupMetadataKey,
    GroupMetadataValue,
    MemberMetadata,
    OffsetCommitKey,
    OffsetCommitValue,
    RecordError,
    decode_record,
    encode_key,
    encode_value,
    offset_commit_key_fields,
    offset_commit_value_fields,
)


def _batch(records: list[tuple[bytes | None, bytes | None]]) -> pa.RecordBatch:
    n = len(records)
    return pa.RecordBatch.from_arrays(
        [
            pa.array([0] * n, pa.int32()),
            pa.array(range(n), pa.int64()),
            pa.array([1_000 * (i + 1) for i in range(n)], pa.int64()),
            pa.array([k for k, _ in records], pa.binary()),
            pa.array([v for _, v in records], pa.binary()),
        ],
        names=["partition", "offset", "timestamp_ms", "key", "value"],
    )


def _commit(
    group: str, partition: int, offset: int | None, version: int = 3
) -> tuple[bytes, bytes | None]:
    key = encode_key(OffsetCommitKey(group, "t", partition))
    if offset is None:
        return key, None
    value = OffsetCommitValue(offset=offset, leader_epoch=2, metadata="m", commit_timestamp=77)
    return key, encode_value(value, version)


def _members(*ids: str) -> tuple[MemberMetadata, ...]:
    return tuple(
        MemberMetadata(
            member_id=m,
            client_id="c",
            client_host="h",
            session_timeout=6000,
            subscription=b"",
            assignment=b"",
        )
        for m in ids
    )


def _group(generation: int, *members: str) -> tuple[bytes, bytes]:
    value = GroupMetadataValue(
        protocol_type="consumer",
        generation=generation,
        protocol="range" if members else None,
        leader=members[0] if members else None,
        members=_members(*members),
    )
    return encode_key(GroupMetadataKey("g")), encode_value(value, 3)


def test_decode_batch_gives_each_record_its_columns() -> None:
    records = [
        _commit("g", 0, 5),
        _commit("g", 1, 6, version=4),
        _commit("g", 0, None),
        _group(1, "m1"),
        (
            encode_key(ConsumerGroupMetadataKey("cg")),
            encode_value(ConsumerGroupMetadataValue(3), 0),
        ),
        (b"\x00\x7f\x00", b"junk"),  # an unknown record type
    ]
    out = decode_batch(_batch(records), {})
    assert out.schema == DECODED_SCHEMA
    rows = out.to_pylist()
    picked = [
        (
            r["record_type"],
            r["group"],
            r["topic"],
            r["topic_partition"],
            r["committed_offset"],
            r["tombstone"],
        )
        for r in rows
    ]
    assert picked == [
        (1, "g", "t", 0, 5, False),
        (1, "g", "t", 1, 6, False),
        (1, "g", "t", 0, None, True),
        (2, "g", None, None, None, False),
        (3, "cg", None, None, None, False),
        (127, None, None, None, None, False),
    ]
    assert (rows[0]["leader_epoch"], rows[0]["metadata"], rows[0]["commit_timestamp_ms"]) == (
        2,
        "m",
        77,
    )
    # Commits keep no bytes; the records the timeline replays keep theirs.
    assert rows[0]["key"] is None and rows[3]["key"] == records[3][0]
    assert rows[5]["error"] and rows[5]["value"] == b"junk"
    assert [r["error"] for r in rows[:5]] == [None] * 5


def test_timeline_derives_a_classic_groups_events_and_keeps_live_offsets() -> None:
    records = [
        _group(1, "m1"),
        _commit("g", 0, 5),
        _group(2, "m1", "m2"),
        _commit("g", 1, 9),
        _group(3, "m1"),
        _commit("g", 0, None),
        _group(3),
    ]
    timeline = GroupTimeline()
    timeline.replay(decode_batch(_batch(records), {}).to_pylist())
    events = [(e["event"], e["generation_or_epoch"], e["member_id"]) for e in timeline.events]
    assert events == [
        ("group_created", 1, None),
        ("member_joined", 0, "m1"),
        ("rebalance_completed", 1, None),
        ("member_joined", 1, "m2"),
        ("rebalance_completed", 2, None),
        ("member_left", 2, "m2"),
        ("rebalance_completed", 3, None),
        ("member_left", 3, "m1"),
        ("group_emptied", 3, None),
    ]
    # The time of each event is its record's; its place in the log is kept.
    assert [e["log_offset"] for e in timeline.events][-1] == 6
    assert timeline.events[-1]["time_ms"] == 7_000
    assert timeline.latest == {("g", "t", 1): Committed(9, 77, 2)}


def _every_shape() -> list[tuple[bytes | None, bytes | None]]:
    """OffsetCommit records at every value version and metadata size, with and without a
    topic id, and damaged ones: truncated, trailing bytes, an unknown version, metadata
    that is not UTF-8, an unreadable key; and other records among them."""
    records: list[tuple[bytes | None, bytes | None]] = []
    topic_ids = (None, uuid.UUID(int=0), uuid.UUID(int=7))
    for version in range(5):
        for metadata in ("", "m", "é∂" * 3, "x" * 126, "y" * 127, "z" * 300):
            for topic_id in topic_ids if version == 4 else (None,):
                value = OffsetCommitValue(
                    offset=version * 1000 + len(metadata),
                    leader_epoch=version,
                    metadata=metadata,
                    commit_timestamp=1_700_000_000_000 + version,
                    expire_timestamp=99 if version == 1 else -1,
                    topic_id=topic_id,
                )
                key = encode_key(OffsetCommitKey(f"g{version}", "t", len(metadata)))
                raw = encode_value(value, version)
                records += [(key, raw), (key, raw[:-1]), (key, raw + b"\x00")]
                if metadata:
                    at = {0: 12, 1: 12, 2: 12, 3: 16, 4: 15}[version]
                    records.append((key, raw[:at] + b"\xff" + raw[at + 1 :]))
    key = encode_key(OffsetCommitKey("g", "t", 0))
    v4 = encode_value(OffsetCommitValue(offset=1, commit_timestamp=2), 4)
    records += [
        (key, b"\x00\x09" + v4[2:]),  # a version the codec lacks
        (key, v4[:-1] + b"\x01\x05\x01\x00"),  # another tagged field
        (key, None),  # a tombstone
        (key[:-1], v4),  # an unreadable key
        (b"\x00\x00" + key[2:], v4),  # a legacy (type 0) key
        _group(1, "m1"),
        (None, b"x"),
        (b"\x00", None),
        (b"\x00\x7f\x00", b"junk"),
    ]
    return records


def _by_the_codec(records: list[tuple[bytes | None, bytes | None]]) -> list[dict[str, object]]:
    """Each record's row as the codec reads it, record by record."""
    rows = []
    for key, value in records:
        row: dict[str, object] = dict.fromkeys(DECODED_SCHEMA.names)
        row["tombstone"] = False
        if key is not None and len(key) >= 2 and key[0] == 0 and key[1] <= 1:
            try:
                row["group"], row["topic"], row["topic_partition"] = offset_commit_key_fields(key)
            except RecordError as e:
                rows.append({**row, "error": str(e), "key": key, "value": value})
                continue
            row["record_type"] = key[1]
            if value is None:
                rows.append({**row, "tombstone": True})
                continue
            try:
                fields = offset_commit_value_fields(value)
            except RecordError as e:
                rows.append({**row, "error": str(e), "key": key, "value": value})
                continue
            names = ("committed_offset", "leader_epoch", "metadata", "commit_timestamp_ms")
            row.update(zip(names, fields[:4], strict=True))
            row["expire_timestamp_ms"] = fields[4]
            rows.append(row)
            continue
        row.update(key=key, value=value, tombstone=value is None)
        if key is None or len(key) < 2:
            row["error"] = "record without a coordinator key"
        else:
            row["record_type"] = int.from_bytes(key[:2], "big", signed=True)
            try:
                decoded, _ = decode_record(key, value)
                row["group"] = getattr(decoded, "group_id", None) or decoded.group
            except RecordError as e:
                row["error"] = str(e)
        rows.append(row)
    return rows


def test_decode_batch_reads_every_shape_as_the_codec_does() -> None:
    records = _every_shape()
    batch = _batch(records)
    expected = _by_the_codec(records)
    got = decode_batch(batch, {}).to_pylist()
    for row, want in zip(got, expected, strict=True):
        for name in ("partition", "offset", "timestamp_ms"):
            del row[name]
        assert row == {k: v for k, v in want.items() if k in row}
    # A slice of the batch (Arrow buffers with an offset) reads the same.
    decoded = DECODED_SCHEMA.names[3:]
    sliced = decode_batch(batch.slice(7, 40), {}).select(decoded)
    assert sliced.to_pylist() == decode_batch(_batch(records[7:47]), {}).select(decoded).to_pylist()


def test_decode_batch_leaves_only_the_rare_shapes_to_the_codec(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Commits as clients write them are read by their layout over the whole batch: the
    codec runs once per distinct key and for the values the layout table lacks, not once
    per record."""
    calls = {"keys": 0, "values": 0}

    def counted(name: str, decode: Any) -> Any:
        def wrapper(data: bytes) -> Any:
            calls[name] += 1
            return decode(data)

        return wrapper

    monkeypatch.setattr(
        coordinator_log, "offset_commit_key_fields", counted("keys", offset_commit_key_fields)
    )
    monkeypatch.setattr(
        coordinator_log,
        "offset_commit_value_fields",
        counted("values", offset_commit_value_fields),
    )
    records = [_commit(f"g{i % 3}", i % 4, i, version=3 + i % 2) for i in range(1000)]
    records.append(_commit("g", 0, 5, version=4)[:1] + (b"\x00\x04" + b"\x00" * 30,))
    rows = decode_batch(_batch(records), {}).to_pylist()
    assert [r["committed_offset"] for r in rows[:1000]] == list(range(1000))
    assert rows[-1]["error"] is not None
    assert calls == {"keys": 13, "values": 1}


def test_decode_batches_marks_what_the_timeline_replays() -> None:
    """The job's function marks every record but the commits superseded within the task
    (each key's first commit marked where it is, its latest added as a timeline-only copy),
    over several Arrow batches; the timeline replayed from the marked rows equals the one
    replayed from the whole log."""
    records = [
        _group(1, "m1"),
        _commit("g", 0, 1),
        _commit("g", 0, 2),
        _commit("g", 1, 3),
        _group(2, "m1", "m2"),
        _commit("g", 0, 4),
        _commit("g", 0, None),
        _commit("g", 0, 5),
        _commit("g", 1, 6),
        _commit("h", 2, 7),
        _group(3, "m1"),
        _commit("g", 1, 8),
    ]
    whole = _batch(records)
    out = pa.Table.from_batches(
        list(coordinator_log.decode_batches(iter([whole.slice(0, 5), whole.slice(5)]))),
        coordinator_log.STREAM_SCHEMA,
    )
    assert out.num_rows == len(records) + 2  # the copies of ("g", 0) at 7 and ("g", 1) at 11
    rows = out.to_pylist()
    marked = sorted((r["offset"], r["timeline_only"]) for r in rows if r["to_timeline"])
    assert marked == [
        (0, False),
        (1, False),  # ("g", 0)'s first
        (3, False),  # ("g", 1)'s first
        (4, False),
        (6, False),  # the tombstone
        (7, True),  # ("g", 0)'s latest
        (9, False),  # ("h", 2)'s only commit
        (10, False),
        (11, True),  # ("g", 1)'s latest
    ]
    assert [r["offset"] for r in rows if not r["timeline_only"]] == list(range(len(records)))
    replayed = [
        {k: v for k, v in r.items() if k in DECODED_SCHEMA.names}
        for r in sorted((r for r in rows if r["to_timeline"]), key=lambda r: r["offset"])
    ]
    partial, full = GroupTimeline(), GroupTimeline()
    partial.replay(replayed)
    full.replay(decode_batch(whole, {}).to_pylist())
    assert partial.events == full.events and partial.latest == full.latest
    assert partial.latest[("g", "t", 0)] == Committed(5, 77, 2)
