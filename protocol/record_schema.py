"""The generic coordinator record codec, compiled at import from Kafka's JSON schemas in
``schemas/`` (copies of Kafka's, see its NOTICE.md) into one reader/writer closure pair per
(record type, version). Fields map to the frozen dataclasses of record_types.py by
snake_case name; the mapping is checked at import, so a dataclass that drifts from its
schema fails loudly. records.py dispatches to it for every record type without a fast path
(record_fast.py), and the tests check the fast paths against it byte for byte.
"""

from __future__ import annotations

import dataclasses
import json
import re
import struct
import uuid
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from importlib import resources
from typing import Any, Final, TypeAlias, cast

from .frozen import fast_new
from .record_fields import (
    DECODE_ERRORS,
    ZERO_UUID,
    cached_uuid,
    get_count,
    get_nstr,
    int32s,
    put_bytes,
    put_count,
    put_nstr,
)
from .record_types import (
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
    Key,
    MalformedRecord,
    MemberMetadata,
    OffsetCommitKey,
    OffsetCommitValue,
    PartitionMetadata,
    RecordError,
    TopicMetadata,
    TopicPartitions,
    TopicPartitionsWithEpochs,
    UnknownRecordType,
    UnsupportedRecordVersion,
    Value,
)
from .varint import read_uvarint, uvarint_bytes

# Declared here, not imported: see record_fields.py.
_I8 = struct.Struct(">b")
_I16 = struct.Struct(">h")
_I32 = struct.Struct(">i")

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


def snake_case(name: str) -> str:
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


def load_schema(name: str) -> _Json:
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
        return ZERO_UUID
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
    return cached_uuid(buf[pos : pos + 16]), pos + 16


def _write_uuid(v: Any, out: list[bytes]) -> None:
    out.append(cast(uuid.UUID, v).bytes)


def _string_codec(nullable: bool, flexible: bool, what: str) -> tuple[_Reader, _Writer]:
    def read(buf: bytes, pos: int) -> tuple[Any, int]:
        s, pos = get_nstr(buf, pos, flexible)
        if s is None and not nullable:
            raise MalformedRecord(f"{what}: null in a non-nullable field")
        return s, pos

    def write(v: Any, out: list[bytes]) -> None:
        if v is None and not nullable:
            raise ValueError(f"{what} is not nullable")
        put_nstr(out, v, flexible)

    return read, write


def _bytes_codec(nullable: bool, flexible: bool, what: str) -> tuple[_Reader, _Writer]:
    def read(buf: bytes, pos: int) -> tuple[Any, int]:
        if flexible:
            n, pos = read_uvarint(buf, pos)
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
            put_bytes(out, bytes(v), flexible)

    return read, write


def _array_codec(
    elem: tuple[_Reader, _Writer] | None, nullable: bool, flexible: bool, what: str
) -> tuple[_Reader, _Writer]:
    """An array; ``elem`` None means int32 elements, read and written in one struct call."""

    def read(buf: bytes, pos: int) -> tuple[Any, int]:
        n, pos = get_count(buf, pos, flexible)
        if n < 0:
            if nullable:
                return None, pos
            raise MalformedRecord(f"{what}: null in a non-nullable field")
        if elem is None:
            return int32s(n).unpack_from(buf, pos), pos + 4 * n
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
        put_count(out, len(v), flexible)
        if elem is None:
            out.append(int32s(len(v)).pack(*v))
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
            marker, pos = read_uvarint(buf, pos)
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


class SchemaCompiler:
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
            name = snake_case(f["name"])
            if name not in index:
                raise TypeError(f"{where}: {cls.__name__} has no field {name}")
            i = index[name]
            # A tagged-only field may omit "versions" (Kafka's generator then takes its
            # taggedVersions: TransactionLogValue's tagged fields).
            present = version in _Versions.parse(f.get("versions") or f.get("taggedVersions"))
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
        unread = [n for n in unread if n not in {snake_case(f["name"]) for f in fields_json}]
        if unread:
            raise TypeError(f"{where}: {cls.__name__} fields {unread} are not in the schema")
        tag_write.sort(key=lambda t: t[0])
        new: Callable[..., Any] = fast_new(cls)

        def read(buf: bytes, pos: int) -> tuple[Any, int]:
            vals = base.copy()
            for i, read_field in seq_read:
                vals[i], pos = read_field(buf, pos)
            if flexible:
                count = buf[pos]
                if count < 0x80:  # one byte: read inline
                    pos += 1
                else:
                    count, pos = read_uvarint(buf, pos)
                for _ in range(count):
                    tag, pos = read_uvarint(buf, pos)
                    size, pos = read_uvarint(buf, pos)
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
                    fields_out += (uvarint_bytes(tag), uvarint_bytes(len(payload)), payload)
                out.append(uvarint_bytes(len(fields_out) // 3))
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
SCHEMAS: Final[dict[str, dict[str, type]]] = {
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
GENERIC_KEYS: dict[int, tuple[_Reader, _Writer]] = {}
# record type -> value version -> (reader, writer) of the value struct.
GENERIC_VALUES: dict[int, dict[int, tuple[_Reader, _Writer]]] = {}


def _compile_all() -> None:
    for name, classes in SCHEMAS.items():
        schema = load_schema(name)
        api_key = int(schema["apiKey"])
        valid = _Versions.parse(schema["validVersions"])
        if schema["type"] == "coordinator-key":
            GENERIC_KEYS[api_key] = SchemaCompiler(schema, classes, 0).message()
        else:
            GENERIC_VALUES[api_key] = {
                v: SchemaCompiler(schema, classes, v).message()
                for v in range(valid.lo, valid.hi + 1)
            }


_compile_all()


def decode_prefixed(
    codecs: Mapping[int, tuple[_Reader, _Writer]],
    data: bytes,
    what: str,
    unknown: Callable[[int], RecordError],
) -> Any:
    """An int16 prefix (a record type, or a version) choosing the codec in `codecs`, then
    its struct, which must end with the data. Raises `unknown(prefix)` for a prefix
    without a codec, MalformedRecord for bad bytes (`what` names them)."""
    try:
        (prefix,) = _I16.unpack_from(data, 0)
        codec = codecs.get(prefix)
        if codec is None:
            raise unknown(prefix)
        obj, pos = codec[0](data, 2)
    except DECODE_ERRORS as e:
        raise MalformedRecord(f"{what}: {e}") from e
    if pos != len(data):
        raise MalformedRecord(f"{what}: {len(data) - pos} trailing bytes")
    return obj


def encode_prefixed(prefix: int, write: _Writer, obj: Any) -> bytes:
    """The int16 prefix, then `obj` written by `write`."""
    out = [_I16.pack(prefix)]
    write(obj, out)
    return b"".join(out)


def generic_decode_key(data: bytes) -> Key:
    """The schema-driven key decoder (the fast paths are checked against it)."""
    return cast(Key, decode_prefixed(GENERIC_KEYS, data, "coordinator key", UnknownRecordType))


def generic_encode_key(key: Key) -> bytes:
    return encode_prefixed(key.RECORD_TYPE, GENERIC_KEYS[key.RECORD_TYPE][1], key)


def generic_decode_value(record_type: int, data: bytes) -> Value:
    versions = GENERIC_VALUES.get(record_type)
    if versions is None:
        raise UnknownRecordType(record_type)

    def unsupported(version: int) -> RecordError:
        return UnsupportedRecordVersion(f"record type {record_type} value version {version}")

    return cast(
        Value, decode_prefixed(versions, data, f"record type {record_type} value", unsupported)
    )


def generic_encode_value(value: Value, version: int) -> bytes:
    versions = GENERIC_VALUES[value.RECORD_TYPE]
    if version not in versions:
        raise UnsupportedRecordVersion(f"{type(value).__name__} has no version {version}")
    return encode_prefixed(version, versions[version][1], value)
