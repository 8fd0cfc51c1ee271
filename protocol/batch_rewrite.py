"""The byte-level edits log compaction makes to a v2 record batch (storage/cleaner.py decides
which records stay; this module writes the result).

A batch's records section (after the 61-byte header, decompressed when the batch is
compressed) is a run of records, each a zigzag varint length and then: attributes (int8),
timestamp delta (varlong), offset delta, key length and key, value length and value
(varints; length -1 = null), headers. ``record_spans`` finds where each record lies and
reads what compaction decides on (offset delta, key, whether the value is null) without
building record objects. ``rebuild_batch`` keeps a batch's header and the chosen records,
copied byte for byte, or with each timestamp delta moved when the base timestamp becomes a
delete horizon (KIP-534), compressed again with the batch's codec; the length, record count
and CRC are recomputed. ``empty_batch`` is Kafka's DefaultRecordBatch.writeEmptyHeader.
``recompress_batch`` stores a produced batch with the codec its topic's compression.type
names (Kafka's LogValidator, when the target codec differs from the producer's).
"""

from __future__ import annotations

import struct
from collections.abc import Sequence
from typing import TypeAlias

from aiokafka import codec

from .batches import (
    ATTRIBUTES_AT,
    BASE_TIMESTAMP_AT,
    BATCH_LENGTH_AT,
    COMPRESSION_MASK,
    CONTROL_MASK,
    CRC_AT,
    CRC_FROM,
    DELETE_HORIZON_MASK,
    HEADER_SIZE,
    HEADER_STRUCT,
    LOG_OVERHEAD,
    RECORDS_COUNT_AT,
    TIMESTAMP_TYPE_MASK,
    TRANSACTIONAL_MASK,
    BatchHeader,
    InvalidBatch,
    calc_crc32c,
)
from .varint import ONE_BYTE_VARINTS, VARLONG_MAX_BYTES, read_varint, varint_bytes

# (start, end) of the record in the records section, offset delta, key, is a tombstone
RecordSpan: TypeAlias = tuple[int, int, int, bytes | None, bool]

# Record varints are read with the varlong limit, as aiokafka's reader (which the cleaner
# used before) does, for every field.
_RECORD_VARINT_MAX_BYTES = VARLONG_MAX_BYTES
_I16 = struct.Struct(">h")
_I32 = struct.Struct(">i")
_U32 = struct.Struct(">I")
_I64 = struct.Struct(">q")
# What an emptied batch keeps of its attributes (Kafka's writeEmptyHeader: no compression,
# no delete horizon).
_EMPTY_BATCH_ATTRIBUTES = TIMESTAMP_TYPE_MASK | TRANSACTIONAL_MASK | CONTROL_MASK


def record_spans(header: BatchHeader, batch: bytes) -> tuple[bytes | memoryview, list[RecordSpan]]:
    """The records section of `batch` (decompressed) and where each record lies in it.
    Raises InvalidBatch when a record does not fit its batch or the codec fails."""
    data: bytes | memoryview = memoryview(batch)[HEADER_SIZE:]
    if header.compression:
        try:
            data = _decompress(header.compression, memoryview(batch)[HEADER_SIZE:])
        except InvalidBatch:
            raise
        except Exception as exc:
            raise InvalidBatch(f"cannot decompress batch: {exc!r}") from exc
    records: list[RecordSpan] = []
    pos = 0
    size = len(data)
    limit = _RECORD_VARINT_MAX_BYTES
    # A record's varints are mostly one byte: read those inline (a byte read past a
    # record's end only leads to the "run past the record" check; past the section, to
    # an IndexError).
    small = ONE_BYTE_VARINTS
    try:
        for _ in range(header.records_count):
            b = data[pos]
            if b < 0x80:
                length, body = small[b], pos + 1
            else:
                length, body = read_varint(data, pos, size, limit)
            end = body + length
            if length <= 0 or end > size:
                raise InvalidBatch("record length out of bounds")
            # attributes (int8), timestamp delta, offset delta, key, value length
            p = body + 1
            if data[p] < 0x80:
                p += 1
            else:
                _, p = read_varint(data, p, end, limit)
            b = data[p]
            if b < 0x80:
                delta, p = small[b], p + 1
            else:
                delta, p = read_varint(data, p, end, limit)
            b = data[p]
            if b < 0x80:
                key_length, p = small[b], p + 1
            else:
                key_length, p = read_varint(data, p, end, limit)
            key = None
            if key_length >= 0:
                key = bytes(data[p : p + key_length])
                p += key_length
            b = data[p]
            if b < 0x80:
                value_length, p = small[b], p + 1
            else:
                value_length, p = read_varint(data, p, end, limit)
            if p > end or value_length > end - p:
                raise InvalidBatch("record fields run past the record")
            records.append((pos, end, delta, key, value_length < 0))
            pos = end
    except InvalidBatch:
        raise
    except (IndexError, ValueError) as exc:
        raise InvalidBatch(f"malformed record: {exc}") from exc
    if pos != size:
        raise InvalidBatch("bytes after the last record")
    return data, records


def rebuild_batch(
    header: BatchHeader,
    batch: bytes,
    data: bytes | memoryview,
    survivors: Sequence[RecordSpan],
    delete_horizon: int | None,
) -> bytes:
    """`batch` (read by `record_spans` into `data`) with only the `survivors` records; with a
    `delete_horizon`, stamped with it (attribute bit 6, the base timestamp, every record's
    timestamp delta moved so that its timestamp stays)."""
    if delete_horizon is not None:
        body = _restamp(data, survivors, header.base_timestamp - delete_horizon)
    else:
        body = b"".join(data[start:end] for start, end, _, _, _ in survivors)
    if header.compression:
        body = _compress(header.compression, body)
    out = bytearray(HEADER_SIZE + len(body))
    out[:HEADER_SIZE] = batch[:HEADER_SIZE]
    out[HEADER_SIZE:] = body
    _I32.pack_into(out, BATCH_LENGTH_AT, len(out) - LOG_OVERHEAD)
    _I32.pack_into(out, RECORDS_COUNT_AT, len(survivors))
    if delete_horizon is not None:
        _I16.pack_into(out, ATTRIBUTES_AT, header.attributes | DELETE_HORIZON_MASK)
        _I64.pack_into(out, BASE_TIMESTAMP_AT, delete_horizon)
    _U32.pack_into(out, CRC_AT, calc_crc32c(memoryview(out)[CRC_FROM:]))
    return bytes(out)


def _restamp(data: bytes | memoryview, survivors: Sequence[RecordSpan], shift: int) -> bytes:
    """The `survivors` records with each timestamp delta moved by `shift` (the old base
    timestamp minus the new one), so that every record keeps its timestamp; the rest of
    each record is copied byte for byte."""
    out = bytearray()
    limit = _RECORD_VARINT_MAX_BYTES
    small = ONE_BYTE_VARINTS
    for start, end, _, _, _ in survivors:
        # Past the record's length, then its attributes byte (record_spans read them all).
        body = start + 1 if data[start] < 0x80 else read_varint(data, start, end, limit)[1]
        b = data[body + 1]
        if b < 0x80:
            delta, rest = small[b], body + 2
        else:
            delta, rest = read_varint(data, body + 1, end, limit)
        new_delta = varint_bytes(delta + shift)
        out += varint_bytes(1 + len(new_delta) + end - rest)  # the new record length
        out.append(data[body])
        out += new_delta
        out += data[rest:end]
    return bytes(out)


def empty_batch(header: BatchHeader) -> bytes:
    """The header alone of a producer's latest batch whose records all went (Kafka's
    DefaultRecordBatch.writeEmptyHeader): offsets, producer id, epoch and base sequence
    as they were, no records, no compression, both timestamps its max timestamp."""
    out = bytearray(HEADER_SIZE)
    HEADER_STRUCT.pack_into(
        out,
        0,
        header.base_offset,
        HEADER_SIZE - LOG_OVERHEAD,
        header.partition_leader_epoch,
        header.magic,
        0,
        header.attributes & _EMPTY_BATCH_ATTRIBUTES,
        header.last_offset_delta,
        header.max_timestamp,
        header.max_timestamp,
        header.producer_id,
        header.producer_epoch,
        header.base_sequence,
        0,
    )
    _U32.pack_into(out, CRC_AT, calc_crc32c(memoryview(out)[CRC_FROM:]))
    return bytes(out)


def recompress_batch(
    header: BatchHeader, batch: bytes | bytearray | memoryview, compression: int, level: int | None
) -> bytearray:
    """`batch` with its records section decompressed and compressed again with codec
    `compression` (0: none) at `level` (None: the codec's default); its offsets, producer
    fields, timestamps and records stay, its length, attributes and CRC are recomputed.
    Raises InvalidBatch when the records cannot be decompressed."""
    section = memoryview(batch)[HEADER_SIZE : header.size_bytes]
    if header.compression:
        try:
            data: bytes | memoryview = _decompress(header.compression, section)
        except InvalidBatch:
            raise
        except Exception as exc:
            raise InvalidBatch(f"cannot decompress batch: {exc!r}") from exc
    else:
        data = section
    body = _compress(compression, bytes(data), level) if compression else data
    out = bytearray(HEADER_SIZE + len(body))
    out[:HEADER_SIZE] = batch[:HEADER_SIZE]
    out[HEADER_SIZE:] = body
    _I32.pack_into(out, BATCH_LENGTH_AT, len(out) - LOG_OVERHEAD)
    attributes = (header.attributes & ~COMPRESSION_MASK) | compression
    _I16.pack_into(out, ATTRIBUTES_AT, attributes)
    _U32.pack_into(out, CRC_AT, calc_crc32c(memoryview(out)[CRC_FROM:]))
    return out


def _decompress(compression: int, data: memoryview) -> bytes:
    if compression == 1:
        return bytes(codec.gzip_decode(data))
    if compression == 2:
        return bytes(codec.snappy_decode(data.tobytes()))
    if compression == 3:
        return bytes(codec.lz4_decode(data.tobytes()))
    if compression == 4:
        return bytes(codec.zstd_decode(data.tobytes()))
    raise InvalidBatch(f"unknown compression codec {compression}")


def _compress(compression: int, data: bytes, level: int | None = None) -> bytes:
    if compression == 1:
        return bytes(codec.gzip_encode(data, compresslevel=level))
    if compression == 2:
        return bytes(codec.snappy_encode(data))
    if compression == 3:
        return bytes(codec.lz4_encode(data, level=9 if level is None else level))
    if compression == 4:
        return bytes(codec.zstd_encode(data, level=level))
    raise InvalidBatch(f"unknown compression codec {compression}")
