"""The keys and values of a record batch's records read in bulk, a run of same-shaped
records at a time: the loader's fast path for batches of offset commits.

Theory of operation. A v2 batch's records follow its header, each one

    length varint | attributes int8 | timestampDelta varint | offsetDelta varint |
    keyLength varint | key | valueLength varint | value | headerCount varint | headers

Decoding them one at a time (a record object, its fields, a tuple) costs most of a
coordinator shard's load. But the coordinator writes runs of records of one shape: one
OffsetCommit request's records have one group and topic (one key length), one value
layout (one value length), the batch's timestamp (delta 0), no headers, and offset deltas
counting up. A run of n records of one shape is n slots of the same size S in which every
byte other than the key's and value's contents and the offset delta is the same in each
slot: the record's framing. So a run is recognised with C-level operations only: each
framing byte of the first record, compared with the same byte of every following slot
(a strided slice, `buf[p::S]`, stripped of that byte: what remains starts where a record
of another shape begins), and the offset deltas compared with the expected ones (a
precomputed column of varint bytes per delta width). Alignment follows by induction: a
slot whose length bytes match holds a record of size S, so the next slot starts where
the next record does. Then one `struct.iter_unpack` with the run's layout yields every
(key, value) of the run as a tuple, a few C calls for the whole run.

Anything else (a compressed batch, a null key or value, a record with headers, a key not
starting with the expected prefix, a malformed record) gives None, and the caller
decodes the batch the general way, which also reports what is malformed.
"""

from __future__ import annotations

import struct
from collections.abc import Iterator
from functools import cache

# Offset deltas below these take 1, 2 and 3 bytes as zigzag varints (2 * delta).
_WIDTH_ENDS = (0, 64, 8192, 1 << 16)  # 3 bytes only up to 65535: past it, None
# The first run checked, in records; each next chunk of a long run is 4 times larger.
_FIRST_CHUNK = 16
# A run costs a few microseconds however short (a record decoded the general way: a
# fraction of one): a batch whose runs average fewer records than this is given up.
RUN_RECORDS_MIN = 32

RecordRun = Iterator[tuple[bytes, bytes]]


@cache
def _delta_column(width: int, index: int) -> bytes:
    """Byte `index` of the zigzag varint (`width` bytes long) of every offset delta d
    below the end of the deltas that long, at position d. Built from repeated bytes: the
    byte holds bits 7*index.. of 2*d, which change every 2**(7*index - 1) deltas."""
    end = _WIDTH_ENDS[width]
    more = 0 if index == width - 1 else 0x80  # the continuation bit
    if index == 0:
        period = bytes((delta << 1) & 0x7F | more for delta in range(64))
        return period * (end // 64)
    repeat = 1 << (7 * index - 1)
    return b"".join(bytes(((step & 0x7F) | more,)) * repeat for step in range(-(-end // repeat)))[
        :end
    ]


@cache
def _layout(key_at: int, key_len: int, value_at: int, value_len: int, size: int) -> struct.Struct:
    """(key, value) of a record slot of `size` bytes, the key at `key_at`, the value at
    `value_at`."""
    key_end = key_at + key_len
    value_end = value_at + value_len
    return struct.Struct(
        f"<{key_at}x{key_len}s{value_at - key_end}x{value_len}s{size - value_end}x"
    )


def _varint(buf: bytes, pos: int, end: int) -> tuple[int, int]:
    """(zigzag varint at `pos`, position after it); (-1, end + 1) when it runs past `end`
    or past 3 bytes (longer ones are not this fast path's)."""
    if pos < end:
        byte = buf[pos]
        if byte < 0x80:  # the common case: one byte
            return (byte >> 1) ^ -(byte & 1), pos + 1
    value = 0
    shift = 0
    for at in range(pos, min(pos + 3, end)):
        byte = buf[at]
        value |= (byte & 0x7F) << shift
        if byte < 0x80:
            return (value >> 1) ^ -(value & 1), at + 1
        shift += 7
    return -1, end + 1


def _shape(
    buf: bytes, pos: int, end: int, delta: int, key_prefix: bytes
) -> tuple[int, int, int, int, int, int, int] | None:
    """The record at `pos` (offset delta `delta`) as (size, delta_at, delta_width, key_at,
    key_len, value_at, value_len), positions relative to `pos`; None when it is not of
    this fast path (see the module docstring) or is malformed."""
    length, at = _varint(buf, pos, end)
    record_end = at + length
    if length <= 0 or record_end > end:
        return None
    _, at = _varint(buf, at + 1, record_end)  # attributes, then the timestamp delta
    delta_at = at
    found, at = _varint(buf, at, record_end)
    if found != delta:
        return None
    delta_width = at - delta_at
    key_len, key_at = _varint(buf, at, record_end)
    if key_len < len(key_prefix) or buf[key_at : key_at + len(key_prefix)] != key_prefix:
        return None
    value_len, value_at = _varint(buf, key_at + key_len, record_end)
    if value_len < 0 or value_at + value_len + 1 != record_end:
        return None
    if buf[record_end - 1] != 0:  # the header count: none
        return None
    return (
        record_end - pos,
        delta_at - pos,
        delta_width,
        key_at - pos,
        key_len,
        value_at - pos,
        value_len,
    )


@cache
def _framing(shape: tuple[int, int, int, int, int, int, int], prefix_len: int) -> list[int]:
    """The positions in a record slot of `shape` (`_shape`) that every record of its run
    repeats: all but the offset delta and the contents of the key (past its prefix) and
    value."""
    size, delta_at, delta_width, key_at, key_len, value_at, value_len = shape
    return [
        p
        for p in range(size)
        if not (
            delta_at <= p < delta_at + delta_width
            or key_at + prefix_len <= p < key_at + key_len
            or value_at <= p < value_at + value_len
        )
    ]


def _run_length(buf: bytes, pos: int, size: int, limit: int, framing: list[int]) -> int:
    """How many slots of `size` bytes from `pos` (at most `limit`) repeat the framing
    bytes (positions `framing` within a slot) of the first."""
    run = 0
    chunk = _FIRST_CHUNK
    first = [buf[pos + p : pos + p + 1] for p in framing]
    while run < limit:
        count = limit - run if limit - run < chunk else chunk
        start = pos + run * size
        stop = start + count * size
        good = count
        for p, byte in zip(framing, first, strict=True):
            column = buf[start + p : stop : size]
            if column != byte * count:
                # How many slots from `start` repeat the first record's byte at `p`.
                same = count - len(column.lstrip(byte))
                if same < good:
                    good = same
                    if good == 0:
                        break
        run += good
        if good < count:
            break
        chunk *= 4
    return run


def record_runs(
    buf: bytes, start: int, end: int, count: int, key_prefix: bytes
) -> list[RecordRun] | None:
    """The (key, value) pairs of the `count` records in `buf[start:end]` (an uncompressed
    v2 batch's records section), run by run, in order; None when some record has a null
    key or value, headers, a key not starting with `key_prefix`, or is malformed (the
    caller decodes the batch the general way). The runs read `buf` lazily: keep it."""
    runs: list[RecordRun] = []
    view = memoryview(buf)
    pos = start
    delta = 0
    while delta < count:
        shape = _shape(buf, pos, end, delta, key_prefix)
        if shape is None:
            return None
        size, delta_at, delta_width, key_at, key_len, value_at, value_len = shape
        if delta_width > 3 or delta >= _WIDTH_ENDS[delta_width]:
            return None
        limit = min(count - delta, _WIDTH_ENDS[delta_width] - delta, (end - pos) // size)
        framing = _framing(shape, len(key_prefix))
        run = _run_length(buf, pos, size, limit, framing)
        run_end = pos + run * size
        for index in range(delta_width):
            column = buf[pos + delta_at + index : run_end : size]
            if column != _delta_column(delta_width, index)[delta : delta + run]:
                return None
        runs.append(
            _layout(key_at, key_len, value_at, value_len, size).iter_unpack(view[pos:run_end])
        )
        pos = run_end
        delta += run
        if len(runs) > 2 and delta < RUN_RECORDS_MIN * len(runs) and delta < count:
            return None  # short runs: the general decoding is cheaper (see above)
    if pos != end:
        return None
    return runs
