"""protocol/guard.py: the generated structural pre-check accepts exactly what the original
closure-based walk accepted, never reads past the frame, and is faster.

Classes: every request class of every version kio knows. Values: a generic strategy built
from each dataclass's fields, encoded with kio's own entity_writer.
"""

from __future__ import annotations

import dataclasses
import datetime
import io
import struct
import timeit
import uuid
from collections.abc import Callable
from functools import cache
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from kio.schema.index import api_key_map, schema_name_map
from kio.serial import entity_writer
from kio.serial._implicit_defaults import get_tagged_field_default
from kio.serial._introspect import (
    EntityField,
    EntityTupleField,
    PrimitiveField,
    PrimitiveTupleField,
    classify_field,
    get_field_tag,
    get_schema_field_type,
    is_optional,
)

from groupcoord.protocol.api import request_schema
from groupcoord.protocol.guard import MalformedBody, body_end, check_body, validator_source
from groupcoord.protocol.header import parse_header

Step = Callable[[bytes, int, int], int]

# --- reference: the original closure-per-field walk, verbatim but for the names ---------

_OLD_I16 = struct.Struct(">h")
_OLD_I32 = struct.Struct(">i")
_OLD_FIXED_SIZES = {
    "int8": 1,
    "uint8": 1,
    "bool": 1,
    "int16": 2,
    "uint16": 2,
    "error_code": 2,
    "int32": 4,
    "uint32": 4,
    "timedelta_i32": 4,
    "int64": 8,
    "uint64": 8,
    "float64": 8,
    "timedelta_i64": 8,
    "datetime_i64": 8,
    "uuid": 16,
}


def _old_uvarint(buf: bytes, pos: int, end: int) -> tuple[int, int]:
    value = 0
    shift = 0
    while True:
        if pos >= end:
            raise MalformedBody("varint runs past the end of the frame")
        b = buf[pos]
        pos += 1
        value |= (b & 0x7F) << shift
        if not b & 0x80:
            return value, pos
        shift += 7
        if shift > 35:
            raise MalformedBody("varint too long")


def _old_need(pos: int, size: int, end: int) -> int:
    if size < 0 or pos + size > end:
        raise MalformedBody("a length runs past the end of the frame")
    return pos + size


def _old_fixed(size: int) -> Step:
    return lambda buf, pos, end: _old_need(pos, size, end)


def _old_compact_blob(buf: bytes, pos: int, end: int) -> int:
    length, pos = _old_uvarint(buf, pos, end)
    return pos if length == 0 else _old_need(pos, length - 1, end)


def _old_legacy_string(buf: bytes, pos: int, end: int) -> int:
    pos = _old_need(pos, 2, end)
    (length,) = _OLD_I16.unpack_from(buf, pos - 2)
    return pos if length == -1 else _old_need(pos, length, end)


def _old_legacy_bytes(buf: bytes, pos: int, end: int) -> int:
    pos = _old_need(pos, 4, end)
    (length,) = _OLD_I32.unpack_from(buf, pos - 4)
    return pos if length == -1 else _old_need(pos, length, end)


def _old_primitive(kafka_type: str, flexible: bool) -> Step:
    size = _OLD_FIXED_SIZES.get(kafka_type)
    if size is not None:
        return _old_fixed(size)
    if kafka_type == "string":
        return _old_compact_blob if flexible else _old_legacy_string
    if kafka_type in ("bytes", "records"):
        return _old_compact_blob if flexible else _old_legacy_bytes
    raise NotImplementedError(f"no guard for kafka type {kafka_type!r}")


def _old_array(element: Step, flexible: bool, element_bytes_min: int) -> Step:
    def step(buf: bytes, pos: int, end: int) -> int:
        if flexible:
            count, pos = _old_uvarint(buf, pos, end)
            count -= 1
        else:
            pos = _old_need(pos, 4, end)
            (count,) = _OLD_I32.unpack_from(buf, pos - 4)
        if count <= 0:
            return pos
        if count * element_bytes_min > end - pos:
            raise MalformedBody(f"array of {count} elements cannot fit in the frame")
        for _ in range(count):
            pos = element(buf, pos, end)
        return pos

    return step


def _old_nullable(entity: Step) -> Step:
    def step(buf: bytes, pos: int, end: int) -> int:
        pos = _old_need(pos, 1, end)
        if buf[pos - 1] == 0xFF:  # int8 -1: null
            return pos
        return entity(buf, pos, end)

    return step


@cache
def _old_entity(cls: type[Any]) -> tuple[Step, int]:
    """(step validating one encoded entity of `cls`, the least bytes one can take)."""
    flexible = bool(cls.__flexible__)
    steps: list[Step] = []
    tagged: dict[int, Step] = {}
    bytes_min = 1 if flexible else 0  # the tagged-field count
    for field in dataclasses.fields(cls):
        kind = classify_field(field)
        tag = get_field_tag(field)
        optional = tag is None and is_optional(field)
        if isinstance(kind, PrimitiveField):
            kafka_type = get_schema_field_type(field)
            step = _old_primitive(kafka_type, flexible)
            field_min = _OLD_FIXED_SIZES.get(kafka_type, 1)
        elif isinstance(kind, PrimitiveTupleField):
            kafka_type = get_schema_field_type(field)
            step = _old_array(
                _old_primitive(kafka_type, flexible),
                flexible,
                max(1, _OLD_FIXED_SIZES.get(kafka_type, 1)),
            )
            field_min = 1 if flexible else 4
        elif isinstance(kind, EntityField):
            inner, inner_min = _old_entity(kind.type_)
            step = _old_nullable(inner) if optional else inner
            field_min = 1 if optional else inner_min
        elif isinstance(kind, EntityTupleField):
            inner, inner_min = _old_entity(kind.type_)
            step = _old_array(inner, flexible, max(1, inner_min))
            field_min = 1 if flexible else 4
        else:  # pragma: no cover - classify_field has four outcomes
            raise NotImplementedError(field)
        if tag is not None:
            tagged[int(tag)] = step
        else:
            steps.append(step)
            bytes_min += field_min

    def validate(buf: bytes, pos: int, end: int) -> int:
        for step in steps:
            pos = step(buf, pos, end)
        if flexible:
            count, pos = _old_uvarint(buf, pos, end)
            for _ in range(count):
                tag, pos = _old_uvarint(buf, pos, end)
                size, pos = _old_uvarint(buf, pos, end)
                field_end = _old_need(pos, size, end)
                known = tagged.get(tag)
                if known is not None and known(buf, pos, field_end) != field_end:
                    raise MalformedBody(f"tagged field {tag} has a wrong size")
                pos = field_end
        return pos

    return validate, bytes_min


def old_body_end(cls: type[Any], frame: bytes, pos: int) -> int:
    return _old_entity(cls)[0](frame, pos, len(frame))


def old_check_body(cls: type[Any], frame: bytes, pos: int) -> None:
    _old_entity(cls)[0](frame, pos, len(frame))


# --- the request classes ---------------------------------------------------------------


def _all_requests() -> list[tuple[int, int, type[Any]]]:
    found = []
    for api_key, name in sorted(api_key_map.items()):
        for version in sorted(schema_name_map[name]):
            cls = request_schema(api_key, version)
            if cls is not None:
                found.append((api_key, version, cls))
    return found


REQUESTS = _all_requests()
REQUEST_IDS = [f"{cls.__name__}-v{version}" for _key, version, cls in REQUESTS]


def _header(api_key: int, version: int, cls: type[Any]) -> bytes:
    """A valid request header (v1, or v2 for flexible versions) for `cls`."""
    client_id = b"guard-test"
    header = struct.pack(">hhih", api_key, version, 7, len(client_id)) + client_id
    if cls.__header_schema__.__version__ >= 2:
        header += b"\x00"
    _parsed, pos = parse_header(header, flexible=cls.__header_schema__.__version__ >= 2)
    assert pos == len(header)
    return header


def _encode(cls: type[Any], value: Any) -> bytes:
    buf = io.BytesIO()
    entity_writer(cls)(buf, value)
    return buf.getvalue()


# --- a generic value strategy from the dataclass fields --------------------------------

_INT_RANGES = {
    "int8": (-(2**7), 2**7 - 1),
    "int16": (-(2**15), 2**15 - 1),
    "int32": (-(2**31), 2**31 - 1),
    "int64": (-(2**63), 2**63 - 1),
    "uint8": (0, 2**8 - 1),
    "uint16": (0, 2**16 - 1),
    "uint32": (0, 2**32 - 1),
    "uint64": (0, 2**64 - 1),
    "error_code": (-(2**15), 2**15 - 1),
}
# Long enough for a two-byte compact length (>= 127) now and then; what long ones hold does
# not matter, and drawing them byte by byte would dominate the run time.
_TEXT = st.one_of(
    st.text(max_size=6), st.integers(120, 140).map(lambda n: "x" * (n - 1) + "\u00e9")
)
_BINARY = st.one_of(st.binary(max_size=8), st.integers(127, 140).map(lambda n: b"\xa5" * n))


def _millis(low: int, high: int) -> st.SearchStrategy[datetime.timedelta]:
    return st.integers(low, high).map(lambda ms: datetime.timedelta(milliseconds=ms))


@cache
def _primitive(kafka_type: str, long: bool = True) -> st.SearchStrategy[Any]:
    if kafka_type in _INT_RANGES:
        low, high = _INT_RANGES[kafka_type]
        return st.integers(low, high)
    if kafka_type == "bool":
        return st.booleans()
    if kafka_type == "float64":
        return st.floats(allow_nan=False, allow_infinity=False)
    if kafka_type == "string":
        return _TEXT if long else st.text(max_size=6)
    if kafka_type in ("bytes", "records"):
        return _BINARY if long else st.binary(max_size=8)
    if kafka_type == "uuid":
        return st.uuids()
    if kafka_type == "timedelta_i32":
        return _millis(-(2**31), 2**31 - 1)
    if kafka_type == "timedelta_i64":
        return _millis(-(2**50), 2**50)  # timedelta itself cannot reach the int64 range
    if kafka_type == "datetime_i64":
        return st.integers(0, 2**42).map(
            lambda ms: datetime.datetime.fromtimestamp(ms / 1000, datetime.UTC)
        )
    raise NotImplementedError(kafka_type)


def _tagged_default(field: dataclasses.Field[Any]) -> Any:
    if field.default is not dataclasses.MISSING:
        return field.default
    if field.default_factory is not dataclasses.MISSING:
        return field.default_factory()
    return get_tagged_field_default(field)


def _field(field: dataclasses.Field[Any], depth: int, long: bool) -> st.SearchStrategy[Any]:
    kind = classify_field(field)
    items = 3 if depth == 0 else 2
    if isinstance(kind, PrimitiveField):
        inner = _primitive(get_schema_field_type(field), long)
    elif isinstance(kind, PrimitiveTupleField):
        kafka_type = get_schema_field_type(field)
        element = _primitive(kafka_type, long)
        # A two-byte compact count now and then: one short element repeated, so that drawing
        # it stays cheap and checking every truncation does not turn quadratic.
        short = {"string": st.just("k"), "bytes": st.just(b"k")}.get(kafka_type, element)
        inner = st.one_of(
            st.lists(element, max_size=items),
            st.tuples(short, st.integers(127, 129)).map(lambda drawn: [drawn[0]] * drawn[1])
            if long and depth == 0
            else st.nothing(),
        ).map(tuple)
    elif isinstance(kind, EntityField):
        inner = entity_values(kind.type_, depth + 1, long)
    elif isinstance(kind, EntityTupleField):
        inner = st.lists(entity_values(kind.type_, depth + 1, long), max_size=items).map(tuple)
    else:  # pragma: no cover
        raise NotImplementedError(field)
    if get_field_tag(field) is not None:  # absent (the default) or present
        return st.one_of(st.just(_tagged_default(field)), inner)
    if is_optional(field):
        return st.one_of(st.none(), inner)
    return inner


@cache
def entity_values(cls: type[Any], depth: int = 0, long: bool = True) -> st.SearchStrategy[Any]:
    """Instances of `cls`; with `long`, strings and arrays past a one-byte length too."""
    fields = {f.name: _field(f, depth, long) for f in dataclasses.fields(cls)}
    return st.fixed_dictionaries(fields).map(lambda values: cls(**values))


# --- helpers ---------------------------------------------------------------------------


def _outcome(walk: Callable[[type[Any], bytes, int], int], cls: type[Any], frame: bytes, pos: int):
    try:
        return walk(cls, frame, pos)
    except MalformedBody:
        return "rejected"


def _assert_same(cls: type[Any], frame: bytes, pos: int) -> Any:
    """Old and new agree on `frame`; the new walk stays inside it. Returns the outcome."""
    new = _outcome(body_end, cls, frame, pos)
    old = _outcome(old_body_end, cls, frame, pos)
    assert new == old, (cls.__name__, frame[pos:].hex(), old, new, validator_source(cls))
    assert new == "rejected" or pos <= new <= len(frame)
    if new == "rejected":
        with pytest.raises(MalformedBody):
            check_body(cls, frame, pos)
    else:
        check_body(cls, frame, pos)
    return new


PER_CLASS = settings(
    max_examples=8,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)

# Bytes that steer a walk into its interesting branches: null and empty markers, a
# continued varint, small counts, the top of a length.
_SPICY_BYTES = (0x00, 0x01, 0x02, 0x7F, 0x80, 0x81, 0xFE, 0xFF)
_SPICY = st.sampled_from(_SPICY_BYTES)


@st.composite
def _mutated(draw: st.DrawFn, body: bytes) -> bytes:
    data = bytearray(body)
    for _ in range(draw(st.integers(1, 4))):
        op = draw(st.sampled_from(["set", "insert", "delete", "append", "varint"]))
        at = draw(st.integers(0, len(data)))
        if op == "set" and data:
            data[min(at, len(data) - 1)] = draw(_SPICY | st.integers(0, 255))
        elif op == "insert":
            data[at:at] = draw(st.lists(_SPICY, min_size=1, max_size=4))
        elif op == "delete":
            del data[at : at + draw(st.integers(1, 4))]
        elif op == "append":
            data += draw(st.binary(min_size=1, max_size=8))
        else:  # a long (up to too long) varint where a length or count may sit
            data[at:at] = bytes([0xFF] * draw(st.integers(1, 6)) + [draw(st.integers(0, 0x7F))])
    return bytes(data)


# --- (1) valid encodings are accepted, exactly; (2) truncations rejected ---------------


@pytest.mark.parametrize(("api_key", "version", "cls"), REQUESTS, ids=REQUEST_IDS)
@PER_CLASS
@given(data=st.data())
def test_valid_encodings_walk_to_their_end_and_truncations_fail(
    api_key: int, version: int, cls: type[Any], data: st.DataObject
) -> None:
    header = _header(api_key, version, cls)
    body = _encode(cls, data.draw(entity_values(cls), label="value"))
    frame = header + body
    pos = len(header)

    assert body_end(cls, frame, pos) == len(frame)
    check_body(cls, frame, pos)
    assert _assert_same(cls, frame, pos) == len(frame)
    # Trailing bytes are not the walk's business: it stops where the entity ends.
    assert _assert_same(cls, frame + b"\xff\x00garbage", pos) == len(frame)

    # The walk is deterministic in the bytes it has read, and the full one needs every
    # byte, so each strict prefix must run out of bytes (and never read past its end).
    for cut in range(pos, len(frame)):
        assert _assert_same(cls, frame[:cut], pos) == "rejected", cut


# --- (3) garbage after a valid header never walks past the end --------------------------


@pytest.mark.parametrize(("api_key", "version", "cls"), REQUESTS, ids=REQUEST_IDS)
@PER_CLASS
@given(data=st.data())
def test_garbage_and_mutations_agree_with_the_original_walk(
    api_key: int, version: int, cls: type[Any], data: st.DataObject
) -> None:
    header = _header(api_key, version, cls)
    pos = len(header)
    garbage = data.draw(
        st.one_of(st.binary(max_size=64), st.lists(_SPICY, max_size=48).map(bytes)),
        label="garbage",
    )
    _assert_same(cls, header + garbage, pos)  # (3), and (4) on garbage
    # (4) mutations of a valid encoding reach deeper than garbage does.
    body = _encode(cls, data.draw(entity_values(cls, long=False), label="value"))
    # Every byte replaced by each steering value in turn hits every length, count, marker
    # and tag; then a few random multi-byte mutations.
    for at in range(len(body)):
        for value in _SPICY_BYTES:
            if body[at] != value:
                _assert_same(cls, header + body[:at] + bytes([value]) + body[at + 1 :], pos)
    for mutated in data.draw(st.lists(_mutated(body), min_size=1, max_size=8), label="mutants"):
        _assert_same(cls, header + mutated, pos)


def test_generated_walk_is_bounded_by_end_not_by_the_buffer() -> None:
    """Inside a tagged field the walk is bounded by the field's window, not the buffer: a
    known tagged field must fill its declared size exactly."""
    cls = request_schema(1, 12)  # FetchRequest v12: tag 0 is cluster_id (compact string)
    assert cls is not None
    header = _header(1, 12, cls)
    fixed = struct.pack(">iiiibii", -1, 500, 1, 1 << 20, 0, 0, -1)
    tail = b"\x01\x01\x01"  # no topics, no forgotten topics, rack_id ""

    def frame(tags: bytes) -> bytes:
        return header + fixed + tail + tags

    ok = frame(b"\x01\x00\x03\x03ab")  # one tag: 0, size 3, "ab"
    assert body_end(cls, ok, len(header)) == len(ok)
    for bad in (
        b"\x01\x00\x03\x04ab",  # "ab" claims 3 bytes: runs past the window
        b"\x01\x00\x04\x03ab\x00",  # window 4, string takes 3
        b"\x01\x00\x09\x03ab",  # window past the frame
        b"\x02\x00\x03\x03ab",  # a second tag is missing
    ):
        assert _assert_same(cls, frame(bad), len(header)) == "rejected", bad.hex()
    unknown = frame(b"\x01\x05\x02\xff\xff")  # unknown tag 5 is skipped whatever it holds
    assert _assert_same(cls, unknown, len(header)) == len(unknown)
    huge = header + fixed + b"\xff\xff\xff\xff\x0f"  # four billion topics in a few bytes
    assert _assert_same(cls, huge, len(header)) == "rejected"


# --- (5) micro-benchmark ---------------------------------------------------------------


def _blank(cls: type[Any], **values: Any) -> Any:
    """An instance of `cls` with defaults, zeros and empties where `values` says nothing."""
    for field in dataclasses.fields(cls):
        if field.name in values or field.default is not dataclasses.MISSING:
            continue
        if field.default_factory is not dataclasses.MISSING:
            continue
        kind = classify_field(field)
        if isinstance(kind, PrimitiveTupleField | EntityTupleField):
            values[field.name] = ()
        elif isinstance(kind, EntityField):
            values[field.name] = None if is_optional(field) else _blank(kind.type_)
        else:
            values[field.name] = {
                "string": "g",
                "bytes": b"",
                "records": None,
                "bool": False,
                "uuid": uuid.UUID(int=1),
                "timedelta_i32": datetime.timedelta(seconds=1),
                "timedelta_i64": datetime.timedelta(seconds=1),
            }.get(get_schema_field_type(field), 0)
    return cls(**values)


def _bench_frames() -> dict[str, tuple[type[Any], bytes, int]]:
    def frame(api_key: int, version: int, build: Callable[[type[Any]], Any]):
        cls = request_schema(api_key, version)
        assert cls is not None
        header = _header(api_key, version, cls)
        return cls, header + _encode(cls, build(cls)), len(header)

    def offset_commit(cls: type[Any]) -> Any:
        topic_cls = classify_field(_named(cls, "topics")).type_
        partition_cls = classify_field(_named(topic_cls, "partitions")).type_
        partition = _blank(partition_cls, partition_index=0, committed_offset=42)
        topic = _blank(topic_cls, name="orders", partitions=(partition,))
        return _blank(cls, group_id="billing", member_id="member-1", topics=(topic,))

    def heartbeat(cls: type[Any]) -> Any:
        return _blank(cls, group_id="billing", generation_id=3, member_id="member-1")

    def fetch(cls: type[Any]) -> Any:
        topic_cls = classify_field(_named(cls, "topics")).type_
        partition_cls = classify_field(_named(topic_cls, "partitions")).type_
        partitions = tuple(
            _blank(partition_cls, partition=i, fetch_offset=1000 + i, partition_max_bytes=1 << 20)
            for i in range(10)
        )
        return _blank(cls, topics=(_blank(topic_cls, topic="orders", partitions=partitions),))

    return {
        "OffsetCommit v9 (1 topic, 1 partition)": frame(8, 9, offset_commit),
        "Heartbeat v4": frame(12, 4, heartbeat),
        "Fetch v12 (10 partitions)": frame(1, 12, fetch),
    }


def _named(cls: type[Any], name: str) -> dataclasses.Field[Any]:
    return next(f for f in dataclasses.fields(cls) if f.name == name)


def _per_call_us(check: Callable[[type[Any], bytes, int], None], args: tuple[Any, ...]) -> float:
    number = 2000
    best = min(timeit.repeat(lambda: check(*args), number=number, repeat=5))
    return best / number * 1e6


def test_benchmark_old_vs_new(capsys: pytest.CaptureFixture[str]) -> None:
    rows = []
    for name, (cls, frame, pos) in _bench_frames().items():
        assert body_end(cls, frame, pos) == old_body_end(cls, frame, pos) == len(frame)
        old = _per_call_us(old_check_body, (cls, frame, pos))
        new = _per_call_us(check_body, (cls, frame, pos))
        rows.append((name, len(frame) - pos, old, new))
    with capsys.disabled():
        print("\nguard.check_body, µs per call (best of 5):")
        for name, size, old, new in rows:
            print(f"  {name:<40} {size:4d} B  old {old:6.2f}  new {new:6.2f}  x{old / new:4.1f}")
    for _name, _size, old, new in rows:
        assert new < old
