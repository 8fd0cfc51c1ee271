"""Coordinator records: byte-for-byte Kafka ``__consumer_offsets`` keys and values.

Theory of operation. A record key is an int16 *record type* (the schema's ``apiKey``) followed
by the key struct at version 0; a value is an int16 *value version* followed by the value struct
at that version; a null value is a tombstone. Versions listed in a schema's
``flexibleVersions`` use compact strings/bytes/arrays (unsigned varint length + 1, 0 = null)
and end every struct with a tagged-field section (uvarint count, then uvarint tag, uvarint
size, data, in tag order); the others use int16-length strings and int32-length bytes and
arrays (-1 = null). A nullable struct carries an int8 marker (-1 null, 1 present), or, as a
tagged field, a uvarint marker (Kafka's generator, KIP-893).

Two codecs live here:

* A generic one, compiled at import from the JSON schemas in ``schemas/`` (copies of Kafka's,
  see its NOTICE.md) into one reader/writer closure pair per (record type, version). Fields
  map to frozen dataclass attributes by snake_case name; the mapping is checked at import, so
  a dataclass that drifts from its schema fails loudly.
* Hand-written fast paths, using precompiled ``struct.Struct`` objects, for what a load
  replays by the million: OffsetCommit keys (types 0 and 1) and values (v0-v4), and
  GroupMetadata keys and values (v0-v4). The unit tests check them byte for byte against the
  generic codec at every version.

Two more things make replay fast. Frozen dataclasses are built through a slotted twin class
(``fast_new``): a frozen ``__init__`` pays for ``object.__setattr__`` per field (about 3.5x a
plain one). And decoded keys are memoised on their bytes (bounded), since an uncompacted log
commits the same (group, topic, partition) over and over; keys are immutable, so sharing them
is safe.

Compatibility notes: type 0 (LegacyOffsetCommit) keys decode to ``OffsetCommitKey``; type 0
values decode with the OffsetCommitValue reader (LegacyOffsetCommitValue v0 has the same
layout as OffsetCommitValue v0, and accepting every OffsetCommitValue version there is a
superset of what Kafka reads). As in Kafka, writing a value at a version that lacks an
``ignorable`` field drops that field. Unknown tagged fields are skipped (not preserved).
Unlike Kafka's readers, trailing bytes after a struct are an error (``MalformedRecord``).
"""

from __future__ import annotations

import dataclasses
import functools
import json
import re
import struct
import uuid
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from enum import IntEnum
from importlib import resources
from typing import Any, ClassVar, Final, TypeAlias, cast

from .frozen import fast_new

__all__ = [
    "new_offset_commit_key",
    "new_offset_commit_value",
    "ClassicMemberMetadata",
    "ClassicProtocol",
    "ConsumerGroupCurrentMemberAssignmentKey",
    "ConsumerGroupCurrentMemberAssignmentValue",
    "ConsumerGroupMemberMetadataKey",
    "ConsumerGroupMemberMetadataValue",
    "ConsumerGroupMetadataKey",
    "ConsumerGroupMetadataValue",
    "ConsumerGroupPartitionMetadataKey",
    "ConsumerGroupPartitionMetadataValue",
    "ConsumerGroupRegularExpressionKey",
    "ConsumerGroupRegularExpressionValue",
    "ConsumerGroupTargetAssignmentMemberKey",
    "ConsumerGroupTargetAssignmentMemberValue",
    "ConsumerGroupTargetAssignmentMetadataKey",
    "ConsumerGroupTargetAssignmentMetadataValue",
    "GroupMetadataKey",
    "GroupMetadataValue",
    "Key",
    "MalformedRecord",
    "MemberMetadata",
    "OffsetCommitKey",
    "OffsetCommitValue",
    "PartitionMetadata",
    "RecordError",
    "RecordType",
    "TopicMetadata",
    "TopicPartitions",
    "TopicPartitionsWithEpochs",
    "UnknownRecordType",
    "UnsupportedRecordVersion",
    "Value",
    "decode_key",
    "decode_record",
    "decode_value",
    "default_value_version",
    "encode_key",
    "encode_value",
    "offset_commit_key_fields",
    "offset_commit_value_fields",
]


class RecordType(IntEnum):
    """Record type numbers (the schemas' ``apiKey``), as in Kafka's CoordinatorRecordType."""

    LEGACY_OFFSET_COMMIT = 0
    OFFSET_COMMIT = 1
    GROUP_METADATA = 2
    CONSUMER_GROUP_METADATA = 3
    CONSUMER_GROUP_PARTITION_METADATA = 4
    CONSUMER_GROUP_MEMBER_METADATA = 5
    CONSUMER_GROUP_TARGET_ASSIGNMENT_METADATA = 6
    CONSUMER_GROUP_TARGET_ASSIGNMENT_MEMBER = 7
    CONSUMER_GROUP_CURRENT_MEMBER_ASSIGNMENT = 8
    CONSUMER_GROUP_REGULAR_EXPRESSION = 16


class RecordError(ValueError):
    """A coordinator record that cannot be decoded (or a value that cannot be encoded)."""


class UnknownRecordType(RecordError):
    """A record type this server does not handle; Kafka's loader warns and skips these."""

    def __init__(self, record_type: int) -> None:
        super().__init__(f"unknown coordinator record type {record_type}")
        self.record_type = record_type


class UnsupportedRecordVersion(RecordError):
    """A value version outside the schema's ``validVersions``."""


class MalformedRecord(RecordError):
    """Truncated, overlong or otherwise invalid record bytes."""


# --------------------------------------------------------------------------------------------
# Keys (version 0, never flexible)


@dataclass(frozen=True, slots=True)
class OffsetCommitKey:
    """Types 1 and 0 (legacy, same layout); always written as type 1."""

    RECORD_TYPE: ClassVar[RecordType] = RecordType.OFFSET_COMMIT
    group: str
    topic: str
    partition: int


@dataclass(frozen=True, slots=True)
class GroupMetadataKey:
    RECORD_TYPE: ClassVar[RecordType] = RecordType.GROUP_METADATA
    group: str


@dataclass(frozen=True, slots=True)
class ConsumerGroupMetadataKey:
    RECORD_TYPE: ClassVar[RecordType] = RecordType.CONSUMER_GROUP_METADATA
    group_id: str


@dataclass(frozen=True, slots=True)
class ConsumerGroupPartitionMetadataKey:
    RECORD_TYPE: ClassVar[RecordType] = RecordType.CONSUMER_GROUP_PARTITION_METADATA
    group_id: str


@dataclass(frozen=True, slots=True)
class ConsumerGroupMemberMetadataKey:
    RECORD_TYPE: ClassVar[RecordType] = RecordType.CONSUMER_GROUP_MEMBER_METADATA
    group_id: str
    member_id: str


@dataclass(frozen=True, slots=True)
class ConsumerGroupTargetAssignmentMetadataKey:
    RECORD_TYPE: ClassVar[RecordType] = RecordType.CONSUMER_GROUP_TARGET_ASSIGNMENT_METADATA
    group_id: str


@dataclass(frozen=True, slots=True)
class ConsumerGroupTargetAssignmentMemberKey:
    RECORD_TYPE: ClassVar[RecordType] = RecordType.CONSUMER_GROUP_TARGET_ASSIGNMENT_MEMBER
    group_id: str
    member_id: str


@dataclass(frozen=True, slots=True)
class ConsumerGroupCurrentMemberAssignmentKey:
    RECORD_TYPE: ClassVar[RecordType] = RecordType.CONSUMER_GROUP_CURRENT_MEMBER_ASSIGNMENT
    group_id: str
    member_id: str


@dataclass(frozen=True, slots=True)
class ConsumerGroupRegularExpressionKey:
    RECORD_TYPE: ClassVar[RecordType] = RecordType.CONSUMER_GROUP_REGULAR_EXPRESSION
    group_id: str
    regular_expression: str


# --------------------------------------------------------------------------------------------
# Values. Field order is the schema's; classes whose schema puts a defaulted field before a
# required one are keyword-only. Arrays are tuples. Defaults are the schema's.


@dataclass(frozen=True, slots=True, kw_only=True)
class OffsetCommitValue:
    """v0-v4 (flexible from v4). ``expire_timestamp`` exists only in v1, ``leader_epoch``
    from v3, ``topic_id`` (tagged, absent when None) from v4."""

    RECORD_TYPE: ClassVar[RecordType] = RecordType.OFFSET_COMMIT
    offset: int
    leader_epoch: int = -1
    metadata: str = ""
    commit_timestamp: int
    expire_timestamp: int = -1
    topic_id: uuid.UUID | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class MemberMetadata:
    """A classic group member (GroupMetadataValue.MemberMetadata)."""

    member_id: str
    group_instance_id: str | None = None
    client_id: str
    client_host: str
    rebalance_timeout: int = -1
    session_timeout: int
    subscription: bytes
    assignment: bytes


@dataclass(frozen=True, slots=True, kw_only=True)
class GroupMetadataValue:
    """v0-v4 (flexible from v4); Kafka trunk writes v3."""

    RECORD_TYPE: ClassVar[RecordType] = RecordType.GROUP_METADATA
    protocol_type: str
    generation: int
    protocol: str | None
    leader: str | None
    current_state_timestamp: int = -1
    members: tuple[MemberMetadata, ...] = ()


@dataclass(frozen=True, slots=True)
class ConsumerGroupMetadataValue:
    RECORD_TYPE: ClassVar[RecordType] = RecordType.CONSUMER_GROUP_METADATA
    epoch: int
    metadata_hash: int = 0  # tagged 0 (KIP-1101)


@dataclass(frozen=True, slots=True)
class PartitionMetadata:
    partition: int
    racks: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class TopicMetadata:
    topic_id: uuid.UUID
    topic_name: str
    num_partitions: int
    partition_metadata: tuple[PartitionMetadata, ...]


@dataclass(frozen=True, slots=True)
class ConsumerGroupPartitionMetadataValue:
    """Legacy (replaced by ConsumerGroupMetadataValue.metadata_hash); read and tombstoned only."""

    RECORD_TYPE: ClassVar[RecordType] = RecordType.CONSUMER_GROUP_PARTITION_METADATA
    topics: tuple[TopicMetadata, ...]


@dataclass(frozen=True, slots=True)
class ClassicProtocol:
    name: str
    metadata: bytes


@dataclass(frozen=True, slots=True)
class ClassicMemberMetadata:
    session_timeout_ms: int
    supported_protocols: tuple[ClassicProtocol, ...]


@dataclass(frozen=True, slots=True, kw_only=True)
class ConsumerGroupMemberMetadataValue:
    RECORD_TYPE: ClassVar[RecordType] = RecordType.CONSUMER_GROUP_MEMBER_METADATA
    instance_id: str | None
    rack_id: str | None
    client_id: str
    client_host: str
    subscribed_topic_names: tuple[str, ...]
    subscribed_topic_regex: str | None
    rebalance_timeout_ms: int = -1
    server_assignor: str | None
    classic_member_metadata: ClassicMemberMetadata | None = None  # tagged 0


@dataclass(frozen=True, slots=True)
class ConsumerGroupTargetAssignmentMetadataValue:
    RECORD_TYPE: ClassVar[RecordType] = RecordType.CONSUMER_GROUP_TARGET_ASSIGNMENT_METADATA
    assignment_epoch: int
    assignment_timestamp: int = 0  # tagged 0 (KIP-1263)


@dataclass(frozen=True, slots=True)
class TopicPartitions:
    """ConsumerGroupTargetAssignmentMemberValue.TopicPartition."""

    topic_id: uuid.UUID
    partitions: tuple[int, ...]


@dataclass(frozen=True, slots=True)
class ConsumerGroupTargetAssignmentMemberValue:
    RECORD_TYPE: ClassVar[RecordType] = RecordType.CONSUMER_GROUP_TARGET_ASSIGNMENT_MEMBER
    topic_partitions: tuple[TopicPartitions, ...]


@dataclass(frozen=True, slots=True)
class TopicPartitionsWithEpochs:
    """ConsumerGroupCurrentMemberAssignmentValue.TopicPartitions; ``assignment_epochs`` is
    the KIP-1251 tagged field (tag 0), aligned with ``partitions`` when present."""

    topic_id: uuid.UUID
    partitions: tuple[int, ...]
    assignment_epochs: tuple[int, ...] | None = None


@dataclass(frozen=True, slots=True)
class ConsumerGroupCurrentMemberAssignmentValue:
    RECORD_TYPE: ClassVar[RecordType] = RecordType.CONSUMER_GROUP_CURRENT_MEMBER_ASSIGNMENT
    member_epoch: int
    previous_member_epoch: int
    state: int
    assigned_partitions: tuple[TopicPartitionsWithEpochs, ...]
    partitions_pending_revocation: tuple[TopicPartitionsWithEpochs, ...]


@dataclass(frozen=True, slots=True)
class ConsumerGroupRegularExpressionValue:
    RECORD_TYPE: ClassVar[RecordType] = RecordType.CONSUMER_GROUP_REGULAR_EXPRESSION
    topics: tuple[str, ...]
    version: int
    timestamp: int


Key: TypeAlias = (
    OffsetCommitKey
    | GroupMetadataKey
    | ConsumerGroupMetadataKey
    | ConsumerGroupPartitionMetadataKey
    | ConsumerGroupMemberMetadataKey
    | ConsumerGroupTargetAssignmentMetadataKey
    | ConsumerGroupTargetAssignmentMemberKey
    | ConsumerGroupCurrentMemberAssignmentKey
    | ConsumerGroupRegularExpressionKey
)
Value: TypeAlias = (
    OffsetCommitValue
    | GroupMetadataValue
    | ConsumerGroupMetadataValue
    | ConsumerGroupPartitionMetadataValue
    | ConsumerGroupMemberMetadataValue
    | ConsumerGroupTargetAssignmentMetadataValue
    | ConsumerGroupTargetAssignmentMemberValue
    | ConsumerGroupCurrentMemberAssignmentValue
    | ConsumerGroupRegularExpressionValue
)

# --------------------------------------------------------------------------------------------
# Primitives

_I8 = struct.Struct(">b")
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

_MAX_STRING = 0x7FFF
_ZERO_UUID: Final = uuid.UUID(int=0)
_ZERO_UUID_BYTES: Final = bytes(16)
_DECODE_ERRORS = (struct.error, IndexError, UnicodeDecodeError)
_SMALL_UVARINTS = tuple(bytes((i,)) for i in range(0x80))


def _uvarint(n: int) -> bytes:
    if n < 0x80:
        return _SMALL_UVARINTS[n]
    out = bytearray()
    while n >= 0x80:
        out.append((n & 0x7F) | 0x80)
        n >>= 7
    out.append(n)
    return bytes(out)


def _read_uvarint(buf: bytes, pos: int) -> tuple[int, int]:
    """Kafka's unsigned varint (at most 5 bytes); IndexError when truncated."""
    b = buf[pos]
    pos += 1
    if b < 0x80:
        return b, pos
    value = b & 0x7F
    shift = 7
    while True:
        b = buf[pos]
        pos += 1
        value |= (b & 0x7F) << shift
        if b < 0x80:
            return value, pos
        shift += 7
        if shift > 28:
            raise MalformedRecord("unsigned varint longer than 5 bytes")


@functools.lru_cache(maxsize=512)
def _int32s(n: int) -> struct.Struct:
    return struct.Struct(f">{n}i")


_uuid_memo: dict[bytes, uuid.UUID] = {}
_UUID_MEMO_SIZE = 4096


def _uuid(raw: bytes) -> uuid.UUID:
    """UUID from 16 bytes; memoised because topic ids repeat and UUID() costs ~1 us."""
    u = _uuid_memo.get(raw)
    if u is None:
        if len(raw) != 16:
            raise MalformedRecord("uuid truncated")
        u = uuid.UUID(bytes=raw)
        if len(_uuid_memo) >= _UUID_MEMO_SIZE:
            _uuid_memo.clear()
        _uuid_memo[raw] = u
    return u


def _get_str(buf: bytes, pos: int, flexible: bool) -> tuple[str, int]:
    if flexible:
        n, pos = _read_uvarint(buf, pos)
        n -= 1
    else:
        (n,) = _I16.unpack_from(buf, pos)
        pos += 2
    if n < 0:
        raise MalformedRecord("null in a non-nullable string")
    end = pos + n
    if n > _MAX_STRING or end > len(buf):
        raise MalformedRecord("string overlong or truncated")
    return buf[pos:end].decode(), end


def _get_nstr(buf: bytes, pos: int, flexible: bool) -> tuple[str | None, int]:
    if flexible:
        n, pos = _read_uvarint(buf, pos)
        n -= 1
    else:
        (n,) = _I16.unpack_from(buf, pos)
        pos += 2
    if n < 0:
        return None, pos
    end = pos + n
    if n > _MAX_STRING or end > len(buf):
        raise MalformedRecord("string overlong or truncated")
    return buf[pos:end].decode(), end


def _get_bytes(buf: bytes, pos: int, flexible: bool) -> tuple[bytes, int]:
    if flexible:
        n, pos = _read_uvarint(buf, pos)
        n -= 1
    else:
        (n,) = _I32.unpack_from(buf, pos)
        pos += 4
    if n < 0:
        raise MalformedRecord("null in non-nullable bytes")
    end = pos + n
    if end > len(buf):
        raise MalformedRecord("bytes truncated")
    return buf[pos:end], end


def _get_count(buf: bytes, pos: int, flexible: bool) -> tuple[int, int]:
    """An array length (-1 = null); rejects counts larger than the bytes left, as Kafka does."""
    if flexible:
        n, pos = _read_uvarint(buf, pos)
        n -= 1
    else:
        (n,) = _I32.unpack_from(buf, pos)
        pos += 4
    if n > len(buf) - pos:
        raise MalformedRecord(f"array of {n} elements in {len(buf) - pos} bytes")
    return n, pos


def _skip_tags(buf: bytes, pos: int) -> int:
    count, pos = _read_uvarint(buf, pos)
    for _ in range(count):
        _tag, pos = _read_uvarint(buf, pos)
        size, pos = _read_uvarint(buf, pos)
        pos += size
    if pos > len(buf):
        raise MalformedRecord("tagged field truncated")
    return pos


def _put_str(out: list[bytes], s: str, flexible: bool) -> None:
    raw = s.encode()
    if len(raw) > _MAX_STRING:
        raise ValueError(f"string of {len(raw)} bytes exceeds {_MAX_STRING}")
    out.append(_uvarint(len(raw) + 1) if flexible else _I16.pack(len(raw)))
    out.append(raw)


def _put_nstr(out: list[bytes], s: str | None, flexible: bool) -> None:
    if s is None:
        out.append(b"\x00" if flexible else b"\xff\xff")
    else:
        _put_str(out, s, flexible)


def _put_bytes(out: list[bytes], b: bytes, flexible: bool) -> None:
    out.append(_uvarint(len(b) + 1) if flexible else _I32.pack(len(b)))
    out.append(b)


def _put_count(out: list[bytes], n: int, flexible: bool) -> None:
    out.append(_uvarint(n + 1) if flexible else _I32.pack(n))


# --------------------------------------------------------------------------------------------
# Generic schema-driven codec

_Reader: TypeAlias = Callable[[bytes, int], tuple[Any, int]]
_Writer: TypeAlias = Callable[[Any, list[bytes]], None]
_Json: TypeAlias = dict[str, Any]

_FIXED_FORMATS: Final = {
    "int8": ">b",
    "int16": ">h",
    "uint16": ">H",
    "int32": ">i",
    "uint32": ">I",
    "int64": ">q",
    "float64": ">d",
    "bool": ">?",
}
_COMMENTS = re.compile(r'("(?:\\.|[^"\\])*")|//[^\n]*|/\*.*?\*/', re.DOTALL)
_SNAKE = re.compile(r"(?<=[a-z0-9])(?=[A-Z])")
_REQUIRED: Final = object()
_NO_NORMALISATION: Final = object()


def _snake(name: str) -> str:
    return _SNAKE.sub("_", name).lower()


@dataclass(frozen=True, slots=True)
class _Versions:
    lo: int
    hi: int

    @classmethod
    def parse(cls, spec: str | None) -> _Versions:
        if spec is None or spec == "none":
            return cls(0, -1)
        if spec.endswith("+"):
            return cls(int(spec[:-1]), 0x7FFF)
        lo, _, hi = spec.partition("-")
        return cls(int(lo), int(hi or lo))

    def __contains__(self, version: object) -> bool:
        return isinstance(version, int) and self.lo <= version <= self.hi


def _load_schema(name: str) -> _Json:
    text = resources.files(__package__ or "groupcoord.protocol").joinpath("schemas", f"{name}.json")
    raw = text.read_text(encoding="utf-8")
    return cast(_Json, json.loads(_COMMENTS.sub(lambda m: m.group(1) or "", raw)))


def _schema_default(f: _Json) -> Any:
    t: str = f["type"]
    d = f.get("default", _REQUIRED)
    if d is None or d == "null":
        return None
    if t.startswith("[]"):
        return ()
    if t in _FIXED_FORMATS:
        if d is _REQUIRED:
            return False if t == "bool" else 0
        if t == "bool":
            return d is True or d == "true"
        return int(d, 0) if isinstance(d, str) else int(d)
    if t == "string":
        return d if isinstance(d, str) else ""
    if t == "bytes":
        return b""
    if t == "uuid":
        return _ZERO_UUID
    return _REQUIRED  # a struct: no generic default


def _fixed_codec(fmt: str) -> tuple[_Reader, _Writer]:
    st = struct.Struct(fmt)
    unpack, pack, size = st.unpack_from, st.pack, st.size

    def read(buf: bytes, pos: int) -> tuple[Any, int]:
        return unpack(buf, pos)[0], pos + size

    def write(v: Any, out: list[bytes]) -> None:
        out.append(pack(v))

    return read, write


def _read_uuid(buf: bytes, pos: int) -> tuple[Any, int]:
    return _uuid(buf[pos : pos + 16]), pos + 16


def _write_uuid(v: Any, out: list[bytes]) -> None:
    out.append(cast(uuid.UUID, v).bytes)


def _string_codec(nullable: bool, flexible: bool, what: str) -> tuple[_Reader, _Writer]:
    def read(buf: bytes, pos: int) -> tuple[Any, int]:
        s, pos = _get_nstr(buf, pos, flexible)
        if s is None and not nullable:
            raise MalformedRecord(f"{what}: null in a non-nullable field")
        return s, pos

    def write(v: Any, out: list[bytes]) -> None:
        if v is None and not nullable:
            raise ValueError(f"{what} is not nullable")
        _put_nstr(out, v, flexible)

    return read, write


def _bytes_codec(nullable: bool, flexible: bool, what: str) -> tuple[_Reader, _Writer]:
    def read(buf: bytes, pos: int) -> tuple[Any, int]:
        if flexible:
            n, pos = _read_uvarint(buf, pos)
            n -= 1
        else:
            (n,) = _I32.unpack_from(buf, pos)
            pos += 4
        if n < 0:
            if nullable:
                return None, pos
            raise MalformedRecord(f"{what}: null in a non-nullable field")
        end = pos + n
        if end > len(buf):
            raise MalformedRecord(f"{what}: truncated")
        return buf[pos:end], end

    def write(v: Any, out: list[bytes]) -> None:
        if v is None:
            if not nullable:
                raise ValueError(f"{what} is not nullable")
            out.append(b"\x00" if flexible else b"\xff\xff\xff\xff")
        else:
            _put_bytes(out, bytes(v), flexible)

    return read, write


def _array_codec(
    elem: tuple[_Reader, _Writer] | None, nullable: bool, flexible: bool, what: str
) -> tuple[_Reader, _Writer]:
    """An array; ``elem`` None means int32 elements, read and written in one struct call."""

    def read(buf: bytes, pos: int) -> tuple[Any, int]:
        n, pos = _get_count(buf, pos, flexible)
        if n < 0:
            if nullable:
                return None, pos
            raise MalformedRecord(f"{what}: null in a non-nullable field")
        if elem is None:
            return _int32s(n).unpack_from(buf, pos), pos + 4 * n
        read_elem = elem[0]
        items = []
        for _ in range(n):
            item, pos = read_elem(buf, pos)
            items.append(item)
        return tuple(items), pos

    def write(v: Any, out: list[bytes]) -> None:
        if v is None:
            if not nullable:
                raise ValueError(f"{what} is not nullable")
            out.append(b"\x00" if flexible else b"\xff\xff\xff\xff")
            return
        _put_count(out, len(v), flexible)
        if elem is None:
            out.append(_int32s(len(v)).pack(*v))
        else:
            write_elem = elem[1]
            for item in v:
                write_elem(item, out)

    return read, write


def _struct_field_codec(
    inner: tuple[_Reader, _Writer], nullable: bool, tagged: bool, what: str
) -> tuple[_Reader, _Writer]:
    """A struct-typed field: nullable ones carry a marker (int8, or uvarint when tagged)."""
    read_inner, write_inner = inner
    if not nullable:
        return inner

    def read(buf: bytes, pos: int) -> tuple[Any, int]:
        if tagged:
            marker, pos = _read_uvarint(buf, pos)
            present = marker > 0
        else:
            present = _I8.unpack_from(buf, pos)[0] >= 0
            pos += 1
        if not present:
            return None, pos
        return read_inner(buf, pos)

    def write(v: Any, out: list[bytes]) -> None:
        if v is None:
            out.append(b"\x00" if tagged else b"\xff")
        else:
            out.append(b"\x01")
            write_inner(v, out)

    return read, write


class _Compiler:
    """Compiles one schema at one version into closures over dataclasses."""

    def __init__(self, schema: _Json, classes: Mapping[str, type], version: int) -> None:
        self.schema = schema
        self.classes = classes
        self.version = version
        self.flexible = version in _Versions.parse(schema["flexibleVersions"])
        self.common = {s["name"]: s["fields"] for s in schema.get("commonStructs", [])}

    def message(self) -> tuple[_Reader, _Writer]:
        return self.struct(self.schema["name"], self.schema["fields"])

    def struct(self, struct_name: str, fields_json: list[_Json]) -> tuple[_Reader, _Writer]:
        cls = self.classes[struct_name]
        where = f"{self.schema['name']} v{self.version} {struct_name}"
        dc_fields = dataclasses.fields(cast(Any, cls))
        index = {f.name: i for i, f in enumerate(dc_fields)}
        base: list[Any] = [
            _REQUIRED if f.default is dataclasses.MISSING else f.default for f in dc_fields
        ]
        seq_read: list[tuple[int, _Reader]] = []
        seq_write: list[tuple[str, _Writer]] = []
        tag_read: dict[int, tuple[int, _Reader, Any]] = {}
        tag_write: list[tuple[int, str, _Writer, Any]] = []
        absent: list[tuple[str, Any]] = []
        version, flexible = self.version, self.flexible
        for f in fields_json:
            name = _snake(f["name"])
            if name not in index:
                raise TypeError(f"{where}: {cls.__name__} has no field {name}")
            i = index[name]
            present = version in _Versions.parse(f["versions"])
            tagged = flexible and version in _Versions.parse(f.get("taggedVersions"))
            nullable = version in _Versions.parse(f.get("nullableVersions"))
            if not present or tagged:
                if base[i] is _REQUIRED:
                    raise TypeError(f"{where}: {cls.__name__}.{name} needs a default")
            if not present:
                if not f.get("ignorable", False):
                    absent.append((name, base[i]))
                continue
            codec = self.field(f, nullable, tagged, f"{where}.{name}")
            if tagged:
                default = _schema_default(f)
                # None stands for the schema default where the Python field is optional but
                # the schema's is not (OffsetCommitValue.topic_id: absent = ZERO_UUID).
                norm = default if base[i] is None and default is not None else _NO_NORMALISATION
                tag_read[int(f["tag"])] = (i, codec[0], norm)
                tag_write.append((int(f["tag"]), name, codec[1], default))
            else:
                seq_read.append((i, codec[0]))
                seq_write.append((name, codec[1]))
        unread = [dc_fields[i].name for i, v in enumerate(base) if v is _REQUIRED]
        unread = [n for n in unread if n not in {_snake(f["name"]) for f in fields_json}]
        if unread:
            raise TypeError(f"{where}: {cls.__name__} fields {unread} are not in the schema")
        tag_write.sort(key=lambda t: t[0])
        new: Callable[..., Any] = fast_new(cls)

        def read(buf: bytes, pos: int) -> tuple[Any, int]:
            vals = base.copy()
            for i, read_field in seq_read:
                vals[i], pos = read_field(buf, pos)
            if flexible:
                count, pos = _read_uvarint(buf, pos)
                for _ in range(count):
                    tag, pos = _read_uvarint(buf, pos)
                    size, pos = _read_uvarint(buf, pos)
                    end = pos + size
                    if end > len(buf):
                        raise MalformedRecord(f"{where}: tagged field {tag} truncated")
                    known = tag_read.get(tag)
                    if known is not None:
                        i, read_field, norm = known
                        value, field_end = read_field(buf, pos)
                        if field_end != end:
                            raise MalformedRecord(f"{where}: tagged field {tag} size mismatch")
                        vals[i] = None if value == norm else value
                    pos = end
            return new(*vals), pos

        def write(obj: Any, out: list[bytes]) -> None:
            for name, write_field in seq_write:
                write_field(getattr(obj, name), out)
            for name, default in absent:
                if getattr(obj, name) != default:
                    raise ValueError(f"{where}: {name} cannot be written at this version")
            if flexible:
                fields_out: list[bytes] = []
                for tag, name, write_field, default in tag_write:
                    value = getattr(obj, name)
                    if value is None or (default is not None and value == default):
                        continue
                    data: list[bytes] = []
                    write_field(value, data)
                    payload = b"".join(data)
                    fields_out += (_uvarint(tag), _uvarint(len(payload)), payload)
                out.append(_uvarint(len(fields_out) // 3))
                out += fields_out

        return read, write

    def field(self, f: _Json, nullable: bool, tagged: bool, what: str) -> tuple[_Reader, _Writer]:
        t: str = f["type"]
        if t.startswith("[]"):
            element = t[2:]
            if element == "int32":
                return _array_codec(None, nullable, self.flexible, what)
            return _array_codec(self.element(element, f, what), nullable, self.flexible, what)
        if t in _FIXED_FORMATS or t in ("uuid", "string", "bytes"):
            return self.element(t, f, what, nullable)
        inner = self.struct(t, f.get("fields") or self.common[t])
        return _struct_field_codec(inner, nullable, tagged, what)

    def element(
        self, t: str, f: _Json, what: str, nullable: bool = False
    ) -> tuple[_Reader, _Writer]:
        if t in _FIXED_FORMATS:
            return _fixed_codec(_FIXED_FORMATS[t])
        if t == "uuid":
            return _read_uuid, _write_uuid
        if t == "string":
            return _string_codec(nullable, self.flexible, what)
        if t == "bytes":
            return _bytes_codec(nullable, self.flexible, what)
        return self.struct(t, f.get("fields") or self.common[t])


# Schema file name -> {struct name in that schema: dataclass}; the top-level struct is named
# after the schema.
_SCHEMAS: Final[dict[str, dict[str, type]]] = {
    "LegacyOffsetCommitKey": {"LegacyOffsetCommitKey": OffsetCommitKey},
    "LegacyOffsetCommitValue": {"LegacyOffsetCommitValue": OffsetCommitValue},
    "OffsetCommitKey": {"OffsetCommitKey": OffsetCommitKey},
    "OffsetCommitValue": {"OffsetCommitValue": OffsetCommitValue},
    "GroupMetadataKey": {"GroupMetadataKey": GroupMetadataKey},
    "GroupMetadataValue": {
        "GroupMetadataValue": GroupMetadataValue,
        "MemberMetadata": MemberMetadata,
    },
    "ConsumerGroupMetadataKey": {"ConsumerGroupMetadataKey": ConsumerGroupMetadataKey},
    "ConsumerGroupMetadataValue": {"ConsumerGroupMetadataValue": ConsumerGroupMetadataValue},
    "ConsumerGroupPartitionMetadataKey": {
        "ConsumerGroupPartitionMetadataKey": ConsumerGroupPartitionMetadataKey
    },
    "ConsumerGroupPartitionMetadataValue": {
        "ConsumerGroupPartitionMetadataValue": ConsumerGroupPartitionMetadataValue,
        "TopicMetadata": TopicMetadata,
        "PartitionMetadata": PartitionMetadata,
    },
    "ConsumerGroupMemberMetadataKey": {
        "ConsumerGroupMemberMetadataKey": ConsumerGroupMemberMetadataKey
    },
    "ConsumerGroupMemberMetadataValue": {
        "ConsumerGroupMemberMetadataValue": ConsumerGroupMemberMetadataValue,
        "ClassicMemberMetadata": ClassicMemberMetadata,
        "ClassicProtocol": ClassicProtocol,
    },
    "ConsumerGroupTargetAssignmentMetadataKey": {
        "ConsumerGroupTargetAssignmentMetadataKey": ConsumerGroupTargetAssignmentMetadataKey
    },
    "ConsumerGroupTargetAssignmentMetadataValue": {
        "ConsumerGroupTargetAssignmentMetadataValue": ConsumerGroupTargetAssignmentMetadataValue
    },
    "ConsumerGroupTargetAssignmentMemberKey": {
        "ConsumerGroupTargetAssignmentMemberKey": ConsumerGroupTargetAssignmentMemberKey
    },
    "ConsumerGroupTargetAssignmentMemberValue": {
        "ConsumerGroupTargetAssignmentMemberValue": ConsumerGroupTargetAssignmentMemberValue,
        "TopicPartition": TopicPartitions,
    },
    "ConsumerGroupCurrentMemberAssignmentKey": {
        "ConsumerGroupCurrentMemberAssignmentKey": ConsumerGroupCurrentMemberAssignmentKey
    },
    "ConsumerGroupCurrentMemberAssignmentValue": {
        "ConsumerGroupCurrentMemberAssignmentValue": ConsumerGroupCurrentMemberAssignmentValue,
        "TopicPartitions": TopicPartitionsWithEpochs,
    },
    "ConsumerGroupRegularExpressionKey": {
        "ConsumerGroupRegularExpressionKey": ConsumerGroupRegularExpressionKey
    },
    "ConsumerGroupRegularExpressionValue": {
        "ConsumerGroupRegularExpressionValue": ConsumerGroupRegularExpressionValue
    },
}

# record type -> (reader, writer) of the key struct at version 0.
_GENERIC_KEYS: dict[int, tuple[_Reader, _Writer]] = {}
# record type -> value version -> (reader, writer) of the value struct.
_GENERIC_VALUES: dict[int, dict[int, tuple[_Reader, _Writer]]] = {}


def _compile_all() -> None:
    for name, classes in _SCHEMAS.items():
        schema = _load_schema(name)
        api_key = int(schema["apiKey"])
        valid = _Versions.parse(schema["validVersions"])
        if schema["type"] == "coordinator-key":
            _GENERIC_KEYS[api_key] = _Compiler(schema, classes, 0).message()
        else:
            _GENERIC_VALUES[api_key] = {
                v: _Compiler(schema, classes, v).message() for v in range(valid.lo, valid.hi + 1)
            }


_compile_all()


def _generic_decode_key(data: bytes) -> Key:
    """The schema-driven key decoder (the fast paths are checked against it)."""
    try:
        (record_type,) = _I16.unpack_from(data, 0)
        codec = _GENERIC_KEYS.get(record_type)
        if codec is None:
            raise UnknownRecordType(record_type)
        key, pos = codec[0](data, 2)
    except _DECODE_ERRORS as e:
        raise MalformedRecord(f"coordinator key: {e}") from e
    if pos != len(data):
        raise MalformedRecord(f"coordinator key: {len(data) - pos} trailing bytes")
    return cast(Key, key)


def _generic_encode_key(key: Key) -> bytes:
    out = [_I16.pack(key.RECORD_TYPE)]
    _GENERIC_KEYS[key.RECORD_TYPE][1](key, out)
    return b"".join(out)


def _generic_decode_value(record_type: int, data: bytes) -> Value:
    versions = _GENERIC_VALUES.get(record_type)
    if versions is None:
        raise UnknownRecordType(record_type)
    try:
        (version,) = _I16.unpack_from(data, 0)
        codec = versions.get(version)
        if codec is None:
            raise UnsupportedRecordVersion(f"record type {record_type} value version {version}")
        value, pos = codec[0](data, 2)
    except _DECODE_ERRORS as e:
        raise MalformedRecord(f"record type {record_type} value: {e}") from e
    if pos != len(data):
        raise MalformedRecord(f"record type {record_type} value: {len(data) - pos} trailing bytes")
    return cast(Value, value)


def _generic_encode_value(value: Value, version: int) -> bytes:
    versions = _GENERIC_VALUES[value.RECORD_TYPE]
    if version not in versions:
        raise UnsupportedRecordVersion(f"{type(value).__name__} has no version {version}")
    out = [_I16.pack(version)]
    versions[version][1](value, out)
    return b"".join(out)


# --------------------------------------------------------------------------------------------
# Fast paths

new_offset_commit_key = fast_new(OffsetCommitKey)
_new_group_metadata_key = fast_new(GroupMetadataKey)
new_offset_commit_value = fast_new(OffsetCommitValue)
_new_group_metadata_value = fast_new(GroupMetadataValue)
_new_member_metadata = fast_new(MemberMetadata)


def _decode_offset_commit_key(data: bytes) -> OffsetCommitKey:
    return new_offset_commit_key(*offset_commit_key_fields(data))


def _decode_group_metadata_key(data: bytes) -> GroupMetadataKey:
    try:
        _, n = _HH.unpack_from(data, 0)
        group = data[4:].decode()
    except _DECODE_ERRORS as e:
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
    except _DECODE_ERRORS as e:
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
            return offset, leader_epoch, "", commit, -1, raw if raw != _ZERO_UUID_BYTES else None
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
                    raw = data[q + 11 :] if tagged else _ZERO_UUID_BYTES
                    return (
                        offset,
                        leader_epoch,
                        metadata,
                        commit,
                        -1,
                        raw if raw != _ZERO_UUID_BYTES else None,
                    )
    value = _decode_offset_commit_value(data)
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


def _encode_offset_commit_key(key: OffsetCommitKey) -> bytes:
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


def _encode_group_metadata_key(key: GroupMetadataKey) -> bytes:
    g = key.group.encode()
    return _HH.pack(2, len(g)) + g


def _decode_offset_commit_value(data: bytes) -> OffsetCommitValue:
    size = len(data)
    try:
        version = data[0] << 8 | data[1]
        if version == 4:
            # Whole-record shapes first: empty metadata (what clients usually commit), with
            # no tagged field or with just the topic id. One unpack call each.
            if size == 42 and data[14] == 1 and data[23:26] == b"\x01\x00\x10":
                _, offset, leader_epoch, _, commit, _, raw = _OCV4_TOPIC_ID.unpack(data)
                topic_id = _uuid(raw) if raw != _ZERO_UUID_BYTES else None
                return new_offset_commit_value(offset, leader_epoch, "", commit, -1, topic_id)
            if size == 24 and data[14] == 1 and data[23] == 0:
                _, offset, leader_epoch, _, commit, _ = _OCV4_BARE.unpack(data)
                return new_offset_commit_value(offset, leader_epoch, "", commit, -1, None)
            _, offset, leader_epoch = _HQI.unpack_from(data, 0)
            n = data[14]
            if n < 0x80:
                p = 15
            else:
                n, p = _read_uvarint(data, 14)
            n -= 1
            q = p + n
            metadata = data[p:q].decode() if n > 0 else ""
            (commit,) = _I64.unpack_from(data, q)
            p = q + 9
            topic_id = None
            if data[q + 8]:  # tagged fields
                count, p = _read_uvarint(data, q + 8)
                for _ in range(count):
                    tag, p = _read_uvarint(data, p)
                    field_size, p = _read_uvarint(data, p)
                    if tag == 0:
                        raw = data[p : p + 16]
                        if field_size != 16 or len(raw) != 16:
                            raise MalformedRecord("OffsetCommitValue: topicId size")
                        topic_id = _uuid(raw) if raw != _ZERO_UUID_BYTES else None
                    p += field_size
            if n < 0 or n > _MAX_STRING or p != size:
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
    except _DECODE_ERRORS as e:
        raise MalformedRecord(f"OffsetCommitValue: {e}") from e
    if version & 0x8000:
        version -= 0x10000
    raise UnsupportedRecordVersion(f"OffsetCommitValue version {version}")


def _encode_offset_commit_value(value: OffsetCommitValue, version: int) -> bytes:
    md = value.metadata.encode()
    n = len(md)
    if n > _MAX_STRING:
        raise ValueError(f"OffsetCommitValue.metadata of {n} bytes exceeds {_MAX_STRING}")
    if version == 4:
        tagged = b"\x00"
        topic_id = value.topic_id
        if topic_id is not None and topic_id.int:  # (not UUID.__eq__: Python code)
            tagged = b"\x01\x00\x10" + topic_id.int.to_bytes(16)  # UUID.bytes, inlined
        return b"".join(
            (
                _HQI.pack(4, value.offset, value.leader_epoch),
                _SMALL_UVARINTS[n + 1] if n < 0x7F else _uvarint(n + 1),
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


def _decode_group_metadata_value(data: bytes) -> GroupMetadataValue:
    try:
        (version,) = _I16.unpack_from(data, 0)
        if not 0 <= version <= 4:
            raise UnsupportedRecordVersion(f"GroupMetadataValue version {version}")
        flex = version >= 4
        protocol_type, p = _get_str(data, 2, flex)
        (generation,) = _I32.unpack_from(data, p)
        protocol, p = _get_nstr(data, p + 4, flex)
        leader, p = _get_nstr(data, p, flex)
        timestamp = -1
        if version >= 2:
            (timestamp,) = _I64.unpack_from(data, p)
            p += 8
        count, p = _get_count(data, p, flex)
        if count < 0:
            raise MalformedRecord("GroupMetadataValue: null members")
        members = []
        for _ in range(count):
            member_id, p = _get_str(data, p, flex)
            instance_id = None
            if version >= 3:
                instance_id, p = _get_nstr(data, p, flex)
            client_id, p = _get_str(data, p, flex)
            client_host, p = _get_str(data, p, flex)
            rebalance_timeout = -1
            if version >= 1:
                (rebalance_timeout,) = _I32.unpack_from(data, p)
                p += 4
            (session_timeout,) = _I32.unpack_from(data, p)
            subscription, p = _get_bytes(data, p + 4, flex)
            assignment, p = _get_bytes(data, p, flex)
            if flex:
                p = _skip_tags(data, p)
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
            p = _skip_tags(data, p)
    except _DECODE_ERRORS as e:
        raise MalformedRecord(f"GroupMetadataValue: {e}") from e
    if p != len(data):
        raise MalformedRecord(f"GroupMetadataValue: {len(data) - p} trailing bytes")
    return _new_group_metadata_value(
        protocol_type, generation, protocol, leader, timestamp, tuple(members)
    )


def _encode_group_metadata_value(value: GroupMetadataValue, version: int) -> bytes:
    if not 0 <= version <= 4:
        raise UnsupportedRecordVersion(f"GroupMetadataValue has no version {version}")
    flex = version >= 4
    out = [_I16.pack(version)]
    _put_str(out, value.protocol_type, flex)
    out.append(_I32.pack(value.generation))
    _put_nstr(out, value.protocol, flex)
    _put_nstr(out, value.leader, flex)
    if version >= 2:
        out.append(_I64.pack(value.current_state_timestamp))
    _put_count(out, len(value.members), flex)
    for m in value.members:
        _put_str(out, m.member_id, flex)
        if version >= 3:
            _put_nstr(out, m.group_instance_id, flex)
        _put_str(out, m.client_id, flex)
        _put_str(out, m.client_host, flex)
        if version >= 1:
            out.append(_I32.pack(m.rebalance_timeout))
        out.append(_I32.pack(m.session_timeout))
        _put_bytes(out, m.subscription, flex)
        _put_bytes(out, m.assignment, flex)
        if flex:
            out.append(b"\x00")
    if flex:
        out.append(b"\x00")
    return b"".join(out)


# --------------------------------------------------------------------------------------------
# Public API


def _generic_key_decoder(data: bytes) -> Key:
    return _generic_decode_key(data)


def _generic_value_decoder(record_type: int) -> Callable[[bytes], Value]:
    def decode(data: bytes) -> Value:
        return _generic_decode_value(record_type, data)

    return decode


_KEY_DECODERS: Final[dict[int, Callable[[bytes], Key]]] = {
    t: _generic_key_decoder for t in _GENERIC_KEYS
}
_KEY_DECODERS[int(RecordType.LEGACY_OFFSET_COMMIT)] = _decode_offset_commit_key
_KEY_DECODERS[int(RecordType.OFFSET_COMMIT)] = _decode_offset_commit_key
_KEY_DECODERS[int(RecordType.GROUP_METADATA)] = _decode_group_metadata_key

_VALUE_DECODERS: Final[dict[int, Callable[[bytes], Value]]] = {
    t: _generic_value_decoder(t) for t in _GENERIC_VALUES
}
_VALUE_DECODERS[int(RecordType.LEGACY_OFFSET_COMMIT)] = _decode_offset_commit_value
_VALUE_DECODERS[int(RecordType.OFFSET_COMMIT)] = _decode_offset_commit_value
_VALUE_DECODERS[int(RecordType.GROUP_METADATA)] = _decode_group_metadata_value

_KEY_ENCODERS: Final[dict[type, Callable[[Any], bytes]]] = {
    cls: _generic_encode_key
    for classes in _SCHEMAS.values()
    for cls in classes.values()
    if cls.__name__.endswith("Key")
}
_KEY_ENCODERS[OffsetCommitKey] = _encode_offset_commit_key
_KEY_ENCODERS[GroupMetadataKey] = _encode_group_metadata_key

_VALUE_ENCODERS: Final[dict[type, Callable[[Any, int], bytes]]] = {
    cls: _generic_encode_value
    for name, classes in _SCHEMAS.items()
    if name.endswith("Value") and not name.startswith("Legacy")
    for cls in classes.values()
    if cls.__name__ == name
}
_VALUE_ENCODERS[OffsetCommitValue] = _encode_offset_commit_value
_VALUE_ENCODERS[GroupMetadataValue] = _encode_group_metadata_value

# Decoded keys by their bytes. A log that is not yet compacted commits the same few keys over
# and over: a hit costs a dict lookup instead of a decode. A compacted one holds each key about
# once, and memoising those only keeps objects alive for the GC to walk (it slowed a run of
# distinct keys by a third), so when a filled memo served fewer hits than it stored keys,
# memoising pauses for _KEY_MEMO_PAUSE decodes before trying again.
_key_memo: dict[bytes, Key] = {}
_KEY_MEMO_SIZE = 16384
_KEY_MEMO_PAUSE = 16 * _KEY_MEMO_SIZE
_key_memo_hits = 0
_key_memo_paused = 0


def _key_memo_reset() -> None:
    global _key_memo_hits, _key_memo_paused
    _key_memo.clear()
    _key_memo_hits = _key_memo_paused = 0


def _key_memo_miss(data: bytes) -> Key:
    global _key_memo_hits, _key_memo_paused
    key = _decode_key_uncached(data)
    if _key_memo_paused:
        _key_memo_paused -= 1
        return key
    if len(_key_memo) >= _KEY_MEMO_SIZE:
        if _key_memo_hits < _KEY_MEMO_SIZE:
            _key_memo_paused = _KEY_MEMO_PAUSE
        _key_memo.clear()
        _key_memo_hits = 0
        if _key_memo_paused:
            return key
    _key_memo[data] = key
    return key


def _decode_key_uncached(data: bytes) -> Key:
    if len(data) < 2:
        raise MalformedRecord("coordinator key shorter than its record type")
    record_type = data[0] << 8 | data[1]
    decode = _KEY_DECODERS.get(record_type)
    if decode is None:
        raise UnknownRecordType(record_type - 0x10000 if record_type & 0x8000 else record_type)
    return decode(data)


def decode_key(data: bytes) -> Key:
    """Decode key bytes. Legacy type 0 keys decode to ``OffsetCommitKey``.

    Raises ``UnknownRecordType`` (skip the record) or ``MalformedRecord``.
    """
    global _key_memo_hits
    key = _key_memo.get(data)
    if key is None:
        return _key_memo_miss(data)
    _key_memo_hits += 1
    return key


def decode_value(record_type: int, data: bytes | None) -> Value | None:
    """Decode the value of a record of ``record_type``; None (a tombstone) stays None.

    Raises ``UnknownRecordType``, ``UnsupportedRecordVersion`` or ``MalformedRecord``.
    """
    decode = _VALUE_DECODERS.get(record_type)
    if decode is None:
        raise UnknownRecordType(record_type)
    if data is None:
        return None
    return decode(data)


def decode_record(key: bytes, value: bytes | None) -> tuple[Key, Value | None]:
    """``decode_key`` and ``decode_value`` in one call, for loading a log."""
    global _key_memo_hits
    k = _key_memo.get(key)
    if k is None:
        k = _key_memo_miss(key)
    else:
        _key_memo_hits += 1
    if value is None:
        return k, None
    return k, _VALUE_DECODERS[k.RECORD_TYPE.value](value)


def encode_key(key: Key) -> bytes:
    """Record type (int16) + key struct at version 0. Offset commit keys are written as type 1."""
    encode = _KEY_ENCODERS.get(type(key))
    if encode is None:
        raise TypeError(f"not a coordinator record key: {type(key).__name__}")
    try:
        return encode(key)
    except struct.error as e:
        raise ValueError(f"{type(key).__name__}: {e}") from e


def default_value_version(value: Value) -> int:
    """The version Kafka trunk writes: OffsetCommitValue v4, or v1 when it has an expire
    timestamp (v1 alone carries one); GroupMetadataValue v3; the others their latest."""
    if isinstance(value, OffsetCommitValue):
        return 1 if value.expire_timestamp != -1 else 4
    if isinstance(value, GroupMetadataValue):
        return 3
    return max(_GENERIC_VALUES[value.RECORD_TYPE])


def encode_value(value: Value, version: int | None = None) -> bytes:
    """Value version (int16) + value struct, at ``version`` or ``default_value_version``.

    Fields the version lacks are dropped if the schema marks them ignorable (as Kafka does);
    otherwise a non-default value there raises ValueError.
    """
    encode = _VALUE_ENCODERS.get(type(value))
    if encode is None:
        raise TypeError(f"not a coordinator record value: {type(value).__name__}")
    if version is None:
        if type(value) is OffsetCommitValue:  # default_value_version, inlined: every commit
            version = 1 if value.expire_timestamp != -1 else 4
        else:
            version = default_value_version(value)
    try:
        return encode(value, version)
    except struct.error as e:
        raise ValueError(f"{type(value).__name__}: {e}") from e
