"""Transaction markers: the control batches that end a transaction on a partition
(Kafka's EndTransactionMarker and MemoryRecords.withEndTransactionMarker).

A marker is a record batch v2 with attribute bits 0x10 (transactional) and 0x20 (control),
the producer's id and epoch, base sequence -1, and one record: key = int16 version 0 +
int16 type (0 ABORT, 1 COMMIT; 2-6 are KRaft's), value = EndTxnMarker (int16 version 0 +
int32 coordinator epoch), no headers, timestamp = the write time.

Readers tell a marker by the control bit and the key's type. A control batch with no
records (left by a cleaner) or an unknown type is no marker (`marker_of` answers None).
"""

from __future__ import annotations

import struct

from .batches import (
    CONTROL_MASK,
    CRC_AT,
    CRC_FROM,
    HEADER_SIZE,
    HEADER_STRUCT,
    LOG_OVERHEAD,
    MAGIC_V2,
    NO_SEQUENCE,
    TRANSACTIONAL_MASK,
    BatchHeader,
    calc_crc32c,
    parse_header,
)
from .varint import VarintError, read_varint, uvarint_bytes, varint_bytes

CONTROL_ABORT = 0
CONTROL_COMMIT = 1
MARKER_ATTRIBUTES = TRANSACTIONAL_MASK | CONTROL_MASK

_KEY = struct.Struct(">hh")  # version, type
_VALUE = struct.Struct(">hi")  # version, coordinator epoch
_CRC = struct.Struct(">I")


def marker_batch(
    producer_id: int, producer_epoch: int, coordinator_epoch: int, commit: bool, timestamp_ms: int
) -> tuple[bytearray, BatchHeader]:
    """A marker batch at base offset 0 (the log stamps the real one) and its header."""
    key = _KEY.pack(0, CONTROL_COMMIT if commit else CONTROL_ABORT)
    value = _VALUE.pack(0, coordinator_epoch)
    body = (
        b"\x00"  # record attributes
        + varint_bytes(0)  # timestamp delta
        + varint_bytes(0)  # offset delta
        + varint_bytes(len(key))
        + key
        + varint_bytes(len(value))
        + value
        + uvarint_bytes(0)  # header count (a varint: 0 encodes as 0 either way)
    )
    record = varint_bytes(len(body)) + body
    size = HEADER_SIZE + len(record)
    buf = bytearray(size)
    HEADER_STRUCT.pack_into(
        buf,
        0,
        0,  # base offset
        size - LOG_OVERHEAD,  # batch length
        0,  # partition leader epoch: this node's, as Metadata answers it
        MAGIC_V2,
        0,  # crc, below
        MARKER_ATTRIBUTES,
        0,  # last offset delta
        timestamp_ms,
        timestamp_ms,
        producer_id,
        producer_epoch,
        NO_SEQUENCE,
        1,
    )
    buf[HEADER_SIZE:] = record
    _CRC.pack_into(buf, CRC_AT, int(calc_crc32c(memoryview(buf)[CRC_FROM:])))
    return buf, parse_header(buf)


def marker_of(batch: bytes | bytearray | memoryview) -> tuple[bool, int] | None:
    """(commit, coordinator epoch) of the marker batch `batch` (one whole control batch, as
    stored); None when it holds no record or its key is no ABORT/COMMIT marker."""
    header = parse_header(batch)
    if not header.attributes & CONTROL_MASK or header.records_count < 1:
        return None
    try:
        end = len(batch)
        pos = read_varint(batch, HEADER_SIZE, end)[1]  # record length
        pos += 1  # attributes
        pos = read_varint(batch, pos, end)[1]  # timestamp delta
        pos = read_varint(batch, pos, end)[1]  # offset delta
        key_size, pos = read_varint(batch, pos, end)
        if key_size < _KEY.size or pos + key_size > end:
            return None
        # An unknown key version is read as the highest known (Kafka's ControlRecordType).
        kind = _KEY.unpack_from(batch, pos)[1]
        pos += key_size
        if kind not in (CONTROL_ABORT, CONTROL_COMMIT):
            return None
        value_size, pos = read_varint(batch, pos, end)
        coordinator_epoch = -1
        if value_size >= _VALUE.size and pos + value_size <= end:
            coordinator_epoch = _VALUE.unpack_from(batch, pos)[1]
    except (VarintError, IndexError, struct.error):
        return None
    return kind == CONTROL_COMMIT, coordinator_epoch


def marker_commits(key: bytes | None) -> bool | None:
    """Of a control record's key: True for a COMMIT marker, False for an ABORT one, None
    for any other control record (or a key too short to be one). An unknown key version
    is read as version 0, as Kafka reads it as its highest known."""
    if key is None or len(key) < _KEY.size:
        return None
    kind = _KEY.unpack_from(key)[1]
    if kind == CONTROL_COMMIT:
        return True
    if kind == CONTROL_ABORT:
        return False
    return None


__all__ = [
    "CONTROL_ABORT",
    "CONTROL_COMMIT",
    "MARKER_ATTRIBUTES",
    "marker_batch",
    "marker_commits",
    "marker_of",
]
