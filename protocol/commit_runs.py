"""OffsetCommit records of a record batch read in bulk, a run of same-shaped records at a
time: the shard loader's fast path (coordinator/runtime/runner.py).

Theory of operation. A v2 batch's records follow its header, each one

    length varint | attributes int8 | timestampDelta varint | offsetDelta varint |
    keyLength varint | key | valueLength varint | value | headerCount varint | headers

Decoding them one at a time (a record object, its fields, a tuple) costs most of a
coordinator shard's load. But the coordinator writes runs of records of one shape: one
OffsetCommit request's records have one group and topic (one key layout: version 1, the
group's and the topic's lengths), one value layout (one value length), the batch's
timestamp (delta 0), no headers, and offset deltas counting up; many groups whose names
have one length make one run too. A run of n records of one shape is n slots of the
same size S in which every byte other than the group, topic and partition of the key,
the value and the offset delta is the same in each slot: the record's framing. So a run
is recognised with C-level operations only: each framing byte of the first record,
compared with the same byte of every following slot (a strided slice, `buf[p::S]`,
stripped of that byte: what remains starts where a record of another shape begins), and
the offset deltas compared with the expected ones (a precomputed column of varint bytes
per delta width). Alignment follows by induction: a slot whose length bytes match holds
a record of size S, so the next slot starts where the next record does. Then one
`struct.iter_unpack` with the run's layout yields every (key, value) of the run, and
another every key's (group, topic, partition), a few C calls for the whole run.

Anything else (a null key or value, a record with headers, another record type, a
malformed key or record) gives None, and the caller decodes the batch the general way,
which also reports what is malformed. So do short runs: a run costs a few microseconds
however short, a record decoded the general way a fraction of one.
"""

from __future__ import annotations

import struct
from functools import cache
from typing import NamedTuple

# Offset deltas below these take 1, 2 and 3 bytes as zigzag varints (2 * delta).
_WIDTH_ENDS = (0, 64, 8192, 1 << 16)  # 3 bytes only up to 65535: past it, None
# The first run checked, in records; each next chunk of a long run is 4 times larger.
_FIRST_CHUNK = 16
# A batch whose runs average fewer records than this is given up (module docstring).
RUN_RECORDS_MIN = 32

COMMIT_KEY_PREFIX = b"\x00\x01"  # an OffsetCommit key (record type 1) starts so
# An OffsetCommit key: version int16, group (int16 length, bytes), topic (the same),
# partition int32.
_KEY_FIXED_BYTES = 10
_GROUP_LENGTH = struct.Struct(">h")
_TOPIC_LENGTH = _GROUP_LENGTH

# size, delta_at, delta_width, key_at, key_len, value_at, value_len, group_len (_shape)
_Shape = tuple[int, int, int, int, int, int, int, int]


class CommitRun(NamedTuple):
    """A run of OffsetCommit records of one shape: `pairs.iter_unpack(records)` yields
    each record's (key bytes, value bytes), `fields.iter_unpack(records)` its key's
    (group bytes, topic bytes, partition)."""

    records: memoryview
    pairs: struct.Struct
    fields: struct.Struct


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
def _layouts(shape: _Shape) -> tuple[struct.Struct, struct.Struct]:
    """(key, value) and (group, topic, partition) of a record slot of `shape`."""
    size, _, _, key_at, key_len, value_at, value_len, group_len = shape
    key_end = key_at + key_len
    value_end = value_at + value_len
    topic_len = key_len - _KEY_FIXED_BYTES - group_len
    pairs = f"<{key_at}x{key_len}s{value_at - key_end}x{value_len}s{size - value_end}x"
    fields = f">{key_at + 4}x{group_len}s2x{topic_len}si{size - key_end}x"
    return struct.Struct(pairs), struct.Struct(fields)


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


def _shape(buf: bytes, pos: int, end: int, delta: int) -> _Shape | None:
    """The record at `pos` (offset delta `delta`) as (size, delta_at, delta_width, key_at,
    key_len, value_at, value_len, group_len), positions relative to `pos`; None when it
    is not of this fast path (see the module docstring) or is malformed."""
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
    if key_len < _KEY_FIXED_BYTES or buf[key_at : key_at + 2] != COMMIT_KEY_PREFIX:
        return None
    group_len, topic_len = _GROUP_LENGTH.unpack_from(buf, key_at + 2)[0], -1
    if 0 <= group_len <= key_len - _KEY_FIXED_BYTES:
        topic_len = _TOPIC_LENGTH.unpack_from(buf, key_at + 4 + group_len)[0]
    if topic_len != key_len - _KEY_FIXED_BYTES - group_len:
        return None  # a malformed key: the general way reports it
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
        group_len,
    )


@cache
def _framing(shape: _Shape) -> list[int]:
    """The positions in a record slot of `shape` (`_shape`) that every record of its run
    repeats: all but the offset delta, the key's group, topic and partition, and the
    value."""
    size, delta_at, delta_width, key_at, key_len, value_at, value_len, group_len = shape
    group_at = key_at + 4
    topic_at = group_at + group_len + 2
    return [
        p
        for p in range(size)
        if not (
            delta_at <= p < delta_at + delta_width
            or group_at <= p < group_at + group_len
            or topic_at <= p < key_at + key_len
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


def commit_runs(buf: bytes, start: int, end: int, count: int) -> list[CommitRun] | None:
    """The `count` records in `buf[start:end]` (an uncompressed v2 batch's records
    section) as runs of OffsetCommit records, in order; None when some record is not an
    OffsetCommit record (type 1) with a value and without headers, is malformed, or the
    runs are short (the caller decodes the batch the general way). The runs are views of
    `buf`."""
    runs: list[CommitRun] = []
    view = memoryview(buf)
    pos = start
    delta = 0
    while delta < count:
        shape = _shape(buf, pos, end, delta)
        if shape is None:
            return None
        size, delta_at, delta_width = shape[0], shape[1], shape[2]
        if delta >= _WIDTH_ENDS[delta_width]:
            return None
        limit = min(count - delta, _WIDTH_ENDS[delta_width] - delta, (end - pos) // size)
        run = _run_length(buf, pos, size, limit, _framing(shape))
        run_end = pos + run * size
        for index in range(delta_width):
            column = buf[pos + delta_at + index : run_end : size]
            if column != _delta_column(delta_width, index)[delta : delta + run]:
                return None
        pairs, fields = _layouts(shape)
        runs.append(CommitRun(view[pos:run_end], pairs, fields))
        pos = run_end
        delta += run
        if len(runs) > 2 and delta < RUN_RECORDS_MIN * len(runs) and delta < count:
            return None  # short runs: the general decoding is cheaper (see above)
    if pos != end:
        return None
    return runs
