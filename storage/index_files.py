"""The bytes of a segment's two index files, as Kafka writes them: the offset index
(`.index`: big-endian u32 relative offset, u32 file position) and the time index
(`.timeindex`: i64 timestamp, u32 relative offset), from and to the arrays a Segment keeps.

Each runs in C loops (array byteswaps and extended slices), no Python work per entry: a
segment's indexes are read whole at start and written whole at roll or close."""

from __future__ import annotations

import sys
from array import array
from itertools import islice
from operator import lt

INDEX_ENTRY_BYTES = 8
TIME_INDEX_ENTRY_BYTES = 12
_LITTLE_ENDIAN_HOST = sys.byteorder == "little"


def strictly_increasing(values: array[int]) -> bool:
    return all(map(lt, values, islice(values, 1, None)))


def decode_offset_index(data: bytes) -> tuple[array[int], array[int]]:
    both = array("I")
    both.frombytes(data)
    if _LITTLE_ENDIAN_HOST:
        both.byteswap()
    return both[0::2], both[1::2]


def encode_offset_index(rel: array[int], pos: array[int]) -> bytes:
    both = array("I", bytes(INDEX_ENTRY_BYTES * len(rel)))
    both[0::2] = rel
    both[1::2] = pos
    if _LITTLE_ENDIAN_HOST:
        both.byteswap()
    return both.tobytes()


def decode_time_index(data: bytes) -> tuple[array[int], array[int]]:
    # De-interleave the 12-byte entries with extended slices (C loops, no per-entry
    # Python work): byte j of every timestamp, then byte j of every offset.
    n = len(data) // TIME_INDEX_ENTRY_BYTES
    ts_bytes = bytearray(8 * n)
    rel_bytes = bytearray(4 * n)
    for j in range(8):
        ts_bytes[j::8] = data[j::TIME_INDEX_ENTRY_BYTES]
    for j in range(4):
        rel_bytes[j::4] = data[8 + j :: TIME_INDEX_ENTRY_BYTES]
    ts = array("q")
    ts.frombytes(ts_bytes)
    rel = array("I")
    rel.frombytes(rel_bytes)
    if _LITTLE_ENDIAN_HOST:
        ts.byteswap()
        rel.byteswap()
    return ts, rel


def encode_time_index(ts: array[int], rel: array[int]) -> bytes:
    ts_be = array("q", ts)
    rel_be = array("I", rel)
    if _LITTLE_ENDIAN_HOST:
        ts_be.byteswap()
        rel_be.byteswap()
    ts_bytes = ts_be.tobytes()
    rel_bytes = rel_be.tobytes()
    out = bytearray(TIME_INDEX_ENTRY_BYTES * len(ts))
    for j in range(8):
        out[j::TIME_INDEX_ENTRY_BYTES] = ts_bytes[j::8]
    for j in range(4):
        out[8 + j :: TIME_INDEX_ENTRY_BYTES] = rel_bytes[j::4]
    return bytes(out)
