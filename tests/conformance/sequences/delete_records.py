"""DeleteRecords (KIP-107): the log start moved forward, never backwards, up to the high
watermark; what Fetch and ListOffsets say once it moved; Kafka's per-partition errors."""

from __future__ import annotations

from typing import Any

from tests.conformance.runner import Session, sequence
from tests.conformance.sequences.data import (
    _filled_topic,
    batch,
    create_topic,
    fetch,
    list_offsets,
    produce,
)

DELETE_RECORDS = 21


def delete_records(
    s: Session, partitions: dict[str, dict[int, int]], *, version: int, label: str
) -> Any:
    """DeleteRecords of {topic: {partition: offset}}."""
    return s.call(
        "admin",
        DELETE_RECORDS,
        version,
        label,
        topics=[
            {
                "name": topic,
                "partitions": [
                    {"partition_index": p, "offset": offset} for p, offset in offsets.items()
                ],
            }
            for topic, offsets in partitions.items()
        ],
        timeout=30_000,
    )


for _v in (0, 1, 2):

    @sequence(f"data/delete-records-v{_v}")
    def _(s: Session, version: int = _v) -> None:
        topic = _filled_topic(s)  # partition 0: batches of 5, 1 and 3 records
        delete_records(s, {topic: {0: 3}}, version=version, label="inside the first batch")
        list_offsets(s, topic, {0: -2}, version=7, label="earliest: the new log start")
        fetch(s, topic, {0: 2}, version=12, label="below the log start")
        fetch(s, topic, {0: 3}, version=12, label="at the log start")
        delete_records(s, {topic: {0: 1}}, version=version, label="backwards: unchanged")
        delete_records(s, {topic: {0: 3}}, version=version, label="the same offset again")
        delete_records(s, {topic: {0: 10}}, version=version, label="past the high watermark")
        delete_records(s, {topic: {0: -2}}, version=version, label="negative offset")
        delete_records(s, {topic: {0: -1, 1: 0}}, version=version, label="-1: high watermark")
        list_offsets(s, topic, {0: -2, 1: -2}, version=7, label="earliest after -1")
        fetch(s, topic, {0: 9}, version=12, label="at the end, which is the start")
        produce(s, topic, 0, batch(9, 2), label="more records")
        fetch(s, topic, {0: 9}, version=12, label="the new records")
        delete_records(s, {topic: {7: 0}}, version=version, label="unknown partition")
        delete_records(s, {s.name("missing"): {0: 0}}, version=version, label="unknown topic")


@sequence("data/delete-records-compacted-topic")
def _(s: Session) -> None:
    compacted = s.name("compact")
    create_topic(s, compacted, 1, version=7, configs={"cleanup.policy": "compact"})
    produce(s, compacted, 0, batch(0, 3), label="3 keyed records")
    delete_records(s, {compacted: {0: 1}}, version=2, label="compact only: policy violation")
    both = s.name("both")
    create_topic(s, both, 1, version=7, configs={"cleanup.policy": "compact,delete"})
    produce(s, both, 0, batch(0, 3), label="3 keyed records")
    delete_records(s, {both: {0: 1}}, version=2, label="compact,delete: moved")
