"""The analytics job's decode step: Spark tasks that decode `__consumer_offsets` and write
the offset_commits table themselves, handing Spark back only what the group timeline
replays.

Theory of operation. A busy log is nearly all OffsetCommit records, and offset_commits holds
one row per record. Handing every decoded row back to Spark to write (mapInArrow's output
turned into Spark rows, cached for the second use, then Parquet by Spark's writer) cost the
job about two thirds of its CPU (bench_analytics); the decoder already holds each batch as
Arrow columns, so the task writes them with pyarrow instead and returns only the timeline's
rows (TimelineMarks: a few per key, and every record that is not a commit), which the driver
collects (analytics.py).

Exactly once. A micro-batch runs as one Spark job whose tasks write under a staging
directory that is unique to that attempt of the batch (`.tmp-<batch>-<uuid>`, hidden from
readers by its leading dot); task `p` writes `part-<p>.parquet` (aside, then renamed), so a
retried task replaces its own file. Only when the job succeeded does the driver move the
staging directory into place as `batch_id=N/`, replacing what an earlier attempt of the same
batch left (`promote`). Spark re-runs a failed batch with the same offsets, so the rows are
the same. The output directory must be one the executors see (local mode, or a shared
filesystem), as it had to be for Spark's own writer.
"""

from __future__ import annotations

import os
import shutil
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from .coordinator_log import (
    DECODED_DDL,
    DECODED_SCHEMA,
    OFFSET_COMMIT_TYPES,
    TimelineMarks,
    decode_with_commits,
)

# offset_commits' columns: (name, the decoded column it comes from).
_COMMIT_FIELDS = (
    ("group", "group"),
    ("topic", "topic"),
    ("partition", "topic_partition"),
    ("offset", "committed_offset"),
    ("commit_timestamp_ms", "commit_timestamp_ms"),
    ("leader_epoch", "leader_epoch"),
    ("metadata", "metadata"),
    ("expire_timestamp_ms", "expire_timestamp_ms"),
    ("deleted", "tombstone"),
    ("log_partition", "partition"),
    ("log_offset", "offset"),
    ("log_timestamp_ms", "timestamp_ms"),
)
COMMITS_SCHEMA = pa.schema(
    [pa.field(name, DECODED_SCHEMA.field(source).type) for name, source in _COMMIT_FIELDS]
)
# What the decode tasks return: the timeline's rows, as decoded.
TIMELINE_DDL = DECODED_DDL
# Spark settings of the decode step, set on the micro-batch's session (the stream's clone of
# the user's: their other queries keep their own): no byte limit on the Arrow batches sent to
# the tasks' Python workers (while one is set, 256 MB by default, Spark measures the batch
# being built after every row), and batches of ARROW_BATCH_ROWS rather than 10,000: the
# decoder's cost per batch (hashing the keys, numpy's calls) is spread over five times the
# records (bench_analytics: 1.5 M records per CPU second at 10,000 rows, 2.0 M at 50,000),
# and a batch of commits is about 5 MB.
ARROW_BATCH_ROWS = 50_000
ARROW_SETTINGS = {
    "spark.sql.execution.arrow.maxBytesPerBatch": str(2**31 - 1),
    "spark.sql.execution.arrow.maxRecordsPerBatch": str(ARROW_BATCH_ROWS),
}
# The offset_commits columns with few distinct values, the ones Parquet dictionary-encodes.
# The others (offsets, timestamps) are nearly all distinct: Parquet's default, a dictionary
# for every column, builds one for each until it overflows and falls back, which cost the
# write more than half its CPU (0.7-0.8 CPU seconds per million rows, 0.3 without; the
# files are smaller too). (Parquet never dictionary-encodes a boolean such as `deleted`.)
DICTIONARY_COLUMNS = (
    "group",
    "topic",
    "partition",
    "leader_epoch",
    "metadata",
    "expire_timestamp_ms",
    "log_partition",
)
assert set(DICTIONARY_COLUMNS) <= set(COMMITS_SCHEMA.names)
# Rows buffered per Parquet row group (a few of the micro-batch's Arrow batches).
ROW_GROUP_ROWS = 200_000


def commit_rows(decoded: pa.RecordBatch) -> pa.Table:
    """offset_commits' rows of a decoded batch (coordinator_log.DECODED_SCHEMA): its
    OffsetCommit records that decoded, tombstones included."""
    types = decoded.column("record_type")
    keep = pc.and_(
        pc.is_in(types, pa.array(OFFSET_COMMIT_TYPES, pa.int16())),
        pc.is_null(decoded.column("error")),
    )
    kept = decoded.filter(pc.fill_null(keep, False))
    return pa.Table.from_arrays(
        [kept.column(source) for _, source in _COMMIT_FIELDS], schema=COMMITS_SCHEMA
    )


def decode_to_files(
    staging: str | Path, partition_id: Callable[[], int] | None = None
) -> Callable[[Iterator[pa.RecordBatch]], Iterator[pa.RecordBatch]]:
    """mapInArrow's function (output TIMELINE_DDL) for one attempt of a micro-batch: decodes
    each batch, appends its offset_commits rows to `staging/part-<p>.parquet` (p: the Spark
    task's partition, or `partition_id()`), and yields the rows the timeline replays."""
    staging = str(staging)

    def run(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        part = partition_id() if partition_id is not None else _task_partition()
        target = os.path.join(staging, f"part-{part:05d}.parquet")
        aside = os.path.join(staging, f".part-{part:05d}-{uuid.uuid4().hex}")
        memo: dict[bytes, tuple[str, str, int]] = {}
        marks = TimelineMarks()
        pending: list[pa.Table] = []
        pending_rows = 0
        writer: pq.ParquetWriter | None = None
        try:
            for batch in batches:
                decoded, commits = decode_with_commits(batch, memo)
                rows = commit_rows(decoded)
                if rows.num_rows:
                    pending.append(rows)
                    pending_rows += rows.num_rows
                if pending_rows >= ROW_GROUP_ROWS:
                    writer = writer or _writer(aside)
                    writer.write_table(pa.concat_tables(pending))
                    pending, pending_rows = [], 0
                yield _timeline_rows(marks.mark(decoded, commits))
            latest = marks.latest()
            if latest is not None:
                yield _timeline_rows(latest)
            # A task without commits still writes its (empty) file: the table has a
            # directory for every batch.
            writer = writer or _writer(aside)
            if pending:
                writer.write_table(pa.concat_tables(pending))
            writer.close()
            writer = None
            os.replace(aside, target)
        finally:
            if writer is not None:
                writer.close()
            if os.path.exists(aside):
                os.unlink(aside)

    return run


def _writer(path: str) -> pq.ParquetWriter:
    """offset_commits' Parquet writer, dictionary-encoding only DICTIONARY_COLUMNS."""
    return pq.ParquetWriter(path, COMMITS_SCHEMA, use_dictionary=list(DICTIONARY_COLUMNS))


def _timeline_rows(marked: pa.RecordBatch) -> pa.RecordBatch:
    """The rows of a marked batch (coordinator_log.STREAM_SCHEMA) the timeline replays,
    without the marks."""
    picked = marked.filter(marked.column("to_timeline"))
    return pa.RecordBatch.from_arrays(picked.columns[: len(DECODED_SCHEMA)], schema=DECODED_SCHEMA)


def _task_partition() -> int:
    from pyspark import TaskContext

    context = TaskContext.get()
    return 0 if context is None else context.partitionId()


def staging_dir(table_dir: Path, batch_id: int) -> Path:
    """A new staging directory for one attempt of batch `batch_id` (module docstring)."""
    staging = table_dir / f".tmp-{batch_id}-{uuid.uuid4().hex}"
    staging.mkdir(parents=True)
    return staging


def promote(staging: Path, table_dir: Path, batch_id: int) -> None:
    """The attempt's files become batch `batch_id`'s, replacing an earlier attempt's."""
    target = table_dir / f"batch_id={batch_id}"
    if target.exists():
        shutil.rmtree(target)
    os.replace(staging, target)


def clear_staging(table_dir: Path) -> None:
    """Remove the staging directories attempts that died left behind."""
    if table_dir.is_dir():
        for entry in table_dir.iterdir():
            if entry.name.startswith(".tmp-") and entry.is_dir():
                shutil.rmtree(entry, ignore_errors=True)
