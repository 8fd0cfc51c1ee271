"""OffsetCommit values read as columns with numpy, a whole Arrow batch at once, for the
analytics job's decoder (coordinator_log.py).

Theory of operation. Every OffsetCommitValue version is a fixed layout but for one string,
the metadata, whose length is in a fixed place (an int16 in v0-v3; a one-byte compact
length in v4, when the metadata is under 127 bytes, as clients write it):

    v0, v2  version  offset:i64  metadata:str16  commit_ts:i64
    v1      version  offset:i64  metadata:str16  commit_ts:i64  expire_ts:i64
    v3      version  offset:i64  epoch:i32  metadata:str16  commit_ts:i64
    v4      version  offset:i64  epoch:i32  metadata:cstr  commit_ts:i64  tags

(v4's tagged fields: none (0), or only the topic id (1, tag 0, size 16, 16 bytes)). So the
fields of every value of a batch are found by array arithmetic on the value column's
offsets and gathered from its data buffer, big-endian, with no Python per record. A value
of any other shape (a longer metadata, other tagged fields, a version this table lacks,
trailing bytes, metadata that is not UTF-8) is left to the codec (`fast` is False for it),
which gives the same fields or the error. The unit tests check both ways agree record for
record.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pyarrow as pa

_BE64 = np.dtype(">i8")
_BE32 = np.dtype(">i4")
_BE16 = np.dtype(">i2")
_TOPIC_ID_TAG = np.array([1, 0, 16], np.uint8)  # tag count 1, tag 0, size 16


@dataclass(frozen=True)
class CommitColumns:
    """The fields of a batch's OffsetCommit values; rows where `fast` is False hold
    nothing meaningful (left to the codec)."""

    fast: np.ndarray  # bool
    offset: np.ndarray  # int64
    leader_epoch: np.ndarray  # int32
    metadata: pa.StringArray  # "" where not fast
    commit_timestamp_ms: np.ndarray  # int64
    expire_timestamp_ms: np.ndarray  # int64


def binary_buffers(column: pa.Array) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """(valid, starts, lengths) of a binary column's values, and its data: (bool, int64,
    int64) per row, then the bytes as uint8. Works for binary and large_binary, sliced or
    not."""
    n = len(column)
    width = np.int64 if pa.types.is_large_binary(column.type) else np.int32
    validity, offsets_buf, data_buf = column.buffers()
    offsets = np.frombuffer(offsets_buf, width, n + 1, column.offset * width().itemsize)
    offsets = offsets.astype(np.int64)
    data = np.frombuffer(data_buf, np.uint8) if data_buf is not None else np.empty(0, np.uint8)
    if validity is None:
        valid = np.ones(n, bool)
    else:
        bits = np.unpackbits(np.frombuffer(validity, np.uint8), bitorder="little")
        valid = bits[column.offset : column.offset + n].astype(bool)
    return valid, offsets[:-1], offsets[1:] - offsets[:-1], data


def _gather(data: np.ndarray, at: np.ndarray, dtype: np.dtype) -> np.ndarray:
    """The big-endian integer of `dtype` at each position of `at` in `data`, native."""
    width = dtype.itemsize
    picked = data[at[:, None] + np.arange(width)]
    return picked.view(dtype).reshape(-1).astype(dtype.newbyteorder("="))


def commit_columns(values: pa.Array, wanted: np.ndarray) -> CommitColumns:
    """The fields of the OffsetCommit values at the rows of `wanted` (bool; the rows whose
    key is an OffsetCommit key and whose value is not null), by the table of the module
    docstring."""
    valid, starts, lengths, data = binary_buffers(values)
    n = len(values)
    rows = wanted & valid & (lengths >= 20)
    # Each row's bytes are read at starts + a position below its length only: rows too
    # short for a layout's fixed part are out before the layout reads them.
    safe = np.where(rows, starts, 0)
    size = np.where(rows, lengths, 0)
    first = np.zeros(n, np.uint8)
    version = np.full(n, -1, np.int64)
    first[rows] = data[safe[rows]]
    version[rows] = data[safe[rows] + 1]
    version[first != 0] = -1
    # Where the metadata starts and how long it is, per layout; -1: not this table's.
    meta_at = np.full(n, -1, np.int64)
    meta_len = np.zeros(n, np.int64)
    tail = np.zeros(n, np.int64)  # bytes after the metadata
    short16 = (version >= 0) & (version <= 3)
    at16 = np.where(version == 3, 14, 10)
    m16 = short16 & (size >= at16 + 2)
    if m16.any():
        length16 = _gather(data, safe[m16] + at16[m16], _BE16).astype(np.int64)
        meta_at[m16] = at16[m16] + 2
        meta_len[m16] = length16
        tail[m16] = np.where(version[m16] == 1, 16, 8)
    v4 = (version == 4) & (size >= 24)
    if v4.any():
        compact = data[safe[v4] + 14].astype(np.int64)
        ok = (compact >= 1) & (compact < 0x80)
        idx = np.flatnonzero(v4)[ok]
        meta_at[idx] = 15
        meta_len[idx] = compact[ok] - 1
        tail[idx] = 9  # commit timestamp and an empty tag section; topic id checked below
    layout = (meta_at >= 0) & (meta_len >= 0)
    ends = meta_at + meta_len + tail
    with_topic_id = layout & (version == 4) & (size == ends + 18)
    layout &= (size == ends) | with_topic_id
    commit_at = meta_at + meta_len
    if (layout & (version == 4)).any():
        v4 = np.flatnonzero(layout & (version == 4))
        tag_at = safe[v4] + commit_at[v4] + 8
        ok = data[tag_at] == 0
        has_id = with_topic_id[v4]
        tags = data[tag_at[has_id][:, None] + np.arange(3)]
        ok[has_id] = (tags == _TOPIC_ID_TAG).all(1)
        layout[v4] = ok
    fast = layout
    idx = np.flatnonzero(fast)
    offset = np.zeros(n, np.int64)
    epoch = np.full(n, -1, np.int32)
    commit = np.zeros(n, np.int64)
    expire = np.full(n, -1, np.int64)
    if len(idx):
        base = safe[idx]
        offset[idx] = _gather(data, base + 2, _BE64)
        has_epoch = version[idx] >= 3
        epoch[idx[has_epoch]] = _gather(data, base[has_epoch] + 10, _BE32)
        commit[idx] = _gather(data, base + commit_at[idx], _BE64)
        v1 = version[idx] == 1
        expire[idx[v1]] = _gather(data, base[v1] + commit_at[idx[v1]] + 8, _BE64)
    metadata, fast = _metadata(data, np.where(fast, safe + meta_at, 0), meta_len, fast)
    return CommitColumns(fast, offset, epoch, metadata, commit, expire)


def _metadata(
    data: np.ndarray, at: np.ndarray, length: np.ndarray, fast: np.ndarray
) -> tuple[pa.StringArray, np.ndarray]:
    """The metadata strings of the `fast` rows ("" elsewhere), and `fast` less the rows
    whose metadata is not UTF-8 (the codec raises for them)."""
    length = np.where(fast, length, 0)
    offsets = np.zeros(len(length) + 1, np.int64)
    np.cumsum(length, out=offsets[1:])
    total = int(offsets[-1])
    if total:
        source = np.repeat(at - offsets[:-1], length) + np.arange(total)
        chars = data[source]
    else:
        chars = np.empty(0, np.uint8)
    strings = pa.StringArray.from_buffers(
        len(length), pa.py_buffer(offsets.astype(np.int32)), pa.py_buffer(chars.tobytes())
    )
    try:
        strings.validate(full=True)
    except pa.ArrowInvalid:
        # Rare: some metadata is not UTF-8; the codec raises for those rows.
        texts = [""] * len(length)
        for i in np.flatnonzero(length):
            try:
                texts[i] = data[at[i] : at[i] + length[i]].tobytes().decode()
            except UnicodeDecodeError:
                fast[i] = False
        strings = pa.array(texts, pa.string())
    return strings, fast
