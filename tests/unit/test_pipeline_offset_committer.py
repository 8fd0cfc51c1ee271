"""The offset committer's pure parts (pipeline/offset_committer.py): the Kafka sources' end
offsets out of a progress event, the commit metadata and the group name."""

from __future__ import annotations

import json
from types import SimpleNamespace

from groupcoord.pipeline.offset_committer import commit_metadata, group_name, kafka_end_offsets


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
