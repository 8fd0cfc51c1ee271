"""`__consumer_offsets` records decoded into columns, for Spark's mapInArrow (the analytics
job, analytics.py): Arrow batches of the Kafka source's rows in, Arrow batches of decoded
records out, one output row per input row, a whole batch per call.

Theory of operation. The codec is the server's own (protocol/records.py), so the job reads
exactly what the server writes (and what Kafka writes: the format is byte for byte Kafka's).
OffsetCommit records, nearly all of a busy log, go through the codec's fast paths
(`offset_commit_key_fields`, `offset_commit_value_fields`) straight into columns, with keys
memoised on their bytes (a log commits the same partitions over and over), and no record
object is built. Every other record (GroupMetadata, the ConsumerGroup* records of KIP-848)
is decoded whole to name its group, and keeps its key and value bytes: the group timeline
(group_timeline.py) replays them on the driver. A record the codec cannot read keeps its
bytes, with the error in `error`, and is skipped by the tables, as the server's loader skips
it.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pyarrow as pa

from groupcoord.protocol.records import (
    RecordError,
    decode_record,
    offset_commit_key_fields,
    offset_commit_value_fields,
)

# The Kafka source's columns the job selects (analytics.py) and hands to `decode_batches`.
SOURCE_COLUMNS = ("partition", "offset", "timestamp_ms", "key", "value")

# What `decode_batches` yields, as Spark's DDL (mapInArrow's schema) and as Arrow's.
DECODED_DDL = (
    "partition INT, offset BIGINT, timestamp_ms BIGINT, record_type SMALLINT, `group` STRING, "
    "topic STRING, topic_partition INT, committed_offset BIGINT, leader_epoch INT, "
    "metadata STRING, commit_timestamp_ms BIGINT, expire_timestamp_ms BIGINT, "
    "tombstone BOOLEAN, error STRING, key BINARY, value BINARY"
)
DECODED_SCHEMA = pa.schema(
    [
        ("partition", pa.int32()),
        ("offset", pa.int64()),
        ("timestamp_ms", pa.int64()),
        ("record_type", pa.int16()),
        ("group", pa.string()),
        ("topic", pa.string()),
        ("topic_partition", pa.int32()),
        ("committed_offset", pa.int64()),
        ("leader_epoch", pa.int32()),
        ("metadata", pa.string()),
        ("commit_timestamp_ms", pa.int64()),
        ("expire_timestamp_ms", pa.int64()),
        ("tombstone", pa.bool_()),
        ("error", pa.string()),
        ("key", pa.binary()),
        ("value", pa.binary()),
    ]
)
OFFSET_COMMIT_TYPES = (0, 1)  # LegacyOffsetCommit and OffsetCommit: the same key layout
# Decoded keys kept per Python worker (emptied when full).
_KEY_MEMO_MAX = 100_000


def decode_batches(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
    """mapInArrow's function: each batch of SOURCE_COLUMNS decoded (DECODED_SCHEMA)."""
    memo: dict[bytes, tuple[str, str, int]] = {}
    for batch in batches:
        yield decode_batch(batch, memo)


def decode_batch(batch: pa.RecordBatch, memo: dict[bytes, tuple[str, str, int]]) -> pa.RecordBatch:
    """One batch (module docstring); `memo`: OffsetCommit key bytes -> their fields."""
    keys: list[Any] = batch.column("key").to_pylist()
    values: list[Any] = batch.column("value").to_pylist()
    n = len(keys)
    types: list[int | None] = [None] * n
    groups: list[str | None] = [None] * n
    topics: list[str | None] = [None] * n
    parts: list[int | None] = [None] * n
    offsets: list[int | None] = [None] * n
    epochs: list[int | None] = [None] * n
    metas: list[str | None] = [None] * n
    commits: list[int | None] = [None] * n
    expires: list[int | None] = [None] * n
    tombstones: list[bool] = [False] * n
    errors: list[str | None] = [None] * n
    kept_keys: list[bytes | None] = [None] * n
    kept_values: list[bytes | None] = [None] * n
    if len(memo) > _KEY_MEMO_MAX:
        memo.clear()
    memo_get = memo.get
    for i in range(n):
        key = keys[i]
        value = values[i]
        if key is not None and len(key) >= 2 and key[0] == 0 and key[1] <= 1:
            fields = memo_get(key)
            try:
                if fields is None:
                    fields = memo[key] = offset_commit_key_fields(key)
                groups[i], topics[i], parts[i] = fields
                types[i] = key[1]
                if value is None:
                    tombstones[i] = True
                    continue
                offset, epoch, meta, commit, expire, _ = offset_commit_value_fields(value)
            except RecordError as e:
                errors[i] = str(e)
                kept_keys[i], kept_values[i] = key, value
                continue
            offsets[i] = offset
            epochs[i] = epoch
            metas[i] = meta
            commits[i] = commit
            expires[i] = expire
            continue
        kept_keys[i], kept_values[i] = key, value
        tombstones[i] = value is None
        if key is None or len(key) < 2:
            errors[i] = "record without a coordinator key"
            continue
        types[i] = int.from_bytes(key[:2], "big", signed=True)
        try:
            decoded_key, _ = decode_record(key, value)
        except RecordError as e:
            errors[i] = str(e)
            continue
        groups[i] = getattr(decoded_key, "group_id", None) or getattr(decoded_key, "group", None)
    return pa.RecordBatch.from_arrays(
        [
            batch.column("partition"),
            batch.column("offset"),
            batch.column("timestamp_ms"),
            pa.array(types, pa.int16()),
            pa.array(groups, pa.string()),
            pa.array(topics, pa.string()),
            pa.array(parts, pa.int32()),
            pa.array(offsets, pa.int64()),
            pa.array(epochs, pa.int32()),
            pa.array(metas, pa.string()),
            pa.array(commits, pa.int64()),
            pa.array(expires, pa.int64()),
            pa.array(tombstones, pa.bool_()),
            pa.array(errors, pa.string()),
            pa.array(kept_keys, pa.binary()),
            pa.array(kept_values, pa.binary()),
        ],
        schema=DECODED_SCHEMA,
    )
