"""The analytics job's driver-side state: the group timeline and the live committed offsets,
rebuilt from the decoded log by the server's own code.

Theory of operation. The server derives its rebalance timeline from the records it writes,
by the same functions when it writes them and when it replays its log at load
(coordinator/groups/event_records.py). The job does exactly what a loading server does: it
replays the records, in log order per `__consumer_offsets` partition, into one pure
GroupShard per partition, and keeps the events the shard derives (the "replayed from the
log" form: what a live server adds from what it sees, a rebalance's start or an admin
reset, is not in the log). So group_events holds the timeline the server would show after a
restart, with no second copy of the derivation.

The shard needs every group record and enough of the commits to know which groups and
offsets exist (a simple group, made by commits alone, is deleted by its tombstones). A
micro-batch's commits are many; the job hands over, per OffsetCommit key, only the batch's
first and last commit (marked by the decoder, coordinator_log.TimelineMarks: a few more when
Spark splits a log partition over tasks), with every tombstone and every other record: the
shard then holds each key's latest offset, and which groups exist, as after the full log
(an offset committed and deleted twice within one batch is seen once). `latest` is the
live committed offsets the lag table is computed from.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from groupcoord.coordinator.groups.config import GroupConfig
from groupcoord.coordinator.groups.events import GroupEvent
from groupcoord.coordinator.groups.shard import GroupShard
from groupcoord.coordinator.groups.testing import ManualTimer, SequentialIds
from groupcoord.protocol.records import (
    OffsetCommitKey,
    OffsetCommitValue,
    RecordError,
    decode_record,
)

from .coordinator_log import OFFSET_COMMIT_TYPES

# group_events' columns (batch_id is the table's partition column).
EVENT_COLUMNS = (
    "time_ms",
    "group",
    "generation_or_epoch",
    "event",
    "member_id",
    "cause",
    "details",
    "log_partition",
    "log_offset",
)


@dataclass(frozen=True, slots=True)
class Committed:
    """A live committed offset: the last commit of its (group, topic, partition)."""

    offset: int
    commit_timestamp_ms: int
    leader_epoch: int


class GroupTimeline:
    """One pure GroupShard per `__consumer_offsets` partition, fed decoded rows in log order
    (`replay`); the derived events of the current call are in `events`."""

    def __init__(self) -> None:
        self._shards: dict[int, GroupShard] = {}
        self.events: list[dict[str, Any]] = []
        self.latest: dict[tuple[str, str, int], Committed] = {}
        self._collecting = True
        self._offset = -1  # the log offset of the record being replayed

    def _shard(self, partition: int) -> GroupShard:
        shard = self._shards.get(partition)
        if shard is None:
            # No timeline kept in memory (timeline_events=0): the sink takes every event.
            config = GroupConfig(timeline_events=0, timeline_events_total=0)
            shard = GroupShard(partition, config, ManualTimer(), SequentialIds())
            shard.events.sink = lambda event: self._keep(event, partition)
            self._shards[partition] = shard
        return shard

    def _keep(self, event: GroupEvent, partition: int) -> None:
        if self._collecting:
            self.events.append(
                {
                    "time_ms": event.time_ms,
                    "group": event.group_id,
                    "generation_or_epoch": event.generation_or_epoch,
                    "event": event.event,
                    "member_id": event.member_id,
                    "cause": event.cause,
                    "details": json.dumps(event.details, sort_keys=True, default=str),
                    "log_partition": partition,
                    "log_offset": self._offset,
                }
            )

    def replay(self, rows: Iterable[Mapping[str, Any]], collect: bool = True) -> None:
        """Replay decoded rows (coordinator_log.DECODED_SCHEMA), sorted by (partition,
        offset); with `collect` the events they derive are appended to `events` (a rebuild
        from earlier batches passes False)."""
        self._collecting = collect
        for row in rows:
            if row["error"] is not None:
                continue  # the server's loader skips what it cannot decode, too
            shard = self._shard(row["partition"])
            time_ms = row["timestamp_ms"]
            self._offset = row["offset"]
            shard.events.replay_time_ms = time_ms
            if row["record_type"] in OFFSET_COMMIT_TYPES:
                self._replay_commit(shard, row, time_ms)
                continue
            try:
                key, value = decode_record(row["key"], row["value"])
                shard.replay(key, value, time_ms)
            except RecordError:  # an unknown type included, as the loader skips it
                continue
        self._collecting = True

    def _replay_commit(self, shard: GroupShard, row: Mapping[str, Any], time_ms: int) -> None:
        tp = (row["group"], row["topic"], row["topic_partition"])
        key = OffsetCommitKey(*tp)
        if row["tombstone"]:
            shard.replay(key, None, time_ms)
            self.latest.pop(tp, None)
            return
        value = OffsetCommitValue(
            offset=row["committed_offset"],
            leader_epoch=row["leader_epoch"],
            metadata=row["metadata"] or "",
            commit_timestamp=row["commit_timestamp_ms"],
            expire_timestamp=row["expire_timestamp_ms"],
        )
        shard.replay(key, value, time_ms)
        self.latest[tp] = Committed(
            row["committed_offset"], row["commit_timestamp_ms"], row["leader_epoch"]
        )
