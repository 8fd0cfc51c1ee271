"""Hand-written fast paths of the coordinator record codec, for what a load replays by the
million and every durable commit writes: OffsetCommit keys (types 0 and 1) and values
(v0-v4), GroupMetadata keys and values (v0-v4), read and written with precompiled
``struct.Struct`` objects, a whole record in one or two calls where clients' usual shapes
allow it. Same results and errors as the generic codec (record_schema.py); the unit tests
check them against it byte for byte at every version. records.py dispatches here.
"""

from __future__ import annotations

import struct
from typing import TypeAlias

from .frozen import fast_new
from .record_fields import (
    DECODE_ERRORS,
    MAX_STRING,
    ZERO_UUID_BYTES,
    cached_uuid,
    get_bytes,
    get_count,
    get_nstr,
    get_str,
    put_bytes,
    put_count,
    put_nstr,
    put_str,
    skip_tags,
)
from .record_types import (
    ConsumerGroupCurrentMemberAssignmentKey,
    ConsumerGroupMemberMetadataKey,
    ConsumerGroupTargetAssignmentMemberKey,
    GroupMetadataKey,
    GroupMetadataValue,
    MalformedRecord,
    MemberMetadata,
    OffsetCommitKey,
    OffsetCommitValue,
    UnsupportedRecordVersion,
)
from .varint import SMALL_UVARINTS, read_uvarint, uvarint_bytes

# Declared here, not imported: see record_fields.py.
_I16 = struct.Struct(">h")
_I32 = struct.Struct(">i")
_I64 = struct.Struct(">q")
_HH = struct.Struct(">hh")
_QQ = struct.Struct(">qq")
_HQH = struct.Struct(">hqh")  # OffsetCommitValue v0-v2: version, offset, metadata length
_HQI = struct.Struct(">hqi")  # OffsetCommitValue v4: version, offset, leaderEpoch
_HQIH = struct.Struct(">hqih")  # OffsetCommitValue v3: ... + metadata length
# Whole OffsetCommitValue records with empty metadata: v3; v4 without tagged fields; v4 with
# only the topic id (tag count 1, tag 0, size 16, uuid).
_OCV3_BARE = struct.Struct(">hqihq")
_OCV4_BARE = struct.Struct(">hqiBqB")
_OCV4_TOPIC_ID = struct.Struct(">hqiBq3s16s")

new_offset_commit_key = fast_new(OffsetCommitKey)
_new_group_metadata_key = fast_new(GroupMetadataKey)
new_offset_commit_value = fast_new(OffsetCommitValue)
_new_group_metadata_value = fast_new(GroupMetadataValue)
_new_member_metadata = fast_new(MemberMetadata)


def decode_offset_commit_key(data: bytes) -> OffsetCommitKey:
    return new_offset_commit_key(*offset_commit_key_fields(data))


def decode_group_metadata_key(data: bytes) -> GroupMetadataKey:
    try:
        _, n = _HH.unpack_from(data, 0)
        group = data[4:].decode()
    except DECODE_ERRORS as e:
        raise MalformedRecord(f"GroupMetadataKey: {e}") from e
    if n + 4 != len(data):
        raise MalformedRecord("GroupMetadataKey: bad string length or trailing bytes")
    return _new_group_metadata_key(group)


def offset_commit_key_fields(data: bytes) -> tuple[str, str, int]:
    """(group, topic, partition) of OffsetCommit key bytes (type 0 or 1), without building an
    ``OffsetCommitKey``: for loaders that keep their own memo. Raises ``MalformedRecord``
    where ``decode_key`` would, and for keys of any other type."""
    if len(data) < 2 or data[0] != 0 or data[1] > 1:
        raise MalformedRecord("not an OffsetCommit key")
    try:
        _, n = _HH.unpack_from(data, 0)
        p = 4 + n
        group = data[4:p].decode()
        (m,) = _I16.unpack_from(data, p)
        p += 2
        q = p + m
        topic = data[p:q].decode()
        (partition,) = _I32.unpack_from(data, q)
    except DECODE_ERRORS as e:
        raise MalformedRecord(f"OffsetCommitKey: {e}") from e
    if n < 0 or m < 0 or q + 4 != len(data):
        raise MalformedRecord("OffsetCommitKey: bad string length or trailing bytes")
    return group, topic, partition


OffsetCommitFields: TypeAlias = tuple[int, int, str, int, int, bytes | None]


def offset_commit_value_fields(data: bytes) -> OffsetCommitFields:
    """(offset, leader_epoch, metadata, commit_timestamp, expire_timestamp, topic id bytes)
    of OffsetCommitValue bytes, without building an ``OffsetCommitValue``. The topic id is
    its 16 bytes, None when absent or all zero (as ``decode_value`` gives None). Same
    results and errors as ``decode_value``. What clients write (v4, metadata under 127
    bytes, with or without a topic id) is read here in one or two unpack calls; anything
    else by ``decode_value``'s reader."""
    size = len(data)
    if size >= 24 and data[1] == 4 and data[0] == 0:
        if size == 24 and data[14] == 1 and data[23] == 0:
            _, offset, leader_epoch, _, commit, _ = _OCV4_BARE.unpack(data)
            return offset, leader_epoch, "", commit, -1, None
        if size == 42 and data[14] == 1 and data[23:26] == b"\x01\x00\x10":
            _, offset, leader_epoch, _, commit, _, raw = _OCV4_TOPIC_ID.unpack(data)
            return offset, leader_epoch, "", commit, -1, raw if raw != ZERO_UUID_BYTES else None
        q = 14 + data[14]  # metadata end, when its length is a one-byte uvarint
        if 0 < data[14] < 0x80 and q + 9 <= size:
            tagged = data[q + 8]
            if (tagged == 0 and size == q + 9) or (
                size == q + 27 and data[q + 8 : q + 11] == b"\x01\x00\x10"
            ):
                try:
                    metadata = data[15:q].decode()
                except UnicodeDecodeError:
                    pass  # the reader below raises MalformedRecord
                else:
                    _, offset, leader_epoch = _HQI.unpack_from(data, 0)
                    (commit,) = _I64.unpack_from(data, q)
                    raw = data[q + 11 :] if tagged else ZERO_UUID_BYTES
                    return (
                        offset,
                        leader_epoch,
                        metadata,
                        commit,
                        -1,
                        raw if raw != ZERO_UUID_BYTES else None,
                    )
    value = decode_offset_commit_value(data)
    return (
        value.offset,
        value.leader_epoch,
        value.metadata,
        value.commit_timestamp,
        value.expire_timestamp,
        None if value.topic_id is None else value.topic_id.bytes,
    )


# Every durable commit encodes its key, and consumers commit the same partitions over and
# over: the encoded keys are kept, a bounded number (emptied when full).
_COMMIT_KEYS: dict[tuple[str, str, int], bytes] = {}
_COMMIT_KEYS_MAX = 10_000


def encode_offset_commit_key(key: OffsetCommitKey) -> bytes:
    fields = (key.group, key.topic, key.partition)
    encoded = _COMMIT_KEYS.get(fields)
    if encoded is None:
        g = key.group.encode()
        t = key.topic.encode()
        encoded = b"".join((_HH.pack(1, len(g)), g, _I16.pack(len(t)), t, _I32.pack(key.partition)))
        if len(_COMMIT_KEYS) >= _COMMIT_KEYS_MAX:
            _COMMIT_KEYS.clear()
        _COMMIT_KEYS[fields] = encoded
    return encoded


def encode_group_metadata_key(key: GroupMetadataKey) -> bytes:
    g = key.group.encode()
    return _HH.pack(2, len(g)) + g


def encode_group_member_key(
    key: ConsumerGroupMemberMetadataKey
    | ConsumerGroupTargetAssignmentMemberKey
    | ConsumerGroupCurrentMemberAssignmentKey,
) -> bytes:
    """A consumer group's member record key: its type, the group id and the member id (each
    an int16-length string). A mass expiry writes three of these per member (tombstones):
    the schema-driven encoder was a third of the removal's loop time."""
    g = key.group_id.encode()
    m = key.member_id.encode()
    return b"".join((_HH.pack(key.RECORD_TYPE, len(g)), g, _I16.pack(len(m)), m))


def decode_offset_commit_value(data: bytes) -> OffsetCommitValue:
    size = len(data)
    try:
        version = data[0] << 8 | data[1]
        if version == 4:
            # Whole-record shapes first: empty metadata (what clients usually commit), with
            # no tagged field or with just the topic id. One unpack call each.
            if size == 42 and data[14] == 1 and data[23:26] == b"\x01\x00\x10":
                _, offset, leader_epoch, _, commit, _, raw = _OCV4_TOPIC_ID.unpack(data)
                topic_id = cached_uuid(raw) if raw != ZERO_UUID_BYTES else None
                return new_offset_commit_value(offset, leader_epoch, "", commit, -1, topic_id)
            if size == 24 and data[14] == 1 and data[23] == 0:
                _, offset, leader_epoch, _, commit, _ = _OCV4_BARE.unpack(data)
                return new_offset_commit_value(offset, leader_epoch, "", commit, -1, None)
            _, offset, leader_epoch = _HQI.unpack_from(data, 0)
            n = data[14]
            if n < 0x80:
                p = 15
            else:
                n, p = read_uvarint(data, 14)
            n -= 1
            q = p + n
            metadata = data[p:q].decode() if n > 0 else ""
            (commit,) = _I64.unpack_from(data, q)
            p = q + 9
            topic_id = None
            if data[q + 8]:  # tagged fields
                count, p = read_uvarint(data, q + 8)
                for _ in range(count):
                    tag, p = read_uvarint(data, p)
                    field_size, p = read_uvarint(data, p)
                    if tag == 0:
                        raw = data[p : p + 16]
                        if field_size != 16 or len(raw) != 16:
                            raise MalformedRecord("OffsetCommitValue: topicId size")
                        topic_id = cached_uuid(raw) if raw != ZERO_UUID_BYTES else None
                    p += field_size
            if n < 0 or n > MAX_STRING or p != size:
                raise MalformedRecord("OffsetCommitValue: bad lengths or trailing bytes")
            return new_offset_commit_value(offset, leader_epoch, metadata, commit, -1, topic_id)
        if version == 3:
            if size == 24:  # empty metadata
                _, offset, leader_epoch, n, commit = _OCV3_BARE.unpack(data)
                if n == 0:
                    return new_offset_commit_value(offset, leader_epoch, "", commit, -1, None)
            _, offset, leader_epoch, n = _HQIH.unpack_from(data, 0)
            q = 16 + n
            metadata = data[16:q].decode() if n > 0 else ""
            (commit,) = _I64.unpack_from(data, q)
            if n < 0 or q + 8 != size:
                raise MalformedRecord("OffsetCommitValue: bad lengths or trailing bytes")
            return new_offset_commit_value(offset, leader_epoch, metadata, commit, -1, None)
        if version <= 2:
            _, offset, n = _HQH.unpack_from(data, 0)
            q = 12 + n
            metadata = data[12:q].decode() if n > 0 else ""
            if version == 1:
                commit, expire = _QQ.unpack_from(data, q)
                end = q + 16
            else:
                (commit,) = _I64.unpack_from(data, q)
                expire = -1
                end = q + 8
            if n < 0 or end != size:
                raise MalformedRecord("OffsetCommitValue: bad lengths or trailing bytes")
            return new_offset_commit_value(offset, -1, metadata, commit, expire, None)
    except DECODE_ERRORS as e:
        raise MalformedRecord(f"OffsetCommitValue: {e}") from e
    if version & 0x8000:
        version -= 0x10000
    raise UnsupportedRecordVersion(f"OffsetCommitValue version {version}")


def encode_offset_commit_value(value: OffsetCommitValue, version: int) -> bytes:
    md = value.metadata.encode()
    n = len(md)
    if n > MAX_STRING:
        raise ValueError(f"OffsetCommitValue.metadata of {n} bytes exceeds {MAX_STRING}")
    if version == 4:
        tagged = b"\x00"
        topic_id = value.topic_id
        if topic_id is not None and topic_id.int:  # (not UUID.__eq__: Python code)
            tagged = b"\x01\x00\x10" + topic_id.int.to_bytes(16)  # UUID.bytes, inlined
        return b"".join(
            (
                _HQI.pack(4, value.offset, value.leader_epoch),
                SMALL_UVARINTS[n + 1] if n < 0x7F else uvarint_bytes(n + 1),
                md,
                _I64.pack(value.commit_timestamp),
                tagged,
            )
        )
    if version == 3:
        head = _HQIH.pack(3, value.offset, value.leader_epoch, n)
        return b"".join((head, md, _I64.pack(value.commit_timestamp)))
    if version == 1:
        tail = _QQ.pack(value.commit_timestamp, value.expire_timestamp)
        return b"".join((_HQH.pack(1, value.offset, n), md, tail))
    if version in (0, 2):
        head = _HQH.pack(version, value.offset, n)
        return b"".join((head, md, _I64.pack(value.commit_timestamp)))
    raise UnsupportedRecordVersion(f"OffsetCommitValue has no version {version}")


def decode_group_metadata_value(data: bytes) -> GroupMetadataValue:
    try:
        (version,) = _I16.unpack_from(data, 0)
        if not 0 <= version <= 4:
            raise UnsupportedRecordVersion(f"GroupMetadataValue version {version}")
        flex = version >= 4
        protocol_type, p = get_str(data, 2, flex)
        (generation,) = _I32.unpack_from(data, p)
        protocol, p = get_nstr(data, p + 4, flex)
        leader, p = get_nstr(data, p, flex)
        timestamp = -1
        if version >= 2:
            (timestamp,) = _I64.unpack_from(data, p)
            p += 8
        count, p = get_count(data, p, flex)
        if count < 0:
            raise MalformedRecord("GroupMetadataValue: null members")
        members = []
        for _ in range(count):
            member_id, p = get_str(data, p, flex)
            instance_id = None
            if version >= 3:
                instance_id, p = get_nstr(data, p, flex)
            client_id, p = get_str(data, p, flex)
            client_host, p = get_str(data, p, flex)
            rebalance_timeout = -1
            if version >= 1:
                (rebalance_timeout,) = _I32.unpack_from(data, p)
                p += 4
            (session_timeout,) = _I32.unpack_from(data, p)
            subscription, p = get_bytes(data, p + 4, flex)
            assignment, p = get_bytes(data, p, flex)
            if flex:
                p = skip_tags(data, p)
            members.append(
                _new_member_metadata(
                    member_id,
                    instance_id,
                    client_id,
                    client_host,
                    rebalance_timeout,
                    session_timeout,
                    subscription,
                    assignment,
                )
            )
        if flex:
            p = skip_tags(data, p)
    except DECODE_ERRORS as e:
        raise MalformedRecord(f"GroupMetadataValue: {e}") from e
    if p != len(data):
        raise MalformedRecord(f"GroupMetadataValue: {len(data) - p} trailing bytes")
    return _new_group_metadata_value(
        protocol_type, generation, protocol, leader, timestamp, tuple(members)
    )


def encode_group_metadata_value(value: GroupMetadataValue, version: int) -> bytes:
    if not 0 <= version <= 4:
        raise UnsupportedRecordVersion(f"GroupMetadataValue has no version {version}")
    flex = version >= 4
    out = [_I16.pack(version)]
    put_str(out, value.protocol_type, flex)
    out.append(_I32.pack(value.generation))
    put_nstr(out, value.protocol, flex)
    put_nstr(out, value.leader, flex)
    if version >= 2:
        out.append(_I64.pack(value.current_state_timestamp))
    put_count(out, len(value.members), flex)
    for m in value.members:
        put_str(out, m.member_id, flex)
        if version >= 3:
            put_nstr(out, m.group_instance_id, flex)
        put_str(out, m.client_id, flex)
        put_str(out, m.client_host, flex)
        if version >= 1:
            out.append(_I32.pack(m.rebalance_timeout))
        out.append(_I32.pack(m.session_timeout))
        put_bytes(out, m.subscription, flex)
        put_bytes(out, m.assignment, flex)
        if flex:
            out.append(b"\x00")
    if flex:
        out.append(b"\x00")
    return b"".join(out)
