"""Transaction markers: Kafka's control batches (EndTransactionMarker), built and read.

A marker is a record batch v2 with the transactional (0x10) and control (0x20) attribute
bits, the producer id and epoch of the transaction it ends, base sequence -1 and one record:
key = int16 version 0, int16 type (ABORT 0, COMMIT 1); value = int16 version 0, int32
coordinator epoch (Kafka's MemoryRecords.withEndTransactionMarker). Readers identify markers
by the control bit and the key's type; other control types (KRaft's 2-6) are not markers.
"""

from __future__ import annotations

import struct

from .batches import (
    ATTRIBUTES_AT,
    CONTROL_MASK,
    CRC_AT,
    CRC_FROM,
    NO_SEQUENCE,
    DefaultRecordBatchBuilder,
    calc_crc32c,
)

ABORT = 0
COMMIT = 1
_KEY = struct.Struct(">hh")  # version, type
_VALUE = struct.Struct(">hi")  # version, coordinator epoch
_ATTRIBUTES = struct.Struct(">h")
_CRC = struct.Struct(">I")


def end_txn_marker_batch(
    producer_id: int,
    producer_epoch: int,
    commit: bool,
    timestamp_ms: int,
    coordinator_epoch: int = 0,
) -> bytearray:
    """The control batch of a COMMIT (`commit`) or ABORT marker, base offset 0 (the log
    stamps its own)."""
    builder = DefaultRecordBatchBuilder(2, 0, 1, producer_id, producer_epoch, NO_SEQUENCE, 1 << 30)
    key = _KEY.pack(0, COMMIT if commit else ABORT)
    builder.append(0, timestamp_ms, key, _VALUE.pack(0, coordinator_epoch), [])
    data: bytearray = builder.build()
    (attributes,) = _ATTRIBUTES.unpack_from(data, ATTRIBUTES_AT)
    _ATTRIBUTES.pack_into(data, ATTRIBUTES_AT, attributes | CONTROL_MASK)
    _CRC.pack_into(data, CRC_AT, int(calc_crc32c(memoryview(data)[CRC_FROM:])))
    return data


def marker_commits(key: bytes | None) -> bool | None:
    """Of a control record's key: True for a COMMIT marker, False for an ABORT one, None
    for any other control record (or a key too short to be one). An unknown key version
    is read as version 0, as Kafka reads it as its highest known."""
    if key is None or len(key) < _KEY.size:
        return None
    _, kind = _KEY.unpack_from(key)
    if kind == COMMIT:
        return True
    if kind == ABORT:
        return False
    return None
