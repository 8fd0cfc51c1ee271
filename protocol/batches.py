"""Record batch (magic v2) header access without re-encoding.

Batches are stored and served exactly as producers sent them; the server only reads the
61-byte header, checks the CRC-32C and rewrites the base offset (which the CRC does not
cover), and, as Kafka's LogValidator, the timestamp type and max timestamp (which it does
cover: the CRC is recomputed; the records stay as sent, compressed or not). Records inside a
batch are decoded only where a record-level answer is needed (timestamp checks and lookups),
using aiokafka's C-accelerated codec, which this module also hands to the rest of the server
(DefaultRecordBatch to read a batch's records, DefaultRecordBatchBuilder to build one,
and calc_crc32c, from the crc32c package): nothing outside protocol/ imports aiokafka.

Layout (big-endian): baseOffset i64 @0, batchLength i32 @8, partitionLeaderEpoch i32 @12,
magic i8 @16, crc u32 @17, attributes i16 @21, lastOffsetDelta i32 @23, baseTimestamp i64
@27, maxTimestamp i64 @35, producerId i64 @43, producerEpoch i16 @51, baseSequence i32 @53,
recordsCount i32 @57, records @61. The CRC covers bytes 21..end. It is declared once, in
_FIELDS below: the offsets (*_AT), HEADER_STRUCT and the partial readers of header_struct
derive from it.
"""

from __future__ import annotations

import dataclasses
import struct
from collections.abc import Iterator
from dataclasses import dataclass

# Re-exported (the "as" says so): the rest of the server reads, builds and checks batches
# with these.
from aiokafka.record.default_records import DefaultRecordBatch as DefaultRecordBatch
from aiokafka.record.default_records import (
    DefaultRecordBatchBuilder as DefaultRecordBatchBuilder,
)

# CRC-32C by the crc32c package (a dependency; kio's too): the SSE4.2
# instruction, 7 times faster than aiokafka's table (46 MB: 4 ms, not 28), which a load
# pays twice (the recovery of a rebuilt log, then every read); the same values.
from crc32c import crc32c as _crc32c

from .frozen import fast_new

calc_crc32c = _crc32c  # re-exported: the server's CRC-32C (see the import)

# The v2 batch header (Kafka's DefaultRecordBatch), field by field: BatchHeader's field
# names and struct codes, in order.
_FIELDS = (
    ("base_offset", "q"),
    ("batch_length", "i"),
    ("partition_leader_epoch", "i"),
    ("magic", "b"),
    ("crc", "I"),
    ("attributes", "h"),
    ("last_offset_delta", "i"),
    ("base_timestamp", "q"),
    ("max_timestamp", "q"),
    ("producer_id", "q"),
    ("producer_epoch", "h"),
    ("base_sequence", "i"),
    ("records_count", "i"),
)
_AT = {
    name: struct.calcsize(">" + "".join(code for _, code in _FIELDS[:i]))
    for i, (name, _) in enumerate(_FIELDS)
}
_CODE = dict(_FIELDS)


def header_struct(*names: str) -> struct.Struct:
    """A struct that reads (or packs) only the named header fields, in header order, and
    skips the others: for loops that need a few fields of many headers, not BatchHeaders."""
    fmt = ">"
    pos = 0
    for name in names:
        skip = _AT[name] - pos
        if skip < 0:
            raise ValueError(f"header field {name} out of order")
        fmt += (f"{skip}x" if skip else "") + _CODE[name]
        pos = _AT[name] + struct.calcsize(">" + _CODE[name])
    return struct.Struct(fmt)


HEADER_STRUCT = header_struct(*_CODE)
HEADER_SIZE = HEADER_STRUCT.size  # 61
BATCH_LENGTH_AT = _AT["batch_length"]
CRC_AT = _AT["crc"]
ATTRIBUTES_AT = _AT["attributes"]
BASE_TIMESTAMP_AT = _AT["base_timestamp"]
MAX_TIMESTAMP_AT = _AT["max_timestamp"]
RECORDS_COUNT_AT = _AT["records_count"]
# The CRC covers the batch from its attributes on.
CRC_FROM = ATTRIBUTES_AT
# baseOffset + batchLength: the part of the header outside batchLength.
LOG_OVERHEAD = _AT["partition_leader_epoch"]
MAGIC_V2 = 2

COMPRESSION_MASK = 0x07
TIMESTAMP_TYPE_MASK = 0x08
TRANSACTIONAL_MASK = 0x10
CONTROL_MASK = 0x20
DELETE_HORIZON_MASK = 0x40
# The attribute bits Kafka's DefaultRecordBatch.computeAttributes writes back, bar the
# timestamp type: rewriting the timestamp clears any other (undefined) bit, as in Kafka.
_KEPT_ATTRIBUTES = COMPRESSION_MASK | TRANSACTIONAL_MASK | CONTROL_MASK | DELETE_HORIZON_MASK

NO_PRODUCER_ID = -1
NO_SEQUENCE = -1

_BASE_OFFSET = header_struct("base_offset")
_CRC = struct.Struct(">" + _CODE["crc"])
_ATTRIBUTES = struct.Struct(">" + _CODE["attributes"])
_MAX_TIMESTAMP = struct.Struct(">" + _CODE["max_timestamp"])
_LENGTH = header_struct("base_offset", "batch_length")
_OFFSET_LENGTH_EPOCH = header_struct("base_offset", "batch_length", "partition_leader_epoch")


class InvalidBatch(ValueError):
    """A batch that is truncated, not magic v2, or fails its CRC."""


@dataclass(frozen=True, slots=True)
class BatchHeader:
    base_offset: int
    batch_length: int
    partition_leader_epoch: int
    magic: int
    crc: int
    attributes: int
    last_offset_delta: int
    base_timestamp: int
    max_timestamp: int
    producer_id: int
    producer_epoch: int
    base_sequence: int
    records_count: int

    @property
    def size_bytes(self) -> int:
        return self.batch_length + LOG_OVERHEAD

    @property
    def last_offset(self) -> int:
        return self.base_offset + self.last_offset_delta

    @property
    def compression(self) -> int:
        return self.attributes & COMPRESSION_MASK

    @property
    def is_transactional(self) -> bool:
        return bool(self.attributes & TRANSACTIONAL_MASK)

    @property
    def is_control(self) -> bool:
        return bool(self.attributes & CONTROL_MASK)

    @property
    def is_log_append_time(self) -> bool:
        """Timestamp type LogAppendTime: every record's timestamp is max_timestamp."""
        return bool(self.attributes & TIMESTAMP_TYPE_MASK)

    @property
    def last_sequence(self) -> int:
        if self.base_sequence == NO_SEQUENCE:
            return NO_SEQUENCE
        # Sequences wrap at int32 max, as in Kafka's DefaultRecordBatch.incrementSequence.
        return (self.base_sequence + self.last_offset_delta) % (2**31)


# Every appended batch (a produce request's, a coordinator shard's) gets a header: built
# without the frozen __init__'s 13 object.__setattr__ calls.
_new_header = fast_new(BatchHeader)
if tuple(f.name for f in dataclasses.fields(BatchHeader)) != tuple(_CODE):
    raise TypeError("BatchHeader's fields are not the header layout's")


def parse_header(buf: bytes | bytearray | memoryview, pos: int = 0) -> BatchHeader:
    """Parse the header at `pos`; raises InvalidBatch when it is cut short or not v2."""
    if len(buf) - pos < HEADER_SIZE:
        raise InvalidBatch("batch header truncated")
    header = _new_header(*HEADER_STRUCT.unpack_from(buf, pos))
    if header.magic != MAGIC_V2:
        raise InvalidBatch(f"unsupported record batch magic {header.magic}")
    if header.batch_length < HEADER_SIZE - LOG_OVERHEAD:
        raise InvalidBatch(f"batch length {header.batch_length} is below the header size")
    if header.last_offset_delta < 0 or header.records_count < 0:
        raise InvalidBatch("negative record count")
    return header


def batch_size_at(buf: bytes | bytearray | memoryview, pos: int) -> int:
    """Total size of the batch at `pos` (0 when not even its length is there)."""
    if len(buf) - pos < LOG_OVERHEAD:
        return 0
    return int(_LENGTH.unpack_from(buf, pos)[1]) + LOG_OVERHEAD


def crc_ok(buf: bytes | bytearray | memoryview, pos: int, header: BatchHeader) -> bool:
    end = pos + header.size_bytes
    if end > len(buf):
        return False
    # A memoryview slice: the CRC is computed in place, without copying the batch.
    return int(calc_crc32c(memoryview(buf)[pos + CRC_FROM : end])) == header.crc


def walk_batches(buf: bytes | bytearray | memoryview) -> Iterator[tuple[int, BatchHeader]]:
    """(position, header) of each batch of `buf`, batches laid end to end, their headers
    parsed and nothing else checked (not the CRC); InvalidBatch for a header cut short or
    malformed, or a batch running past the end."""
    pos = 0
    total = len(buf)
    while pos < total:
        header = parse_header(buf, pos)
        if pos + header.size_bytes > total:
            raise InvalidBatch("batch truncated")
        yield pos, header
        pos += header.size_bytes


def split_batches(buf: bytes | bytearray | memoryview) -> list[BatchHeader]:
    """Headers of every batch in a produce payload, validated (length, magic, CRC).

    Raises InvalidBatch on any defect: a produce request is all or nothing per partition.
    """
    headers: list[BatchHeader] = []
    for pos, header in walk_batches(buf):
        if not crc_ok(buf, pos, header):
            raise InvalidBatch("batch CRC mismatch")
        if header.records_count != header.last_offset_delta + 1:
            raise InvalidBatch("records count does not match the last offset delta")
        headers.append(header)
    return headers


def set_base_offset(buf: bytearray, pos: int, base_offset: int) -> None:
    """Stamp the offset the log assigned; outside the CRC, so the batch stays valid."""
    _BASE_OFFSET.pack_into(buf, pos, base_offset)


def set_base_offset_and_leader_epoch(
    buf: bytearray, pos: int, base_offset: int, batch_length: int, leader_epoch: int
) -> None:
    """Stamp the offset the log assigned and the leader's epoch, as Kafka's leader does on
    append (LogValidator: setPartitionLeaderEpoch); both sit outside the CRC. One pack of
    the first three header fields (`batch_length` is written back as it is)."""
    _OFFSET_LENGTH_EPOCH.pack_into(buf, pos, base_offset, batch_length, leader_epoch)


def set_max_timestamp(
    buf: bytearray, pos: int, header: BatchHeader, log_append_time: bool, max_timestamp: int
) -> BatchHeader:
    """Kafka's DefaultRecordBatch.setMaxTimestamp on the batch at `pos`: write the timestamp
    type (attributes bit 3) and max timestamp, then the CRC they are covered by. The base
    timestamp and the records' timestamp deltas stay as they are (readers of a LogAppendTime
    batch take max_timestamp for every record). Returns the batch's new header; nothing is
    written when both are already as asked."""
    if header.is_log_append_time == log_append_time and header.max_timestamp == max_timestamp:
        return header
    attributes = header.attributes & _KEPT_ATTRIBUTES
    if log_append_time:
        attributes |= TIMESTAMP_TYPE_MASK
    _ATTRIBUTES.pack_into(buf, pos + ATTRIBUTES_AT, attributes)
    _MAX_TIMESTAMP.pack_into(buf, pos + MAX_TIMESTAMP_AT, max_timestamp)
    crc = int(calc_crc32c(memoryview(buf)[pos + CRC_FROM : pos + header.size_bytes]))
    _CRC.pack_into(buf, pos + CRC_AT, crc)
    return dataclasses.replace(header, attributes=attributes, max_timestamp=max_timestamp, crc=crc)


def record_timestamp_list(batch: bytes | bytearray | memoryview) -> list[int]:
    """Each record's timestamp, in order, of one whole batch (as record_timestamps reads
    them); a list built in one pass, for checks over every record of a produced batch."""
    return [record.timestamp for record in DefaultRecordBatch(batch)]


def record_keys(batch: bytes | bytearray | memoryview) -> list[bytes | None]:
    """Each record's key (None when it has none), in order, of one whole batch,
    decompressing if needed."""
    return [record.key for record in DefaultRecordBatch(batch)]


def record_timestamps(batch: bytes | bytearray | memoryview) -> Iterator[tuple[int, int]]:
    """(offset, timestamp) of each record of one whole batch, decompressing if needed. In a
    LogAppendTime batch every record's timestamp is the batch's max timestamp (as Kafka's
    DefaultRecordBatch reads it; aiokafka's codec does the same)."""
    decoded = DefaultRecordBatch(batch)
    for record in decoded:
        yield record.offset, record.timestamp
