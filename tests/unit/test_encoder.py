"""The compiled response encoder against kio's writer, for every response class kio knows."""

from __future__ import annotations

import dataclasses
import datetime
import io
import os
import struct
import timeit
import uuid
from dataclasses import MISSING
from functools import cache
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from kio.schema.errors import ErrorCode as KioErrorCode
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
from kio.static.constants import EntityType

from groupcoord.protocol import encoder
from groupcoord.protocol.api import ApiKey, encode_response, response_schema
from groupcoord.protocol.errors import ErrorCode
from groupcoord.protocol.header import response_header

RESPONSES = [
    (api_key, version, response_schema(api_key, version))
    for api_key, name in sorted(api_key_map.items())
    for version, entities in sorted(schema_name_map[name].items())
    if EntityType.response in entities
]
# Raise with ENCODER_EXAMPLES=200 for a deeper (minutes-long) run.
EXAMPLES_PER_CLASS = int(os.environ.get("ENCODER_EXAMPLES", "10"))


def kio_body(entity: Any) -> bytes:
    buf = io.BytesIO()
    entity_writer(type(entity))(buf, entity)
    return buf.getvalue()


def kio_frame(api_key: int, correlation_id: int, entity: Any) -> bytes:
    """encode_response as it was before the compiled encoder (kio's writer)."""
    flexible = bool(type(entity).__flexible__) and api_key != ApiKey.API_VERSIONS
    buf = io.BytesIO()
    buf.write(b"\x00\x00\x00\x00")
    buf.write(response_header(correlation_id, flexible))
    entity_writer(type(entity))(buf, entity)
    data = buf.getbuffer()
    struct.pack_into(">i", data, 0, len(data) - 4)
    out = bytes(data)
    del data
    return out


# ---------------------------------------------------------------------------------------
# A generic entity strategy built from the dataclass schemas.

_INT_RANGES = {
    "int8": (-(2**7), 2**7 - 1),
    "int16": (-(2**15), 2**15 - 1),
    "int32": (-(2**31), 2**31 - 1),
    "int64": (-(2**63), 2**63 - 1),
    "uint8": (0, 2**8 - 1),
    "uint16": (0, 2**16 - 1),
    "uint32": (0, 2**32 - 1),
    "uint64": (0, 2**64 - 1),
}
_TEXT = st.text(st.characters(exclude_categories=("Cs",)), max_size=8) | st.text(
    st.characters(exclude_categories=("Cs",)), min_size=60, max_size=150
)  # non-ASCII often; long ones need a 2-byte varint / cross 127 bytes
_BLOB = st.binary(max_size=8) | st.binary(min_size=126, max_size=300)
_ERROR_CODES = (
    st.sampled_from(list(KioErrorCode))
    | st.sampled_from(list(ErrorCode))
    | st.integers(-(2**15), 2**15 - 1)  # plain ints: the compiled encoder accepts them
)
_TZ = st.sampled_from(
    [datetime.UTC, datetime.timezone(datetime.timedelta(hours=5, minutes=30))]
    + [datetime.timezone(datetime.timedelta(hours=-8))]
)
_DATETIMES = st.builds(
    lambda ms, tz: datetime.datetime.fromtimestamp(ms / 1000, tz=datetime.UTC).astimezone(tz),
    st.integers(0, 2**41),
    _TZ,
)


def _timedeltas(bits: int) -> st.SearchStrategy[datetime.timedelta]:
    bound = 2 ** (bits - 1) if bits == 32 else 2**53
    return st.integers(-bound, bound - 1).map(lambda ms: datetime.timedelta(milliseconds=ms))


def _primitive(kafka_type: str) -> st.SearchStrategy[Any]:
    if kafka_type in _INT_RANGES:
        low, high = _INT_RANGES[kafka_type]
        return st.integers(low, high) | st.sampled_from(sorted({0, max(low, -1), low, high}))
    return {
        "bool": st.booleans(),
        "float64": st.floats(allow_nan=False, allow_infinity=False),
        "error_code": _ERROR_CODES,
        "string": _TEXT,
        "bytes": _BLOB,
        "records": _BLOB,
        "uuid": st.uuids() | st.just(uuid.UUID(int=0)),
        "timedelta_i32": _timedeltas(32),
        "timedelta_i64": _timedeltas(64),
        "datetime_i64": _DATETIMES,
    }[kafka_type]


def _field_strategy(field: dataclasses.Field[Any]) -> st.SearchStrategy[Any]:
    kind = classify_field(field)
    if isinstance(kind, PrimitiveField):
        strategy = _primitive(get_schema_field_type(field))
    elif isinstance(kind, PrimitiveTupleField):
        strategy = st.lists(_primitive(get_schema_field_type(field)), max_size=4).map(tuple)
    elif isinstance(kind, EntityField):
        strategy = entities(kind.type_)
    elif isinstance(kind, EntityTupleField):
        strategy = st.lists(entities(kind.type_), max_size=2).map(tuple)
    else:  # pragma: no cover
        raise AssertionError(kind)
    if get_field_tag(field) is not None:
        # Tagged: sometimes the default (not written), sometimes any value.
        default = field.default
        if default is MISSING:
            default = get_tagged_field_default(field)
        return st.just(default) | strategy
    if is_optional(field):
        return st.none() | strategy
    return strategy


@cache
def entities(cls: type[Any]) -> st.SearchStrategy[Any]:
    return st.builds(cls, **{f.name: _field_strategy(f) for f in dataclasses.fields(cls)})


class _IntWithValue(int):
    """kio's writer reads `error_code.value`; plain ints lack it, so kio gets this."""

    @property
    def value(self) -> int:
        return int(self)


def for_kio(entity: Any) -> Any:
    """`entity` with plain-int error codes made readable by kio's writer."""
    changes = {}
    for field in dataclasses.fields(entity):
        value = getattr(entity, field.name)
        kind = classify_field(field)
        if value is None:
            continue
        if isinstance(kind, PrimitiveField) and get_schema_field_type(field) == "error_code":
            if type(value) is int:
                changes[field.name] = _IntWithValue(value)
        elif isinstance(kind, EntityField):
            new = for_kio(value)
            if new is not value:
                changes[field.name] = new
        elif isinstance(kind, EntityTupleField):
            items = tuple(for_kio(item) for item in value)
            if any(a is not b for a, b in zip(items, value, strict=True)):
                changes[field.name] = items
    return dataclasses.replace(entity, **changes) if changes else entity


# ---------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("api_key", "version", "cls"),
    RESPONSES,
    ids=[f"{cls.__name__}-v{version}" for _, version, cls in RESPONSES],
)
def test_identical_to_kio(api_key: int, version: int, cls: type[Any]) -> None:
    assert encoder.fallback_fields(cls) == []
    before = encoder.fallback_count()

    @settings(
        max_examples=EXAMPLES_PER_CLASS,
        deadline=None,
        database=None,
        suppress_health_check=list(HealthCheck),
    )
    @given(entities(cls), st.integers(-(2**31), 2**31 - 1))
    def check(entity: Any, correlation_id: int) -> None:
        reference = for_kio(entity)
        assert encoder.encode(entity) == kio_body(reference)
        framed = encode_response(api_key, version, correlation_id, entity)
        assert framed == kio_frame(api_key, correlation_id, reference)

    check()
    # The comparison above is not vacuous: nothing went through kio's writer at run time.
    assert encoder.fallback_count() == before


def test_every_class_compiles_without_field_fallbacks() -> None:
    assert len(RESPONSES) > 250
    assert {cls.__name__: encoder.fallback_fields(cls) for _, _, cls in RESPONSES} == {
        cls.__name__: [] for _, _, cls in RESPONSES
    }


def test_plain_int_and_intenum_error_codes_encode_alike() -> None:
    cls = response_schema(ApiKey.HEARTBEAT, 4)
    td = datetime.timedelta(milliseconds=3)
    as_int = encode_response(12, 4, 5, cls(throttle_time=td, error_code=27))
    as_enum = encode_response(12, 4, 5, cls(throttle_time=td, error_code=ErrorCode(27)))
    as_kio = encode_response(12, 4, 5, cls(throttle_time=td, error_code=KioErrorCode(27)))
    assert as_int == as_enum == as_kio == bytes.fromhex("0000000c 00000005 00 00000003 001b 00")


def test_api_versions_uses_header_v0_and_bad_values_fall_back_to_kio() -> None:
    cls = response_schema(ApiKey.API_VERSIONS, 3)
    entity = cls(error_code=ErrorCode.NONE, api_keys=(), throttle_time=datetime.timedelta(0))
    assert encode_response(18, 3, 1, entity) == kio_frame(18, 1, entity)
    assert encode_response(18, 3, 1, entity)[8] == 0  # error code, no header tag byte
    # A value the compiled code rejects is re-encoded (or refused) by kio itself.
    hb = response_schema(ApiKey.HEARTBEAT, 0)(error_code=ErrorCode.NONE)
    before = encoder.fallback_count()
    bad = dataclasses.replace(hb, error_code=2**20)
    with pytest.raises(AttributeError):  # kio: int has no .value
        encoder.encode(bad)
    assert encoder.fallback_count() == before + 1


# ---------------------------------------------------------------------------------------


def _bench(fn: Any, *args: Any) -> float:
    number = 1
    while True:
        elapsed = timeit.timeit(lambda: fn(*args), number=number)
        if elapsed > 0.05:
            break
        number *= 4
    best = min(timeit.repeat(lambda: fn(*args), number=number, repeat=5))
    return best / number * 1e6


def test_benchmark_print(capsys: pytest.CaptureFixture[str]) -> None:
    td = datetime.timedelta(0)
    heartbeat = response_schema(ApiKey.HEARTBEAT, 4)(throttle_time=td, error_code=ErrorCode.NONE)
    oc = response_types_entity_offset_commit()
    fetch = response_types_entity_fetch()
    cases = [
        ("HeartbeatResponse v4", 12, 4, heartbeat),
        ("OffsetCommitResponse v9 1x1", 8, 9, oc),
        ("FetchResponse v12 1x1x1MB", 1, 12, fetch),
    ]
    lines = []
    for name, api_key, version, entity in cases:
        assert encoder.encode(entity) == kio_body(entity)
        assert encode_response(api_key, version, 7, entity) == kio_frame(api_key, 7, entity)
        old_body = _bench(kio_body, entity)
        new_body = _bench(encoder.encode, entity)
        old_frame = _bench(kio_frame, api_key, 7, entity)
        new_frame = _bench(encode_response, api_key, version, 7, entity)
        lines.append(
            f"{name:30} body kio {old_body:8.2f} us  new {new_body:8.2f} us  "
            f"x{old_body / new_body:5.1f} | framed kio {old_frame:8.2f} us  "
            f"encode_response {new_frame:8.2f} us  x{old_frame / new_frame:5.1f}"
        )
    with capsys.disabled():
        print("\n" + "\n".join(lines))


def response_types_entity_offset_commit() -> Any:
    from kio.schema.offset_commit.v9 import response as m

    return m.OffsetCommitResponse(
        throttle_time=datetime.timedelta(0),
        topics=(
            m.OffsetCommitResponseTopic(
                name="orders",
                partitions=(
                    m.OffsetCommitResponsePartition(partition_index=3, error_code=ErrorCode.NONE),
                ),
            ),
        ),
    )


def response_types_entity_fetch() -> Any:
    from kio.schema.fetch.v12 import response as m

    return m.FetchResponse(
        throttle_time=datetime.timedelta(0),
        error_code=ErrorCode.NONE,
        session_id=0,
        responses=(
            m.FetchableTopicResponse(
                topic="orders",
                partitions=(
                    m.PartitionData(
                        partition_index=0,
                        error_code=ErrorCode.NONE,
                        high_watermark=1000,
                        last_stable_offset=1000,
                        log_start_offset=0,
                        aborted_transactions=None,
                        records=b"\x01" * (1 << 20),
                    ),
                ),
            ),
        ),
    )
