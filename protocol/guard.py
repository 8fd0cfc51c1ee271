"""Structural pre-check of a request body before the native codec decodes it.

Why: kio's native reader reserves memory for an array from the length the client declares
before reading a single element, so a frame of a few bytes announcing four billion
elements aborts the whole process (an allocation failure is not an exception). This walk
follows the same schema and checks every declared length and count against the bytes
actually present, so only well-formed sizes ever reach the codec. It builds nothing.
"""

from __future__ import annotations

import dataclasses
import struct
from collections.abc import Callable
from functools import cache
from typing import Any

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

Step = Callable[[bytes, int, int], int]

_I16 = struct.Struct(">h")
_I32 = struct.Struct(">i")

_FIXED_SIZES = {
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


class MalformedBody(ValueError):
    pass


def _uvarint(buf: bytes, pos: int, end: int) -> tuple[int, int]:
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


def _need(pos: int, size: int, end: int) -> int:
    if size < 0 or pos + size > end:
        raise MalformedBody("a length runs past the end of the frame")
    return pos + size


def _fixed(size: int) -> Step:
    return lambda buf, pos, end: _need(pos, size, end)


def _compact_blob(buf: bytes, pos: int, end: int) -> int:
    length, pos = _uvarint(buf, pos, end)
    return pos if length == 0 else _need(pos, length - 1, end)


def _legacy_string(buf: bytes, pos: int, end: int) -> int:
    pos = _need(pos, 2, end)
    (length,) = _I16.unpack_from(buf, pos - 2)
    return pos if length == -1 else _need(pos, length, end)


def _legacy_bytes(buf: bytes, pos: int, end: int) -> int:
    pos = _need(pos, 4, end)
    (length,) = _I32.unpack_from(buf, pos - 4)
    return pos if length == -1 else _need(pos, length, end)


def _primitive(kafka_type: str, flexible: bool) -> Step:
    size = _FIXED_SIZES.get(kafka_type)
    if size is not None:
        return _fixed(size)
    if kafka_type == "string":
        return _compact_blob if flexible else _legacy_string
    if kafka_type in ("bytes", "records"):
        return _compact_blob if flexible else _legacy_bytes
    raise NotImplementedError(f"no guard for kafka type {kafka_type!r}")


def _array(element: Step, flexible: bool, element_bytes_min: int) -> Step:
    def step(buf: bytes, pos: int, end: int) -> int:
        if flexible:
            count, pos = _uvarint(buf, pos, end)
            count -= 1
        else:
            pos = _need(pos, 4, end)
            (count,) = _I32.unpack_from(buf, pos - 4)
        if count <= 0:
            return pos
        if count * element_bytes_min > end - pos:
            raise MalformedBody(f"array of {count} elements cannot fit in the frame")
        for _ in range(count):
            pos = element(buf, pos, end)
        return pos

    return step


def _nullable(entity: Step) -> Step:
    def step(buf: bytes, pos: int, end: int) -> int:
        pos = _need(pos, 1, end)
        if buf[pos - 1] == 0xFF:  # int8 -1: null
            return pos
        return entity(buf, pos, end)

    return step


@cache
def _entity(cls: type[Any]) -> tuple[Step, int]:
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
            step = _primitive(kafka_type, flexible)
            field_min = _FIXED_SIZES.get(kafka_type, 1)
        elif isinstance(kind, PrimitiveTupleField):
            kafka_type = get_schema_field_type(field)
            step = _array(
                _primitive(kafka_type, flexible), flexible, max(1, _FIXED_SIZES.get(kafka_type, 1))
            )
            field_min = 1 if flexible else 4
        elif isinstance(kind, EntityField):
            inner, inner_min = _entity(kind.type_)
            step = _nullable(inner) if optional else inner
            field_min = 1 if optional else inner_min
        elif isinstance(kind, EntityTupleField):
            inner, inner_min = _entity(kind.type_)
            step = _array(inner, flexible, max(1, inner_min))
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
            count, pos = _uvarint(buf, pos, end)
            for _ in range(count):
                tag, pos = _uvarint(buf, pos, end)
                size, pos = _uvarint(buf, pos, end)
                field_end = _need(pos, size, end)
                known = tagged.get(tag)
                if known is not None and known(buf, pos, field_end) != field_end:
                    raise MalformedBody(f"tagged field {tag} has a wrong size")
                pos = field_end
        return pos

    return validate, bytes_min


def check_body(cls: type[Any], frame: bytes, pos: int) -> None:
    """Raise MalformedBody unless `frame[pos:]` holds a structurally sound `cls`."""
    _entity(cls)[0](frame, pos, len(frame))
