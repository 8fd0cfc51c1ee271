"""Coordinator record codec: hand-written byte vectors from the JSON schemas, every version,
older-version decoding, tagged fields (known, absent, unknown), errors, and round trips in
which the hand-written fast paths must agree byte for byte with the schema-driven codec."""

from __future__ import annotations

import dataclasses
import gc
import sys
import time
import uuid
from pathlib import Path
from typing import Any, cast

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from groupcoord.protocol import record_schema as rs
from groupcoord.protocol import records as r
from groupcoord.protocol.frozen import fast_new
from groupcoord.protocol.records import (
    ClassicMemberMetadata,
    ClassicProtocol,
    ConsumerGroupCurrentMemberAssignmentKey,
    ConsumerGroupCurrentMemberAssignmentValue,
    ConsumerGroupMemberMetadataKey,
    ConsumerGroupMemberMetadataValue,
    ConsumerGroupMetadataKey,
    ConsumerGroupMetadataValue,
    ConsumerGroupPartitionMetadataKey,
    ConsumerGroupPartitionMetadataValue,
    ConsumerGroupRegularExpressionKey,
    ConsumerGroupRegularExpressionValue,
    ConsumerGroupTargetAssignmentMemberKey,
    ConsumerGroupTargetAssignmentMemberValue,
    ConsumerGroupTargetAssignmentMetadataKey,
    ConsumerGroupTargetAssignmentMetadataValue,
    GroupMetadataKey,
    GroupMetadataValue,
    MalformedRecord,
    MemberMetadata,
    OffsetCommitKey,
    OffsetCommitValue,
    PartitionMetadata,
    RecordType,
    TopicMetadata,
    TopicPartitions,
    TopicPartitionsWithEpochs,
    UnknownRecordType,
    UnsupportedRecordVersion,
    decode_key,
    decode_record,
    decode_value,
    encode_key,
    encode_value,
)
from groupcoord.protocol.txn_records import TXN_SCHEMAS

TOPIC_ID = uuid.UUID("00112233-4455-6677-8899-aabbccddeeff")
TOPIC_ID_HEX = "00112233445566778899aabbccddeeff"


def h(text: str) -> bytes:
    """Hex with spaces and `#` comments, so vectors can be laid out field by field."""
    return bytes.fromhex("".join(line.split("#")[0] for line in text.splitlines()))


# ------------------------------------------------------------------------------------------
# Keys


def test_offset_commit_key_vector() -> None:
    key = OffsetCommitKey("g", "t", 0)
    assert encode_key(key) == b"\x00\x01\x00\x01g\x00\x01t\x00\x00\x00\x00"
    assert decode_key(b"\x00\x01\x00\x01g\x00\x01t\x00\x00\x00\x00") == key


def test_legacy_offset_commit_key_decodes_and_is_rewritten_as_type_1() -> None:
    key = decode_key(b"\x00\x00\x00\x01g\x00\x01t\x00\x00\x00\x07")
    assert key == OffsetCommitKey("g", "t", 7)
    assert encode_key(key)[:2] == b"\x00\x01"


def test_key_vectors_for_every_type() -> None:
    vectors: list[tuple[r.Key, str]] = [
        (GroupMetadataKey("grp"), "0002 0003 677270"),
        (ConsumerGroupMetadataKey("g"), "0003 0001 67"),
        (ConsumerGroupPartitionMetadataKey("g"), "0004 0001 67"),
        (ConsumerGroupMemberMetadataKey("g", "m"), "0005 0001 67 0001 6d"),
        (ConsumerGroupTargetAssignmentMetadataKey("g"), "0006 0001 67"),
        (ConsumerGroupTargetAssignmentMemberKey("g", "m"), "0007 0001 67 0001 6d"),
        (ConsumerGroupCurrentMemberAssignmentKey("g", "m"), "0008 0001 67 0001 6d"),
        (ConsumerGroupRegularExpressionKey("g", "a.*"), "0010 0001 67 0003 612e2a"),
    ]
    for key, hex_ in vectors:
        assert encode_key(key) == h(hex_), key
        assert decode_key(h(hex_)) == key
        assert rs.generic_encode_key(key) == h(hex_)
        assert rs.generic_decode_key(h(hex_)) == key


def test_record_types_match_the_schemas() -> None:
    for name in rs.SCHEMAS:
        schema = rs.load_schema(name)
        assert (
            RecordType(schema["apiKey"]).name
            == rs.snake_case(name[:-5] if name.endswith("Value") else name[:-3]).upper()
        )
    value_types = {cast(Any, cls).RECORD_TYPE for cls in r._VALUE_ENCODERS}
    assert value_types == set(RecordType) - {RecordType.LEGACY_OFFSET_COMMIT}


def test_schema_copies_are_unmodified() -> None:
    """The copies match the checksums taken from Kafka's files (protocol/schemas/SHA256SUMS),
    and, where the shared reference tree is beside the work tree, those files too."""
    import hashlib

    copies = Path(r.__file__).parent / "schemas"
    sums = {}
    for line in (copies / "SHA256SUMS").read_text().splitlines():
        digest, file = line.split()
        sums[file] = digest
    # The transaction state log's schemas (protocol/txn_records.py) sit beside them.
    assert set(sums) == {f"{name}.json" for name in (*rs.SCHEMAS, *TXN_SCHEMAS)}
    for file, digest in sums.items():
        assert hashlib.sha256((copies / file).read_bytes()).hexdigest() == digest, file
    shared = Path(__file__).resolve().parents[3] / "shared/kafka-schemas/coordinator-records"
    for file, digest in sums.items() if shared.is_dir() else ():
        assert hashlib.sha256((shared / file).read_bytes()).hexdigest() == digest, file


def test_unknown_key_type() -> None:
    with pytest.raises(UnknownRecordType) as e:
        decode_key(h("000a 0001 67"))  # ShareGroupMemberMetadata: out of scope
    assert e.value.record_type == 10
    with pytest.raises(UnknownRecordType):
        decode_key(h("ffff 0001 67"))
    with pytest.raises(MalformedRecord):
        decode_key(b"\x00")


def test_decoded_keys_are_memoised_and_frozen() -> None:
    raw = encode_key(OffsetCommitKey("memo", "t", 3))
    first = decode_key(raw)
    assert isinstance(first, OffsetCommitKey)
    assert decode_key(bytes(bytearray(raw))) is first
    with pytest.raises(dataclasses.FrozenInstanceError):
        first.partition = 4  # type: ignore[misc]
    assert hash(first) == hash(OffsetCommitKey("memo", "t", 3))
    # Different key types with equal fields stay unequal (dataclass eq checks the class).
    member_key: object = ConsumerGroupMemberMetadataKey("g", "m")
    assert member_key != ConsumerGroupTargetAssignmentMemberKey("g", "m")


def test_key_memo_pauses_while_keys_do_not_repeat(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(r, "_KEY_MEMO_SIZE", 4)
    monkeypatch.setattr(r, "_KEY_MEMO_PAUSE", 8)
    r._key_memo_reset()
    try:
        raws = [encode_key(OffsetCommitKey("g", "t", i)) for i in range(20)]
        decoded = [decode_key(raw) for raw in raws[:5]]  # 4 stored, no hits: pause
        assert r._key_memo_paused == 8 and not r._key_memo
        decoded += [decode_key(raw) for raw in raws[5:14]]
        assert r._key_memo_paused == 0 and len(r._key_memo) == 1
        for _ in range(3):  # repeating keys: they hit, and the memo stays on
            decoded_again = [decode_key(raw) for raw in raws[13:17]]
        assert r._key_memo_paused == 0 and len(r._key_memo) == 4
        assert r._key_memo_hits == 9
        expected = [OffsetCommitKey("g", "t", i) for i in [*range(14), *range(13, 17)]]
        assert decoded + decoded_again == expected
        assert decode_record(raws[19], None) == (OffsetCommitKey("g", "t", 19), None)
    finally:
        r._key_memo_reset()


def test_fast_constructor_builds_ordinary_frozen_instances() -> None:
    new = fast_new(MemberMetadata)
    args = ("m", None, "c", "h", 1, 2, b"s", b"a")
    built = new(*args)
    expected = MemberMetadata(
        member_id="m",
        group_instance_id=None,
        client_id="c",
        client_host="h",
        rebalance_timeout=1,
        session_timeout=2,
        subscription=b"s",
        assignment=b"a",
    )
    assert type(built) is MemberMetadata
    assert built == expected and hash(built) == hash(expected) and repr(built) == repr(expected)
    assert dataclasses.replace(built, session_timeout=3).session_timeout == 3
    with pytest.raises(dataclasses.FrozenInstanceError):
        built.client_id = "x"  # type: ignore[misc]


# ------------------------------------------------------------------------------------------
# OffsetCommitValue

OCV_V0 = """
0000                # version 0
0000000000000064    # offset 100
0002 6d64           # metadata "md"
00000000000003e8    # commitTimestamp 1000
"""
OCV_V1 = """
0001                # version 1
0000000000000064    # offset 100
0002 6d64           # metadata "md"
00000000000003e8    # commitTimestamp 1000
00000000000007d0    # expireTimestamp 2000 (v1 only)
"""
OCV_V2 = """
0002 0000000000000064 0002 6d64 00000000000003e8
"""
OCV_V3 = """
0003                # version 3
0000000000000064    # offset 100
00000005            # leaderEpoch 5 (v3+)
0002 6d64           # metadata "md"
00000000000003e8    # commitTimestamp 1000
"""
OCV_V4 = """
0004                # version 4: flexible
0000000000000064    # offset 100
00000005            # leaderEpoch 5
03 6d64             # metadata "md": compact string, uvarint length + 1
00000000000003e8    # commitTimestamp 1000
00                  # no tagged fields
"""
OCV_V4_TOPIC_ID = f"""
0004 0000000000000064 00000005 03 6d64 00000000000003e8
01                  # one tagged field
00 10 {TOPIC_ID_HEX}  # tag 0 (topicId), size 16, uuid
"""


def test_offset_commit_value_vectors() -> None:
    full = OffsetCommitValue(
        offset=100,
        leader_epoch=5,
        metadata="md",
        commit_timestamp=1000,
        expire_timestamp=2000,
        topic_id=TOPIC_ID,
    )
    assert encode_value(full, 1) == h(OCV_V1)
    assert encode_value(full, 3) == h(OCV_V3)
    assert encode_value(full, 4) == h(OCV_V4_TOPIC_ID)
    assert encode_value(dataclasses.replace(full, topic_id=None), 4) == h(OCV_V4)
    # ZERO_UUID is Kafka's default for topicId: not written, read back as None.
    assert encode_value(dataclasses.replace(full, topic_id=uuid.UUID(int=0)), 4) == h(OCV_V4)
    assert encode_value(full, 0) == h(OCV_V0)
    assert encode_value(full, 2) == h(OCV_V2)

    assert decode_value(1, h(OCV_V1)) == OffsetCommitValue(
        offset=100, metadata="md", commit_timestamp=1000, expire_timestamp=2000
    )
    assert decode_value(1, h(OCV_V3)) == OffsetCommitValue(
        offset=100, leader_epoch=5, metadata="md", commit_timestamp=1000
    )
    assert decode_value(1, h(OCV_V4)) == OffsetCommitValue(
        offset=100, leader_epoch=5, metadata="md", commit_timestamp=1000
    )
    assert decode_value(1, h(OCV_V4_TOPIC_ID)) == OffsetCommitValue(
        offset=100, leader_epoch=5, metadata="md", commit_timestamp=1000, topic_id=TOPIC_ID
    )


def test_offset_commit_value_older_versions_decode_with_defaults() -> None:
    expected = OffsetCommitValue(offset=100, metadata="md", commit_timestamp=1000)
    assert decode_value(1, h(OCV_V0)) == expected
    assert decode_value(1, h(OCV_V2)) == expected
    # Type 0: LegacyOffsetCommitValue v0 has OffsetCommitValue v0's layout.
    assert decode_value(0, h(OCV_V0)) == expected
    assert decode_record(h("0000 0001 67 0001 74 00000001"), h(OCV_V0)) == (
        OffsetCommitKey("g", "t", 1),
        expected,
    )


def test_offset_commit_value_writer_versions_follow_trunk() -> None:
    value = OffsetCommitValue(offset=1, commit_timestamp=2)
    assert encode_value(value)[:2] == b"\x00\x04"
    expiring = dataclasses.replace(value, expire_timestamp=3)
    assert encode_value(expiring)[:2] == b"\x00\x01"
    assert decode_value(1, encode_value(expiring)) == expiring
    assert r.default_value_version(GroupMetadataValue(**GMV_FIELDS)) == 3
    assert r.default_value_version(ConsumerGroupMetadataValue(1)) == 0


@pytest.mark.parametrize(
    ("tags", "topic_id"),
    [
        (f"02 00 10 {TOPIC_ID_HEX} 05 02 abcd", TOPIC_ID),  # topicId, then unknown tag 5
        (f"02 03 01 ff 00 10 {TOPIC_ID_HEX}", TOPIC_ID),  # unknown tag 3 first
        ("01 07 00", None),  # only an unknown (empty) tag 7
    ],
)
def test_offset_commit_value_skips_unknown_tagged_fields(
    tags: str, topic_id: uuid.UUID | None
) -> None:
    raw = h(f"0004 0000000000000064 00000005 01 00000000000003e8 {tags}")
    expected = OffsetCommitValue(
        offset=100, leader_epoch=5, commit_timestamp=1000, topic_id=topic_id
    )
    assert decode_value(1, raw) == expected
    assert rs.generic_decode_value(1, raw) == expected


# ------------------------------------------------------------------------------------------
# GroupMetadataValue

GMV_FIELDS: dict[str, Any] = dict(
    protocol_type="consumer",
    generation=7,
    protocol="range",
    leader="m1",
    current_state_timestamp=1234,
    members=(
        MemberMetadata(
            member_id="m1",
            group_instance_id="i1",
            client_id="c",
            client_host="/h",
            rebalance_timeout=300000,
            session_timeout=45000,
            subscription=b"\x01\x02",
            assignment=b"",
        ),
    ),
)
GMV_V3 = """
0003                    # version 3
0008 636f6e73756d6572   # protocolType "consumer"
00000007                # generation 7
0005 72616e6765         # protocol "range" (nullable)
0002 6d31               # leader "m1" (nullable)
00000000000004d2        # currentStateTimestamp 1234 (v2+)
00000001                # members: int32 count
0002 6d31               #   memberId "m1"
0002 6931               #   groupInstanceId "i1" (v3+, nullable)
0001 63                 #   clientId "c"
0002 2f68               #   clientHost "/h"
000493e0                #   rebalanceTimeout 300000 (v1+)
0000afc8                #   sessionTimeout 45000
00000002 0102           #   subscription: int32 length + bytes
00000000                #   assignment: empty
"""
GMV_V4 = """
0004 09 636f6e73756d6572 00000007 06 72616e6765 03 6d31 00000000000004d2
02                      # members: compact array of 1
03 6d31 03 6931 02 63 03 2f68 000493e0 0000afc8 03 0102 01
00                      #   member tagged fields
00                      # tagged fields
"""
GMV_V0 = """
0000 0008 636f6e73756d6572 00000007 0005 72616e6765 0002 6d31
00000001 0002 6d31 0001 63 0002 2f68 0000afc8 00000002 0102 00000000
"""
GMV_V1 = """
0001 0008 636f6e73756d6572 00000007 0005 72616e6765 0002 6d31
00000001 0002 6d31 0001 63 0002 2f68 000493e0 0000afc8 00000002 0102 00000000
"""
GMV_V2 = """
0002 0008 636f6e73756d6572 00000007 0005 72616e6765 0002 6d31 00000000000004d2
00000001 0002 6d31 0001 63 0002 2f68 000493e0 0000afc8 00000002 0102 00000000
"""


def test_group_metadata_value_v3_vector() -> None:
    value = GroupMetadataValue(**GMV_FIELDS)
    assert encode_value(value) == h(GMV_V3)
    assert encode_value(value, 3) == h(GMV_V3)
    assert decode_value(2, h(GMV_V3)) == value
    assert encode_value(value, 4) == h(GMV_V4)
    assert decode_value(2, h(GMV_V4)) == value


def test_group_metadata_value_nulls_and_empty_group() -> None:
    empty = GroupMetadataValue(
        protocol_type="", generation=0, protocol=None, leader=None, current_state_timestamp=5
    )
    raw = h("0003 0000 00000000 ffff ffff 0000000000000005 00000000")
    assert encode_value(empty) == raw
    assert decode_value(2, raw) == empty
    assert decode_value(2, None) is None


def test_group_metadata_value_older_versions_decode_with_defaults() -> None:
    member = GMV_FIELDS["members"][0]
    v2 = GroupMetadataValue(
        **{**GMV_FIELDS, "members": (dataclasses.replace(member, group_instance_id=None),)}
    )
    v1 = dataclasses.replace(v2, current_state_timestamp=-1)
    v0 = dataclasses.replace(
        v1, members=(dataclasses.replace(v1.members[0], rebalance_timeout=-1),)
    )
    for raw, expected, version in ((GMV_V0, v0, 0), (GMV_V1, v1, 1), (GMV_V2, v2, 2)):
        assert decode_value(2, h(raw)) == expected
        assert rs.generic_decode_value(2, h(raw)) == expected
        # Writing the full value at an old version drops the ignorable newer fields.
        assert encode_value(GroupMetadataValue(**GMV_FIELDS), version) == h(raw)


def test_group_metadata_value_v4_skips_unknown_tagged_fields() -> None:
    raw = h(
        """
        0004 09 636f6e73756d6572 00000007 06 72616e6765 03 6d31 00000000000004d2
        02 03 6d31 03 6931 02 63 03 2f68 000493e0 0000afc8 03 0102 01
        02 01 01 ff 09 00          # member: unknown tags 1 (1 byte) and 9 (empty)
        01 20 03 616263            # top level: unknown tag 32 (3 bytes)
        """
    )
    assert decode_value(2, raw) == GroupMetadataValue(**GMV_FIELDS)
    assert rs.generic_decode_value(2, raw) == GroupMetadataValue(**GMV_FIELDS)


# ------------------------------------------------------------------------------------------
# Consumer group values

CMA_NO_EPOCHS = f"""
0000                # version 0 (flexible)
00000005            # MemberEpoch 5
00000004            # PreviousMemberEpoch 4
00                  # State 0
02                  # AssignedPartitions: compact array of 1
{TOPIC_ID_HEX}      #   TopicId
03 00000000 00000001  # Partitions [0, 1]
00                  #   no tagged fields: AssignmentEpochs absent (null)
01                  # PartitionsPendingRevocation: empty
00                  # no tagged fields
"""
CMA_EPOCHS = f"""
0000 00000005 00000004 00
02 {TOPIC_ID_HEX} 03 00000000 00000001
01                  #   one tagged field
00 09               #   tag 0 (AssignmentEpochs), size 9
03 00000002 00000003  # compact array [2, 3]
01
00
"""


def test_current_member_assignment_vectors_with_and_without_assignment_epochs() -> None:
    without = ConsumerGroupCurrentMemberAssignmentValue(
        5, 4, 0, (TopicPartitionsWithEpochs(TOPIC_ID, (0, 1)),), ()
    )
    with_epochs = ConsumerGroupCurrentMemberAssignmentValue(
        5, 4, 0, (TopicPartitionsWithEpochs(TOPIC_ID, (0, 1), (2, 3)),), ()
    )
    assert encode_value(without) == h(CMA_NO_EPOCHS)
    assert decode_value(8, h(CMA_NO_EPOCHS)) == without
    assert encode_value(with_epochs) == h(CMA_EPOCHS)
    assert decode_value(8, h(CMA_EPOCHS)) == with_epochs
    # An empty (not null) AssignmentEpochs is written: Kafka checks only for null.
    empty = ConsumerGroupCurrentMemberAssignmentValue(
        5, 4, 0, (), (TopicPartitionsWithEpochs(TOPIC_ID, (), ()),)
    )
    raw = h(f"0000 00000005 00000004 00 01 02 {TOPIC_ID_HEX} 01 01 00 01 01 00")
    assert encode_value(empty) == raw
    assert decode_value(8, raw) == empty


def test_current_member_assignment_skips_unknown_tagged_fields() -> None:
    raw = h(
        f"""
        0000 00000005 00000004 00
        02 {TOPIC_ID_HEX} 03 00000000 00000001
        02 00 09 03 00000002 00000003 05 01 ff   # tag 0, then unknown tag 5
        01
        01 03 02 0000                            # unknown top-level tag 3
        """
    )
    assert decode_value(8, raw) == ConsumerGroupCurrentMemberAssignmentValue(
        5, 4, 0, (TopicPartitionsWithEpochs(TOPIC_ID, (0, 1), (2, 3)),), ()
    )


def test_consumer_group_metadata_value_vectors() -> None:
    assert encode_value(ConsumerGroupMetadataValue(5)) == h("0000 00000005 00")
    with_hash = ConsumerGroupMetadataValue(5, 0x0102030405060708)
    raw = h("0000 00000005 01 00 08 0102030405060708")
    assert encode_value(with_hash) == raw
    assert decode_value(3, raw) == with_hash
    assert decode_value(3, h("0000 00000005 01 07 02 abcd")) == ConsumerGroupMetadataValue(5)


def test_target_assignment_values() -> None:
    meta = ConsumerGroupTargetAssignmentMetadataValue(3, 99)
    raw = h("0000 00000003 01 00 08 0000000000000063")
    assert encode_value(meta) == raw
    assert decode_value(6, raw) == meta
    assert encode_value(ConsumerGroupTargetAssignmentMetadataValue(3)) == h("0000 00000003 00")
    member = ConsumerGroupTargetAssignmentMemberValue((TopicPartitions(TOPIC_ID, (4,)),))
    raw = h(f"0000 02 {TOPIC_ID_HEX} 02 00000004 00 00")
    assert encode_value(member) == raw
    assert decode_value(7, raw) == member


def test_member_metadata_value_with_classic_metadata() -> None:
    value = ConsumerGroupMemberMetadataValue(
        instance_id=None,
        rack_id="r",
        client_id="c",
        client_host="h",
        subscribed_topic_names=("t",),
        subscribed_topic_regex=None,
        rebalance_timeout_ms=300000,
        server_assignor="uniform",
        classic_member_metadata=ClassicMemberMetadata(45000, (ClassicProtocol("range", b"\x01"),)),
    )
    raw = h(
        """
        0000
        00                  # InstanceId null
        02 72               # RackId "r"
        02 63 02 68         # ClientId "c", ClientHost "h"
        02 02 74            # SubscribedTopicNames ["t"]
        00                  # SubscribedTopicRegex null
        000493e0            # RebalanceTimeoutMs
        08 756e69666f726d   # ServerAssignor "uniform"
        01 00 10            # tag 0 (ClassicMemberMetadata), size 16
        01                  #   present: a nullable tagged struct's uvarint marker
        0000afc8            #   SessionTimeoutMs 45000
        02 06 72616e6765 02 01 00   # SupportedProtocols [("range", 01)]
        00                  #   struct tagged fields
        """
    )
    assert encode_value(value) == raw
    assert decode_value(5, raw) == value
    plain = dataclasses.replace(value, classic_member_metadata=None)
    assert encode_value(plain) == raw[: raw.index(b"\x01\x00\x10")] + b"\x00"
    assert decode_value(5, encode_value(plain)) == plain


def test_regular_expression_and_partition_metadata_values() -> None:
    regex = ConsumerGroupRegularExpressionValue(("a", "b"), 3, 4)
    raw = h("0000 03 02 61 02 62 0000000000000003 0000000000000004 00")
    assert encode_value(regex) == raw
    assert decode_value(16, raw) == regex
    legacy = ConsumerGroupPartitionMetadataValue(
        (TopicMetadata(TOPIC_ID, "t", 2, (PartitionMetadata(0, ("r1",)),)),)
    )
    raw = h(f"0000 02 {TOPIC_ID_HEX} 02 74 00000002 02 00000000 02 03 7231 00 00 00")
    assert encode_value(legacy) == raw
    assert decode_value(4, raw) == legacy


# ------------------------------------------------------------------------------------------
# Errors


def test_unknown_types_and_versions() -> None:
    for record_type in (9, 10, 17, 99):
        with pytest.raises(UnknownRecordType):
            decode_value(record_type, b"\x00\x00")
        with pytest.raises(UnknownRecordType):
            decode_value(record_type, None)
    with pytest.raises(UnsupportedRecordVersion):
        decode_value(1, h("0005 0000000000000064"))
    with pytest.raises(UnsupportedRecordVersion):
        decode_value(1, h("ffff 0000000000000064"))
    with pytest.raises(UnsupportedRecordVersion):
        decode_value(2, h("0005"))
    with pytest.raises(UnsupportedRecordVersion):
        decode_value(3, h("0001 00000005 00"))
    with pytest.raises(UnsupportedRecordVersion):
        encode_value(OffsetCommitValue(offset=1, commit_timestamp=2), 5)
    with pytest.raises(UnsupportedRecordVersion):
        encode_value(ConsumerGroupMetadataValue(1), 1)
    with pytest.raises(TypeError):
        encode_value(OffsetCommitKey("g", "t", 0))  # type: ignore[arg-type]
    with pytest.raises(TypeError):
        encode_key(OffsetCommitValue(offset=1, commit_timestamp=2))  # type: ignore[arg-type]


def test_malformed_values() -> None:
    bad = [
        (1, h(OCV_V3) + b"\x00"),  # trailing byte
        (1, h("0003 0000000000000064 00000005 ffff 00000000000003e8")),  # null metadata
        (1, h("0004 0000000000000064 00000005 00 00000000000003e8 00")),  # null, compact
        (1, h("0004 0000000000000064 00000005 01 00000000000003e8 01 00 08 0011223344556677")),
        (1, h("0003 0000000000000064 00000005 0002 ff fe 00000000000003e8")),  # not UTF-8
        (2, h("0003 ffff")),  # null protocolType
        (2, h(GMV_V3)[:-4] + h("7fffffff")),  # assignment longer than the record
        (8, h("0000 00000005 00000004 00 ffffffff0f")),  # array count beyond the record
        (3, h("0000 00000005 01 00 04 00000000")),  # MetadataHash tag with the wrong size
    ]
    for record_type, raw in bad:
        with pytest.raises(MalformedRecord):
            decode_value(record_type, raw)
    with pytest.raises(MalformedRecord):
        decode_key(h("0001 0001 67 0001 74 00000000 00"))
    with pytest.raises(MalformedRecord):
        decode_key(h("0001 ffff 0001 74 00000000"))
    with pytest.raises(MalformedRecord):
        decode_key(h("0005 0001 67"))


def test_encoding_limits() -> None:
    with pytest.raises(ValueError):
        encode_key(OffsetCommitKey("g" * 0x8000, "t", 0))
    with pytest.raises(ValueError):
        encode_key(ConsumerGroupMetadataKey("g" * 0x8000))
    with pytest.raises(ValueError):
        encode_value(OffsetCommitValue(offset=1 << 63, commit_timestamp=0))
    with pytest.raises(ValueError):
        encode_value(ConsumerGroupMetadataValue(1 << 31))


def test_schema_drift_is_caught_at_compile_time() -> None:
    schema = rs.load_schema("ConsumerGroupMetadataValue")

    @dataclasses.dataclass(frozen=True, slots=True)
    class Extended:  # a field the schema lacks is fine if it has a default
        epoch: int
        metadata_hash: int = 0
        extra: str = ""

    rs.SchemaCompiler(schema, {"ConsumerGroupMetadataValue": Extended}, 0).message()

    @dataclasses.dataclass(frozen=True, slots=True)
    class Missing:
        epoch: int

    with pytest.raises(TypeError, match="no field metadata_hash"):
        rs.SchemaCompiler(schema, {"ConsumerGroupMetadataValue": Missing}, 0).message()

    @dataclasses.dataclass(frozen=True, slots=True)
    class NoDefault:  # a tagged field must have a default
        epoch: int
        metadata_hash: int

    with pytest.raises(TypeError, match="needs a default"):
        rs.SchemaCompiler(schema, {"ConsumerGroupMetadataValue": NoDefault}, 0).message()


# ------------------------------------------------------------------------------------------
# Round trips (hypothesis): every type and version; fast paths == schema-driven codec.

i8 = st.integers(-(2**7), 2**7 - 1)
i32 = st.integers(-(2**31), 2**31 - 1)
i64 = st.integers(-(2**63), 2**63 - 1)
text = st.text(max_size=12)
ntext = st.none() | text
blobs = st.binary(max_size=12)
uuids = st.uuids() | st.just(TOPIC_ID)
ints32 = st.lists(i32, max_size=5).map(tuple)

offset_commit_values = st.builds(
    OffsetCommitValue,
    offset=i64,
    leader_epoch=i32,
    metadata=text,
    commit_timestamp=i64,
    expire_timestamp=i64,
    topic_id=st.none() | uuids | st.just(uuid.UUID(int=0)),
)
member_metadata = st.builds(
    MemberMetadata,
    member_id=text,
    group_instance_id=ntext,
    client_id=text,
    client_host=text,
    rebalance_timeout=i32,
    session_timeout=i32,
    subscription=blobs,
    assignment=blobs,
)
group_metadata_values = st.builds(
    GroupMetadataValue,
    protocol_type=text,
    generation=i32,
    protocol=ntext,
    leader=ntext,
    current_state_timestamp=i64,
    members=st.lists(member_metadata, max_size=3).map(tuple),
)
with_epochs = st.builds(TopicPartitionsWithEpochs, uuids, ints32, st.none() | ints32)
consumer_values: st.SearchStrategy[r.Value] = st.one_of(
    st.builds(ConsumerGroupMetadataValue, i32, i64),
    st.builds(
        ConsumerGroupPartitionMetadataValue,
        st.lists(
            st.builds(
                TopicMetadata,
                uuids,
                text,
                i32,
                st.lists(
                    st.builds(PartitionMetadata, i32, st.lists(text, max_size=2).map(tuple)),
                    max_size=2,
                ).map(tuple),
            ),
            max_size=2,
        ).map(tuple),
    ),
    st.builds(
        ConsumerGroupMemberMetadataValue,
        instance_id=ntext,
        rack_id=ntext,
        client_id=text,
        client_host=text,
        subscribed_topic_names=st.lists(text, max_size=3).map(tuple),
        subscribed_topic_regex=ntext,
        rebalance_timeout_ms=i32,
        server_assignor=ntext,
        classic_member_metadata=st.none()
        | st.builds(
            ClassicMemberMetadata,
            i32,
            st.lists(st.builds(ClassicProtocol, text, blobs), max_size=2).map(tuple),
        ),
    ),
    st.builds(ConsumerGroupTargetAssignmentMetadataValue, i32, i64),
    st.builds(
        ConsumerGroupTargetAssignmentMemberValue,
        st.lists(st.builds(TopicPartitions, uuids, ints32), max_size=3).map(tuple),
    ),
    st.builds(
        ConsumerGroupCurrentMemberAssignmentValue,
        i32,
        i32,
        i8,
        st.lists(with_epochs, max_size=3).map(tuple),
        st.lists(with_epochs, max_size=3).map(tuple),
    ),
    st.builds(ConsumerGroupRegularExpressionValue, st.lists(text, max_size=3).map(tuple), i64, i64),
)
keys: st.SearchStrategy[r.Key] = st.one_of(
    st.builds(OffsetCommitKey, text, text, i32),
    st.builds(GroupMetadataKey, text),
    st.builds(ConsumerGroupMetadataKey, text),
    st.builds(ConsumerGroupPartitionMetadataKey, text),
    st.builds(ConsumerGroupMemberMetadataKey, text, text),
    st.builds(ConsumerGroupTargetAssignmentMetadataKey, text),
    st.builds(ConsumerGroupTargetAssignmentMemberKey, text, text),
    st.builds(ConsumerGroupCurrentMemberAssignmentKey, text, text),
    st.builds(ConsumerGroupRegularExpressionKey, text, text),
)


def as_written(value: OffsetCommitValue, version: int) -> OffsetCommitValue:
    """What survives a write at `version`: absent (ignorable) fields fall back to defaults."""
    topic_id = value.topic_id if value.topic_id != uuid.UUID(int=0) else None
    return OffsetCommitValue(
        offset=value.offset,
        leader_epoch=value.leader_epoch if version >= 3 else -1,
        metadata=value.metadata,
        commit_timestamp=value.commit_timestamp,
        expire_timestamp=value.expire_timestamp if version == 1 else -1,
        topic_id=topic_id if version >= 4 else None,
    )


def group_as_written(value: GroupMetadataValue, version: int) -> GroupMetadataValue:
    members = tuple(
        dataclasses.replace(
            m,
            group_instance_id=m.group_instance_id if version >= 3 else None,
            rebalance_timeout=m.rebalance_timeout if version >= 1 else -1,
        )
        for m in value.members
    )
    timestamp = value.current_state_timestamp if version >= 2 else -1
    return dataclasses.replace(value, current_state_timestamp=timestamp, members=members)


def assert_rejects_truncation(record_type: int, raw: bytes) -> None:
    for cut in range(len(raw)):
        with pytest.raises((MalformedRecord, UnsupportedRecordVersion)):
            decode_value(record_type, raw[:cut])


@given(keys)
def test_key_round_trip(key: r.Key) -> None:
    raw = encode_key(key)
    assert raw == rs.generic_encode_key(key)
    assert decode_key(raw) == key
    assert rs.generic_decode_key(raw) == key
    for cut in range(len(raw)):
        with pytest.raises(MalformedRecord):
            r._decode_key_uncached(raw[:cut])


@given(offset_commit_values, st.integers(0, 4))
def test_offset_commit_value_round_trip(value: OffsetCommitValue, version: int) -> None:
    raw = encode_value(value, version)
    assert raw == rs.generic_encode_value(value, version)
    assert decode_value(1, raw) == as_written(value, version)
    assert rs.generic_decode_value(1, raw) == as_written(value, version)
    assert_rejects_truncation(1, raw)


@given(group_metadata_values, st.integers(0, 4))
def test_group_metadata_value_round_trip(value: GroupMetadataValue, version: int) -> None:
    raw = encode_value(value, version)
    assert raw == rs.generic_encode_value(value, version)
    assert decode_value(2, raw) == group_as_written(value, version)
    assert rs.generic_decode_value(2, raw) == group_as_written(value, version)
    assert_rejects_truncation(2, raw)


@settings(max_examples=300)
@given(consumer_values)
def test_consumer_group_value_round_trip(value: r.Value) -> None:
    raw = encode_value(value)
    assert raw[:2] == b"\x00\x00"
    assert decode_value(value.RECORD_TYPE, raw) == value
    assert_rejects_truncation(value.RECORD_TYPE, raw)
    with pytest.raises(MalformedRecord):
        decode_value(value.RECORD_TYPE, raw + b"\x00")


# ------------------------------------------------------------------------------------------
# Micro-benchmark: a figure to read, never an assertion, so not a test:
# `python -m tests.unit.test_records [n]` prints it (the decoders are tested above).


def offset_commit_decode_rates(n: int, distinct_keys: int) -> dict[str, float]:
    """Records/s of decode_key + decode_value over `n` v4 offset commits (the default
    writer version, with a topic id), against the schema-driven codec as the peer."""
    records = [
        (
            # bytes(bytearray(...)): fresh objects, as a batch reader hands them out.
            bytes(bytearray(encode_key(OffsetCommitKey("group", f"t{i % 10}", i % distinct_keys)))),
            bytes(
                bytearray(
                    encode_value(
                        OffsetCommitValue(
                            offset=i,
                            leader_epoch=3,
                            commit_timestamp=1_700_000_000_000 + i,
                            topic_id=TOPIC_ID,
                        )
                    )
                )
            ),
        )
        for i in range(n)
    ]

    def run(decode_k: Any, decode_v: Any) -> float:
        best = float("inf")
        for _ in range(3):
            r._key_memo_reset()
            start = time.perf_counter()
            for k, v in records:
                decode_k(k)
                decode_v(1, v)
            best = min(best, time.perf_counter() - start)
        return n / best

    gc.collect()
    fast = run(decode_key, decode_value)
    generic = run(rs.generic_decode_key, rs.generic_decode_value)
    return {"fast": fast, "generic": generic, "ratio": fast / generic}


if __name__ == "__main__":
    n = int(sys.argv[1]) if len(sys.argv) > 1 else 1_000_000
    for distinct in (1_000, n):
        rates = offset_commit_decode_rates(n, distinct)
        print(
            f"{n:,} offset commits, {distinct:,} distinct keys: decode_key+decode_value"
            f" {rates['fast']:,.0f}/s; schema-driven peer {rates['generic']:,.0f}/s;"
            f" ratio {rates['ratio']:.2f}"
        )
