"""serve --workers: consumer lag of partitions another worker leads.

Theory of operation. A group's coordinator measures its lag (observability/lag_metrics.py,
the web page's group_api.py) from each committed partition's log end offset and the
timestamp of the first record not consumed, read synchronously from topics/lag_reads.py's
PartitionEnds. A worker's own copy of a partition another worker leads is empty, so
`WorkerPartitionEnds` answers those from the leader's figures instead, kept in a
`LeaderEnds` cache: a read notes what it asked for, and a background loop asks each
leader every REFRESH_S for what was asked in the last WANTED_FOR_S, on the workers'
channel (worker_channel.py): one ListOffsets (latest: the high watermark) per leader, and
a Fetch of one batch at each wanted offset whose header gives the timestamp, as the
local read takes it (the header of the batch holding that offset). Timestamps are kept by
(topic, partition, offset), as the local cache keeps them; a partition's end is kept
until it is no longer asked for. A read the cache cannot answer yet (the first scrape
after a start) answers None, as for a partition unknown: the lag shows up one refresh
later.
"""

from __future__ import annotations

import asyncio
import datetime
import time
from collections.abc import Callable, Sequence

from groupcoord.protocol.api import ApiKey, build, request_types
from groupcoord.protocol.batches import HEADER_SIZE, InvalidBatch, parse_header

from ..observability.logging import get_logger
from ..ownership import Ownership
from ..topics.lag_reads import PartitionEnds
from .topic_sync import Peer, peer_request

log = get_logger("groupcoord.peer_ends")

REFRESH_S = 1.0
WANTED_FOR_S = 120.0
LIST_OFFSETS_VERSION = 7
FETCH_VERSION = 12
LATEST = -1
_UNREACHABLE = (OSError, TimeoutError, asyncio.IncompleteReadError)

TopicPartition = tuple[str, int]


class LeaderEnds:
    """The leaders' ends and timestamps this worker asked for (module docstring)."""

    def __init__(
        self,
        ownership: Ownership,
        peer_of: Callable[[int], Peer],
        clock_s: Callable[[], float] = time.monotonic,
    ) -> None:
        self.ownership = ownership
        self.peer_of = peer_of
        self.clock_s = clock_s
        self.ends: dict[TopicPartition, int] = {}
        self.timestamps: dict[tuple[str, int, int], int | None] = {}
        # What reads asked for, and when last: refreshed while recent.
        self._wanted_ends: dict[TopicPartition, float] = {}
        self._wanted_stamps: dict[tuple[str, int, int], float] = {}

    def high_watermark(self, topic: str, partition: int) -> int | None:
        key = (topic, partition)
        self._wanted_ends[key] = self.clock_s()
        return self.ends.get(key)

    def timestamp_ms(self, topic: str, partition: int, offset: int) -> int | None:
        key = (topic, partition, offset)
        if key in self.timestamps:
            self._wanted_stamps[key] = self.clock_s()
            return self.timestamps[key]
        self._wanted_stamps[key] = self.clock_s()
        return None

    async def run(self) -> None:
        while True:
            await asyncio.sleep(REFRESH_S)
            try:
                await self.refresh()
            except Exception:  # a peer's odd answer must not end the loop
                log.exception("leader ends not refreshed")

    async def refresh(self) -> None:
        """Ask every leader for what was asked of it lately; forget the rest."""
        horizon = self.clock_s() - WANTED_FOR_S
        self._wanted_ends = {k: t for k, t in self._wanted_ends.items() if t >= horizon}
        self._wanted_stamps = {k: t for k, t in self._wanted_stamps.items() if t >= horizon}
        self.ends = {k: v for k, v in self.ends.items() if k in self._wanted_ends}
        self.timestamps = {k: v for k, v in self.timestamps.items() if k in self._wanted_stamps}
        by_leader: dict[int, list[TopicPartition]] = {}
        for topic, partition in self._wanted_ends:
            leader = self.ownership.partition_leader(topic, partition)
            by_leader.setdefault(leader, []).append((topic, partition))
        for leader, partitions in by_leader.items():
            await self._ends_from(leader, partitions)
        for key in [k for k in self._wanted_stamps if k not in self.timestamps]:
            topic, partition, offset = key
            end = self.ends.get((topic, partition))
            if end is None or offset >= end:
                continue  # nothing there to read yet
            self.timestamps[key] = await self._timestamp_from(
                self.ownership.partition_leader(topic, partition), topic, partition, offset
            )

    async def _ends_from(self, leader: int, partitions: list[TopicPartition]) -> None:
        v = LIST_OFFSETS_VERSION
        mod = request_types(ApiKey.LIST_OFFSETS, v)
        topics: dict[str, list[int]] = {}
        for topic, partition in partitions:
            topics.setdefault(topic, []).append(partition)
        body = build(
            mod.ListOffsetsRequest,
            replica_id=-1,
            isolation_level=0,
            topics=tuple(
                build(
                    mod.ListOffsetsTopic,
                    name=name,
                    partitions=tuple(
                        build(
                            mod.ListOffsetsPartition,
                            partition_index=p,
                            current_leader_epoch=-1,
                            timestamp=LATEST,
                        )
                        for p in indexes
                    ),
                )
                for name, indexes in topics.items()
            ),
        )
        try:
            response = await peer_request(self.peer_of(leader), ApiKey.LIST_OFFSETS, v, body)
        except _UNREACHABLE:
            return  # the last figures stay until the leader answers again
        for topic in response.topics:
            for p in topic.partitions:
                if not p.error_code:
                    self.ends[(topic.name, p.partition_index)] = p.offset

    async def _timestamp_from(
        self, leader: int, topic: str, partition: int, offset: int
    ) -> int | None:
        v = FETCH_VERSION
        mod = request_types(ApiKey.FETCH, v)
        body = build(
            mod.FetchRequest,
            cluster_id=None,
            replica_id=-1,
            max_wait=datetime.timedelta(0),
            min_bytes=0,
            max_bytes=1,  # the first batch comes whole all the same (KIP-74)
            isolation_level=0,
            session_id=0,
            session_epoch=-1,
            topics=(
                build(
                    mod.FetchTopic,
                    topic=topic,
                    partitions=(
                        build(
                            mod.FetchPartition,
                            partition=partition,
                            current_leader_epoch=-1,
                            fetch_offset=offset,
                            last_fetched_epoch=-1,
                            log_start_offset=-1,
                            partition_max_bytes=1,
                        ),
                    ),
                ),
            ),
            forgotten_topics_data=(),
            rack_id="",
        )
        try:
            response = await peer_request(self.peer_of(leader), ApiKey.FETCH, v, body)
        except _UNREACHABLE:
            return None
        for answer in response.responses:
            for p in answer.partitions:
                records = p.records
                if p.error_code or not records or len(records) < HEADER_SIZE:
                    return None
                try:
                    header = parse_header(records)
                except InvalidBatch:
                    return None
                return int(
                    header.max_timestamp if header.is_log_append_time else header.base_timestamp
                )
        return None


class WorkerPartitionEnds:
    """PartitionEnds for a worker: its own partitions read locally, the others' from
    their leaders (LeaderEnds)."""

    def __init__(self, local: PartitionEnds, leaders: LeaderEnds) -> None:
        self.local = local
        self.leaders = leaders
        self.owns = leaders.ownership.owns_partition

    def begin_scrape(self) -> None:
        self.local.begin_scrape()

    def high_watermark(self, topic: str, partition: int) -> int | None:
        if self.owns(topic, partition) or self.local.topics.partition(topic, partition) is None:
            return self.local.high_watermark(topic, partition)
        return self.leaders.high_watermark(topic, partition)

    def timestamp_ms(self, topic: str, partition: int, offset: int) -> int | None:
        return self.timestamps_ms(topic, partition, (offset,))[0]

    def timestamps_ms(self, topic: str, partition: int, offsets: Sequence[int]) -> list[int | None]:
        """`timestamp_ms` of each of `offsets`: one walk of the local log (lag_reads.py) for
        a partition this worker leads, the leader's cached figures for the others."""
        if self.owns(topic, partition) or self.local.topics.partition(topic, partition) is None:
            return self.local.timestamps_ms(topic, partition, offsets)
        return [self.leaders.timestamp_ms(topic, partition, offset) for offset in offsets]
