"""protocol/varint.py, the one varint reader and writer: Kafka's encodings (checked against
aiokafka's codec, which the clients use), the limits each caller passes, and the batch
header layout that protocol/batches.py declares once."""

from __future__ import annotations

import struct

import pytest
from aiokafka.record.util import decode_varint, encode_varint
from hypothesis import given
from hypothesis import strategies as st

from groupcoord.protocol.batches import (
    ATTRIBUTES_AT,
    BASE_TIMESTAMP_AT,
    BATCH_LENGTH_AT,
    CRC_AT,
    CRC_FROM,
    HEADER_SIZE,
    HEADER_STRUCT,
    LOG_OVERHEAD,
    MAX_TIMESTAMP_AT,
    RECORDS_COUNT_AT,
    header_struct,
)
from groupcoord.protocol.varint import (
    ONE_BYTE_VARINTS,
    SMALL_UVARINTS,
    VarintError,
    read_uvarint,
    read_varint,
    uvarint_bytes,
    varint_bytes,
)

INT64 = st.integers(-(2**63), 2**63 - 1)


def aiokafka_varint(value: int) -> bytes:
    out = bytearray()
    encode_varint(value, out.append)
    return bytes(out)


@given(INT64)
def test_zigzag_varints_are_kafkas(value: int) -> None:
    raw = aiokafka_varint(value)
    assert varint_bytes(value) == raw
    assert read_varint(raw + b"\xff", 0, len(raw), 10) == (value, len(raw))
    assert decode_varint(raw, 0) == (value, len(raw))


@given(st.integers(0, 2**64))
def test_unsigned_varints_round_trip(value: int) -> None:
    raw = uvarint_bytes(value)
    assert all(b & 0x80 for b in raw[:-1]) and not raw[-1] & 0x80
    assert read_uvarint(raw, 0, len(raw), len(raw)) == (value, len(raw))
    assert read_uvarint(b"ab" + raw, 2, max_bytes=len(raw)) == (value, len(raw) + 2)


def test_one_byte_tables() -> None:
    assert [read_uvarint(b, 0) for b in SMALL_UVARINTS] == [(i, 1) for i in range(0x80)]
    assert [read_varint(bytes((b,)), 0) for b in range(0x80)] == [
        (value, 1) for value in ONE_BYTE_VARINTS
    ]
    assert ONE_BYTE_VARINTS[:5] == (0, -1, 1, -2, 2)


def test_limits_and_ends() -> None:
    five = b"\xff\xff\xff\xff\x0f"
    assert read_uvarint(five, 0, 5, 5) == (2**32 - 1, 5)
    with pytest.raises(VarintError, match="longer than 4 bytes"):
        read_uvarint(five, 0, 5, 4)
    # Too long wins over the end: the byte that makes it too long was read.
    with pytest.raises(VarintError, match="longer than 5 bytes"):
        read_uvarint(b"\x80" * 5, 0, 5, 5)
    with pytest.raises(VarintError, match="past the end"):
        read_uvarint(b"\x80\x80\x01", 0, 2, 5)  # the window ends before the last byte
    with pytest.raises(VarintError, match="past the end"):
        read_uvarint(b"\x01", 1, 1, 5)
    with pytest.raises(IndexError):  # no end given: the buffer's own
        read_uvarint(b"\x80\x80", 0)
    with pytest.raises(OverflowError):
        varint_bytes(2**63)


def test_the_batch_header_layout_is_kafkas() -> None:
    assert HEADER_STRUCT.format == ">qiibIhiqqqhii" and HEADER_SIZE == 61
    assert (LOG_OVERHEAD, BATCH_LENGTH_AT, CRC_AT, ATTRIBUTES_AT, CRC_FROM) == (12, 8, 17, 21, 21)
    assert (BASE_TIMESTAMP_AT, MAX_TIMESTAMP_AT, RECORDS_COUNT_AT) == (27, 35, 57)
    loader = header_struct(
        "base_offset",
        "batch_length",
        "magic",
        "crc",
        "attributes",
        "last_offset_delta",
        "records_count",
    )
    assert loader.format == ">qi4xbIhi30xi" and loader.size == HEADER_SIZE
    assert header_struct("base_offset", "batch_length").format == struct.Struct(">qi").format
    with pytest.raises(ValueError):
        header_struct("crc", "magic")
