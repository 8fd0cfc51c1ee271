"""Request values built from the codec's schemas, for the tests that need every API at every
version (the guard's walk, the null refusals, the schema fuzz suite):

- `entity_values(cls)`: a hypothesis strategy of instances of any kio entity class, every
  field drawn by its Kafka type (`fuzz=True`: values steered to reach the handlers: a few
  known names, small counts and timeouts, real record batches now and then);
- `encode_raw(cls, value)`: the bytes of a value as kio's writer gives them, except that a
  None is written as a null wherever it sits, also where the schema forbids a null (kio's
  writer refuses those strings);
- `blank(cls)` and `null_cases(cls)`: a minimal valid value, and one value per field that the
  schema says is never null (array, string or bytes, at any depth) with that field null.
"""

from __future__ import annotations

import dataclasses
import datetime
import io
import uuid
from collections.abc import Iterator
from dataclasses import MISSING
from functools import cache
from types import NoneType, UnionType
from typing import Any, Union, get_args, get_origin

from hypothesis import strategies as st
from kio.serial import writers
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
from kio.serial._serialize import get_writer

_BLOBS = ("string", "bytes", "records")


def null_allowed(tp: Any) -> bool:
    """Whether the schema lets a value of type `tp` be null: `X | None` (for an array,
    `tuple[X, ...] | None`; kio's is_optional also says yes for `tuple[X | None, ...]`)."""
    return get_origin(tp) in (UnionType, Union) and NoneType in get_args(tp)


def element_type(tp: Any) -> Any:
    """The element type of `tuple[X, ...]` or `tuple[X, ...] | None`."""
    if get_origin(tp) is not tuple:
        tp = next(a for a in get_args(tp) if a is not NoneType)
    return get_args(tp)[0]


# --- values ----------------------------------------------------------------------------

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

# Names the fuzz server knows (FUZZ_TOPIC exists; FUZZ_GROUP gets members), so that drawn
# requests reach past "unknown topic" and "unknown member" into the handlers.
FUZZ_TOPIC = "fuzz-topic"
FUZZ_GROUP = "fuzz-group"
_FUZZ_NAMES = st.sampled_from(
    [FUZZ_TOPIC, FUZZ_GROUP, "", "consumer", "range", "uniform", "cleanup.policy", "-1"]
)
_FUZZ_TEXT = st.one_of(_FUZZ_NAMES, st.text(max_size=8))
_FUZZ_SMALL = st.sampled_from([-1, 0, 1, 2, 3])


def _millis(low: int, high: int) -> st.SearchStrategy[datetime.timedelta]:
    return st.integers(low, high).map(lambda ms: datetime.timedelta(milliseconds=ms))


def _record_batch(value: bytes) -> bytes:
    from aiokafka.record.default_records import DefaultRecordBatchBuilder

    builder = DefaultRecordBatchBuilder(
        magic=2,
        compression_type=0,
        is_transactional=0,
        producer_id=-1,
        producer_epoch=-1,
        base_sequence=-1,
        batch_size=10**6,
    )
    builder.append(0, timestamp=1, key=b"k", value=value, headers=[])
    return bytes(builder.build())


@cache
def _primitive(kafka_type: str, long: bool = True, fuzz: bool = False) -> st.SearchStrategy[Any]:
    if fuzz:
        steered = _fuzz_primitive(kafka_type)
        if steered is not None:
            return st.one_of(steered, _primitive(kafka_type, long=False))
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


def _fuzz_primitive(kafka_type: str) -> st.SearchStrategy[Any] | None:
    """Values that reach further into a handler than uniform ones: known names, small
    numbers (a partition, a generation, an epoch), short waits, real record batches."""
    if kafka_type == "string":
        return _FUZZ_TEXT
    if kafka_type in _INT_RANGES:
        return _FUZZ_SMALL
    if kafka_type == "timedelta_i32" or kafka_type == "timedelta_i64":
        # Short: a long poll or a join parked for long would hold the run up.
        return _millis(-1, 50)
    if kafka_type == "uuid":
        return st.just(uuid.UUID(int=0))
    if kafka_type == "records":
        return st.binary(max_size=4).map(_record_batch)
    return None


def _tagged_default(field: dataclasses.Field[Any]) -> Any:
    if field.default is not dataclasses.MISSING:
        return field.default
    if field.default_factory is not dataclasses.MISSING:
        return field.default_factory()
    return get_tagged_field_default(field)


def _field(
    field: dataclasses.Field[Any], depth: int, long: bool, fuzz: bool
) -> st.SearchStrategy[Any]:
    kind = classify_field(field)
    items = 3 if depth == 0 else 2
    if isinstance(kind, PrimitiveField):
        inner = _primitive(get_schema_field_type(field), long, fuzz)
    elif isinstance(kind, PrimitiveTupleField):
        kafka_type = get_schema_field_type(field)
        element = _primitive(kafka_type, long, fuzz)
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
        inner = entity_values(kind.type_, depth + 1, long, fuzz)
    elif isinstance(kind, EntityTupleField):
        inner = st.lists(entity_values(kind.type_, depth + 1, long, fuzz), max_size=items).map(
            tuple
        )
    else:  # pragma: no cover
        raise NotImplementedError(field)
    if get_field_tag(field) is not None:  # absent (the default) or present
        return st.one_of(st.just(_tagged_default(field)), inner)
    if null_allowed(field.type):
        return st.one_of(st.none(), inner)
    return inner


@cache
def entity_values(
    cls: type[Any], depth: int = 0, long: bool = True, fuzz: bool = False
) -> st.SearchStrategy[Any]:
    """Instances of `cls`; with `long`, strings and arrays past a one-byte length too; with
    `fuzz`, values steered towards what the fuzz server knows."""
    fields = {f.name: _field(f, depth, long, fuzz) for f in dataclasses.fields(cls)}
    return st.fixed_dictionaries(fields).map(lambda values: cls(**values))


# --- mutations of encoded bytes --------------------------------------------------------

# Bytes that steer a walk into its interesting branches: null and empty markers, a
# continued varint, small counts, the top of a length.
SPICY_BYTES = (0x00, 0x01, 0x02, 0x7F, 0x80, 0x81, 0xFE, 0xFF)
SPICY = st.sampled_from(SPICY_BYTES)


@st.composite
def mutated_bytes(draw: st.DrawFn, body: bytes) -> bytes:
    data = bytearray(body)
    for _ in range(draw(st.integers(1, 4))):
        op = draw(st.sampled_from(["set", "insert", "delete", "append", "varint"]))
        at = draw(st.integers(0, len(data)))
        if op == "set" and data:
            data[min(at, len(data) - 1)] = draw(SPICY | st.integers(0, 255))
        elif op == "insert":
            data[at:at] = draw(st.lists(SPICY, min_size=1, max_size=4))
        elif op == "delete":
            del data[at : at + draw(st.integers(1, 4))]
        elif op == "append":
            data += draw(st.binary(min_size=1, max_size=8))
        else:  # a long (up to too long) varint where a length or count may sit
            data[at:at] = bytes([0xFF] * draw(st.integers(1, 6)) + [draw(st.integers(0, 0x7F))])
    return bytes(data)


# --- the raw encoder -------------------------------------------------------------------


@cache
def _raw_writer(cls: type[Any]) -> Any:
    """kio's entity writer for `cls`, but writing None as a null in every string, bytes and
    array field (kio's own only does where the schema allows it)."""
    flexible = bool(cls.__flexible__)
    plain: list[tuple[str, Any]] = []
    tagged: list[tuple[int, dataclasses.Field[Any], Any, Any]] = []
    for field in dataclasses.fields(cls):
        kind = classify_field(field)
        tag = get_field_tag(field)
        if isinstance(kind, PrimitiveField | PrimitiveTupleField):
            kafka_type = get_schema_field_type(field)
            # The nullable writer writes a value exactly as the plain one, and None as null.
            write = get_writer(kafka_type, flexible, optional=kafka_type in _BLOBS)
        else:
            write = _raw_entity(
                kind.type_,
                nullable=isinstance(kind, EntityField) and (tag is None and is_optional(field)),
            )
        if kind.is_array:
            write = (writers.compact_array_writer if flexible else writers.legacy_array_writer)(
                write
            )
        if tag is None:
            plain.append((field.name, write))
        else:
            tagged.append((int(tag), field, write, _tagged_default(field)))
    tagged.sort(key=lambda t: t[0])

    def write_entity(buf: io.BytesIO, value: Any) -> None:
        for name, write in plain:
            write(buf, getattr(value, name))
        if not flexible:
            return
        present = []
        for tag, field, write, default in tagged:
            field_value = getattr(value, field.name)
            if field_value == field.default or (
                field.default is MISSING and field_value == default
            ):
                continue  # as kio: a tagged field at its default is not written
            inner = io.BytesIO()
            write(inner, field_value)
            present.append((tag, inner.getvalue()))
        writers.write_unsigned_varint(buf, len(present))
        for tag, data in present:
            writers.write_unsigned_varint(buf, tag)
            writers.write_unsigned_varint(buf, len(data))
            buf.write(data)

    return write_entity


def _raw_entity(cls: type[Any], nullable: bool) -> Any:
    write = _raw_writer(cls)
    if not nullable:
        return write

    def write_nullable(buf: io.BytesIO, value: Any) -> None:
        if value is None:
            writers.write_int8(buf, -1)
        else:
            writers.write_int8(buf, 1)
            write(buf, value)

    return write_nullable


def encode_raw(cls: type[Any], value: Any) -> bytes:
    """The body bytes of `value` (an instance of `cls`), None written as null anywhere."""
    buf = io.BytesIO()
    _raw_writer(cls)(buf, value)
    return buf.getvalue()


# --- minimal values and their null cases -----------------------------------------------


def blank(cls: type[Any], **values: Any) -> Any:
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
            values[field.name] = None if is_optional(field) else blank(kind.type_)
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


def null_cases(cls: type[Any]) -> Iterator[tuple[str, Any]]:
    """(path, value) per field of `cls`, at any depth, that the schema says is never null
    (arrays, strings, bytes, array elements): a blank `cls` with just that field null, the
    arrays and structs on the way to it holding one element."""
    for field in dataclasses.fields(cls):
        kind = classify_field(field)
        name = field.name
        blob = isinstance(kind, PrimitiveField) and get_schema_field_type(field) in _BLOBS
        if (blob or kind.is_array) and not null_allowed(field.type):
            yield name, blank(cls, **{name: None})
        if isinstance(kind, PrimitiveTupleField) and get_schema_field_type(field) in _BLOBS:
            if not null_allowed(element_type(field.type)):
                yield f"{name}[]", blank(cls, **{name: (None,)})
        elif isinstance(kind, EntityField):
            for path, inner in null_cases(kind.type_):
                yield f"{name}.{path}", blank(cls, **{name: inner})
        elif isinstance(kind, EntityTupleField):
            for path, inner in null_cases(kind.type_):
                yield f"{name}[].{path}", blank(cls, **{name: (inner,)})
