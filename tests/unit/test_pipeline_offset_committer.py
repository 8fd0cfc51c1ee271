"""The offset committer's pure parts (pipeline/offset_committer.py): the Kafka sources' end
offsets out of a progress event, the commit metadata and the group name, and the progress
JSON its JVM-facing listener fetches."""

from __future__ import annotations

import json
from types import SimpleNamespace

from groupcoord.pipeline.offset_committer import (
    KafkaOffsetCommitter,
    PendingCommit,
    _JsonProgress,
    commit_metadata,
    group_name,
    kafka_end_offsets,
)


def source(description: str, end: object) -> SimpleNamespace:
    return SimpleNamespace(description=description, endOffset=end)


def test_end_offsets_of_the_kafka_sources_only() -> None:
    sources = [
        source("KafkaV2[Subscribe[a]]", json.dumps({"a": {"0": 5, "2": 7}})),
        source("KafkaV2[Subscribe[b]]", json.dumps({"b": {"1": 0}})),
        source("RateStreamV2[rowsPerSecond=1]", json.dumps({"x": {"0": 9}})),
        source("KafkaV2[Subscribe[c]]", None),  # nothing read yet
        source("KafkaV2[Subscribe[d]]", "not json"),
    ]
    assert kafka_end_offsets(sources) == {("a", 0): 5, ("a", 2): 7, ("b", 1): 0}
    assert kafka_end_offsets(None) == {}


def test_metadata_and_group_name() -> None:
    assert json.loads(commit_metadata("q", "r", 3)) == {
        "query_id": "q",
        "run_id": "r",
        "batch_id": 3,
    }
    assert group_name("spark-{name}", "lag", "id-1") == "spark-lag"
    assert group_name("spark-{name}", None, "id-1") == "spark-id-1"
    assert group_name("jobs.{id}", "lag", "id-1") == "jobs.id-1"
    assert group_name(lambda name, id_: f"{name}/{id_}", "n", "i") == "n/i"


def test_progress_json_from_the_jvm_becomes_one_pending_commit() -> None:
    """Classic PySpark registers the committer's own JVM-facing listener, which fetches the
    progress' JSON in two py4j calls (not PySpark's event objects, about a hundred calls):
    that JSON gives the same commit as the event would; the other events cost nothing."""
    progress = {
        "id": "q-1",
        "runId": "r-1",
        "name": "lagged",
        "batchId": 4,
        "sources": [
            {"description": "KafkaV2[Subscribe[a]]", "endOffset": {"a": {"0": 5, "1": 9}}},
            {"description": "RateStreamV2[rowsPerSecond=1]", "endOffset": 7},
        ],
    }
    calls: list[str] = []

    class FakeProgress:  # Spark's StreamingQueryProgress as py4j shows it
        def json(self) -> str:
            calls.append("json")
            return json.dumps(progress)

    class FakeEvent:
        def progress(self) -> FakeProgress:
            calls.append("progress")
            return FakeProgress()

    committer = KafkaOffsetCommitter("127.0.0.1:1", retry_backoff_s=60)
    try:
        committer._worker.stop(0)  # keep the commit pending: no broker here
        jvm_side = _JsonProgress(committer)
        jvm_side.onQueryStarted(FakeEvent())
        jvm_side.onQueryProgress(FakeEvent())
        jvm_side.onQueryIdle(FakeEvent())
        jvm_side.onQueryTerminated(FakeEvent())
        assert calls == ["progress", "json"]
        assert committer._worker._pending == {
            "spark-lagged": PendingCommit(
                "spark-lagged", {("a", 0): 5, ("a", 1): 9}, commit_metadata("q-1", "r-1", 4), 4
            )
        }
    finally:
        committer.close(0)
