"""The analytics job's decode tasks (pipeline/commit_files.py): each writes its
offset_commits rows to its own file and yields only what the group timeline replays; the
driver's staging and promotion keep a batch's files exactly once; and the connector options
the job sets so a long range of one log partition is read by several tasks."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from groupcoord.pipeline import analytics, coordinator_log
from groupcoord.pipeline.commit_files import (
    COMMITS_SCHEMA,
    DICTIONARY_COLUMNS,
    clear_staging,
    decode_to_files,
    promote,
    staging_dir,
)
from groupcoord.pipeline.coordinator_log import DECODED_SCHEMA
from tests.unit.test_pipeline_decode import _batch, _commit, _group

RECORDS = [
    _group(1, "m1"),
    _commit("g", 0, 1),
    _commit("g", 0, 2),
    _commit("g", 1, 3),
    _group(2, "m1", "m2"),
    _commit("g", 0, 4),
    _commit("g", 0, None),
    _commit("g", 0, 5),
    (b"\x00\x01broken", b"\x00\x03"),  # an OffsetCommit key the codec cannot read
    _commit("h", 2, 7),
]


def _run(staging: Path, batches: list[pa.RecordBatch], part: int = 3) -> pa.Table:
    out = list(decode_to_files(staging, lambda: part)(iter(batches)))
    return pa.Table.from_batches(out, DECODED_SCHEMA)


def test_a_task_writes_its_commits_and_yields_the_timeline_rows(tmp_path: Path) -> None:
    whole = _batch(RECORDS)
    slices = [whole.slice(0, 4), whole.slice(4)]
    timeline = _run(tmp_path, slices)

    # The rows the timeline replays: those decode_batches marks, without the marks.
    marked = pa.Table.from_batches(
        list(coordinator_log.decode_batches(iter(slices))), coordinator_log.STREAM_SCHEMA
    )
    expected = marked.filter(marked.column("to_timeline")).select(DECODED_SCHEMA.names)
    assert timeline.to_pylist() == expected.to_pylist()

    # The file holds every decoded OffsetCommit record, tombstone included, once (no
    # timeline-only copy, no unreadable record), with the record's place in the log.
    assert sorted(p.name for p in tmp_path.iterdir()) == ["part-00003.parquet"]
    written = pq.read_table(tmp_path / "part-00003.parquet")
    assert written.schema == COMMITS_SCHEMA
    assert [
        (r["group"], r["partition"], r["offset"], r["deleted"], r["log_offset"])
        for r in written.to_pylist()
    ] == [
        ("g", 0, 1, False, 1),
        ("g", 0, 2, False, 2),
        ("g", 1, 3, False, 3),
        ("g", 0, 4, False, 5),
        ("g", 0, None, True, 6),
        ("g", 0, 5, False, 7),
        ("h", 2, 7, False, 9),
    ]
    first = written.to_pylist()[0]
    assert (first["topic"], first["leader_epoch"], first["metadata"]) == ("t", 2, "m")
    assert (first["commit_timestamp_ms"], first["log_timestamp_ms"]) == (77, 2_000)
    # Parquet dictionaries only for the columns of few values (offsets and timestamps are
    # nearly all distinct: a dictionary for them is built, then thrown away).
    row_group = pq.ParquetFile(tmp_path / "part-00003.parquet").metadata.row_group(0)
    dictionary = {
        row_group.column(i).path_in_schema
        for i in range(row_group.num_columns)
        if row_group.column(i).has_dictionary_page
    }
    assert dictionary == set(DICTIONARY_COLUMNS)


def test_a_failed_task_leaves_no_file_and_its_retry_replaces_its_own(tmp_path: Path) -> None:
    whole = _batch(RECORDS)

    def failing() -> Any:
        yield whole.slice(0, 4)
        raise RuntimeError("the task died")

    with pytest.raises(RuntimeError):
        list(decode_to_files(tmp_path, lambda: 0)(failing()))
    assert list(tmp_path.iterdir()) == []
    _run(tmp_path, [whole], part=0)
    _run(tmp_path, [whole], part=0)  # a retry of the same task
    _run(tmp_path, [], part=1)  # a task with nothing: an empty file of the schema
    assert sorted(p.name for p in tmp_path.iterdir()) == [
        "part-00000.parquet",
        "part-00001.parquet",
    ]
    assert pq.read_table(tmp_path / "part-00000.parquet").num_rows == 7
    empty = pq.read_table(tmp_path / "part-00001.parquet")
    assert empty.num_rows == 0 and empty.schema == COMMITS_SCHEMA


def test_promote_replaces_an_earlier_attempt_and_dead_staging_is_cleared(
    tmp_path: Path,
) -> None:
    table = tmp_path / "offset_commits"
    first = staging_dir(table, 4)
    (first / "part-00000.parquet").write_bytes(b"first")
    promote(first, table, 4)
    dead = staging_dir(table, 5)  # an attempt that died before promoting
    again = staging_dir(table, 4)
    (again / "part-00001.parquet").write_bytes(b"again")
    promote(again, table, 4)
    assert [p.name for p in (table / "batch_id=4").iterdir()] == ["part-00001.parquet"]
    assert dead.exists()
    clear_staging(table)
    assert sorted(p.name for p in table.iterdir()) == ["batch_id=4"]


class _Reader:
    """Records the options the job gives Spark's Kafka reader."""

    def __init__(self) -> None:
        self.options: dict[str, str] = {}

    def format(self, name: str) -> _Reader:
        assert name == "kafka"
        return self

    def option(self, name: str, value: str) -> _Reader:
        self.options[name] = value
        return self

    def load(self) -> Any:
        return self

    def selectExpr(self, *columns: str) -> Any:  # noqa: N802 (PySpark's name)
        return self


def test_the_job_splits_long_ranges_of_a_log_partition_over_tasks(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A busy group's shard holds nearly all of a log: the job has the connector split a
    long range of one partition over several tasks (maxRecordsPerPartition) and use every
    core (minPartitions: the default parallelism); the caller's options win."""
    reader = _Reader()
    conf: dict[str, str] = {}
    spark = type(
        "Spark",
        (),
        {
            "readStream": reader,
            "sparkContext": type("Context", (), {"defaultParallelism": 2})(),
            "conf": type("Conf", (), {"set": staticmethod(conf.__setitem__)})(),
        },
    )()
    monkeypatch.setattr(analytics, "offsets_partitions", lambda bootstrap: 3)
    analytics.source_stream(spark, "broker:9092")
    assert reader.options["maxRecordsPerPartition"] == str(analytics.MAX_RECORDS_PER_TASK)
    assert reader.options["minPartitions"] == "2"
    # Large polls and Fetches (Spark's consumer lists offsets after every poll).
    assert reader.options["kafka.max.poll.records"] == "50000"
    assert reader.options["kafka.max.partition.fetch.bytes"] == str(4 << 20)
    assert conf == {analytics.DEPRECATED_OFFSET_FETCHING: "true"}
    analytics.source_stream(
        spark, "broker:9092", {"maxRecordsPerPartition": "10", "kafka.max.poll.records": "7"}
    )
    assert reader.options["maxRecordsPerPartition"] == "10"
    assert reader.options["kafka.max.poll.records"] == "7"


class _MicroBatch:
    """A micro-batch as foreachBatch hands it over, run here: mapInArrow calls the function
    on the batch's Arrow batches as one task would; its session records settings."""

    def __init__(self, batches: list[pa.RecordBatch]) -> None:
        self.batches = batches
        self.settings: dict[str, str] = {}
        self.sparkSession = type(  # noqa: N815 (PySpark's name)
            "Session", (), {"conf": type("Conf", (), {"set": staticmethod(self._set)})()}
        )()
        self.settings_at_run: dict[str, str] = {}

    def _set(self, name: str, value: str) -> None:
        self.settings[name] = value

    def mapInArrow(self, function: Any, schema: str) -> Any:  # noqa: N802 (PySpark's name)
        assert schema == coordinator_log.DECODED_DDL
        self.settings_at_run = dict(self.settings)
        out = pa.Table.from_batches(list(function(iter(self.batches))), DECODED_SCHEMA)
        return type("Frame", (), {"toArrow": lambda _: out})()


def test_a_micro_batch_is_decoded_by_its_tasks_and_its_commits_promoted(
    tmp_path: Path,
) -> None:
    """The driver's side: the tasks run with Arrow batches unbounded in bytes and of 50,000
    rows (set on the micro-batch's session, the stream's own), the batch's commits land in
    batch_id=N/ once (a second attempt replaces the first), and the timeline's rows come
    back."""
    whole = _batch(RECORDS)
    batches = analytics.AnalyticsBatches("unused:9092", tmp_path)
    for _attempt in range(2):
        micro = _MicroBatch([whole])
        rows = batches.decode_and_write_commits(micro, 7)
        assert micro.settings_at_run == {
            "spark.sql.execution.arrow.maxBytesPerBatch": "2147483647",
            "spark.sql.execution.arrow.maxRecordsPerBatch": "50000",
        }
    table = tmp_path / "offset_commits"
    assert sorted(p.name for p in table.iterdir()) == ["batch_id=7"]
    assert pq.read_table(table / "batch_id=7").num_rows == 7
    assert rows.schema == DECODED_SCHEMA and rows.num_rows > 0
