"""The analytics job's decoding and timeline, without Spark (issue 19 item 2b): the Arrow
batch decoder (pipeline/coordinator_log.py) gives each record's columns, and the driver's
timeline (pipeline/group_timeline.py) derives a classic group's events from decoded rows
and keeps the live offsets, a commit tombstone removing one."""

from __future__ import annotations

import pyarrow as pa

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
    encode_key,
    encode_value,
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
