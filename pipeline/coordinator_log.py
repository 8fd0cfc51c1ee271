"""`__consumer_offsets` records decoded into columns, for Spark's mapInArrow (the analytics
job, analytics.py): Arrow batches of the Kafka source's rows in, Arrow batches of decoded
records out, one output row per input row, a whole batch per call.

Theory of operation. The codec is the server's own (protocol/records.py), so the job reads
exactly what the server writes (and what Kafka writes: the format is byte for byte Kafka's).
OffsetCommit records, nearly all of a busy log, are read as columns over the whole batch:
the batch's distinct keys (Arrow's hash of the key column) each decoded once by the codec
(`offset_commit_key_fields`, memoised on their bytes: a log commits the same partitions over
and over) and spread to the rows by index, the values read by their fixed layout with numpy
(commit_columns.py); only a value of a shape the layout table lacks goes to the codec
(`offset_commit_value_fields`), so the fields and errors are the codec's either way. Every
other record (GroupMetadata, the ConsumerGroup* records of KIP-848) is decoded whole to name
its group, and keeps its key and value bytes: the group timeline (group_timeline.py) replays
them on the driver. A record the codec cannot read keeps its bytes, with the error in
`error`, and is skipped by the tables, as the server's loader skips it.

The job's function (`decode_batches`) also marks, per Spark task, what the timeline replays
(TimelineMarks), so the driver collects those rows with a filter instead of an aggregation
over the micro-batch.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from groupcoord.protocol.records import (
    RecordError,
    decode_record,
    offset_commit_key_fields,
    offset_commit_value_fields,
)

from .commit_columns import binary_buffers, commit_columns

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
# What the job's mapInArrow yields (decode_batches): the decoded records and the timeline's
# marks (TimelineMarks).
STREAM_DDL = DECODED_DDL + ", to_timeline BOOLEAN, timeline_only BOOLEAN"
STREAM_SCHEMA = DECODED_SCHEMA.append(pa.field("to_timeline", pa.bool_())).append(
    pa.field("timeline_only", pa.bool_())
)
OFFSET_COMMIT_TYPES = (0, 1)  # LegacyOffsetCommit and OffsetCommit: the same key layout
# Decoded keys kept per Python worker (emptied when full).
_KEY_MEMO_MAX = 100_000


def decode_batches(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
    """mapInArrow's function (STREAM_DDL): each batch of SOURCE_COLUMNS decoded, with the
    timeline's marks, then the copies of the latest commits the timeline needs
    (TimelineMarks)."""
    memo: dict[bytes, tuple[str, str, int]] = {}
    marks = TimelineMarks()
    for batch in batches:
        decoded, commits = decode_with_commits(batch, memo)
        yield marks.mark(decoded, commits)
    latest = marks.latest()
    if latest is not None:
        yield latest


def decode_batch(batch: pa.RecordBatch, memo: dict[bytes, tuple[str, str, int]]) -> pa.RecordBatch:
    """One batch (module docstring; DECODED_SCHEMA); `memo`: OffsetCommit key bytes -> their
    fields."""
    return decode_with_commits(batch, memo)[0]


@dataclass(frozen=True)
class _Commits:
    """Which rows of a decoded batch are commits with a value (`rows`), and of which key:
    `keys[indices[i]]`."""

    rows: np.ndarray
    indices: np.ndarray
    keys: list[bytes]


def decode_with_commits(
    batch: pa.RecordBatch, memo: dict[bytes, tuple[str, str, int]]
) -> tuple[pa.RecordBatch, _Commits]:
    """`decode_batch`'s batch, and which of its rows are commits of which key (for
    TimelineMarks)."""
    n = batch.num_rows
    keys = batch.column("key")
    values = batch.column("value")
    if len(memo) > _KEY_MEMO_MAX:
        memo.clear()
    # The distinct keys, hashed by Arrow: each is decoded once, by the codec.
    encoded = pc.dictionary_encode(keys)
    key_null = encoded.indices.is_null().to_numpy(zero_copy_only=False)
    # A null key points past the distinct keys, at a slot that is no OffsetCommit key.
    nulls_at = len(encoded.dictionary)
    indices = encoded.indices.fill_null(nulls_at).to_numpy().astype(np.int64)
    distinct_keys = encoded.dictionary.to_pylist()
    distinct = _distinct_commit_keys(distinct_keys, memo)
    commit_key = ~key_null & distinct.is_commit[indices]
    key_error = ~key_null & distinct.has_error[indices]
    value_null = ~binary_buffers(values)[0]
    tombstone = commit_key & value_null
    columns = commit_columns(values, commit_key & ~value_null)
    fast = columns.fast
    # Rows left to the codec, one at a time: commit values of another shape, and every
    # record that is not an OffsetCommit (with its key's errors).
    slow_values = np.flatnonzero(commit_key & ~value_null & ~fast)
    others = np.flatnonzero(~commit_key & ~key_error)
    offset = columns.offset
    epoch = columns.leader_epoch
    commit = columns.commit_timestamp_ms
    expire = columns.expire_timestamp_ms
    has_value = fast.copy()
    kept = key_error.copy()  # rows that keep their key and value bytes
    errors: dict[int, str] = {i: distinct.errors[indices[i]] for i in np.flatnonzero(key_error)}
    metadata_of: dict[int, str] = {}
    types = distinct.types[indices]
    type_valid = commit_key.copy()
    group_of: dict[int, str | None] = {}
    if len(slow_values):
        raw_values = values.take(pa.array(slow_values)).to_pylist()
        for i, raw in zip(slow_values.tolist(), raw_values, strict=True):
            try:
                fields = offset_commit_value_fields(raw)
            except RecordError as e:
                errors[i] = str(e)
                kept[i] = True
                continue
            offset[i], epoch[i], meta, commit[i], expire[i], _ = fields
            has_value[i] = True
            metadata_of[i] = meta
    if len(others):
        picked = pa.array(others)
        other_keys = keys.take(picked).to_pylist()
        other_values = values.take(picked).to_pylist()
        kept[others] = True
        for i, key, value in zip(others.tolist(), other_keys, other_values, strict=True):
            tombstone[i] = value is None
            if key is None or len(key) < 2:
                errors[i] = "record without a coordinator key"
                continue
            types[i] = int.from_bytes(key[:2], "big", signed=True)
            type_valid[i] = True
            try:
                decoded_key, _ = decode_record(key, value)
            except RecordError as e:
                errors[i] = str(e)
                continue
            group_of[i] = getattr(decoded_key, "group_id", None) or getattr(
                decoded_key, "group", None
            )
    of_commits = pa.array(indices, mask=~commit_key)  # null for the other rows
    no_value = ~has_value
    kept_rows = pa.array(np.flatnonzero(kept))
    decoded = pa.RecordBatch.from_arrays(
        [
            batch.column("partition"),
            batch.column("offset"),
            batch.column("timestamp_ms"),
            pa.array(types, pa.int16(), mask=~type_valid),
            _patched(distinct.groups.take(of_commits), group_of),
            distinct.topics.take(of_commits),
            distinct.partitions.take(of_commits),
            pa.array(offset, pa.int64(), mask=no_value),
            pa.array(epoch, pa.int32(), mask=no_value),
            pc.if_else(
                pa.array(has_value),
                _patched(columns.metadata, metadata_of),
                pa.scalar(None, pa.string()),
            ),
            pa.array(commit, pa.int64(), mask=no_value),
            pa.array(expire, pa.int64(), mask=no_value),
            pa.array(tombstone, pa.bool_()),
            _patched(pa.nulls(n, pa.string()), errors),
            _replaced(pa.nulls(n, pa.binary()), kept, keys.take(kept_rows)),
            _replaced(pa.nulls(n, pa.binary()), kept, values.take(kept_rows)),
        ],
        schema=DECODED_SCHEMA,
    )
    return decoded, _Commits(commit_key & has_value, indices, distinct_keys)


class TimelineMarks:
    """Marks the rows of one Spark task's decoded batches that the group timeline replays
    (group_timeline.py): every record but an OffsetCommit with a value, and of those the
    first of each key (log partition, key bytes); after the last batch, `latest` gives a
    copy of each key's latest commit when it is not that first one, marked
    `timeline_only` (offset_commits leaves the copies out). A task reads one range of one
    log partition, so a micro-batch's first and latest commits of a key are among those
    marked (with a partition split over several tasks, a few more: the timeline replays
    them as the log has them)."""

    def __init__(self) -> None:
        self._seen: set[tuple[int, bytes]] = set()
        # Key -> (batch number, row) of its latest commit not marked yet.
        self._latest: dict[tuple[int, bytes], tuple[int, int]] = {}
        self._kept: list[pa.RecordBatch] = []  # per batch: its rows that are some latest

    def mark(self, decoded: pa.RecordBatch, commits: _Commits) -> pa.RecordBatch:
        """`decoded` with its marks."""
        marked = ~commits.rows
        rows = np.flatnonzero(commits.rows)
        if len(rows):
            partitions = decoded.column("partition").to_numpy(zero_copy_only=False)
            ids = partitions[rows].astype(np.int64) * (len(commits.keys) + 1)
            ids += commits.indices[rows]
            _, firsts = np.unique(ids, return_index=True)
            _, lasts = np.unique(ids[::-1], return_index=True)
            kept: list[int] = []
            batch_no = len(self._kept)
            for first, last in zip(
                rows[firsts].tolist(), rows[len(ids) - 1 - lasts].tolist(), strict=True
            ):
                key = (int(partitions[first]), commits.keys[commits.indices[first]])
                if key not in self._seen:
                    self._seen.add(key)
                    marked[first] = True
                    if last == first:
                        continue
                self._latest[key] = (batch_no, len(kept))
                kept.append(last)
            self._kept.append(decoded.take(pa.array(kept, pa.int64())))
        return _with_marks(decoded, marked, np.zeros(decoded.num_rows, bool))

    def latest(self) -> pa.RecordBatch | None:
        """The copies of the latest commits (class docstring), or None."""
        if not self._latest:
            return None
        picked = sorted(self._latest.values())
        parts = [
            self._kept[b].take(pa.array([row for at, row in picked if at == b], pa.int64()))
            for b in sorted({b for b, _ in picked})
        ]
        copies = pa.Table.from_batches(parts, DECODED_SCHEMA).combine_chunks().to_batches()[0]
        n = copies.num_rows
        return _with_marks(copies, np.ones(n, bool), np.ones(n, bool))


def _with_marks(
    decoded: pa.RecordBatch, to_timeline: np.ndarray, timeline_only: np.ndarray
) -> pa.RecordBatch:
    return pa.RecordBatch.from_arrays(
        [*decoded.columns, pa.array(to_timeline), pa.array(timeline_only)],
        schema=STREAM_SCHEMA,
    )


def _patched(strings: pa.Array, at: dict[int, str | None]) -> pa.Array:
    """`strings` with the rows of `at` replaced by its strings."""
    if not at:
        return strings
    rows = sorted(at)
    mask = np.zeros(len(strings), bool)
    mask[rows] = True
    return _replaced(strings, mask, pa.array([at[i] for i in rows], pa.string()))


def _replaced(column: pa.Array, mask: np.ndarray, replacements: pa.Array) -> pa.Array:
    """`column` with its rows where `mask` is true replaced, in order, by `replacements`
    (not pc.if_else: it mishandles sliced binary arrays in pyarrow 20)."""
    if not len(replacements):
        return column
    return pc.replace_with_mask(column, pa.array(mask), replacements.cast(column.type))


@dataclass
class _DistinctKeys:
    """The fields of a batch's distinct keys, by dictionary index: OffsetCommit keys
    decoded (`is_commit`), keys shaped as one but unreadable (`has_error`, `errors`)."""

    is_commit: np.ndarray
    has_error: np.ndarray
    errors: list[str | None]
    types: np.ndarray
    groups: pa.Array
    topics: pa.Array
    partitions: pa.Array


def _distinct_commit_keys(
    distinct: list[bytes], memo: dict[bytes, tuple[str, str, int]]
) -> _DistinctKeys:
    size = len(distinct) + 1  # and the null keys' slot
    is_commit = np.zeros(size, bool)
    has_error = np.zeros(size, bool)
    errors: list[str | None] = [None] * size
    types = np.zeros(size, np.int16)
    groups: list[str | None] = [None] * size
    topics: list[str | None] = [None] * size
    partitions: list[int | None] = [None] * size
    for j, key in enumerate(distinct):
        if len(key) >= 2 and key[0] == 0 and key[1] <= 1:
            fields = memo.get(key)
            if fields is None:
                try:
                    fields = memo[key] = offset_commit_key_fields(key)
                except RecordError as e:
                    has_error[j] = True
                    errors[j] = str(e)
                    continue
            is_commit[j] = True
            types[j] = key[1]
            groups[j], topics[j], partitions[j] = fields
    return _DistinctKeys(
        is_commit,
        has_error,
        errors,
        types,
        pa.array(groups, pa.string()),
        pa.array(topics, pa.string()),
        pa.array(partitions, pa.int32()),
    )
