"""protocol/guard.py: the generated structural pre-check accepts exactly what the original
closure-based walk accepted (which, since issue 16, refuses a null where the schema forbids
one, as Kafka does), never reads past the frame, and is faster.

Classes: every request class of every version kio knows. Values: a generic strategy built
from each dataclass's fields (tests/schema_values.py), encoded with kio's own entity_writer.
"""

from __future__ import annotations

import dataclasses
import functools
import io
import struct
import timeit
from collections.abc import Callable
from functools import cache
from types import NoneType, UnionType
from typing import Any, Union, get_args, get_origin

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from kio.schema.index import api_key_map, schema_name_map
from kio.serial import entity_writer
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
from tests.schema_values import SPICY, SPICY_BYTES, blank, entity_values, mutated_bytes

Step = Callable[[bytes, int, int], int]

# --- reference: the original closure-per-field walk, verbatim but for the names and the
# refusal of nulls where the schema forbids them (issue 16: a null (length -1) of a
# non-nullable string, bytes or array, any negative length of a legacy one) -------------

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


def _old_null_ok(tp: Any) -> bool:
    return get_origin(tp) in (UnionType, Union) and NoneType in get_args(tp)


def _old_refuse_null() -> int:
    raise MalformedBody("a non-nullable field was serialized as null")


def _old_compact_blob(null_ok: bool) -> Step:
    def step(buf: bytes, pos: int, end: int) -> int:
        length, pos = _old_uvarint(buf, pos, end)
        if length == 0:
            return pos if null_ok else _old_refuse_null()
        return _old_need(pos, length - 1, end)

    return step


def _old_legacy_blob(width: int, null_ok: bool) -> Step:
    unpack = (_OLD_I16 if width == 2 else _OLD_I32).unpack_from

    def step(buf: bytes, pos: int, end: int) -> int:
        pos = _old_need(pos, width, end)
        (length,) = unpack(buf, pos - width)
        if length == -1 and null_ok:
            return pos
        if length < 0 and not null_ok:
            return _old_refuse_null()
        return _old_need(pos, length, end)

    return step


def _old_primitive(kafka_type: str, flexible: bool, null_ok: bool) -> Step:
    size = _OLD_FIXED_SIZES.get(kafka_type)
    if size is not None:
        return _old_fixed(size)
    if kafka_type == "string":
        return _old_compact_blob(null_ok) if flexible else _old_legacy_blob(2, null_ok)
    if kafka_type in ("bytes", "records"):
        return _old_compact_blob(null_ok) if flexible else _old_legacy_blob(4, null_ok)
    raise NotImplementedError(f"no guard for kafka type {kafka_type!r}")


def _old_array(element: Step, flexible: bool, element_bytes_min: int, null_ok: bool) -> Step:
    def step(buf: bytes, pos: int, end: int) -> int:
        if flexible:
            count, pos = _old_uvarint(buf, pos, end)
            count -= 1
        else:
            pos = _old_need(pos, 4, end)
            (count,) = _OLD_I32.unpack_from(buf, pos - 4)
        if count < 0 and not null_ok:
            return _old_refuse_null()
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
        null_ok = _old_null_ok(field.type)
        if isinstance(kind, PrimitiveField):
            kafka_type = get_schema_field_type(field)
            step = _old_primitive(kafka_type, flexible, null_ok)
            field_min = _OLD_FIXED_SIZES.get(kafka_type, 1)
        elif isinstance(kind, PrimitiveTupleField):
            kafka_type = get_schema_field_type(field)
            array_type = next(
                a for a in (field.type, *get_args(field.type)) if get_origin(a) is tuple
            )
            step = _old_array(
                _old_primitive(kafka_type, flexible, _old_null_ok(get_args(array_type)[0])),
                flexible,
                max(1, _OLD_FIXED_SIZES.get(kafka_type, 1)),
                null_ok,
            )
            field_min = 1 if flexible else 4
        elif isinstance(kind, EntityField):
            inner, inner_min = _old_entity(kind.type_)
            step = _old_nullable(inner) if optional else inner
            field_min = 1 if optional else inner_min
        elif isinstance(kind, EntityTupleField):
            inner, inner_min = _old_entity(kind.type_)
            step = _old_array(inner, flexible, max(1, inner_min), null_ok)
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
        st.one_of(st.binary(max_size=64), st.lists(SPICY, max_size=48).map(bytes)),
        label="garbage",
    )
    _assert_same(cls, header + garbage, pos)  # (3), and (4) on garbage
    # (4) mutations of a valid encoding reach deeper than garbage does.
    body = _encode(cls, data.draw(entity_values(cls, long=False), label="value"))
    # Every byte replaced by each steering value in turn hits every length, count, marker
    # and tag; then a few random multi-byte mutations.
    for at in range(len(body)):
        for value in SPICY_BYTES:
            if body[at] != value:
                _assert_same(cls, header + body[:at] + bytes([value]) + body[at + 1 :], pos)
    for mutated in data.draw(
        st.lists(mutated_bytes(body), min_size=1, max_size=8), label="mutants"
    ):
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


def _bench_frames() -> dict[str, tuple[type[Any], bytes, int]]:
    def frame(api_key: int, version: int, build: Callable[[type[Any]], Any]):
        cls = request_schema(api_key, version)
        assert cls is not None
        header = _header(api_key, version, cls)
        return cls, header + _encode(cls, build(cls)), len(header)

    def offset_commit(cls: type[Any]) -> Any:
        topic_cls = classify_field(_named(cls, "topics")).type_
        partition_cls = classify_field(_named(topic_cls, "partitions")).type_
        partition = blank(partition_cls, partition_index=0, committed_offset=42)
        topic = blank(topic_cls, name="orders", partitions=(partition,))
        return blank(cls, group_id="billing", member_id="member-1", topics=(topic,))

    def heartbeat(cls: type[Any]) -> Any:
        return blank(cls, group_id="billing", generation_id=3, member_id="member-1")

    def fetch(cls: type[Any]) -> Any:
        topic_cls = classify_field(_named(cls, "topics")).type_
        partition_cls = classify_field(_named(topic_cls, "partitions")).type_
        partitions = tuple(
            blank(partition_cls, partition=i, fetch_offset=1000 + i, partition_max_bytes=1 << 20)
            for i in range(10)
        )
        return blank(cls, topics=(blank(topic_cls, topic="orders", partitions=partitions),))

    return {
        "OffsetCommit v9 (1 topic, 1 partition)": frame(8, 9, offset_commit),
        "Heartbeat v4": frame(12, 4, heartbeat),
        "Fetch v12 (10 partitions)": frame(1, 12, fetch),
    }


def _named(cls: type[Any], name: str) -> dataclasses.Field[Any]:
    return next(f for f in dataclasses.fields(cls) if f.name == name)


def _per_call_us(
    checks: tuple[Callable[[type[Any], bytes, int], None], ...], args: tuple[Any, ...]
) -> list[float]:
    """Each check's best of 5 rounds, in µs per call. The checks take turns within each round,
    so a burst of load from other processes (the suite's other worker) slows them alike
    instead of landing on whichever ran last."""
    number = 2000
    best = [float("inf")] * len(checks)
    for _ in range(5):
        for i, check in enumerate(checks):
            best[i] = min(best[i], timeit.timeit(functools.partial(check, *args), number=number))
    return [seconds / number * 1e6 for seconds in best]


def test_benchmark_old_vs_new(capsys: pytest.CaptureFixture[str]) -> None:
    rows = []
    for name, (cls, frame, pos) in _bench_frames().items():
        assert body_end(cls, frame, pos) == old_body_end(cls, frame, pos) == len(frame)
        old, new = _per_call_us((old_check_body, check_body), (cls, frame, pos))
        rows.append((name, len(frame) - pos, old, new))
    with capsys.disabled():
        print("\nguard.check_body, µs per call (best of 5):")
        for name, size, old, new in rows:
            print(f"  {name:<40} {size:4d} B  old {old:6.2f}  new {new:6.2f}  x{old / new:4.1f}")
    for _name, _size, old, new in rows:
        assert new < old
