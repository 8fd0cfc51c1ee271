"""The lag table's rows: each live committed offset against its partition's end offset, in
records and in seconds, as the server's lag metrics measure it (kminion's and Burrow's way,
coordinator/observability/lag.py): records = end offset - committed (never below 0), seconds
= the age of the first record not consumed (now - the timestamp of the record at the
committed offset; 0 with no lag; None when it cannot be read).

Everything goes through the Kafka protocol with confluent-kafka (the spark extra has it):
ListOffsets for the end offsets, one Fetch per round of first unconsumed records (one
round per distinct committed offset of a partition: a consumer reads one position per
partition). A partition that cannot be read (its topic deleted) has no end offset and no
lag (None).
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from typing import Any

from confluent_kafka import Consumer, KafkaException, TopicPartition
from confluent_kafka.admin import AdminClient, OffsetSpec

from .group_timeline import Committed

LAG_COLUMNS = (
    "time_ms",
    "group",
    "topic",
    "partition",
    "committed_offset",
    "end_offset",
    "lag_records",
    "lag_seconds",
    "commit_timestamp_ms",
)
TIMEOUT_S = 10.0


def lag_rows(
    bootstrap: str,
    latest: Mapping[tuple[str, str, int], Committed],
    now_ms: int,
    timeout_s: float = TIMEOUT_S,
) -> list[dict[str, Any]]:
    """One row per live committed offset (LAG_COLUMNS), measured now."""
    live = {tp: c for tp, c in latest.items() if c.offset >= 0}
    if not live:
        return []
    ends = _end_offsets(bootstrap, {(t, p) for _, t, p in live}, timeout_s)
    behind = {
        (t, p, c.offset)
        for (_, t, p), c in live.items()
        if ends.get((t, p)) is not None and ends[(t, p)] > c.offset
    }
    first_ms = _first_unconsumed_ms(bootstrap, behind, timeout_s)
    rows = []
    for (group, topic, partition), committed in sorted(live.items()):
        end = ends.get((topic, partition))
        records = None if end is None else max(end - committed.offset, 0)
        seconds: float | None = None
        if records == 0:
            seconds = 0.0
        elif records is not None:
            stamp = first_ms.get((topic, partition, committed.offset))
            seconds = None if stamp is None else max(now_ms - stamp, 0) / 1000.0
        rows.append(
            {
                "time_ms": now_ms,
                "group": group,
                "topic": topic,
                "partition": partition,
                "committed_offset": committed.offset,
                "end_offset": end,
                "lag_records": records,
                "lag_seconds": seconds,
                "commit_timestamp_ms": committed.commit_timestamp_ms,
            }
        )
    return rows


def _end_offsets(
    bootstrap: str, partitions: set[tuple[str, int]], timeout_s: float
) -> dict[tuple[str, int], int | None]:
    """The high watermarks, in one ListOffsets (per broker) for all partitions."""
    if not partitions:
        return {}
    admin = AdminClient({"bootstrap.servers": bootstrap})
    futures = admin.list_offsets(
        {TopicPartition(t, p): OffsetSpec.latest() for t, p in partitions},
        request_timeout=timeout_s,
    )
    ends: dict[tuple[str, int], int | None] = {}
    for tp, future in futures.items():
        try:
            high = future.result(timeout_s).offset
        except KafkaException:
            high = None  # its topic deleted, say: no end offset, no lag
        ends[(tp.topic, tp.partition)] = high if high is not None and high >= 0 else None
    return ends


def _first_unconsumed_ms(
    bootstrap: str, positions: set[tuple[str, int, int]], timeout_s: float
) -> dict[tuple[str, int, int], int]:
    """(topic, partition, offset) -> the timestamp of the first record at or after it."""
    if not positions:
        return {}
    rounds: list[dict[tuple[str, int], int]] = []
    for topic, partition, offset in sorted(positions):
        for taken in rounds:
            if (topic, partition) not in taken:
                taken[(topic, partition)] = offset
                break
        else:
            rounds.append({(topic, partition): offset})
    found: dict[tuple[str, int, int], int] = {}
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            # No subscription and no commit: the id only satisfies librdkafka.
            "group.id": "groupcoord-analytics-lag-probe",
            "enable.auto.commit": False,
        }
    )
    try:
        _read_rounds(consumer, rounds, found, timeout_s)
    finally:
        consumer.close()
    return found


def _read_rounds(
    consumer: Any,
    rounds: list[dict[tuple[str, int], int]],
    found: dict[tuple[str, int, int], int],
    timeout_s: float,
) -> None:
    for taken in rounds:
        consumer.assign([TopicPartition(t, p, o) for (t, p), o in taken.items()])
        waiting = dict(taken)
        for message in _poll(consumer, len(waiting), timeout_s):
            tp = (message.topic(), message.partition())
            if tp in waiting:
                _, stamp = message.timestamp()
                found[(tp[0], tp[1], waiting.pop(tp))] = stamp
            if not waiting:
                break
        consumer.unassign()


def _poll(consumer: Any, wanted: int, timeout_s: float) -> Any:
    """Messages (no errors) until `wanted` came or the time is up."""
    deadline = time.monotonic() + timeout_s
    while wanted > 0 and time.monotonic() < deadline:
        for message in consumer.consume(num_messages=wanted, timeout=0.5):
            if message.error() is None:
                yield message
